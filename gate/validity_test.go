package gate

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var liveFP = Fingerprint{"kind": "device", "engine": "vllm", "model": "qwen", "workload": "w", "slo": "s",
	"time_scale": "1", "cache": "reset_prefix_cache"}

// lv is one level of a live run: served rate, TPOT and TTFT (model ms),
// and the reason it is invalid ("" for valid).
type lv struct {
	qps, eff, p50tpot, p99tpot, p99ttft float64
	passed                              bool
	invalid                             string
}

// liveRun is one device run of scenario "s" with 120 measured requests a
// level (the brief's 128 minus the 8 warm-ups).
func liveRun(objective float64, levels ...lv) Run {
	r := Run{Kind: "device", Scenario: "s", Fingerprint: liveFP, Objective: objective, Bounds: Bounds{MeasuredPerLevel: 120}}
	for _, l := range levels {
		lr := LevelRun{OfferedQPS: l.qps, Passed: l.passed, Metrics: map[string]float64{
			"effective_qps": l.eff, "p50_tpot_ms": l.p50tpot, "p99_tpot_ms": l.p99tpot, "p99_ttft_ms": l.p99ttft}}
		if l.invalid != "" {
			lr.Invalid = []string{l.invalid}
		}
		r.Levels = append(r.Levels, lr)
	}
	return r
}

// healthy is a plausible run at 4 and 8 req/s, scaled by f (1 ± 1%).
func healthy(f float64) Run {
	return liveRun(7.9*f,
		lv{qps: 4, eff: 3.97 * f, p50tpot: 6.1 * f, p99tpot: 7.0 * f, p99ttft: 120 * f, passed: true},
		lv{qps: 8, eff: 7.9 * f, p50tpot: 6.5 * f, p99tpot: 8.0 * f, p99ttft: 300 * f, passed: true})
}

func healthyRuns() []Run { return []Run{healthy(1), healthy(1.01), healthy(0.99)} }

const (
	warmStart   = "warm_start: the warm-up requests found 97.0% of their prompt tokens cached (a cold engine: ~0%): the cache was warm at the start"
	clientBound = "client_bound: p99 dispatch lag 180 ms > 5% of the 2000 ms TTFT SLO (100 ms): the load generator sent late"
)

// verdicts maps "metric@qps" to each result's verdict.
func verdicts(rep *Report) map[string]Verdict {
	out := map[string]Verdict{}
	for _, r := range rep.Results {
		out[r.Series.Metric+"@"+fmtQPS(r.Series.OfferedQPS)] = r.Verdict
	}
	return out
}

func levelVerdicts(qps string, v Verdict) map[string]Verdict {
	out := map[string]Verdict{}
	for _, m := range []string{"effective_qps", "p50_tpot_ms", "p99_tpot_ms", "p99_ttft_ms", "passed", "failed_requests"} {
		out[m+"@"+qps] = v
	}
	return out
}

func merged(ms ...map[string]Verdict) map[string]Verdict {
	out := map[string]Verdict{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func mustBaseline(t *testing.T, runs []Run) *Baseline {
	t.Helper()
	bl, err := NewBaseline("b", runs, DefaultCompared)
	if err != nil {
		t.Fatal(err)
	}
	// Through the file, so the stored layout carries what Check needs.
	path := filepath.Join(t.TempDir(), "b.json")
	if err := bl.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadBaseline(path)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// The tester's scenario: a second replay against the same server started
// warm. Its 8 req/s level is invalid (warm_start); its 4 req/s level is
// valid but reports a 0.023 ms p50 TPOT. Nothing of it may pass.
func TestWarmStartCandidate(t *testing.T) {
	bl := mustBaseline(t, healthyRuns())
	cand := []Run{liveRun(3.98,
		lv{qps: 4, eff: 3.98, p50tpot: 0.023, p99tpot: 0.041, p99ttft: 20, passed: true},
		lv{qps: 8, eff: 37.3, p50tpot: 0.02, p99tpot: 0.03, p99ttft: 15, passed: true, invalid: warmStart})}
	rep := Check(bl, cand, Config{})
	want := merged(map[string]Verdict{
		"objective@0": Invalid, "objective_level_qps@0": Invalid,
		"effective_qps@4": Pass, "p50_tpot_ms@4": Suspect, "p99_tpot_ms@4": Suspect, "p99_ttft_ms@4": Improved,
		"passed@4": Pass, "failed_requests@4": Pass,
	}, levelVerdicts("8", Invalid))
	if got := verdicts(rep); !reflect.DeepEqual(got, want) {
		t.Errorf("verdicts:\n got %v\nwant %v\n%s", got, want, dump(rep))
	}
	if rep.Verdict != Suspect || rep.ExitCode() != 1 {
		t.Errorf("report: %s exit %d, want suspect exit 1", rep.Verdict, rep.ExitCode())
	}
	if v := verdictOf(t, rep, "p50_tpot_ms", 4); !strings.HasPrefix(v.Reason, "candidate p50_tpot_ms 0.023 ms is below the 0.1 ms floor") {
		t.Errorf("p50 TPOT reason: %s", v.Reason)
	}
	wantLevels := []string{
		"s: not comparable: not every level is valid; candidate: 1 of 1 runs invalid (run 1: 8 req/s invalid (" + warmStart + "))",
		"s @ 8 req/s: skipped: the level is invalid; candidate: 1 of 1 runs invalid (run 1: " + warmStart + ")",
	}
	if !reflect.DeepEqual(rep.InvalidLevels, wantLevels) {
		t.Errorf("invalid levels:\n got %q\nwant %q", rep.InvalidLevels, wantLevels)
	}

	// Every format says invalid and suspect, never pass, for those rows.
	for _, tc := range []struct {
		format string
		want   []string
	}{
		{"table", []string{"gate: SUSPECT", "  invalid: s @ 8 req/s: skipped: the level is invalid; candidate: 1 of 1 runs invalid (run 1: warm_start:", "metrics are suspect"}},
		{"md", []string{"| suspect | s @ 4 req/s | p50_tpot_ms |", "| invalid | s @ 8 req/s | p99_ttft_ms |", "| invalid | s | objective |", "- **invalid**: s @ 8 req/s: skipped"}},
		{"github", []string{"::error title=hone gate%3A p50_tpot_ms suspect::s @ 4 req/s: candidate p50_tpot_ms 0.023 ms", "::warning title=hone gate%3A invalid level::s @ 8 req/s: skipped"}},
		{"json", []string{`"verdict": "suspect"`, `"verdict": "invalid"`, `"invalid_levels": [`}},
	} {
		var b bytes.Buffer
		if err := rep.Write(&b, tc.format); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s output lacks %q:\n%s", tc.format, w, b.String())
			}
		}
	}
	var b bytes.Buffer
	rep.Write(&b, "junit")
	var s junitSuite
	if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Tests != 14 || s.Failures != 2 || s.Skipped != 8 || s.Errors != 0 {
		t.Errorf("junit: %d tests, %d failures, %d skipped, %d errors; want 14, 2, 8, 0", s.Tests, s.Failures, s.Skipped, s.Errors)
	}
	for _, c := range s.Cases {
		if c.Failure != nil && !strings.HasPrefix(c.Failure.Message, "suspect: candidate p") {
			t.Errorf("junit failure %s: %s", c.Name, c.Failure.Message)
		}
	}
}

// A level invalid in the baseline is skipped, whatever the candidate says;
// a level invalid in only some baseline runs is compared on the others.
func TestInvalidInBaseline(t *testing.T) {
	withInvalid8 := func(r Run, why string) Run {
		r.Levels[1].Invalid = []string{why}
		return r
	}
	for _, tc := range []struct {
		name     string
		base     []Run
		want     map[string]Verdict
		verdict  Verdict
		excluded string
	}{
		{"every run", []Run{withInvalid8(healthy(1), clientBound), withInvalid8(healthy(1.01), clientBound), withInvalid8(healthy(0.99), clientBound)},
			merged(map[string]Verdict{"objective@0": Invalid, "objective_level_qps@0": Invalid,
				"effective_qps@4": Pass, "p50_tpot_ms@4": Pass, "p99_tpot_ms@4": Pass, "p99_ttft_ms@4": Pass, "passed@4": Pass, "failed_requests@4": Pass,
			}, levelVerdicts("8", Invalid)), Pass, ""},
		{"one run", []Run{healthy(1), withInvalid8(healthy(1.01), clientBound), healthy(0.99)},
			merged(map[string]Verdict{"objective@0": Pass, "objective_level_qps@0": Pass}, levelVerdicts("4", Pass), levelVerdicts("8", Pass)),
			Pass, "baseline: 1 of 3 runs invalid (run 2: " + clientBound + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bl := mustBaseline(t, tc.base)
			rep := Check(bl, healthyRuns(), Config{})
			if got := verdicts(rep); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("verdicts:\n got %v\nwant %v\n%s", got, tc.want, dump(rep))
			}
			if rep.Verdict != tc.verdict || rep.ExitCode() != 0 {
				t.Errorf("report %s exit %d", rep.Verdict, rep.ExitCode())
			}
			if tc.excluded != "" {
				if v := verdictOf(t, rep, "p99_ttft_ms", 8); v.Excluded != tc.excluded || len(v.Series.Values) != 2 {
					t.Errorf("excluded %q over %d baseline values; want %q over 2", v.Excluded, len(v.Series.Values), tc.excluded)
				}
			}
			if tc.verdict == Pass && tc.excluded == "" {
				if v := verdictOf(t, rep, "passed", 8); v.Reason != "skipped: the level is invalid; baseline: 3 of 3 runs invalid (run 1, 2, 3: "+clientBound+")" {
					t.Errorf("reason: %s", v.Reason)
				}
			}
		})
	}
}

// No level valid on both sides: unusable (exit 2), naming every level and
// its reasons.
func TestNoComparableLevelIsUnusable(t *testing.T) {
	bl := mustBaseline(t, []Run{healthy(1), healthy(1.01), withLevelsInvalid(healthy(0.99), "", clientBound)})
	for _, tc := range []struct {
		name string
		cand Run
		want []string
	}{
		{"candidate invalid everywhere", withLevelsInvalid(healthy(1), warmStart, warmStart), []string{
			"s: not comparable: not every level is valid; baseline: 1 of 3 runs invalid (run 3: 8 req/s invalid (" + clientBound + ")); " +
				"candidate: 1 of 1 runs invalid (run 1: 4 req/s invalid (" + warmStart + "); 8 req/s invalid (" + warmStart + "))",
			"s @ 4 req/s: skipped: the level is invalid; candidate: 1 of 1 runs invalid (run 1: " + warmStart + ")",
			"s @ 8 req/s: skipped: the level is invalid; baseline: 1 of 3 runs invalid (run 3: " + clientBound + "); " +
				"candidate: 1 of 1 runs invalid (run 1: " + warmStart + ")",
		}},
		{"one side each", withLevelsInvalid(healthy(1), warmStart, ""), nil}, // 8 req/s is valid in baseline runs 1 and 2
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(bl, []Run{tc.cand}, Config{})
			if tc.want == nil {
				if rep.Verdict == Unusable {
					t.Errorf("8 req/s is comparable, yet unusable:\n%s", dump(rep))
				}
				return
			}
			if rep.Verdict != Unusable || rep.ExitCode() != 2 {
				t.Errorf("%s exit %d, want unusable exit 2", rep.Verdict, rep.ExitCode())
			}
			if !reflect.DeepEqual(rep.InvalidLevels, tc.want) {
				t.Errorf("invalid levels:\n got %q\nwant %q", rep.InvalidLevels, tc.want)
			}
			for _, r := range rep.Results {
				if r.Verdict != Invalid {
					t.Errorf("%s: %s", r.Series.Key(), r.Verdict)
				}
			}
			var b bytes.Buffer
			rep.Write(&b, "github")
			if !strings.HasPrefix(b.String(), "::error title=hone gate%3A unusable::no level is valid") {
				t.Errorf("github:\n%s", b.String())
			}
		})
	}
	// And a baseline with no valid level is refused at creation.
	if _, err := NewBaseline("b", []Run{withLevelsInvalid(healthy(1), clientBound, clientBound)}, DefaultCompared); err == nil || !strings.Contains(err.Error(), "no level is valid") {
		t.Errorf("all-invalid baseline: %v", err)
	}
}

func withLevelsInvalid(r Run, why4, why8 string) Run {
	for i, why := range []string{why4, why8} {
		if why != "" {
			r.Levels[i].Invalid = []string{why}
		}
	}
	return r
}

// Records made with another cold-start procedure, time scale or kind are
// refused (exit 2), whatever compare_fingerprint lists.
func TestProcedureAndKindAreRefused(t *testing.T) {
	bl := mustBaseline(t, healthyRuns())
	with := func(kind, key, value string) []Run {
		runs := healthyRuns()
		for i := range runs {
			fp := Fingerprint{}
			for k, v := range liveFP {
				fp[k] = v
			}
			if key != "" {
				fp[key] = value
			}
			runs[i].Fingerprint = fp
			if kind != "" {
				runs[i].Kind, runs[i].Fingerprint["kind"] = kind, kind
			}
		}
		return runs
	}
	for _, tc := range []struct {
		name string
		runs []Run
		cfg  Config
		want string
	}{
		{"cache procedure", with("", "cache", "fresh_prefixes"), Config{}, `run 1: cache: "reset_prefix_cache" → "fresh_prefixes"`},
		{"cache procedure, config compares model only", with("", "cache", "fresh_prefixes"), Config{Compared: []string{"model"}}, `run 1: cache: "reset_prefix_cache" → "fresh_prefixes"`},
		{"time scale", with("", "time_scale", "0.5"), Config{}, `run 1: time_scale: "1" → "0.5"`},
		{"time scale, config compares model only", with("", "time_scale", "0.5"), Config{Compared: []string{"model"}}, `run 1: time_scale: "1" → "0.5"`},
		{"unverified vs device", with("unverified", "", ""), Config{}, `run 1: kind "unverified", baseline kind "device"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(bl, tc.runs, tc.cfg)
			if rep.Verdict != Incomparable || rep.ExitCode() != 2 || len(rep.Results) != 0 {
				t.Fatalf("%s exit %d with %d results, want incomparable exit 2", rep.Verdict, rep.ExitCode(), len(rep.Results))
			}
			if rep.Incomparable[0] != tc.want {
				t.Errorf("incomparable %q, want first %q", rep.Incomparable, tc.want)
			}
			if err := bl.Update(tc.runs, DefaultCompared, 10); err == nil {
				t.Error("baseline update accepted the runs")
			}
		})
	}
	if rep := Check(bl, with("", "hone_version", "v9"), Config{}); rep.Verdict != Pass {
		t.Errorf("a new hone version: %s %v", rep.Verdict, rep.Incomparable)
	}
}

// Implausible figures make a comparison suspect; plausible ones near the
// bounds do not.
func TestPlausibility(t *testing.T) {
	one := func(eff, objective, p99tpot float64, bounds Bounds) Run {
		r := liveRun(objective, lv{qps: 8, eff: eff, p50tpot: 6.5, p99tpot: p99tpot, p99ttft: 300, passed: true})
		r.Bounds = bounds
		return r
	}
	n120, n16 := Bounds{MeasuredPerLevel: 120}, Bounds{MeasuredPerLevel: 16}
	oneTTFT := func(p99ttft float64) Run {
		r := liveRun(7.9, lv{qps: 8, eff: 7.9, p50tpot: 6.5, p99tpot: 8, p99ttft: p99ttft, passed: true})
		r.Bounds = n120
		return r
	}
	for _, tc := range []struct {
		name       string
		base, cand Run
		want       map[string]Verdict
		reason     string // a suspect reason starts with it
	}{
		{"unchanged", one(7.9, 7.9, 8, n120), one(7.9, 7.9, 8, n120), nil, ""},
		// 120 measured requests: at most 8 × 120/119 × 1.05 = 8.47 req/s.
		{"effective beyond offered", one(7.9, 7.9, 8, n120), one(9, 9, 8, n120),
			map[string]Verdict{"objective@0": Suspect, "effective_qps@8": Suspect},
			"candidate objective 9 req/s exceeds the offered 8 req/s of its highest passing level by more than 5% (limit 8.471)"},
		// 16 measured requests: the schedule's edge allows 8 × 16/15 × 1.05 = 8.96.
		{"within the schedule's edge", one(7.9, 7.9, 8, n16), one(8.9, 8.9, 8, n16),
			map[string]Verdict{"objective@0": Improved, "effective_qps@8": Improved}, ""},
		{"beyond the schedule's edge", one(7.9, 7.9, 8, n16), one(9.1, 9.1, 8, n16),
			map[string]Verdict{"objective@0": Suspect, "effective_qps@8": Suspect},
			"candidate objective 9.1 req/s exceeds the offered 8 req/s of its highest passing level by more than 5% (limit 8.96)"},
		{"objective more than doubled", one(3.5, 3.5, 8, n120), one(7.9, 7.9, 8, n120),
			map[string]Verdict{"objective@0": Suspect, "effective_qps@8": Improved},
			"the objective changed 2.26× (3.5 → 7.9 req/s), beyond the 0.5×–2× a deployment change plausibly makes"},
		{"objective less than halved", one(3.5, 3.5, 8, n120), one(1.5, 1.5, 8, n120),
			map[string]Verdict{"objective@0": Suspect, "effective_qps@8": Fail},
			"the objective changed 0.429× (3.5 → 1.5 req/s)"},
		{"TPOT below the floor", one(7.9, 7.9, 8, n120), one(7.9, 7.9, 0.08, n120),
			map[string]Verdict{"p99_tpot_ms@8": Suspect}, "candidate p99_tpot_ms 0.08 ms is below the 0.1 ms floor"},
		{"TPOT above the record's own floor", one(7.9, 7.9, 8, n120), one(7.9, 7.9, 0.08, Bounds{MeasuredPerLevel: 120, TPOTFloorMs: 0.05}),
			map[string]Verdict{"p99_tpot_ms@8": Improved}, ""},
		{"baseline TPOT below the floor", one(7.9, 7.9, 0.023, n120), one(7.9, 7.9, 0.468, n120),
			map[string]Verdict{"p99_tpot_ms@8": Suspect}, "baseline p99_tpot_ms 0.023 ms is below the 0.1 ms floor"},
		// A TTFT needs a forward pass: 0.05 ms is an artefact, never a pass.
		{"TTFT below the floor", one(7.9, 7.9, 8, n120), oneTTFT(0.05),
			map[string]Verdict{"p99_ttft_ms@8": Suspect}, "candidate p99_ttft_ms 0.05 ms is below the 0.1 ms floor of a real forward pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(mustBaseline(t, []Run{tc.base}), []Run{tc.cand}, Config{})
			want := merged(map[string]Verdict{"objective@0": Pass, "objective_level_qps@0": Pass}, levelVerdicts("8", Pass), tc.want)
			if got := verdicts(rep); !reflect.DeepEqual(got, want) {
				t.Errorf("verdicts:\n got %v\nwant %v\n%s", got, want, dump(rep))
			}
			var reasons []string
			found := false
			for _, r := range rep.Results {
				if r.Verdict == Suspect {
					reasons = append(reasons, r.Reason)
					found = found || strings.HasPrefix(r.Reason, tc.reason)
				}
			}
			switch {
			case tc.reason == "" && rep.Verdict == Suspect:
				t.Errorf("suspect: %q", reasons)
			case tc.reason != "" && (rep.Verdict != Suspect || rep.ExitCode() != 1):
				t.Errorf("%s exit %d, want suspect exit 1", rep.Verdict, rep.ExitCode())
			case tc.reason != "" && !found:
				t.Errorf("reasons %q; want one to start %q", reasons, tc.reason)
			}
		})
	}
}

// An unchanged, valid configuration passes (exit 0) with nothing invalid
// or suspect.
func TestUnchangedValidConfigPasses(t *testing.T) {
	rep := Check(mustBaseline(t, healthyRuns()), []Run{healthy(1.005), healthy(0.995), healthy(1)}, Config{})
	want := merged(map[string]Verdict{"objective@0": Pass, "objective_level_qps@0": Pass}, levelVerdicts("4", Pass), levelVerdicts("8", Pass))
	if got := verdicts(rep); !reflect.DeepEqual(got, want) || rep.Verdict != Pass || rep.ExitCode() != 0 || len(rep.InvalidLevels) != 0 {
		t.Errorf("verdicts %v, report %s exit %d, invalid %q\n%s", got, rep.Verdict, rep.ExitCode(), rep.InvalidLevels, dump(rep))
	}
}

// The replay reader takes each level's verdict, the cache procedure and
// the bounds from the record. replay's example record was made against a
// test server whose p50 TPOT (0.03 ms) no GPU could reach: against itself
// it is suspect, unless its config lowers the floor.
func TestReadReplayRecordVerdicts(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("..", "replay", "testdata", "record.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(doc map[string]any)) []byte {
		var doc map[string]any
		if err := json.Unmarshal(good, &doc); err != nil {
			t.Fatal(err)
		}
		f(doc)
		b, _ := json.Marshal(doc)
		return b
	}
	level0 := func(doc map[string]any) map[string]any {
		return doc["runs"].([]any)[0].(map[string]any)["levels"].([]any)[0].(map[string]any)
	}
	runs, err := ParseRuns(good)
	if err != nil {
		t.Fatal(err)
	}
	if fp := runs[0].Fingerprint; fp["cache"] != "fresh_prefixes" || fp["time_scale"] != "0.1" {
		t.Errorf("fingerprint cache %q time_scale %q", fp["cache"], fp["time_scale"])
	}
	if runs[0].Bounds != (Bounds{MeasuredPerLevel: 4}) || !runs[0].Levels[0].Valid() {
		t.Errorf("bounds %+v, level valid %v", runs[0].Bounds, runs[0].Levels[0].Valid())
	}
	rep := Check(mustBaseline(t, runs), runs, Config{})
	if rep.Verdict != Suspect || verdictOf(t, rep, "p50_tpot_ms", 10).Verdict != Suspect {
		t.Errorf("example record against itself: %s\n%s", rep.Verdict, dump(rep))
	}

	floor := edit(func(doc map[string]any) { doc["config"].(map[string]any)["tpot_floor_ms"] = 0.01 })
	if runs, err := ParseRuns(floor); err != nil || runs[0].Bounds.TPOTFloorMs != 0.01 {
		t.Fatalf("tpot_floor_ms: %v %+v", err, runs)
	} else if rep := Check(mustBaseline(t, runs), runs, Config{}); rep.Verdict != Pass {
		t.Errorf("with tpot_floor_ms 0.01: %s\n%s", rep.Verdict, dump(rep))
	}
	bad := edit(func(doc map[string]any) { doc["config"].(map[string]any)["tpot_floor_ms"] = "fast" })
	if _, err := ParseRuns(bad); err == nil || !strings.Contains(err.Error(), "config.tpot_floor_ms: fast: want a positive number") {
		t.Errorf("bad tpot_floor_ms: %v", err)
	}

	warm := edit(func(doc map[string]any) {
		level0(doc)["verdict"] = map[string]any{"valid": false, "reasons": []any{map[string]any{"code": "warm_start", "detail": "warm"}}}
	})
	runs, err = ParseRuns(warm)
	if err != nil {
		t.Fatal(err)
	}
	if got := runs[0].Levels[0].Invalid; !reflect.DeepEqual(got, []string{"warm_start: warm"}) {
		t.Errorf("invalid %q", got)
	}
	noReason := edit(func(doc map[string]any) { level0(doc)["verdict"] = map[string]any{"valid": false, "reasons": []any{}} })
	if runs, err := ParseRuns(noReason); err != nil || runs[0].Levels[0].Valid() {
		t.Errorf("invalid without reasons read as valid: %v", err)
	}
}

// Version 1 baselines: simulation_only ones are read (they have no
// invalid levels and no cache procedure); live ones are refused above,
// in TestBaselineFileRoundTripAndBadFiles.
func TestReadVersion1SimBaseline(t *testing.T) {
	bl, err := ParseBaseline([]byte(`{"schema_version":1,"name":"old","kind":"simulation_only","runs":1,"fingerprint":{"kind":"simulation_only","engine":"sim"},
		"series":[{"scenario":"s","offered_qps":8,"metric":"p99_ttft_ms","direction":"lower","values":[40]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	run := Run{Kind: "simulation_only", Scenario: "s", Fingerprint: Fingerprint{"kind": "simulation_only", "engine": "sim"},
		Levels: []LevelRun{{OfferedQPS: 8, Passed: true, Metrics: map[string]float64{"p99_ttft_ms": 40}}}}
	if bl.SchemaVersion != SchemaVersion || Check(bl, []Run{run}, Config{}).Verdict != Pass {
		t.Errorf("version 1 sim baseline: schema %d", bl.SchemaVersion)
	}
}

// Runs the host made invalid cast doubt on the ones it spared: with two of
// three candidate runs invalid at a level, the one left decides nothing,
// even 40% worse (what a starved host did to an unchanged config). The
// same with one of three invalid: two valid runs are compared.
func TestTooFewValidRunsDecideNothing(t *testing.T) {
	bl := mustBaseline(t, healthyRuns())
	withInvalid8 := func(r Run) Run { r.Levels[1].Invalid = []string{clientBound}; return r }
	worse := healthy(1.4)
	rep := Check(bl, []Run{withInvalid8(healthy(1)), withInvalid8(healthy(1.01)), worse}, Config{})
	v := verdictOf(t, rep, "p99_ttft_ms", 8)
	if v.Verdict != Invalid || !strings.HasPrefix(v.Reason, "skipped: too few valid runs (at least 2 of a side's runs must be valid); candidate: 2 of 3 runs invalid") {
		t.Errorf("8 req/s p99 TTFT with one valid candidate run: %s: %s", v.Verdict, v.Reason)
	}
	if o := verdictOf(t, rep, "objective", 0); o.Verdict != Invalid || !strings.HasPrefix(o.Reason, "not comparable: too few valid runs") {
		t.Errorf("objective: %s: %s", o.Verdict, o.Reason)
	}
	if rep.Verdict == Fail {
		t.Errorf("report %s: one spared run failed the check\n%s", rep.Verdict, dump(rep))
	}
	// A one-run candidate by design is judged on its run (threshold only).
	rep = Check(bl, []Run{worse}, Config{})
	if v := verdictOf(t, rep, "p99_ttft_ms", 8); v.Verdict != Fail || !strings.Contains(v.Test, "too few for a test") {
		t.Errorf("one-run candidate: %s (%s): %s", v.Verdict, v.Test, v.Reason)
	}
}

// The probe's impossible latencies: a candidate (or baseline) whose valid
// level reports a TPOT of 0 or below, or a negative TTFT, is refused when
// read (exit 2 in the CLI), never compared; a value at a level the record
// itself calls invalid decides nothing and is kept.
func TestImpossibleLatenciesAreRefused(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("..", "replay", "testdata", "record.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(field string, v float64, invalid bool) []byte {
		var doc map[string]any
		if err := json.Unmarshal(good, &doc); err != nil {
			t.Fatal(err)
		}
		l := doc["runs"].([]any)[0].(map[string]any)["levels"].([]any)[0].(map[string]any)
		l[field] = v
		if invalid {
			l["verdict"] = map[string]any{"valid": false, "reasons": []any{map[string]any{"code": "incomplete", "detail": "every request failed"}}}
		}
		b, _ := json.Marshal(doc)
		return b
	}
	for _, tc := range []struct {
		field string
		v     float64
		want  string
	}{
		{"p99_tpot_ms", 0, "default@10/p99_tpot_ms: 0 at a valid level: no request produced two tokens"},
		// Negative ones the record's schema refuses, naming the field.
		{"p99_tpot_ms", -1, "at '/runs/0/levels/0/p99_tpot_ms': minimum: got -1, want 0"},
		{"p50_tpot_ms", -1, "at '/runs/0/levels/0/p50_tpot_ms': minimum: got -1, want 0"},
		{"p99_ttft_ms", -50, "at '/runs/0/levels/0/p99_ttft_ms': minimum: got -50, want 0"},
		{"p99_ttft_ms", 0, "default@10/p99_ttft_ms: 0 at a valid level: no latency is 0 ms"},
		{"hit_rate_metrics_measure", 1.5, "default@10/cache_hit_rate: 1.5: want a fraction in [0, 1]"},
	} {
		_, err := ParseRuns(edit(tc.field, tc.v, false))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v; want %q", tc.field, tc.v, err, tc.want)
		}
	}
	// A level whose every request failed has no TPOT: 0 there is kept
	// (the level is invalid and decides nothing); a negative is not.
	if _, err := ParseRuns(edit("p99_tpot_ms", 0, true)); err != nil {
		t.Errorf("0 at an invalid level: %v", err)
	}
	if _, err := ParseRuns(edit("p99_tpot_ms", -1, true)); err == nil {
		t.Error("-1 at an invalid level was read")
	}

	// Records without a schema (hone sim's) meet the same rule.
	sim := `{"kind":"simulation_only","config":{"mode":"colocated"},"levels":[{"offered_qps":4,"p99_ttft_ms":-50,"p99_tpot_ms":5,"effective_qps":4,"passed":true}],"objective":4}`
	if _, err := ParseRuns([]byte(sim)); err == nil || !strings.Contains(err.Error(), "p99_ttft_ms: -50: a latency cannot be negative") {
		t.Errorf("sim record: %v", err)
	}

	// A stored baseline with a negative p99 TTFT turned a +1509% regression
	// into warn: it is refused on reading, and a baseline is not built
	// from runs holding one.
	_, err = ParseBaseline([]byte(`{"schema_version":2,"kind":"emulated","series":[{"scenario":"s","offered_qps":4,"metric":"p99_ttft_ms","direction":"lower","values":[12,-5]}]}`))
	if err == nil || !strings.Contains(err.Error(), "series[0] (s@4/p99_ttft_ms): values[1]: -5: a latency cannot be negative") {
		t.Errorf("ParseBaseline: %v", err)
	}
	neg := healthy(1)
	neg.Levels[0].Metrics["p99_ttft_ms"] = -5
	if _, err := NewBaseline("b", []Run{healthy(1), neg}, DefaultCompared); err == nil || !strings.Contains(err.Error(), "run 2: s@4/p99_ttft_ms: -5") {
		t.Errorf("NewBaseline: %v", err)
	}
}
