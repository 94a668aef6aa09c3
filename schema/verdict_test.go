package schema

import (
	"fmt"
	"testing"
)

// The rule text records carry: stated from the table, byte for byte the
// text stated by hand (which records carried before the table), with the
// TPOT bound of emulator_bound added since.
func TestVerdictRuleUnchanged(t *testing.T) {
	want := fmt.Sprintf("A level is invalid when: client_bound (p99 dispatch lag > %g%% of the TTFT SLO, "+
		"or median dispatch lag > %g%% of the median TTFT; diagnose adds the client/proxy residual against the same bounds); "+
		"warm_start (the warm-up requests' prefix-cache hit rate > %g%%: the level did not start cold); "+
		"time_scale_mismatch (the engine reports another time scale than the record's); incomplete (not every request was sent and answered); "+
		"counter_contamination (a hit rate outside [0, 1], or prefix-cache queries below the prompt tokens that reached the engine "+
		"or above %g× the prompt tokens sent); emulator_bound (an emulated engine's host added KV-transfer time to the model's clock, after the warm-ups: "+
		"more than %g%% of the median TTFT per measured request; or the host delivered tokens late: "+
		"the client's median or p99 TPOT more than %g%% over the engine's own). Invalid levels never decide an objective, a selection, a bottleneck or a gate verdict.",
		100*ClientBoundSLOFraction, 100*ClientBoundTTFTFraction, 100*WarmStartHitRate, CounterQueryFactor, 100*EmulatorBoundTTFTFraction, 100*EmulatorBoundTPOTFraction)
	if VerdictRule != want {
		t.Errorf("VerdictRule\n got %s\nwant %s", VerdictRule, want)
	}
}

// Every code has one rule, with its own remedies; the host reasons are
// client_bound and emulator_bound.
func TestRules(t *testing.T) {
	seen := map[Code]bool{}
	for _, r := range Rules {
		if seen[r.Code] {
			t.Errorf("%s: two rules", r.Code)
		}
		seen[r.Code] = true
		if r.Text == "" || len(r.Remedies) == 0 {
			t.Errorf("%s: no text or no remedy", r.Code)
		}
		if got, ok := RuleOf(r.Code); !ok || got.Code != r.Code {
			t.Errorf("RuleOf(%s) = %v, %t", r.Code, got.Code, ok)
		}
	}
	for _, c := range []Code{ReasonClientBound, ReasonEmulatorBound} {
		if !HostReason(c) {
			t.Errorf("HostReason(%s) = false", c)
		}
	}
	for _, c := range []Code{ReasonWarmStart, ReasonTimeScaleMismatch, ReasonIncomplete, ReasonCounterContamination, "other"} {
		if HostReason(c) {
			t.Errorf("HostReason(%s) = true", c)
		}
	}
	cb, _ := RuleOf(ReasonClientBound)
	eb, _ := RuleOf(ReasonEmulatorBound)
	if fmt.Sprint(cb.Remedies) == fmt.Sprint(eb.Remedies) {
		t.Error("emulator_bound has client_bound's remedies")
	}
	if got, want := CodeList(), "client_bound, warm_start, time_scale_mismatch, incomplete, counter_contamination or emulator_bound"; got != want {
		t.Errorf("CodeList() = %q, want %q", got, want)
	}
}
