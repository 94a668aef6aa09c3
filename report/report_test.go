package report

import (
	"bytes"
	"flag"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

var render = flag.String("render", "", "also write the first case's report and plots into this directory, to look at")

// testLevels makes a trial's levels: p99 TTFT grows with load from ttft0,
// runs differ by a few percent, and the level at invalidAt (0: none) has
// run 2 invalid (client_bound, its TTFT inflated), or every run when all
// is set.
func testLevels(qps []float64, ttft0, capacity float64, measured int, invalidAt float64, all bool) []optimizer.LevelSummary {
	var ls []optimizer.LevelSummary
	for _, q := range qps {
		l := optimizer.LevelSummary{OfferedQPS: q, Runs: 3, Measured: measured}
		for r := range 3 {
			f := 1 + 0.06*float64(r-1)
			tt := ttft0 * math.Exp(q/capacity) * f
			valid := !(q == invalidAt && (all || r == 1))
			if !valid {
				tt *= 3
				l.Invalid = append(l.Invalid, fmt.Sprintf("run %d: client_bound: p99 dispatch lag %.0f ms > 100 ms (5%% of the TTFT SLO)", r+1, tt/4))
			}
			l.RunP99TTFTMs = append(l.RunP99TTFTMs, tt)
			l.RunP99TPOTMs = append(l.RunP99TPOTMs, (6+q/8)*f)
			l.RunEffectiveQPS = append(l.RunEffectiveQPS, math.Min(q, capacity)*(1-0.01*float64(r)))
			l.RunValid = append(l.RunValid, valid)
			if valid && tt <= slo.Default.TTFTMillis {
				l.PassedRuns++
			}
		}
		l.P99TTFTMs, l.P99TPOTMs, l.EffectiveQPS = l.RunP99TTFTMs[1], l.RunP99TPOTMs[1], l.RunEffectiveQPS[1]
		ls = append(ls, l)
	}
	return ls
}

// testLog is a baseline, a proposal that is selected, an ablation that
// is not eligible, an interaction cell and a re-run of the selection, 3
// runs each; the selection has one invalid level (run 2 at 24 req/s).
// Emulated, the selection was measured again at a larger time scale and
// the ablation would have needed one above the largest allowed.
func testLog(kind schema.Kind, measured int) *optimizer.Log {
	qps := []float64{2, 4, 8, 16, 24, 32}
	cost := func(v float64) *float64 { return &v }
	hit := 0.969
	var floor *optimizer.HostFloor
	if kind == "emulated" {
		floor = &optimizer.HostFloor{OfferedQPS: 32, TimeScale: 0.1, Requests: 120, P50RealMs: 2.27, P99RealMs: 4.76, DispatchP99RealMs: 0.72,
			EngineP50TTFTMs: 18.16, SpecTimeScale: 0.1, ChosenTimeScale: 0.25, FloorModelMs: 19.04, MedianModelMs: 9.08, Rule: optimizer.FloorRule}
	}
	lg := &optimizer.Log{SchemaVersion: optimizer.LogSchemaVersion, Kind: kind, Workload: replay.DefaultWorkload(), QPS: qps, Runs: 3,
		SLO: slo.Default, Budget: 8, HostFloor: floor, BaselineN: 1, Selected: 2, Verified: true, Done: true, Decision: []string{"selected trial 2 (disagg-1p1d-cache)"},
		SelectionRule: optimizer.LiveSelectionRule, RegressionRule: optimizer.LiveRegressionRule,
		Interaction: &optimizer.Interaction{Factors: [2]string{"topology", "prefix caching"}, Cells: [4]int{2, 3, 1, 4},
			Values: [4]float64{16.6, 0, 15.3, 10.5}, Text: "interaction: prefix caching is worth 16.600 req/s on disagg and 4.800 on coloc"},
		Trials: []optimizer.Trial{
			{N: 1, Role: "baseline", Why: "the baseline as given", Key: "coloc-r2-cache", Kind: kind, Objectives: []float64{15.3, 15.5, 15.2}, Objective: 15.3,
				CostGPUSec: cost(0.13), HitRate: &hit, Levels: testLevels(qps, 60, 24, measured, 0, false), Eligible: true, Bottleneck: "client",
				Diagnosis: "client grows most with load", Breakdown: []diagnose.LevelBreakdown{
					{OfferedQPS: 2, Requests: 3 * measured, P99TTFTMs: 69.1, Mean: map[string]float64{"client": 20, "queueing": 5, "prefill": 7, "decode": 800}},
					{OfferedQPS: 32, Requests: 3 * measured, P99TTFTMs: 241.3, Mean: map[string]float64{"client": 120, "queueing": 9, "prefill": 9, "decode": 1100}}}},
			{N: 2, Role: "proposal", Why: "evaluate disaggregated", Key: "disagg-1p1d-cache", Kind: kind, Objectives: []float64{16.9, 16.6, 16.0}, Objective: 16.6,
				CostGPUSec: cost(0.12), HitRate: &hit, Levels: testLevels(qps, 45, 20, measured, 24, false), Eligible: true, Bottleneck: "transfer",
				Rescaled: &optimizer.Rescale{FromScale: 0.25, ToScale: 0.5, MaxScale: 1, Measured: true, Estimate: 1.5, Reason: "3 of 3 runs invalid: emulator_bound"}},
			{N: 3, Role: "ablation", Why: "ablation: prefix caching off", Key: "disagg-1p1d-nocache", Kind: kind, Objectives: []float64{0, 0, 0},
				Levels: testLevels(qps, 900, 12, measured, 0, false), Eligible: false, Reason: "2 of 3 runs have an invalid level, so its figures decide nothing",
				Rescaled: &optimizer.Rescale{FromScale: 0.25, ToScale: 2, MaxScale: 1, Estimate: 5.2, Reason: "2 of 3 runs invalid: emulator_bound"}},
			{N: 4, Role: "interaction", Why: "topology × prefix caching", Key: "coloc-r2-nocache", Kind: kind, Objectives: []float64{10.5, 10.6, 10.4}, Objective: 10.5,
				Levels: testLevels(qps, 150, 12, measured, 32, true), Eligible: true},
			{N: 5, Role: "verify", Why: "re-run of trial 2", Key: "disagg-1p1d-cache", Kind: kind, Objectives: []float64{16.2, 16.8, 16.6}, Objective: 16.6,
				Levels: testLevels(qps, 46, 20, measured, 0, false), Eligible: true},
		}}
	if kind != "emulated" { // only emulated trials are measured again at another time scale
		for i := range lg.Trials {
			lg.Trials[i].Rescaled = nil
		}
	} else {
		// Each trial probed the floor before it began (FloorScaler); a time
		// budget left one ablation unmeasured.
		lg.Trials[0].Floor, lg.Trials[0].TimeScale = &optimizer.FloorReading{P99RealMs: 30.5, SpecTimeScale: 0.1, TimeScale: 1, FloorModelMs: 30.5}, 1
		lg.Trials[1].Floor, lg.Trials[1].TimeScale = &optimizer.FloorReading{P99RealMs: 4.1, SpecTimeScale: 0.1, TimeScale: 0.25, FloorModelMs: 16.4}, 0.5
		lg.TimeBudgetSeconds = 1800
		lg.NotMeasured = []string{"ablation disagg-1p1d-cache-eager: ablation: CUDA graphs off (eager) (the time budget leaves 4m10s; a trial takes about 5m0s)"}
	}
	return lg
}

var plotFiles = []string{"p99_ttft.png", "p99_ttft_all.png", "objective.png", "p99_tpot.png", "effective_qps.png"}

func TestWrite(t *testing.T) {
	noSelection := testLog("emulated", 150)
	noSelection.Selected, noSelection.Verified = 0, false
	device := testLog("device", 250)
	for i := range device.Trials {
		for j := range device.Trials[i].Levels {
			l := &device.Trials[i].Levels[j]
			l.Invalid, l.RunValid = nil, []bool{true, true, true}
		}
	}
	for _, c := range []struct {
		name          string
		lg            *optimizer.Log
		want, notWant []string
	}{
		{"emulated, one invalid level", testLog("emulated", 40), []string{
			"**All figures in this report are EMULATED** (kind `emulated`)", "not GPU measurements",
			"| [emulated] | config |", "| [emulated] offered, req/s | p99 TTFT, ms, model time |", "| [emulated] # | role |",
			"| **baseline** (trial 1) | `coloc-r2-cache` | 15.300 | 15.30 / 15.50 / 15.20 |",
			"| **selected** (trial 2) | `disagg-1p1d-cache` | 16.600 |",
			"Baseline: trial 1 coloc-r2-cache, every level", "Selected: trial 2 disagg-1p1d-cache, every level",
			"| 3 | ablation | `disagg-1p1d-nocache` |", "no: 2 of 3 runs have an invalid level",
			"| 5 | verify, **re-run of the selected config** |", "| 2 | proposal, **selected** |", "| 1 | **baseline** |",
			// 45·e^1.2 = 149.40 ms ×0.94 and ×1.06 in runs 1 and 3; run 2 is invalid.
			"| 24 | 149.4 (140.4–158.4) | 9.00 (8.46–9.54) | 19.800 (19.600–20.000) | 2/3 | **invalid: client_bound** (run 2 of 3) |",
			"**invalid** 24 req/s: client_bound", "**invalid** 32 req/s: client_bound",
			"## Invalid levels (emulated)", "trial 2 `disagg-1p1d-cache` (selected) at 24 req/s: invalid in 1 of 3 runs (client_bound)",
			"  - run 2: client_bound: p99 dispatch lag", "trial 4 `coloc-r2-nocache` (interaction) at 32 req/s: invalid in 3 of 3 runs",
			"nearest-rank 99th percentile", "scheduled send time", "rank ceil(0.99·40) = 40, so **p99 of 40 requests is their largest**",
			"p99 of 40 requests is their largest.*", "![p99 TTFT vs offered load: baseline and selected (emulated)](p99_ttft.png)",
			"*Figure 1 (EMULATED).", "Hollow grey points are invalid runs", "Objective +8.5% vs the baseline",
			// TTFT's parts, their sum, then the pooled p99; decode apart, after the first token.
			"| [emulated] offered, req/s | requests | client | queueing | prefill | transfer | decode_queue | = mean TTFT | p99 TTFT (pooled; not a sum) |",
			"| 32 | 120 | 120.0 | 9.0 | 9.0 | 0.0 | 0.0 | 138.0 | 241.3 |",
			"| [emulated] offered, req/s | requests | mean TTFT | mean decode | decode share of send → last token |",
			"| 32 | 120 | 138.0 | 1100.0 | 89% |",
			"(n in the requests column); p99 of 120 requests is their second largest.", "| [emulated] | cache on | cache off |",
			"## Measurement floor (emulated)", "the host itself adds 2.27 ms (median) / 4.76 ms (p99) of real time",
			"It chose time scale 0.25 (the spec said 0.1), where that floor is 9.1 ms (median) / 19.0 ms (p99) of model time",
			"Trials ran at: trial 1 at 1 (p99 30.50 ms real); trial 2 at 0.5 (p99 4.10 ms real).",
			"## Not measured for want of time (emulated)", "The run's time budget was 30m0s. With a time budget (--time-budget)",
			"\n\n- ablation disagg-1p1d-cache-eager: ablation: CUDA graphs off (eager) (the time budget leaves 4m10s; a trial takes about 5m0s)\n\n",
			"## Trials at another time scale (emulated)", "Some trials ran at a larger time scale: see [Trials at another time scale](#trials-at-another-time-scale-emulated).", "Rule: an emulated trial whose runs decided nothing only because",
			"- trial 2 `disagg-1p1d-cache` (proposal): measured at time scale 0.5: at 0.25, 3 of 3 runs invalid: emulator_bound\n" +
				"- trial 3 `disagg-1p1d-nocache` (ablation): at time scale 0.25 the host decided it (2 of 3 runs invalid: emulator_bound; estimate ×5.2): " +
				"it needs time scale 2, above the largest allowed 1 (--max-time-scale)\n\n",
		}, []string{"DEVICE", "their largest: one slow request sets it. Here n = 120", "| p99 TTFT | client |", "| 1100.0 | 9.0"}},
		{"unverified", testLog("unverified", 40), []string{
			"**All figures in this report are UNVERIFIED** (kind `unverified`)", "They are not device measurements",
			"| [unverified] | config |", "*Figure 1 (UNVERIFIED).", "The endpoint's kind is unverified",
		}, []string{"DEVICE", "EMULATED", "vLLM on GPUs", "model time"}},
		{"nothing selected, 150 requests", noSelection, []string{
			"No trial was eligible and verified: the baseline stays.", "**p99 of 150 requests is their second largest**",
			"Baseline: trial 1 coloc-r2-cache, every level: median over valid runs (min–max); p99 of 150 requests is their second largest.",
			"![p99 TTFT vs offered load: baseline (emulated)](p99_ttft.png)", "None: nothing was selected.",
		}, []string{"selected (trial", "their largest", "re-run of the selected config", "unfinished", "did not reach selection"}},
		{"device, every level valid, 250 requests", device, []string{
			"**All figures in this report are DEVICE** (kind `device`): real vLLM on GPUs", "| [device] offered, req/s | p99 TTFT, ms |",
			"Every level of every run was valid.", "rank ceil(0.99·250) = 248.", "No run was invalid at any level shown.",
		}, []string{"p99 of 250", "**invalid", "Hollow grey points", "model time"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if *render != "" && c.name == "emulated, one invalid level" {
				dir = *render
			}
			var b bytes.Buffer
			if err := Write(&b, c.lg, Options{PlotDir: dir, Command: "hone optimize --spec x"}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if *render != "" && dir == *render {
				if err := os.WriteFile(filepath.Join(dir, "report.md"), b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
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
			for _, f := range plotFiles {
				checkPNG(t, filepath.Join(dir, f))
				if !strings.Contains(out, "]("+f+")") {
					t.Errorf("report does not link %s", f)
				}
			}
		})
	}
}

// A report of an unfinished log (cancelled, or the loop still running)
// says so on its first line, before the title, and nothing in it reads as
// a selection: not the candidate the loop was verifying when it stopped,
// not "the baseline stays".
func TestWriteUnfinished(t *testing.T) {
	verifying := testLog("emulated", 40) // stopped after the re-run of trial 2 was measured, before it was judged
	verifying.Done, verifying.Verified = false, false
	afterBaseline := testLog("emulated", 40)
	afterBaseline.Done, afterBaseline.Selected, afterBaseline.Verified, afterBaseline.Interaction = false, 0, false, nil
	afterBaseline.Trials, afterBaseline.BaselineN = afterBaseline.Trials[:1], 0 // the loop names its baseline after the trial returns
	for _, c := range []struct {
		name    string
		lg      *optimizer.Log
		first   string
		want    []string
		notWant []string
	}{
		{"verifying", verifying,
			"> **This log is unfinished: the loop stopped after trial 5 of budget 8 (cancelled or still running); nothing below is a final selection.**",
			[]string{"**The loop did not reach selection**: it stopped after trial 5, so no trial is selected or verified",
				"Trial 2 `disagg-1p1d-cache` was the candidate being verified when it stopped; its re-run was not judged.",
				"Not compared: the loop stopped before selection", "![p99 TTFT vs offered load: baseline (emulated)](p99_ttft.png)",
				"P99 TTFT (ms, model time) at each offered load, for the baseline. Each point"},
			[]string{"**selected**", "selected:", "re-run of the selected config", "for the baseline and the selected config", "the baseline stays", "None: nothing was selected"}},
		{"after the baseline", afterBaseline,
			"> **This log is unfinished: the loop stopped after trial 1 of budget 8 (cancelled or still running); nothing below is a final selection.**",
			[]string{"**The loop did not reach selection**: it stopped after trial 1,"},
			[]string{"was the candidate", "the baseline stays", "**selected**"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, c.lg, Options{PlotDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if first, _, _ := strings.Cut(out, "\n"); first != c.first {
				t.Errorf("first line %q, want %q", first, c.first)
			}
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

func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if r := img.Bounds(); len(b) == 0 || r.Dx() < 700 || r.Dy() < 450 {
		t.Errorf("%s: %d bytes, %dx%d pixels: want a full-size figure", path, len(b), r.Dx(), r.Dy())
	}
}

func TestWriteRejects(t *testing.T) {
	bad := testLog("emulated", 40)
	bad.BaselineN = 9
	wrongSel := testLog("emulated", 40)
	wrongSel.Selected = 6
	for name, lg := range map[string]*optimizer.Log{"no trials": {}, "baseline out of range": bad, "selection out of range": wrongSel} {
		var b bytes.Buffer
		if err := Write(&b, lg, Options{}); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}
