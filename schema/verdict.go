package schema

import (
	"fmt"
	"sort"
	"strings"
)

// Code names one reason a level's measurement is invalid. An invalid level
// still shows its figures, but nothing decides on them: not the run's
// objective, not the optimizer's selection, not diagnose's bottleneck, not
// the gate. Every code has one Rule in Rules.
type Code string

// The reason codes, in the order of Rules.
const (
	// ReasonClientBound: the load generator (or the hops between it and
	// the engine) distorted what was measured.
	ReasonClientBound Code = "client_bound"
	// ReasonWarmStart: the prefix cache was not in the prescribed (cold)
	// state when the level started.
	ReasonWarmStart Code = "warm_start"
	// ReasonTimeScaleMismatch: the engine ran on another time scale than
	// the one the record divides by.
	ReasonTimeScaleMismatch Code = "time_scale_mismatch"
	// ReasonIncomplete: the level stopped before every request was sent
	// and answered (interrupted, or a setup step failed).
	ReasonIncomplete Code = "incomplete"
	// ReasonCounterContamination: the engine's counters moved by traffic
	// that is not this level's, so hit rates read from them are not this
	// level's either.
	ReasonCounterContamination Code = "counter_contamination"
	// ReasonEmulatorBound: an emulated engine's host could not keep the
	// engine's model, and host time entered the model's own clock (KV
	// pulls whose bytes crossed the side channel after the modelled link
	// would have carried them).
	ReasonEmulatorBound Code = "emulator_bound"
)

// Thresholds of the verdicts, stated once for the record, the docs and the
// tests.
const (
	// ClientBoundSLOFraction: a level is client-bound when its p99
	// dispatch lag (how late the load generator sent, model time) exceeds
	// this fraction of the TTFT SLO. Every TTFT is measured from the
	// scheduled send, so lag of that size moves a pass/fail verdict by
	// more than the margin a decision may rest on, and late sends bunch up
	// (the arrival process is no longer the one the workload specifies).
	ClientBoundSLOFraction = 0.05
	// ClientBoundTTFTFraction: a level is also client-bound when its median
	// dispatch lag (or, in diagnose, its median client/proxy residual)
	// exceeds this fraction of its median TTFT: the client is then the
	// largest share of what is measured, larger than every engine-side
	// part together, and the level measures the host, not the deployment.
	ClientBoundTTFTFraction = 0.5
	// WarmStartHitRate: the warm-up requests (ids 0-7, one per session,
	// distinct prefixes) find nearly nothing cached on a cold engine; a
	// hit rate above this over them means the cache was warm.
	WarmStartHitRate = 0.5
	// CounterQueryFactor bounds the prefix-cache queries a level may add:
	// a prompt is queried once per engine it passes (two in P/D) and again
	// after each preemption; more than this many times the prompt tokens
	// sent means traffic that is not this level's.
	CounterQueryFactor = 4.0
	// EmulatorBoundTTFTFraction: a level is emulator-bound when the model
	// time its emulated engines' host added to KV pulls, per measured
	// request, exceeds this fraction of the level's median TTFT: the
	// emulated figure then differs from the model's by more than the
	// margin a prediction is checked to (5%), by host time alone.
	EmulatorBoundTTFTFraction = 0.05
	// EmulatorBoundTPOTFraction: a level is emulator-bound too when the
	// TPOT the client measured exceeds the emulated engine's own (its
	// per-request decode time over the tokens after the first, model
	// time: the ground truth of an emulation) by more than this fraction
	// at the median or at p99, over the same measured requests: the host
	// delivered the tokens late (a starved client or emulator), and a
	// TPOT figure or tail judged on them would judge the host.
	EmulatorBoundTPOTFraction = 0.05
)

// Decider says who made a level invalid: the measuring host, or the
// procedure the deployment was measured by.
type Decider string

// Deciders.
const (
	// ByHost: the measuring host (the load generator, the emulated
	// engine's host). A rerun on a quieter host, or at a larger time
	// scale, can clear it.
	ByHost Decider = "host"
	// ByProcedure: the measurement procedure around the deployment (its
	// cache state, its counters, its time scale, its completeness).
	ByProcedure Decider = "procedure"
)

// Threshold is one bound a rule compares against.
type Threshold struct {
	Name  string  // what the value bounds
	Value float64 // a fraction, or a factor
}

// Rule is one verdict reason, stated once: its code, who decides it, its
// thresholds, the rule in words (as the record's VerdictRule states it)
// and what to do about it.
type Rule struct {
	Code       Code
	DecidedBy  Decider
	Thresholds []Threshold
	// Text states when a level is invalid for this reason.
	Text string
	// Remedies are what to change so that a level is no longer invalid
	// for this reason, most likely first.
	Remedies []string
}

// remedyTimeScale is the remedy both host reasons share: host time is
// wall time, so at a larger time scale it is less model time.
const remedyTimeScale = "a larger engine time scale (emulator: emulator.time_scale in the spec, hone sim serve --time-scale or hone optimize --time-scale; replay adopts it): "

// Rules are the verdict reasons, one per Code, in the order the record's
// VerdictRule lists them.
var Rules = []Rule{
	{Code: ReasonClientBound, DecidedBy: ByHost,
		Thresholds: []Threshold{{"p99 dispatch lag / TTFT SLO", ClientBoundSLOFraction}, {"median dispatch lag / median TTFT", ClientBoundTTFTFraction}},
		Text: fmt.Sprintf("p99 dispatch lag > %g%% of the TTFT SLO, or median dispatch lag > %g%% of the median TTFT; "+
			"diagnose adds the client/proxy residual against the same bounds", 100*ClientBoundSLOFraction, 100*ClientBoundTTFTFraction),
		Remedies: []string{
			"fewer streams per client: split the load across more load-generator processes so each sends fewer concurrent streams",
			remedyTimeScale + "the client's lag shrinks in model time",
			"run the load generator on another host than the engines and the proxy"}},
	{Code: ReasonWarmStart, DecidedBy: ByProcedure,
		Thresholds: []Threshold{{"warm-up prefix-cache hit rate", WarmStartHitRate}},
		Text:       fmt.Sprintf("the warm-up requests' prefix-cache hit rate > %g%%: the level did not start cold", 100*WarmStartHitRate),
		Remedies:   []string{"start every level cold: reset the prefix cache before it (hone replay --cache reset) or use fresh prefixes"}},
	{Code: ReasonTimeScaleMismatch, DecidedBy: ByProcedure,
		Text:     "the engine reports another time scale than the record's",
		Remedies: []string{"replay on the engine's time scale (leave --time-scale unset to adopt it)"}},
	{Code: ReasonIncomplete, DecidedBy: ByProcedure,
		Text:     "not every request was sent and answered",
		Remedies: []string{"let every level run to the end: no interruption, a --request-timeout long enough for the slowest request"}},
	{Code: ReasonCounterContamination, DecidedBy: ByProcedure,
		Thresholds: []Threshold{{"prefix-cache queries / prompt tokens sent", CounterQueryFactor}},
		Text: fmt.Sprintf("a hit rate outside [0, 1], or prefix-cache queries below the prompt tokens that reached the engine "+
			"or above %g× the prompt tokens sent", CounterQueryFactor),
		Remedies: []string{"keep other traffic off the engines while a level runs"}},
	{Code: ReasonEmulatorBound, DecidedBy: ByHost,
		Thresholds: []Threshold{{"late KV-pull model time per measured request / median TTFT", EmulatorBoundTTFTFraction},
			{"client TPOT over the engine's own, at the median or p99 / the engine's", EmulatorBoundTPOTFraction}},
		Text: fmt.Sprintf("an emulated engine's host added KV-transfer time to the model's clock, after the warm-ups: "+
			"more than %g%% of the median TTFT per measured request; or the host delivered tokens late: "+
			"the client's median or p99 TPOT more than %g%% over the engine's own", 100*EmulatorBoundTTFTFraction, 100*EmulatorBoundTPOTFraction),
		Remedies: []string{
			remedyTimeScale + "the host's late KV pulls shrink in model time",
			"emulate on a host whose side channel keeps the modelled KV link (fewer emulated engines per host, or a faster link between them)",
			"measure with no other load on the host, so that the client reads and the emulator writes each token when the model says"}},
}

// RuleOf is code's rule; ok is false for a code no rule states.
func RuleOf(code Code) (r Rule, ok bool) {
	for _, r := range Rules {
		if r.Code == code {
			return r, true
		}
	}
	return Rule{}, false
}

// Codes lists every reason code, in the order of Rules.
func Codes() []Code {
	out := make([]Code, len(Rules))
	for i, r := range Rules {
		out[i] = r.Code
	}
	return out
}

// CodeList names every code for a sentence: "a, b, ... or z".
func CodeList() string {
	var s []string
	for _, c := range Codes() {
		s = append(s, string(c))
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// JoinCodes joins codes with sep.
func JoinCodes(codes []Code, sep string) string {
	s := make([]string, len(codes))
	for i, c := range codes {
		s[i] = string(c)
	}
	return strings.Join(s, sep)
}

// HostReason reports whether code is a reason the measuring host caused,
// not the deployment measured: client_bound (the load generator) or
// emulator_bound (the emulated engine's host). A rerun on a quieter host,
// or at a larger time scale, can clear it.
func HostReason(code Code) bool {
	r, ok := RuleOf(code)
	return ok && r.DecidedBy == ByHost
}

// VerdictRule states the rules in words, for records and reports.
var VerdictRule = verdictRule()

func verdictRule() string {
	var s []string
	for _, r := range Rules {
		s = append(s, string(r.Code)+" ("+r.Text+")")
	}
	return "A level is invalid when: " + strings.Join(s, "; ") +
		". Invalid levels never decide an objective, a selection, a bottleneck or a gate verdict."
}

// Reason is one cause of an invalid verdict.
type Reason struct {
	Code   Code   `json:"code"`
	Detail string `json:"detail"`
	// Scale, on a reason the host caused (HostReason) and judged from
	// figures that say how much host time entered the model's clock,
	// estimates how many times larger the time scale would have had to be
	// for the level to clear it: host time is fixed in wall time, so in
	// model time it shrinks as 1/scale while the model's own time stays.
	// 0: no estimate.
	Scale float64 `json:"scale,omitempty" jsonschema:"exclusiveMinimum=0"`
}

func (r Reason) String() string { return string(r.Code) + ": " + r.Detail }

// Verdict says whether a level's (or a run's, or a record's) figures may
// decide anything, and why not.
type Verdict struct {
	Valid   bool     `json:"valid"`
	Reasons []Reason `json:"reasons"`
}

// Add records a reason once per code: the first detail stays.
func (v *Verdict) Add(code Code, format string, a ...any) { v.AddScaled(code, 0, format, a...) }

// AddScaled is Add with the reason's Scale estimate. A second finding of
// the same code keeps the first detail and the larger estimate, or none
// when either has none.
func (v *Verdict) AddScaled(code Code, scale float64, format string, a ...any) {
	for i := range v.Reasons {
		if r := &v.Reasons[i]; r.Code == code {
			r.Scale = MergeScale(r.Scale, scale)
			return
		}
	}
	v.Reasons = append(v.Reasons, Reason{Code: code, Detail: fmt.Sprintf(format, a...), Scale: scale})
	v.Valid = false
}

// MergeScale is two findings' Scale for one reason: the larger, or 0 (no
// estimate) when either has none.
func MergeScale(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return max(a, b)
}

// Has reports whether the verdict carries a reason with this code.
func (v Verdict) Has(code Code) bool {
	for _, r := range v.Reasons {
		if r.Code == code {
			return true
		}
	}
	return false
}

// Codes lists the verdict's reason codes, sorted, joined by commas.
func (v Verdict) Codes() string {
	var c []string
	for _, r := range v.Reasons {
		c = append(c, string(r.Code))
	}
	sort.Strings(c)
	return strings.Join(c, ",")
}

// String is "valid" or the reasons, one after another.
func (v Verdict) String() string {
	if v.Valid {
		return "valid"
	}
	var s []string
	for _, r := range v.Reasons {
		s = append(s, r.String())
	}
	return "invalid (" + strings.Join(s, "; ") + ")"
}

// Invalidate marks a level invalid for a reason found outside replay (for
// example diagnose's client/proxy residual). Call Record.Judge afterwards
// so that runs and objectives follow.
func (lr *LevelRecord) Invalidate(code Code, format string, a ...any) {
	lr.Verdict.Add(code, format, a...)
}

// InvalidateScaled is Invalidate for a host reason with its Scale
// estimate (see Reason.Scale; 0: none).
func (lr *LevelRecord) InvalidateScaled(code Code, scale float64, format string, a ...any) {
	lr.Verdict.AddScaled(code, scale, format, a...)
}

// InvalidLevels lists "run R, Q req/s: reasons" for every invalid level.
func (rec *Record) InvalidLevels() []string {
	var out []string
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			if !l.Verdict.Valid {
				out = append(out, fmt.Sprintf("run %d, %s: %s", r.Run+1, l.Name(), l.Verdict.String()))
			}
		}
	}
	return out
}

// FailedAllowance is how many of n measured requests may fail at a level
// before its p99 cannot stand for it: the 1% a p99 leaves out, rounded
// down (0 of fewer than 100).
func FailedAllowance(n int) int { return n / 100 }

// FailedLevels says, level by level, where requests failed beyond what
// the figures can absorb: every measured request failed (timeouts
// included: nothing was measured), or more than FailedAllowance of them
// ended in an error (an HTTP error, a refused or reset connection, a cut
// stream, a malformed reply). Timeouts alongside completed requests are
// the deployment missing its SLO, which the level's pass flag already
// says; interrupted requests are the run's interruption, said elsewhere.
// A level's validity is about the host and the procedure, not the
// deployment, so failures never make a level invalid: they make the run
// fail.
func (rec *Record) FailedLevels() []string {
	var out []string
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			errs, all := 0, 0
			var kinds []string
			for _, o := range []string{OutcomeHTTPError, OutcomeConnectError, OutcomeStreamCut, OutcomeMalformed, OutcomeTimeout} {
				n := l.Failures[o]
				if n == 0 {
					continue
				}
				all += n
				if o != OutcomeTimeout {
					errs += n
				}
				kinds = append(kinds, fmt.Sprintf("%d %s", n, o))
			}
			measured := l.Measured + all + l.Failures[OutcomeCanceled]
			switch {
			case all > 0 && l.Measured == 0:
				out = append(out, fmt.Sprintf("run %d, %s: every one of %d measured requests failed (%s)", r.Run+1, l.Name(), measured, strings.Join(kinds, ", ")))
			case errs > FailedAllowance(measured):
				out = append(out, fmt.Sprintf("run %d, %s: %d of %d measured requests failed (%s), more than the %d a p99 can leave out",
					r.Run+1, l.Name(), errs, measured, strings.Join(kinds, ", "), FailedAllowance(measured)))
			}
		}
	}
	return out
}
