package report

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// capacitySLO is make demo's: p99 TPOT binds first on the emulated L4.
var capacitySLO = slo.SLO{TTFTMillis: 500, TPOTMillis: 12}

// testSearch is one run's search ending at capacity v, bounded at
// v·1.04: it starts at 0.8v (passes), doubles to 1.6v (fails on TPOT, and
// on TTFT too when ttftToo), then bisects to v (passes) and 1.04v (fails).
func testSearch(v float64, ttftToo bool) capacity.Result {
	probe := func(load float64, pass bool) capacity.Probe {
		p := capacity.Probe{Load: load, Measured: 250, Tail: "p99 of 250", Valid: true, Steady: true, SLOMet: pass, Pass: pass,
			P99TTFTMs: 60 * load / v, P99TPOTMs: 11 * load / v, P50TTFTMs: 30, P50TPOTMs: 8, DepartureQPS: load}
		if !pass {
			p.P99TPOTMs = 12.5 * load / v
			if ttftToo {
				p.P99TTFTMs = 900 * load / v
			}
		}
		return p
	}
	up := math.Round(v*1.04*1000) / 1000
	return capacity.Result{Mode: capacity.Open, Value: v, Unit: capacity.UnitRate, Precision: 0.05, Upper: up, SLO: capacitySLO, Bounded: true,
		Probes: []capacity.Probe{probe(0.8*v, true), probe(1.6*v, false), probe(v, true), probe(up, false)}}
}

// testReference is the reference load's summary: 6 req/s, every run
// passing unless past.
func testReference(ttft float64, past bool) []optimizer.LevelSummary {
	l := optimizer.LevelSummary{OfferedQPS: 6, Runs: 3, PassedRuns: 3, Measured: 250, P50TTFTMs: ttft / 2, P50TPOTMs: 7.5,
		RunP99TTFTMs: []float64{ttft * 0.95, ttft, ttft * 1.05}, RunP99TPOTMs: []float64{9.5, 10, 10.5},
		RunEffectiveQPS: []float64{6, 6, 6}, RunValid: []bool{true, true, true}}
	if past {
		l.PassedRuns, l.RunEffectiveQPS = 0, []float64{5.2, 5.3, 5.1}
	}
	l.P99TTFTMs, l.P99TPOTMs, l.EffectiveQPS = ttft, 10, l.RunEffectiveQPS[1]
	return []optimizer.LevelSummary{l}
}

func colocSpec(replicas int, cache bool) *deploy.Spec {
	s := &deploy.Spec{Name: "demo-cheapest", Engine: deploy.EngineEmulator, GPUs: deploy.GPUs{Budget: 2},
		Topology: deploy.Topology{Kind: deploy.Colocated, Replicas: replicas, TP: 1}}
	s.Knobs.PrefixCaching = &cache
	return s
}

// testCapacityTrial is a trial measured by capacity: one search per run,
// its capacities the objectives, cost GPUs / median.
func testCapacityTrial(n int, role, why, key string, spec *deploy.Spec, caps []float64, ref []optimizer.LevelSummary) optimizer.Trial {
	t := optimizer.Trial{N: n, Role: role, Why: why, Key: key, Spec: spec, Kind: schema.KindEmulated, Eligible: true,
		Reason: "correct outputs", Levels: ref, ReferenceQPS: 6, Objectives: caps, Objective: slo.Median(caps), Bottleneck: "decode"}
	for i, c := range caps {
		t.Capacity = append(t.Capacity, testSearch(c, i == 1))
	}
	cost := float64(spec.GPUsNeeded()) / t.Objective
	t.CostGPUSec = &cost
	return t
}

// testCapacityLog is make demo's question, answered: the cheapest config
// serving 12 req/s within p99 TTFT 500 ms and TPOT 12 ms. The baseline
// (2 replicas, 2 GPUs) has capacity 28; one replica (1 GPU) serves 14.2
// and is selected; its cache-off ablation serves 8.1 (below the target,
// above the 6 req/s reference load); a half-batch ablation serves 5.5,
// below the reference load, so its latency there is not compared.
func testCapacityLog() *optimizer.Log {
	one := colocSpec(1, true)
	ts := []optimizer.Trial{
		testCapacityTrial(1, "baseline", "the baseline as given", "coloc-r2-cache", colocSpec(2, true), []float64{27, 28.4, 28}, testReference(60, false)),
		testCapacityTrial(2, "proposal", "predicted rank 1", "coloc-r1-cache", one, []float64{13.8, 14.2, 14.5}, testReference(80, false)),
		testCapacityTrial(3, "ablation", "ablation: prefix caching off", "coloc-r1-nocache", colocSpec(1, false), []float64{8.3, 8.1, 7.9}, testReference(240, false)),
		testCapacityTrial(4, "ablation", "ablation: half the batch", "coloc-r1-cache-mbt4096", one, []float64{5.4, 5.5, 5.6}, testReference(2400, true)),
		testCapacityTrial(5, "verify", "re-run of trial 2", "coloc-r1-cache", one, []float64{14.0, 14.3, 14.6}, testReference(82, false)),
	}
	// The record judged the ablation's third run client-bound after its
	// search (diagnose's client/proxy residual): the run is left out,
	// though its probes passed their own verdicts.
	abl := &ts[2]
	abl.Objectives, abl.Objective = []float64{8.3, 8.1}, 8.2
	abl.InvalidRuns, abl.InvalidLevels = 1, []string{"run 3, 7.9 req/s: invalid (client_bound: p99 client/proxy residual 122 ms > 5% of the 500 ms TTFT SLO (25 ms))"}
	c := 1 / 8.2
	abl.CostGPUSec = &c
	row := func(q float64, queueing float64) diagnose.LevelBreakdown {
		return diagnose.LevelBreakdown{OfferedQPS: q, Requests: 250, P99TTFTMs: 60 + queueing, Mean: map[string]float64{"client": 2, "queueing": queueing, "prefill": 20, "decode": 1200}}
	}
	ts[1].Breakdown = []diagnose.LevelBreakdown{row(6, 1), row(11.04, 3), row(13.8, 9), row(14.2, 12), row(14.5, 15), row(22.08, 900)}
	ts[1].Diagnosis = "decode batching sets TPOT"
	cost := func(v float64) *float64 { return &v }
	return &optimizer.Log{SchemaVersion: optimizer.LogSchemaVersion, Kind: schema.KindEmulated, Workload: replay.DefaultWorkload(), QPS: []float64{2, 24},
		Runs: 3, SLO: capacitySLO, Budget: 7, BaselineN: 1, Selected: 2, Verified: true, Done: true, Trials: ts,
		Decision:      []string{"selected trial 2 (coloc-r1-cache)"},
		SelectionRule: optimizer.LiveSelectionRule + " " + optimizer.GoalRule(predict.Goal{Goal: deploy.GoalCheapest, TargetQPS: 12}), RegressionRule: optimizer.LiveRegressionRule,
		Measure: measureCapacity, CapacityRule: optimizer.CapacityRule, ReferenceQPS: 6, Goal: predict.Goal{Goal: deploy.GoalCheapest, TargetQPS: 12},
		Predict: &optimizer.PredictLog{Rule: optimizer.PredictRule, ErrorBound: 0.1, GridSize: 80, Profiles: []string{"qwen2.5-coder-0.5b-l4"},
			Ranked: []optimizer.RankedSpec{
				{Rank: 1, Key: "coloc-r1-cache", Objective: 15.0, CostGPUSec: cost(1 / 15.0), GPUs: 1, Pareto: true, Measured: 2},
				{Rank: 2, Key: "coloc-r1-cache-mbt4096", Objective: 9.0, CostGPUSec: cost(1 / 9.0), GPUs: 1, Measured: 4},
				{Rank: 3, Key: "coloc-r2-cache", Objective: 30.0, CostGPUSec: cost(2 / 30.0), GPUs: 2, Pareto: true, Measured: 1},
				{Rank: 4, Key: "disagg-1p1d-cache", Objective: 16.0, CostGPUSec: cost(2 / 16.0), GPUs: 2},
			}}}
}

var capacityPlotFiles = []string{paretoFile, capacityFile, probesTPOTFile, probesTTFTFile, predictedFile}

func TestWriteCapacity(t *testing.T) {
	dir := t.TempDir()
	if *render != "" {
		dir = *render
	}
	var b bytes.Buffer
	if err := Write(&b, testCapacityLog(), Options{PlotDir: dir, Command: "hone optimize --spec examples/emulator-l4-cheapest.yaml"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if *render != "" {
		if err := os.WriteFile(filepath.Join(dir, "report.md"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{
		"## Answer (emulated)\n\n**Goal** (spec.objective `cheapest`): the cheapest config (fewest GPUs) serving 12 req/s within p99 TTFT ≤ 500 ms, p99 TPOT ≤ 12 ms, at steady state.",
		// 1 GPU / 14.2 req/s = 0.0704; over the runs 1/14.5 = 0.0690 to 1/13.8 = 0.0725.
		"**Selected**: trial 2 `coloc-r1-cache`, 1 GPU: capacity **14.20 req/s** (median of 3 runs: 13.80 / 14.20 / 14.50 req/s; every run bounded ±5%: passed 13.8–14.5, failed 14.35–15.08 req/s; " +
			"the SLO binds on p99 TPOT in 2 of 3 runs; p99 TTFT and p99 TPOT in 1 of 3 runs); serves 12 req/s in every run at **0.0833 GPU-s per request** (1 / 12), " +
			"0.0704 (0.0690–0.0725) GPU-s per request at capacity.",
		"Baseline: trial 1 `coloc-r2-cache`, 2 GPUs: capacity 28.00 req/s (median of 3 runs: 27.00 / 28.40 / 28.00 req/s; every run bounded ±5%: passed 27–28.4, failed 28.08–29.54 req/s;",
		"serves 12 req/s in every run at 0.1667 GPU-s per request (2 / 12), 0.0714 (0.0704–0.0741) GPU-s per request at capacity.",
		"Change vs the baseline (emulated): GPUs 2 → 1; GPU-s per request at 12 req/s -50.0%; capacity -49.3%; GPU-s per request at capacity -1.4%. " +
			"The selection is verified by its re-run, trial 5 (capacity 14.30 (14.00–14.60) req/s).",
		"| [emulated] | config | GPUs | capacity, req/s: median (min–max) | per run, req/s | search | GPU-s / request at capacity | GPU-s / request at 12 req/s |",
		"| **selected** (trial 2) | `coloc-r1-cache` | 1 | 14.20 (13.80–14.50) | 13.80 / 14.20 / 14.50 | every run bounded ±5%: passed 13.8–14.5, failed 14.35–15.08 req/s | 0.0704 (0.0690–0.0725) | 0.0833 |",
		"![capacity vs GPUs, Pareto front (emulated and predicted)](pareto.png)",
		"## Measurement (emulated)", "Every run also measured the **reference load, 6 req/s**",
		"## Latency at the reference load (emulated)", "Selected: trial 2 coloc-r1-cache, at the reference load: median over valid runs (min–max)",
		// Run 1 of the selection: 0.8·13.8 = 11.04 passes, 22.08 fails on TPOT, 13.8 passes, 14.352 fails.
		"| 2 | `coloc-r1-cache` | 1 | 11 ✓ → 22.1 ✗ TPOT → 13.8 ✓ → 14.4 ✗ TPOT | 13.80 | 13.8: 60 / 11.0 (p99 of 250); 14.4: 62 / 13.0 (p99 of 250) | TPOT |",
		"| 2 | `coloc-r1-cache` | 2 | 11.4 ✓ → 22.7 ✗ TTFT+TPOT → 14.2 ✓ → 14.8 ✗ TTFT+TPOT | 14.20 |",
		"| [emulated] # | role | config | why | GPUs | capacity, req/s: median (min–max) | per run, req/s | GPU-s / request at capacity | serves 12 req/s | eligible |",
		"| 3 | ablation | `coloc-r1-nocache` | ablation: prefix caching off | 1 | 8.20 (8.10–8.30) | 8.30 / 8.10 | 0.1220 (0.1205–0.1235) | no | yes | **invalid** run 3 at 7.9 req/s: client_bound |",
		"| 3 | `coloc-r1-nocache` | *3 (left out)* | 6.32 ✓ → 12.6 ✗ TPOT → 7.9 ✓ (invalid: client_bound) → 8.22 ✗ TPOT | 7.90 |",
		"- trial 3 `coloc-r1-nocache`, run 3, probe at 7.9 req/s: invalid (client_bound: p99 client/proxy residual 122 ms",
		// Ablations: capacity at steady state, latency at the reference load below both capacities, else not compared.
		"| 3 | `coloc-r1-nocache` | prefix caching off | 8.20 (8.10–8.30) | -42.3% | 120.0 | 228.0 / 240.0 / 252.0 | 7.50 | 9.50 / 10.00 / 10.50 |",
		"| 4 | `coloc-r1-cache-mbt4096` | half the batch | 5.50 (5.40–5.60) | -61.3% | *not compared: 6 req/s is above its capacity in a run (lowest 5.40 req/s); 3 of 3 runs failed the SLO at 6 req/s* | | | |",
		"Interaction", "Selection rule (as logged; a run's objective here is its capacity):",
		"predicted capacity, req/s", "| emulated capacity, req/s: median (min–max) |",
		"A run's capacity is resolved to its search's precision (±5%)",
		// Where the time went: at the reference load and each run's capacity, not at every probe.
		"Rows are the reference load's and each counted run's capacity's",
		"| 6 | 250 | 2.0 | 1.0 | 20.0 | 0.0 | 0.0 | 23.0 | 61.0 |\n| 13.8 | 250 |", "| 14.5 | 250 | 2.0 | 15.0 |",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	// The answer leads: before the measurement, the figures and every table.
	if a, m := strings.Index(out, "## Answer"), strings.Index(out, "## Measurement"); a < 0 || a > m || a > strings.Index(out, "![") {
		t.Errorf("the answer is not first: at %d, measurement at %d", a, m)
	}
	// Capacity everywhere, never the levels' objective, outside the
	// logged selection rule.
	body, _, _ := strings.Cut(out, "Selection rule (as logged")
	for _, s := range []string{"largest effective QPS", "largest passing effective", "objective, req/s", "p99_ttft.png", "effective_qps.png", "| 11.04 |", "| 22.08 |"} {
		if strings.Contains(body, s) {
			t.Errorf("report has %q", s)
		}
	}
	for _, f := range capacityPlotFiles {
		checkPNG(t, filepath.Join(dir, f))
		if !strings.Contains(out, "]("+f+")") {
			t.Errorf("report does not link %s", f)
		}
	}
	for _, f := range plotFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil && *render == "" {
			t.Errorf("%s written: a capacity log has one load level, no level curves", f)
		}
	}
}

// A capacity log the loop did not finish answers nothing, and one where
// nothing beat the baseline says the baseline stays.
func TestWriteCapacityNoAnswer(t *testing.T) {
	unfinished := testCapacityLog()
	unfinished.Done, unfinished.Verified = false, false
	stays := testCapacityLog()
	stays.Selected = 1
	stays.Trials = stays.Trials[:1]
	failed := testCapacityLog() // the baseline's deployment failed: no search, no spec, cancelled after
	failed.Done, failed.Selected, failed.Verified, failed.Predict = false, 0, false, nil
	failed.Trials = []optimizer.Trial{{N: 1, Role: "baseline", Key: "coloc-r2-cache", Kind: schema.KindEmulated, Error: "deploy: port in use", Reason: "failed: deploy: port in use"}}
	for _, c := range []struct {
		name    string
		lg      *optimizer.Log
		want    []string
		notWant []string
	}{
		{"baseline failed", failed, []string{"**No answer yet**", "| **baseline** (trial 1) | `coloc-r2-cache` | — | — |"}, nil},
		{"unfinished", unfinished, []string{"**No answer yet**: the loop stopped after trial 5, before it selected anything.", "| **baseline** (trial 1) |"},
			[]string{"**Selected**", "| **selected**"}},
		{"the baseline stays", stays, []string{"**The baseline stays**: no measured config met the goal better than it beyond the runs' noise. Trial 1 `coloc-r2-cache`, 2 GPUs: capacity **28.00 req/s**"},
			[]string{"**Selected**", "Change vs the baseline"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, c.lg, Options{PlotDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, s := range c.want {
				if !strings.Contains(out, s) {
					t.Errorf("report lacks %q", s)
				}
			}
			for _, s := range c.notWant {
				if strings.Contains(out, s) {
					t.Errorf("report has %q", s)
				}
			}
		})
	}
}

// The goal in words, for each goal.
func TestGoalText(t *testing.T) {
	for _, c := range []struct {
		goal predict.Goal
		want string
	}{
		{predict.Goal{Goal: deploy.GoalCheapest, TargetQPS: 12}, "the cheapest config (fewest GPUs) serving 12 req/s within p99 TTFT ≤ 500 ms, p99 TPOT ≤ 12 ms"},
		{predict.Goal{Goal: deploy.GoalPerGPU}, "the most capacity per GPU within p99 TTFT ≤ 500 ms, p99 TPOT ≤ 12 ms"},
		{predict.Goal{Goal: deploy.GoalCapacity}, "the most capacity within a budget of 2 GPUs and p99 TTFT ≤ 500 ms, p99 TPOT ≤ 12 ms"},
		{predict.Goal{}, "the most capacity within a budget of 2 GPUs and p99 TTFT ≤ 500 ms, p99 TPOT ≤ 12 ms"},
	} {
		lg := testCapacityLog()
		lg.Goal = c.goal
		d, err := newDoc(&bytes.Buffer{}, lg)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.goalText(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.goal, got, c.want)
		}
	}
}

// The Pareto front: as much capacity on as few GPUs; a config with more
// GPUs is on it only with more capacity than every one with fewer.
func TestParetoFront(t *testing.T) {
	pt := func(g int, v float64) *paretoPoint { return &paretoPoint{gpus: g, value: v} }
	ps := []*paretoPoint{pt(2, 28), pt(1, 14.2), pt(1, 8.1), pt(2, 12), pt(4, 27), pt(4, 40)}
	var got []float64
	for _, p := range paretoFront(ps) {
		got = append(got, p.value)
	}
	if want := []float64{14.2, 28, 40}; !slices.Equal(got, want) {
		t.Errorf("front %v, want %v", got, want)
	}
}

// A search's value says how far it is bounded: a search a host-distorted
// probe ended measured nothing, and is not a lower bound of 0.
func TestValueCell(t *testing.T) {
	for _, c := range []struct {
		r    capacity.Result
		want string
	}{
		{capacity.Result{Value: 14.2, Upper: 14.6, Bounded: true}, "14.20"},
		{capacity.Result{Value: 4096, Note: "the largest load searched (4096 req/s) passed: a lower bound"},
			"4096.00 (a lower bound: no load failed): the largest load searched (4096 req/s) passed: a lower bound"},
		{capacity.Result{Value: 10, Upper: 20}, "10.00 (not bounded: the lowest failing load is 20)"},
		{capacity.Result{Upper: 0.01, Note: "no load meets the SLO down to 0.01 req/s"}, "none (no load passed): no load meets the SLO down to 0.01 req/s"},
		{capacity.Result{}, "none (the search ended before a load passed or failed)"},
	} {
		if got := valueCell(&c.r); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}

func TestParseInvalidLevel(t *testing.T) {
	l, ok := parseInvalidLevel("run 1, 23.746499747062455 req/s: invalid (client_bound: p99 client/proxy residual 122 ms > 5% of the 2000 ms TTFT SLO (100 ms): the client side)")
	if want := (invalidLevel{run: 1, load: 23.746499747062455, code: "client_bound",
		verdict: "invalid (client_bound: p99 client/proxy residual 122 ms > 5% of the 2000 ms TTFT SLO (100 ms): the client side)"}); !ok || l != want {
		t.Errorf("got %+v %t, want %+v", l, ok, want)
	}
	if _, ok := parseInvalidLevel("4 clients: invalid (incomplete: x)"); ok {
		t.Error("a closed-loop level read as a rate")
	}
}

// A real capacity log, as hone optimize wrote it for make demo's question
// (trimmed: the top of the ranking, the attribution rows the report shows)
// when it was interrupted after three trials: the baseline and a 1-GPU
// config measured, the cache-off ablation left out (client-bound at the
// reference load, by the record's verdict after the search).
func TestWriteCapacityDemoLog(t *testing.T) {
	lg, err := optimizer.ReadLog(filepath.Join("testdata", "capacity-demo-unfinished.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var b bytes.Buffer
	if err := Write(&b, lg, Options{PlotDir: dir}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "> **This log is unfinished: the loop stopped after trial 3 of budget 7") {
		t.Errorf("first line %q", first)
	}
	for _, s := range []string{
		"**Goal** (spec.objective `cheapest`): the cheapest config (fewest GPUs) serving 12 req/s within p99 TTFT ≤ 2000 ms, p99 TPOT ≤ 12 ms, at steady state.",
		"**No answer yet**: the loop stopped after trial 3, before it selected anything.",
		"| **baseline** (trial 1) | `coloc-r2-tp1-cache-sessionaffinity` | 2 | 23.15 | 23.15 / 23.15 / 23.15 | every run bounded ±10%: passed 23.15, failed 24.48–25.36 req/s | 0.0864 | 0.1667 |",
		"| 2 | `coloc-r1-tp1-cache-sessionaffinity-mbt8192` | 2 | 14.7 ✓ → 17.6 ✗ TPOT → 16.1 ✗ TPOT | 14.67 | 14.7: 52 / 11.7 (p99 of 293); 16.1: 41 / 12.7 (p99 of 321) | TPOT |",
		"| 3 | `coloc-r1-tp1-nocache-sessionaffinity-mbt8192` | *2 (left out)* |", "4.76: 129 / 13.4 (max of 199)",
		"**invalid** run 1 at the reference 12 req/s: client_bound;",
		// The cache-off ablation's searches found 4.35 req/s: its latency at 12 is a queue's.
		"| 0.000, not eligible | n/a: measured 0 | 12 (past its capacity: not comparable) | — → 888.3 |",
		"| 12 | 792 | 8.0 | 6.8 | 8.2 | 0.0 | 0.0 | 22.9 | 40.9 |\n| 23.15 | 1533 |",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	for _, f := range []string{paretoFile, capacityFile, probesTPOTFile, probesTTFTFile, predictedFile} {
		checkPNG(t, filepath.Join(dir, f))
	}
}
