package gate

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hone-llm/hone/slo"
)

// tailRuns are runs whose pooled TTFT and TPOT are factor × 1, 2, ..., n
// ms, dealt round-robin over the runs, so that pooled order statistics
// are known exactly: x(k) = factor × k.
func tailRuns(runs, n int, factor float64) []Run {
	out := make([]Run, runs)
	for i := range out {
		var v []float64
		for k := i + 1; k <= n; k += runs {
			v = append(v, factor*float64(k))
		}
		p99 := slo.NearestRank(v, 99)
		out[i] = Run{Kind: "emulated", Scenario: "s", Fingerprint: emuFP, Objective: 10, Levels: []LevelRun{{
			OfferedQPS: 16, Passed: true,
			Metrics: map[string]float64{"effective_qps": 10, "p99_ttft_ms": p99, "p99_tpot_ms": p99},
			Samples: map[string][]float64{"p99_ttft_ms": v, "p99_tpot_ms": v},
		}}}
	}
	return out
}

// The tail rule with exact figures: 384 pooled values a side give p99 =
// x(381) and the 95% interval [x(376), x(384)]. A candidate fails only
// when its interval is wholly above the baseline's and its p99 is worse by
// more than the threshold; apart but within it, it warns; overlapping, it
// passes, however its p99 moved.
func TestTailPooledRule(t *testing.T) {
	bl := mustBaseline(t, tailRuns(3, 384, 1))
	for _, c := range []struct {
		name    string
		factor  float64
		want    Verdict
		reason  string
		cand    float64 // p99
		candLow float64
	}{
		{"same", 1, Pass, "intervals overlap", 381, 376},
		{"2% worse", 1.02, Pass, "intervals overlap", 388.62, 383.52},
		{"7% worse", 1.07, Warn, "warn threshold, intervals apart", 407.67, 402.32},
		{"20% worse", 1.2, Fail, "wholly above the baseline's", 457.2, 451.2},
		{"20% better", 0.8, Improved, "wholly below", 304.8, 300.8},
	} {
		rep := Check(bl, tailRuns(3, 384, c.factor), Config{})
		for _, m := range []string{"p99_ttft_ms", "p99_tpot_ms"} {
			r := result(t, rep, m)
			if r.Tail == nil || r.Tail.MaxOfN {
				t.Fatalf("%s %s: %q, want pooled with intervals", c.name, m, r.Test)
			}
			b, cd := r.Tail.Baseline, r.Tail.Candidate
			if b.Requests != 384 || b.Runs != 3 || b.Value != 381 || b.LowerRank != 376 || b.UpperRank != 384 || b.Lower != 376 || b.Upper != 384 {
				t.Errorf("%s %s: baseline %+v, want 384 requests of 3 runs, p99 381 [376, 384]", c.name, m, b)
			}
			if cd.Value != c.cand || cd.Lower != c.candLow || cd.Upper != math.Round(c.factor*384*100)/100 {
				t.Errorf("%s %s: candidate %+v, want p99 %g, lower %g", c.name, m, cd, c.cand, c.candLow)
			}
			if r.Verdict != c.want || !strings.Contains(r.Reason, c.reason) {
				t.Errorf("%s %s: %s (%s), want %s with %q", c.name, m, r.Verdict, r.Reason, c.want, c.reason)
			}
			if r.Series.Samples != nil {
				t.Errorf("%s %s: the report carries every request", c.name, m)
			}
		}
		if !strings.Contains(strings.Join(rep.Notes, "\n"), "tails: "+TailRule) {
			t.Errorf("%s: notes do not state the tail rule: %q", c.name, rep.Notes)
		}
	}
}

// Below 368 pooled requests a side there is no upper bound for p99: both
// figures are maxima, and only a change beyond the loose threshold fails.
func TestTailMaxOfN(t *testing.T) {
	bl := mustBaseline(t, tailRuns(3, 120, 1)) // the CI gate's 3 runs of 40
	for _, c := range []struct {
		factor float64
		want   Verdict
	}{{1, Pass}, {2.4, Pass}, {3.9, Pass}, {0.2, Pass}, {4.1, Fail}} {
		rep := Check(bl, tailRuns(3, 120, c.factor), Config{})
		r := result(t, rep, "p99_tpot_ms")
		if r.Tail == nil || !r.Tail.MaxOfN || r.BaseCenter != 120 || r.CandCenter != math.Round(12000*c.factor)/100 || r.Threshold != LooseTailChange {
			t.Fatalf("×%g: %+v (center %g → %g, threshold %g), want max of 120 on each side, threshold %g", c.factor, r.Tail, r.BaseCenter, r.CandCenter, r.Threshold, LooseTailChange)
		}
		if r.Verdict != c.want || !strings.Contains(r.Test, "max of n (120 vs 120 requests pooled; a p99 interval needs 368 a side)") {
			t.Errorf("×%g: %s %q (%s), want %s", c.factor, r.Verdict, r.Test, r.Reason, c.want)
		}
	}
	// A looser configured threshold wins over LooseTailChange.
	five := 5.0
	r := result(t, Check(bl, tailRuns(3, 120, 4.5), Config{Metrics: map[string]Threshold{"p99_tpot_ms": {Fail: &five}}}), "p99_tpot_ms")
	if r.Verdict != Pass || r.Threshold != 5 {
		t.Errorf("fail 500%%, ×4.5: %s, threshold %g", r.Verdict, r.Threshold)
	}
	// One side short of 368 makes both figures maxima.
	r = result(t, Check(mustBaseline(t, tailRuns(3, 384, 1)), tailRuns(3, 120, 1.2), Config{}), "p99_ttft_ms")
	if !r.Tail.MaxOfN || r.BaseCenter != 384 || r.CandCenter != 144 || r.Verdict != Pass {
		t.Errorf("384 vs 120: %+v, %g → %g %s", r.Tail, r.BaseCenter, r.CandCenter, r.Verdict)
	}
}

// Only the runs valid at a level are pooled: an invalid candidate run's
// requests, however slow, are left out.
func TestTailPoolsValidRunsOnly(t *testing.T) {
	bl := mustBaseline(t, tailRuns(4, 512, 1))
	cand := tailRuns(4, 512, 1)
	slow := tailRuns(4, 512, 5)
	cand[3] = slow[3]
	cand[3].Levels[0].Invalid = []string{clientBound}
	r := result(t, Check(bl, cand, Config{}), "p99_ttft_ms")
	if r.Tail == nil || r.Tail.Candidate.Runs != 3 || r.Tail.Candidate.Requests != 384 || r.Verdict != Pass || r.Excluded == "" {
		t.Errorf("%+v %s (%s), want 3 valid candidate runs of 384 requests pooled, pass", r.Tail, r.Verdict, r.Reason)
	}
}

// A side without per-request values (a schema-2 baseline, a simulation
// record) has its tails compared per run, and the check says why.
func TestTailWithoutSamplesComparesPerRun(t *testing.T) {
	noSamples := func(runs []Run) []Run {
		for i := range runs {
			runs[i].Levels[0].Samples = nil
		}
		return runs
	}
	old := mustBaseline(t, noSamples(tailRuns(3, 384, 1)))
	rep := Check(old, tailRuns(3, 384, 1.2), Config{})
	r := result(t, rep, "p99_ttft_ms")
	if r.Tail != nil || !strings.Contains(r.Test, "runs") {
		t.Errorf("baseline without samples: %q %+v, want a per-run test", r.Test, r.Tail)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "2 tail metrics were compared per run") || !strings.Contains(notes, "the baseline has no per-request values") {
		t.Errorf("notes: %s", notes)
	}
	rep = Check(mustBaseline(t, tailRuns(3, 384, 1)), noSamples(tailRuns(3, 384, 1)), Config{})
	if r := result(t, rep, "p99_tpot_ms"); r.Tail != nil || !strings.Contains(strings.Join(rep.Notes, "\n"), "the candidate has no per-request values") {
		t.Errorf("candidate without samples: %q %+v %q", r.Test, r.Tail, rep.Notes)
	}
}

// A baseline keeps each run's sorted samples, rounded to 0.01 ms, one line
// per run in the file; a version-2 file (no samples) still reads; samples
// the gate cannot pool are refused naming the field.
func TestBaselineSamplesFile(t *testing.T) {
	dir := t.TempDir()
	runs := tailRuns(3, 6, 1)
	runs[0].Levels[0].Samples["p99_ttft_ms"] = []float64{7.004, 1.2349, 4.5}
	bl := mustBaseline(t, runs)
	path := filepath.Join(dir, "b.json")
	if err := bl.Write(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !regexp.MustCompile(`"samples": \[\n\s+\[1.23, 4.5, 7\],\n\s+\[2, 5\],\n\s+\[3, 6\]\n\s+\]`).Match(b) || !strings.Contains(string(b), `"schema_version": 3`) {
		t.Errorf("file:\n%s", b)
	}
	back, err := ReadBaseline(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range back.Series {
		switch {
		case s.Metric == "p99_ttft_ms" && (len(s.Samples) != 3 || s.Samples[0][0] != 1.23 || s.Samples[2][1] != 6):
			t.Errorf("p99_ttft_ms samples back: %v", s.Samples)
		case Metrics[s.Metric].Percentile == 0 && s.Samples != nil:
			t.Errorf("%s carries samples", s.Metric)
		}
	}
	// Keeping the newest runs keeps their samples.
	if err := back.Update(tailRuns(3, 6, 2), DefaultCompared, 4); err != nil {
		t.Fatal(err)
	}
	for _, s := range back.Series {
		if s.Metric == "p99_tpot_ms" && (len(s.Samples) != 4 || s.Samples[0][0] != 3 || s.Samples[1][0] != 2) {
			t.Errorf("after update, keep 4: %v", s.Samples)
		}
	}

	v2 := `{"schema_version":2,"kind":"emulated","runs":1,"series":[{"scenario":"s","offered_qps":16,"metric":"p99_ttft_ms","direction":"lower","values":[40]}]}`
	if bl, err := ParseBaseline([]byte(v2)); err != nil || bl.SchemaVersion != SchemaVersion {
		t.Errorf("version 2: %v", err)
	}
	series := func(metric, samples string) string {
		return `{"schema_version":3,"kind":"emulated","series":[{"scenario":"s","offered_qps":16,"metric":"` + metric +
			`","direction":"lower","values":[40,41],"samples":` + samples + `}]}`
	}
	for name, tc := range map[string]struct{ doc, want string }{
		"unsorted":     {series("p99_ttft_ms", `[[1,3,2],[1]]`), "samples[0][2]: 2 after 3: want each run's values sorted ascending"},
		"negative":     {series("p99_tpot_ms", `[[-1],[1]]`), "samples[0][0]: -1: want a latency >= 0 ms"},
		"one per run":  {series("p99_ttft_ms", `[[1]]`), "samples: 1 entries for 2 values"},
		"not a tail":   {series("p50_ttft_ms", `[[1],[1]]`), "samples: p50_ttft_ms is not a tail metric; only p99_tpot_ms and p99_ttft_ms carry per-request values"},
		"version 4":    {`{"schema_version":4,"kind":"emulated","series":[]}`, "schema_version 4: want 2 or 3"},
		"huge samples": {series("p99_ttft_ms", `[[1e300],[1]]`), "samples[0][0]"},
	} {
		_, err := ParseBaseline([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
