package gate

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/sim"
)

var emuFP = Fingerprint{"kind": "emulated", "engine": "emulator", "model": "qwen", "workload": "w", "slo": "s"}

// synthRun is one emulated run whose throughput and p99 TTFT are drawn
// around the given centers with the given per-run CV (lognormal), at an
// offered 16 req/s: above every throughput drawn, as it must be to be
// plausible.
func synthRun(r *rand.Rand, qps, ttft, cv float64) Run {
	draw := func(c float64) float64 { return c * math.Exp(cv*r.NormFloat64()-cv*cv/2) }
	q := draw(qps)
	return Run{Kind: "emulated", Scenario: "disagg", Fingerprint: emuFP, Objective: q, Levels: []LevelRun{{
		OfferedQPS: 16, Passed: true, Metrics: map[string]float64{"effective_qps": q, "p99_ttft_ms": draw(ttft)},
	}}}
}

func synthRuns(r *rand.Rand, n int, qps, ttft, cv float64) []Run {
	out := make([]Run, n)
	for i := range out {
		out[i] = synthRun(r, qps, ttft, cv)
	}
	return out
}

// The Monte-Carlo check: 2% CV per run, 3 candidate vs 10 baseline
// runs. No change must fail at most 5% of the time; a 10% regression (in
// throughput) must be caught at least 80% of the time. p99 TTFT's fail
// threshold is +10% itself, so a true +10% sits on the threshold and is
// caught about half the time by design; +20% must be caught.
func TestMonteCarloFalseFailAndPower(t *testing.T) {
	const trials, cv = 2000, 0.02
	r := rand.New(rand.NewPCG(42, 4242))
	var falseFail, caughtQPS, caughtTTFT int
	for i := 0; i < trials; i++ {
		bl, err := NewBaseline("mc", synthRuns(r, 10, 10, 500, cv), DefaultCompared)
		if err != nil {
			t.Fatal(err)
		}
		if Check(bl, synthRuns(r, 3, 10, 500, cv), Config{}).Verdict == Fail {
			falseFail++
		}
		if metricFailed(Check(bl, synthRuns(r, 3, 9, 500, cv), Config{}), "effective_qps") {
			caughtQPS++
		}
		if metricFailed(Check(bl, synthRuns(r, 3, 10, 600, cv), Config{}), "p99_ttft_ms") {
			caughtTTFT++
		}
	}
	ff, pq, pt := float64(falseFail)/trials, float64(caughtQPS)/trials, float64(caughtTTFT)/trials
	t.Logf("Monte Carlo (%d trials, CV %.0f%%, 3 vs 10 runs): false-fail %.2f%%, detection of −10%% throughput %.1f%%, of +20%% p99 TTFT %.1f%%",
		trials, 100*cv, 100*ff, 100*pq, 100*pt)
	if ff > 0.05 {
		t.Errorf("false-fail rate %.3f > 0.05", ff)
	}
	if pq < 0.80 || pt < 0.80 {
		t.Errorf("detection %.3f (throughput), %.3f (TTFT); want >= 0.80", pq, pt)
	}
}

func metricFailed(rep *Report, metric string) bool {
	for _, res := range rep.Results {
		if res.Series.Metric == metric && res.Verdict == Fail {
			return true
		}
	}
	return false
}

func verdictOf(t *testing.T, rep *Report, metric string, qps float64) Result {
	t.Helper()
	for _, res := range rep.Results {
		if res.Series.Metric == metric && res.Series.OfferedQPS == qps {
			return res
		}
	}
	t.Fatalf("no result for %s @ %v", metric, qps)
	return Result{}
}

func TestEveryVerdict(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	bl, _ := NewBaseline("v", synthRuns(r, 10, 10, 500, 0.02), DefaultCompared)

	// pass: same distribution.
	if rep := Check(bl, synthRuns(rand.New(rand.NewPCG(9, 9)), 5, 10, 500, 0.02), Config{}); rep.Verdict != Pass || rep.ExitCode() != 0 {
		t.Errorf("no change: %s\n%s", rep.Verdict, dump(rep))
	}
	// improved: 20% more throughput.
	rep := Check(bl, synthRuns(r, 5, 12, 500, 0.02), Config{})
	if v := verdictOf(t, rep, "effective_qps", 16); v.Verdict != Improved || rep.ExitCode() != 0 {
		t.Errorf("+20%% throughput: %s (%s)", v.Verdict, v.Reason)
	}
	// warn: −4% throughput is beyond warn (3%) but within fail (5%).
	rep = Check(bl, synthRuns(r, 5, 9.6, 500, 0.005), Config{})
	if v := verdictOf(t, rep, "effective_qps", 16); v.Verdict != Warn || rep.ExitCode() != 0 {
		t.Errorf("−4%% throughput: %s (%s)", v.Verdict, v.Reason)
	}
	// fail: +30% p99 TTFT.
	rep = Check(bl, synthRuns(r, 5, 10, 650, 0.02), Config{})
	if v := verdictOf(t, rep, "p99_ttft_ms", 16); v.Verdict != Fail || rep.ExitCode() != 1 || !strings.Contains(v.Test, "Mann–Whitney") {
		t.Errorf("+30%% TTFT: %s via %s (%s)", v.Verdict, v.Test, v.Reason)
	}
	// A per-metric override can make that change acceptable.
	big := 0.5
	rep = Check(bl, synthRuns(r, 5, 10, 650, 0.02), Config{Metrics: map[string]Threshold{"p99_ttft_ms": {Fail: &big, Warn: &big}}})
	if v := verdictOf(t, rep, "p99_ttft_ms", 16); v.Verdict != Pass {
		t.Errorf("with fail threshold 50%%: %s (%s)", v.Verdict, v.Reason)
	}
	// incomparable: another model.
	other := synthRuns(r, 3, 10, 500, 0.02)
	for i := range other {
		other[i].Fingerprint = Fingerprint{"kind": "emulated", "engine": "emulator", "model": "llama", "workload": "w", "slo": "s"}
	}
	rep = Check(bl, other, Config{})
	if rep.Verdict != Incomparable || rep.ExitCode() != 2 || !strings.Contains(strings.Join(rep.Incomparable, ";"), `model: "qwen" → "llama"`) {
		t.Errorf("other model: %s %v", rep.Verdict, rep.Incomparable)
	}
	// hone's own version is recorded but not compared.
	ver := synthRuns(rand.New(rand.NewPCG(9, 9)), 3, 10, 500, 0.02)
	for i := range ver {
		ver[i].Fingerprint = Fingerprint{"kind": "emulated", "engine": "emulator", "model": "qwen", "workload": "w", "slo": "s", "hone_version": "v2"}
	}
	if rep := Check(bl, ver, Config{}); rep.Verdict == Incomparable {
		t.Errorf("a new hone version made the check incomparable: %v", rep.Incomparable)
	}
}

func TestHardRules(t *testing.T) {
	base := []Run{{Kind: "emulated", Scenario: "s", Fingerprint: emuFP, Objective: 8, Levels: []LevelRun{
		{OfferedQPS: 4, Passed: true, Metrics: map[string]float64{"p99_ttft_ms": 100}},
		{OfferedQPS: 8, Passed: true, Metrics: map[string]float64{"p99_ttft_ms": 100}},
	}}}
	bl, _ := NewBaseline("h", base, DefaultCompared)
	cand := []Run{{Kind: "emulated", Scenario: "s", Fingerprint: emuFP, Objective: 4, Levels: []LevelRun{
		{OfferedQPS: 4, Passed: true, Metrics: map[string]float64{"p99_ttft_ms": 100}},
		{OfferedQPS: 8, Passed: false, Failed: 3, Metrics: map[string]float64{"p99_ttft_ms": 100}},
	}}}
	rep := Check(bl, cand, Config{})
	for _, m := range []struct {
		metric string
		qps    float64
	}{{"passed", 8}, {"failed_requests", 8}, {"objective_level_qps", 0}} {
		if v := verdictOf(t, rep, m.metric, m.qps); v.Verdict != Fail {
			t.Errorf("%s: %s (%s)", m.metric, v.Verdict, v.Reason)
		}
	}
	// One run a side: declared threshold comparison, no test.
	if v := verdictOf(t, rep, "p99_ttft_ms", 8); !strings.HasPrefix(v.Test, "threshold only (1 vs 1") || v.Verdict != Pass {
		t.Errorf("single run: %s %s", v.Test, v.Verdict)
	}
}

func TestZeroVarianceIsDeclared(t *testing.T) {
	run := func(ttft float64) Run {
		return Run{Kind: "emulated", Scenario: "s", Fingerprint: emuFP, Objective: 8, Levels: []LevelRun{
			{OfferedQPS: 8, Passed: true, Metrics: map[string]float64{"p99_ttft_ms": ttft}}}}
	}
	bl, _ := NewBaseline("z", []Run{run(100), run(100), run(100)}, DefaultCompared)
	rep := Check(bl, []Run{run(120), run(120), run(120)}, Config{})
	v := verdictOf(t, rep, "p99_ttft_ms", 8)
	if v.Verdict != Fail || !strings.Contains(v.Test, "no run-to-run spread") {
		t.Errorf("zero spread +20%%: %s via %s", v.Verdict, v.Test)
	}
}

func simDoc(t *testing.T, mode sim.Mode, cache bool) []byte {
	res, err := sim.Scan(sim.DefaultScan(sim.Config{Mode: mode, PrefixCache: cache}))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	return b
}

func TestSimulationRecordsCompareExactly(t *testing.T) {
	runs, err := ParseRuns(simDoc(t, sim.Colocated, true))
	if err != nil {
		t.Fatal(err)
	}
	bl, err := NewBaseline("sim", runs, DefaultCompared)
	if err != nil {
		t.Fatal(err)
	}
	if rep := Check(bl, runs, Config{}); rep.Verdict != Pass {
		t.Errorf("identical sim record: %s", rep.Verdict)
	}
	// The same scenario with its cache disabled is a different config under
	// the same scenario name only if we say so; relabel to plant it.
	off, _ := ParseRuns(simDoc(t, sim.Colocated, false))
	off[0].Scenario = runs[0].Scenario
	rep := Check(bl, off, Config{})
	if rep.Verdict != Fail || rep.ExitCode() != 1 {
		t.Fatalf("planted regression: %s", rep.Verdict)
	}
	if v := verdictOf(t, rep, "objective", 0); v.Test != "exact" || v.Verdict != Fail {
		t.Errorf("objective: %s %s", v.Test, v.Verdict)
	}
	// A different scenario has none of the baseline's metrics.
	dis, _ := ParseRuns(simDoc(t, sim.Disaggregated, true))
	if rep := Check(bl, dis, Config{}); rep.Verdict != Incomparable {
		t.Errorf("other scenario: %s", rep.Verdict)
	}
}

func TestBaselineFileRoundTripAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	runs, _ := ParseRuns(simDoc(t, sim.Disaggregated, true))
	bl, _ := NewBaseline("rt", runs, DefaultCompared)
	path := filepath.Join(dir, "b.json")
	if err := bl.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadBaseline(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Runs != 1 || len(back.Series) != len(bl.Series) {
		t.Errorf("round trip: %d runs %d series", back.Runs, len(back.Series))
	}
	good, _ := os.ReadFile(path)
	for name, tc := range map[string]struct {
		doc  string
		want string
	}{
		"truncated":      {string(good[:len(good)/2]), "truncated or corrupt"},
		"empty":          {"", "truncated or corrupt"},
		"wrong version":  {`{"schema_version":9,"kind":"emulated","series":[]}`, "schema_version 9"},
		"no series":      {`{"schema_version":2,"kind":"emulated","series":[]}`, "series: empty"},
		"bad direction":  {`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","metric":"m","direction":"up","values":[1]}]}`, `direction "up"`},
		"no values":      {`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","metric":"m","direction":"lower","values":[]}]}`, "values: empty"},
		"missing metric": {`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","direction":"lower","values":[1]}]}`, "scenario and metric are required"},
		"invalid length": {`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","metric":"m","direction":"lower","values":[1,2],"invalid":[""]}]}`, "invalid: 1 entries for 2 values"},
		"live v1":        {`{"schema_version":1,"kind":"device","series":[{"scenario":"s","metric":"m","direction":"lower","values":[1]}]}`, "recreate it from schema-2 run records"},
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(tc.doc), 0o644)
		_, err := ReadBaseline(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err %v, want one naming the file and %q", name, err, tc.want)
		}
	}
}

func TestUpdateRefusesOtherEnvironment(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	bl, _ := NewBaseline("u", synthRuns(r, 3, 10, 500, 0.02), DefaultCompared)
	if err := bl.Update(synthRuns(r, 12, 10, 500, 0.02), DefaultCompared, 10); err != nil {
		t.Fatal(err)
	}
	if bl.Runs != 10 || len(bl.Series[0].Values) != 10 {
		t.Errorf("keep 10: %d runs, %d values", bl.Runs, len(bl.Series[0].Values))
	}
	sims, _ := ParseRuns(simDoc(t, sim.Colocated, true))
	if err := bl.Update(sims, DefaultCompared, 10); err == nil || !strings.Contains(err.Error(), "never mixed") {
		t.Errorf("mixing kinds: %v", err)
	}
}

func TestFormats(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	bl, _ := NewBaseline("fmt", synthRuns(r, 10, 10, 500, 0.02), DefaultCompared)
	rep := Check(bl, synthRuns(r, 5, 10, 650, 0.02), Config{})
	var buf bytes.Buffer
	for _, f := range Formats {
		buf.Reset()
		if err := rep.Write(&buf, f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out := buf.String()
		switch f {
		case "junit":
			var s junitSuite
			if err := xml.Unmarshal(buf.Bytes(), &s); err != nil {
				t.Fatalf("junit is not XML: %v", err)
			}
			if s.Tests != len(rep.Results) || s.Failures == 0 {
				t.Errorf("junit: %d tests %d failures", s.Tests, s.Failures)
			}
		case "github":
			if !strings.Contains(out, "::error title=hone gate%3A p99_ttft_ms regressed::") {
				t.Errorf("github annotations:\n%s", out)
			}
		case "md":
			if !strings.Contains(out, "| fail | disagg @ 16 req/s | p99_ttft_ms |") {
				t.Errorf("markdown:\n%s", out)
			}
		case "table":
			if !strings.Contains(out, "gate: FAIL") || !strings.Contains(out, "Holm-adjusted") {
				t.Errorf("table:\n%s", out)
			}
		}
	}
	if err := rep.Write(&buf, "yaml"); err == nil {
		t.Error("unknown format accepted")
	}
	// At most 10 annotations however many failures.
	many := &Report{Verdict: Fail}
	for i := 0; i < 25; i++ {
		many.Results = append(many.Results, Result{Series: Series{Scenario: "s", Metric: "m"}, Verdict: Fail})
	}
	buf.Reset()
	many.Write(&buf, "github")
	if n := strings.Count(buf.String(), "::error"); n != 10 {
		t.Errorf("%d annotations, want 10", n)
	}
}

func FuzzParseBaseline(f *testing.F) {
	f.Add([]byte(`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","metric":"p99_ttft_ms","direction":"lower","values":[1,2,3]}]}`))
	f.Add([]byte(`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","metric":"m","direction":"lower","values":[1e400]}]}`))
	f.Add([]byte(`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","metric":"objective","direction":"higher","values":[1e308,1e308,1e308]}]}`))
	f.Add([]byte(`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","metric":"passed","direction":"higher","values":[1,0],"invalid":["","warm_start: warm"]}]}`))
	f.Add([]byte(`{"schema_version":1,"kind":"simulation_only","series":[{"scenario":"s","metric":"m","direction":"lower","values":[1]}]}`))
	f.Add([]byte(`{"schema_version":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		bl, err := ParseBaseline(b)
		if err != nil {
			return
		}
		// Whatever parses must be checkable without a panic, and its report
		// must be writable in every format (JSON has no NaN or Inf).
		var runs []Run
		runs = append(runs, Run{Kind: bl.Kind, Scenario: "s", Fingerprint: bl.Fingerprint, Levels: []LevelRun{{OfferedQPS: 1, Metrics: map[string]float64{"p99_ttft_ms": 1}}}})
		rep := Check(bl, runs, Config{})
		for _, f := range Formats {
			if err := rep.Write(io.Discard, f); err != nil {
				t.Fatalf("%s report of a parsed baseline: %v", f, err)
			}
		}
	})
}

// A baseline value the statistics cannot compute with (1e308: its mean
// overflows, the noise floor was NaN, the JSON report failed) is bad input,
// named by series and index.
func TestParseBaselineRejectsHugeValues(t *testing.T) {
	for _, v := range []string{"1e308", "-1e16"} {
		_, err := ParseBaseline([]byte(`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","metric":"objective","direction":"higher","values":[4,` + v + `]}]}`))
		if err == nil || !strings.Contains(err.Error(), "series[0] (s@0/objective): values[1]") || !strings.Contains(err.Error(), "magnitude at most 1e+15") {
			t.Errorf("%s: %v", v, err)
		}
	}
}

func dump(rep *Report) string {
	var b bytes.Buffer
	rep.Write(&b, "table")
	return b.String()
}

func TestParseRunsRejectsHugeValues(t *testing.T) {
	rec := `{"kind":"simulation_only","config":{"mode":"colocated"},"levels":[{"offered_qps":4,"p99_ttft_ms":1e308,"p99_tpot_ms":5,"effective_qps":4,"passed":true}],"objective":4}`
	if _, err := ParseRuns([]byte(rec)); err == nil || !strings.Contains(err.Error(), "p99_ttft_ms: 1e+308: want a finite number") {
		t.Errorf("ParseRuns: %v", err)
	}
}
