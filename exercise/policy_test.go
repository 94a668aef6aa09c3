package exercise

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/sim"
)

// simEval evaluates configs with hone's exact model, reading the mode and
// cache flag from wherever the knobs say they are.
func simEval(t *testing.T, k Knobs, calls *[]Config) Evaluator {
	return func(_ context.Context, cfg Config) (map[string]any, error) {
		*calls = append(*calls, cfg)
		m, _ := optimizer.Get(cfg, k.Mode)
		c, _ := optimizer.Get(cfg, k.Cache)
		res, err := sim.Scan(sim.DefaultScan(sim.Config{Mode: sim.Mode(m.(string)), PrefixCache: c.(bool)}))
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(res)
		var out map[string]any
		return out, json.Unmarshal(b, &out)
	}
}

func TestExercisePublic(t *testing.T) {
	base := Config{"mode": "colocated", "prefix_cache": true}
	var calls []Config
	d, err := Optimize(context.Background(), base, simEval(t, Knobs{Path{"mode"}, Path{"prefix_cache"}}, &calls), 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 4 || len(d.Log) != 4 {
		t.Fatalf("%d calls, %d log entries; want 4", len(calls), len(d.Log))
	}
	wantRoles := []string{"baseline", "disaggregated", "ablation (prefix cache off)", "verify"}
	for i, e := range d.Log {
		if e.Role != wantRoles[i] {
			t.Errorf("call %d role %q, want %q", i+1, e.Role, wantRoles[i])
		}
	}
	// The ablation is of the better config (disaggregated).
	if got := d.Log[2].Config["mode"]; got != "disaggregated" || d.Log[2].Config["prefix_cache"] != false {
		t.Errorf("ablation config %v, want disaggregated with the cache off", d.Log[2].Config)
	}
	if d.SelectedCall != 2 || d.Selected["mode"] != "disaggregated" || !d.Verified {
		t.Errorf("selected call %d %v verified %v; want call 2, disaggregated, verified", d.SelectedCall, d.Selected, d.Verified)
	}
	all := strings.Join(d.Diagnosis, "\n")
	for _, want := range []string{"fails {16,32} on p99 TTFT", "queueing-bound", "(+98.5%)", "confirmed by its re-run"} {
		if !strings.Contains(all, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, all)
		}
	}
}

func TestExerciseOtherKeyNamesAndExtras(t *testing.T) {
	base := Config{
		"deployment":            map[string]any{"topology": "colocated", "model": "qwen"},
		"enable_prefix_caching": true, "stream": false, "seed": json.Number("12345678901234567"),
	}
	k, err := FindKnobs(base)
	if err != nil {
		t.Fatal(err)
	}
	if k.Mode.String() != "deployment.topology" || k.Cache.String() != "enable_prefix_caching" {
		t.Fatalf("knobs %v %v", k.Mode, k.Cache)
	}
	var calls []Config
	d, err := Optimize(context.Background(), base, simEval(t, k, &calls), 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if c["seed"] != json.Number("12345678901234567") || c["stream"] != false ||
			c["deployment"].(map[string]any)["model"] != "qwen" {
			t.Errorf("a call changed keys it does not own: %v", c)
		}
	}
	if got := d.Selected["deployment"].(map[string]any)["topology"]; got != "disaggregated" {
		t.Errorf("selected %v", d.Selected)
	}
}

func TestFindKnobsErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{"cache": true}, "no deployment-mode value"},
		{Config{"mode": "colocated"}, "no boolean prefix-cache flag"},
		{Config{"a": "colocated", "b": "disaggregated", "c": true}, "several deployment-mode values"},
		{Config{"mode": "colocated", "x": true, "y": false}, "none names a cache"},
		{Config{"mode": "colocated", "kv_cache": true, "prefix_cache": false}, "several cache-like booleans"},
	} {
		if _, err := FindKnobs(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// Several booleans, one of them about caching: that one is chosen.
	k, err := FindKnobs(Config{"mode": "colocated", "stream": true, "use_cache": true})
	if err != nil || k.Cache.String() != "use_cache" {
		t.Errorf("knobs %v, err %v", k, err)
	}
}

func result(obj float64, levels ...map[string]any) map[string]any {
	ls := make([]any, len(levels))
	for i, l := range levels {
		ls[i] = l
	}
	return map[string]any{"objective": obj, "levels": ls}
}

func lvl(q, ttft, eff float64, passed bool) map[string]any {
	return map[string]any{"offered_qps": q, "p99_ttft_ms": ttft, "p99_tpot_ms": 0.5, "effective_qps": eff, "passed": passed}
}

// scripted answers calls in order from a list of results or errors.
func scripted(answers ...any) (Evaluator, *int) {
	n := new(int)
	return func(_ context.Context, cfg Config) (map[string]any, error) {
		a := answers[*n]
		*n++
		if err, ok := a.(error); ok {
			return nil, err
		}
		return a.(map[string]any), nil
	}, n
}

func TestExerciseRaisingCallsAndBudget(t *testing.T) {
	base := Config{"mode": "colocated", "cache": true}
	good := result(5, lvl(1, 10, 1, true), lvl(8, 10, 5, true))
	eval, n := scripted(errors.New("ValueError: bad config"), good, result(0, lvl(1, 3000, 1, false)), good)
	d, err := Optimize(context.Background(), base, eval, 4)
	if err != nil {
		t.Fatal(err)
	}
	if *n != 4 {
		t.Fatalf("%d calls, want 4", *n)
	}
	if !d.Log[0].Failed() || d.SelectedCall != 2 || !d.Verified {
		t.Errorf("log %+v selected %d verified %v", d.Log, d.SelectedCall, d.Verified)
	}
	if !strings.Contains(d.Diagnosis[0], "failed: ValueError: bad config") {
		t.Errorf("diagnosis %q", d.Diagnosis[0])
	}
	for budget := 1; budget <= 6; budget++ {
		var calls []Config
		d, err := Optimize(context.Background(), base, simEval(t, Knobs{Path{"mode"}, Path{"cache"}}, &calls), budget)
		if err != nil {
			t.Fatal(err)
		}
		want := min(budget, 5)
		if len(calls) != want {
			t.Errorf("budget %d: %d calls, want %d", budget, len(calls), want)
		}
		if budget >= 4 && d.Log[len(d.Log)-1].Role != "verify" {
			t.Errorf("budget %d: last call %q, want verify", budget, d.Log[len(d.Log)-1].Role)
		}
		if budget >= 5 && !strings.Contains(strings.Join(d.Diagnosis, "\n"), "interaction:") {
			t.Errorf("budget %d: no interaction read from the full 2x2", budget)
		}
	}
	if _, err := Optimize(context.Background(), base, eval, 0); err == nil {
		t.Error("budget 0 accepted")
	}
}

func TestRegressionRuleRejectsUnstableWinner(t *testing.T) {
	base := Config{"mode": "colocated", "cache": true}
	b := result(5, lvl(1, 10, 1, true), lvl(8, 10, 5, true))
	dis := result(9, lvl(1, 10, 1, true), lvl(8, 10, 9, true))
	abl := result(0, lvl(1, 3000, 1, false), lvl(8, 3000, 1, false))
	rerun := result(7, lvl(1, 10, 1, true), lvl(8, 10, 7, true)) // differs from its first run
	eval, _ := scripted(b, dis, abl, rerun)
	d, err := Optimize(context.Background(), base, eval, 4)
	if err != nil {
		t.Fatal(err)
	}
	if d.SelectedCall != 1 || d.Verified {
		t.Errorf("selected call %d verified %v; want the baseline (call 1), unverified", d.SelectedCall, d.Verified)
	}
	if !strings.Contains(strings.Join(d.Diagnosis, "\n"), "rejected by the regression rule") {
		t.Errorf("no rejection in diagnosis: %v", d.Diagnosis)
	}
}

func TestTieGoesToBaseline(t *testing.T) {
	base := Config{"mode": "colocated", "cache": true}
	same := result(5, lvl(1, 10, 5, true))
	eval, _ := scripted(same, same, result(0, lvl(1, 9000, 1, false)), same)
	d, err := Optimize(context.Background(), base, eval, 4)
	if err != nil {
		t.Fatal(err)
	}
	if d.SelectedCall != 1 {
		t.Errorf("tie selected call %d, want the baseline", d.SelectedCall)
	}
	// The ablation is of the better one; on a tie that is the baseline.
	if d.Log[2].Config["mode"] != "colocated" {
		t.Errorf("ablation %v", d.Log[2].Config)
	}
}

func TestNothingPassesKeepsBaseline(t *testing.T) {
	base := Config{"mode": "colocated", "cache": true}
	fail := result(0, lvl(1, 9000, 1, false))
	eval, n := scripted(fail, fail, fail, fail)
	d, err := Optimize(context.Background(), base, eval, 4)
	if err != nil {
		t.Fatal(err)
	}
	if d.SelectedCall != 1 || d.Selected["mode"] != "colocated" || *n != 3 {
		t.Errorf("selected %d %v after %d calls; want baseline after 3 (nothing to verify)", d.SelectedCall, d.Selected, *n)
	}
}

func TestReadResultComputesObjective(t *testing.T) {
	res := map[string]any{"levels": []any{lvl(1, 10, 1, true), lvl(2, 10, 1.9, true), lvl(4, 9000, 2.5, false)}}
	v, err := ReadResult(res)
	if err != nil || v.Objective != 1.9 || v.ObjectiveReported {
		t.Errorf("view %+v err %v; want objective 1.9 computed", v, err)
	}
	// No "passed": judged against the SLO in the result's config.
	res = map[string]any{"config": map[string]any{"ttft_slo_ms": 5.0}, "load_levels": []any{
		map[string]any{"offered_qps": 1.0, "p99_ttft_ms": 4.0, "p99_tpot_ms": 1.0, "effective_qps": 1.0},
		map[string]any{"offered_qps": 2.0, "p99_ttft_ms": 6.0, "p99_tpot_ms": 1.0, "effective_qps": 2.0},
	}}
	if v, err := ReadResult(res); err != nil || v.Objective != 1 {
		t.Errorf("view %+v err %v; want objective 1", v, err)
	}
	if _, err := ReadResult(map[string]any{"foo": 1}); err == nil {
		t.Error("a result with nothing to read was accepted")
	}
}
