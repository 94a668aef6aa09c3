package report

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/optimizer"
)

const (
	startProfile      = "h100"
	calibratedProfile = "h100-calibrated-after-trial-2"
)

// testPredictLog is testLog with the predict-then-measure loop's record:
// trials 1 and 2 predicted with the start profile, trial 2 missing by
// more than the bound and calibrating it, trials 3 to 5 predicted with the
// calibrated profile, trial 3's prediction failed.
func testPredictLog() *optimizer.Log {
	lg := testLog("emulated", 40)
	cost := func(v float64) *float64 { return &v }
	level := func(q, ttft, tpot float64) optimizer.PredictedLevel {
		return optimizer.PredictedLevel{OfferedQPS: q, P50TTFTMs: ttft, P50TPOTMs: tpot, P99TTFTMs: 3 * ttft, P99TPOTMs: 1.5 * tpot, EffectiveQPS: q, Passed: true}
	}
	predicted := func(t *optimizer.Trial, profile string, objective float64, rank int, levels ...optimizer.PredictedLevel) {
		p := &optimizer.Prediction{Profile: profile, Objective: objective, Rank: rank, Levels: levels}
		e := (t.Objective - objective) / t.Objective
		p.ObjectiveError = &e
		t.Predicted = p
	}
	ts := lg.Trials
	// Measured p50s at 16 req/s, the level nearest trial 1's and 2's
	// objectives (15.3 and 16.6 req/s).
	ts[0].Levels[3].P50TTFTMs, ts[0].Levels[3].P50TPOTMs = 44.0, 7.5
	ts[1].Levels[3].P50TTFTMs, ts[1].Levels[3].P50TPOTMs = 38.4, 6.75
	ts[3].Levels[4].P50TTFTMs, ts[3].Levels[4].P50TPOTMs = 61.0, 8.0
	predicted(&ts[0], startProfile, 14.0, 3, level(8, 30.5, 6.9), level(16, 41.2, 7.1))
	predicted(&ts[1], startProfile, 20.0, 1, level(16, 35.0, 6.25), level(24, 52.0, 7.0))
	ts[2].Predicted = &optimizer.Prediction{Profile: calibratedProfile, Error: "simulate: no level passed the SLO"}
	predicted(&ts[3], calibratedProfile, 11.0, 7, level(8, 40, 7), level(16, 55.5, 7.75))
	ts[3].Predicted.Edge = "p99 TTFT 496.5 ms at 16 req/s passes within 2% under the 500 ms limit"
	predicted(&ts[4], calibratedProfile, 16.9, 1, level(16, 36.0, 6.5))
	before, after := 0.145, 0.031
	lg.Predict = &optimizer.PredictLog{
		Rule: optimizer.PredictRule, ErrorBound: 0.10, GridSize: 48, Profiles: []string{startProfile, calibratedProfile}, Seconds: 3.24,
		Ranked: []optimizer.RankedSpec{
			{Rank: 1, Key: "disagg-1p1d-cache", Name: "disagg-1p1d-cache", Objective: 16.9, CostGPUSec: cost(0.12), GPUs: 2, Pareto: true, Measured: 2},
			{Rank: 2, Key: "disagg-2p1d-cache", Name: "wide prefill", Objective: 16.5, GPUs: 3},
			{Rank: 3, Key: "coloc-r1-cache", Objective: 14.2, CostGPUSec: cost(0.07), GPUs: 1, Pareto: true},
		},
		Calibrations: []optimizer.Calibration{{
			AfterTrial: 2, Trials: []int{1, 2}, From: startProfile, To: calibratedProfile, Path: "profiles/" + calibratedProfile + ".yaml",
			Coefficients: []calibrate.Coefficient{
				{Name: "prefill_ms_per_token", Value: 0.0612, StdErr: 0.0031, RelStdErr: 0.0507, Start: 0.05, Fitted: true},
				{Name: "fixed_overhead_ms", Value: 1.5, StdErr: math.NaN(), RelStdErr: math.NaN(), Start: 1.5, Why: "not identifiable: moves the residuals only | with prefill_ms_per_token"},
			},
			ErrorBefore: &before, ErrorAfter: &after, Notes: []string{"trial 2: 3 of 120 requests dropped from the fit"},
		}},
		StopReason: "no untried config is predicted to beat the measured best (trial 2, 16.600 req/s) by more than its noise band 5.4%",
	}
	return lg
}

func TestWritePredicted(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	if err := Write(&b, testPredictLog(), Options{PlotDir: dir}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{
		"## Predicted vs measured (predicted vs emulated)",
		"Rule: " + optimizer.PredictRule,
		"The engine model predicted the 48 configs of the grid with 2 profiles, `h100` (the start), then `h100-calibrated-after-trial-2` " +
			"(calibrated after trial 2); predicting took 3.2 s in all. Error bound: a trial whose measured objective misses its prediction by more than ±10%",
		"**Measured figures are EMULATED** (kind `emulated`)",
		"| [predicted vs emulated] # | role | config | predicted with profile | predicted objective, req/s | emulated objective, req/s: median (min–max) | objective error " +
			"| at offered, req/s | p50 TTFT, ms: predicted → emulated | p50 TPOT, ms: predicted → emulated |",
		// (15.3 − 14) / 15.3 = +8.5%; 16 req/s is nearest 15.3.
		"| 1 | **baseline** | `coloc-r2-cache` | `h100` (not validated against measured requests) | 14.000 (rank 3) | 15.300 (15.200–15.500) | +8.5% | 16 | 41.2 → 44.0 | 7.10 → 7.50 |",
		// (16.6 − 20) / 16.6 = −20.5%, beyond the bound: the calibration.
		"| 2 | proposal, **selected** | `disagg-1p1d-cache` | `h100` (not validated against measured requests) | 20.000 (rank 1) | 16.600 (16.000–16.900) | **-20.5%**, beyond ±10%; calibrated | 16 | 35.0 → 38.4 | 6.25 → 6.75 |",
		// Nothing predicted or passed: the lowest level; no measured p50 there.
		"| 3 | ablation | `disagg-1p1d-nocache` | `h100-calibrated-after-trial-2` (not validated against measured requests) | **prediction failed**: simulate: no level passed the SLO | 0.000, not eligible | — | 2 | — → — | — → — |",
		// Measured 10.5 is nearest 8 req/s, which the prediction has.
		"| 4 | interaction | `coloc-r2-nocache` | `h100-calibrated-after-trial-2` (not validated against measured requests) | 11.000 (rank 7) ~ too close to call: p99 TTFT 496.5 ms at 16 req/s passes within 2% under the 500 ms limit | 10.500 (10.400–10.600) | -4.8% | 8 | 40.0 → — | 7.00 → — |",
		"| 5 | verify, **re-run of the selected config** | `disagg-1p1d-cache` | `h100-calibrated-after-trial-2` (not validated against measured requests) | 16.900 (rank 1) | 16.600 (16.200–16.800) | -1.8% | 16 | 36.0 → — | 6.50 → — |",
		// |errors| 1.8, 4.8, 8.5, 20.5%: median (4.76 + 8.50) / 2.
		"Median |objective error| over the 4 trials with both a prediction and a measured objective: 6.6%; 1 of them beyond ±10%. " +
			"1 prediction is too close to call (~): a deciding level's predicted p99 lies within 2% of an SLO limit",
		"Predicted times are the engine model's virtual time; emulated times are ms, model time.",
		"Figure 6 ([predicted-vs-measured.png](predicted-vs-measured.png)) plots each eligible trial's measured objective against its prediction (its caption names the trials left out).",
		"![measured vs predicted objective per trial (predicted vs emulated)](predicted-vs-measured.png)",
		"*Figure 6 (PREDICTED vs EMULATED). Each trial's measured objective (emulated, req/s",
		"Left out: 1 of 5 trials: trial 3 (no prediction).*",
		"### Calibrations (predicted vs emulated)",
		"**After trial 2**: `h100` → `h100-calibrated-after-trial-2`, fitted to the emulated records of trials 1, 2 (hone calibrate's least squares). " +
			"Median |objective error| of the measured trials: 14.5% → 3.1%",
		"Written to `profiles/h100-calibrated-after-trial-2.yaml`.",
		"| [calibrated after trial 2] coefficient | start | value ± SE | relative SE | fitted | why |",
		"| `prefill_ms_per_token` | 0.05 | 0.0612 ± 0.0031 | 5.1% | yes | — |",
		"| `fixed_overhead_ms` | 1.5 | 1.5 | — | no | not identifiable: moves the residuals only \\| with prefill_ms_per_token |",
		"- trial 2: 3 of 120 requests dropped from the fit",
		"### Why exploration stopped (predicted vs emulated)\n\nNo untried config is predicted to beat the measured best (trial 2, 16.600 req/s) by more than its noise band 5.4%.",
		"### Top of the latest ranking (predicted, profile `h100-calibrated-after-trial-2`)",
		"The best 3 of the 48 configs",
		"| [predicted] rank | config | predicted objective, req/s | GPU-s / request | GPUs | Pareto | measured (emulated) |",
		"| 1 | `disagg-1p1d-cache` | 16.900 | 0.1200 | 2 | **yes** | trial 2: 16.600 req/s |",
		"| 2 | `disagg-2p1d-cache` (wide prefill) | 16.500 | — | 3 | — | — |",
		"| 3 | `coloc-r1-cache` | 14.200 | 0.0700 | 1 | **yes** | — |",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	if *render != "" {
		if err := os.WriteFile(filepath.Join(*render, "report-predicted.md"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		pic, err := os.ReadFile(filepath.Join(dir, predictedFile))
		if err == nil {
			err = os.WriteFile(filepath.Join(*render, predictedFile), pic, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range append(plotFiles, predictedFile) {
		checkPNG(t, filepath.Join(dir, f))
	}
	// Both profiles' points are drawn, each in its own colour.
	img := decodePNG(t, filepath.Join(dir, predictedFile))
	for i, p := range []string{startProfile, calibratedProfile} {
		if c := profileLook(i).color; !hasColor(img, c) {
			t.Errorf("%s: no pixel in profile %s's colour %v", predictedFile, p, c)
		}
	}
}

// The predicted-vs-measured figure leaves out a trial that was not
// eligible or failed — its objective is no measurement, and drawn at 0 it
// would read as a prediction that missed — and says how many and which.
func TestPredictedLeavesOutUnmeasured(t *testing.T) {
	lg := testPredictLog()
	lg.Trials[3].Eligible, lg.Trials[3].Objective, lg.Trials[3].Objectives = false, 0, nil // trial 4: every run invalid
	lg.Trials[4].Error = "deploy: port in use"
	d, err := newDoc(&bytes.Buffer{}, lg)
	if err != nil {
		t.Fatal(err)
	}
	want := "Left out: 3 of 5 trials: trial 3 (no prediction); trial 5 (the trial failed); " +
		"trial 4 (not eligible: the objective decides nothing, and is not drawn at 0)."
	if f := d.predictedFigure(); !strings.HasSuffix(f.caption, want) {
		t.Errorf("caption %q\nwant it to end %q", f.caption, want)
	}
	if got := leftOutSentence(7, nil, nil, nil); got != "All 7 trials are drawn." {
		t.Errorf("nothing left out: %q", got)
	}
	if got, want := leftOutSentence(7, nil, nil, []string{"5", "6"}), "Left out: 2 of 7 trials: trials 5, 6 (not eligible: the objective decides nothing, and is not drawn at 0)."; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestWriteFailedCalibration: a calibration that failed says so and
// names the profile that stayed.
func TestWriteFailedCalibration(t *testing.T) {
	lg := testPredictLog()
	lg.Predict.Calibrations = append(lg.Predict.Calibrations, optimizer.Calibration{AfterTrial: 4, From: calibratedProfile, Error: "no measured record to calibrate on"})
	var b bytes.Buffer
	if err := Write(&b, lg, Options{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{
		"**After trial 4**: the calibration failed (no measured record to calibrate on); the profile stayed `h100-calibrated-after-trial-2`.",
		// Without plots the section links no figure.
		"Objective error is (measured − predicted) / measured.\n\n|",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	if strings.Contains(out, predictedFile) {
		t.Errorf("report without plots links %s", predictedFile)
	}
}

func TestWriteWithoutPredict(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	if err := Write(&b, testLog("emulated", 40), Options{PlotDir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Predicted vs measured", "predicted", predictedFile, "Calibrations"} {
		if strings.Contains(b.String(), s) {
			t.Errorf("report of a log without predictions has %q", s)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, predictedFile)); !os.IsNotExist(err) {
		t.Errorf("%s written for a log without predictions (stat: %v)", predictedFile, err)
	}
}

// TestNearest pins the level a prediction is compared at.
func TestNearest(t *testing.T) {
	qps := []float64{2, 4, 8, 16, 24, 32}
	for _, c := range []struct{ x, want float64 }{{0, 2}, {15.3, 16}, {10.5, 8}, {12, 8}, {20, 16}, {100, 32}} {
		if got := nearest(qps, c.x); got != c.want {
			t.Errorf("nearest(%v) = %v, want %v", c.x, got, c.want)
		}
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	return img
}

func hasColor(img image.Image, want color.Color) bool {
	wr, wg, wb, _ := want.RGBA()
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if cr, cg, cb, _ := img.At(x, y).RGBA(); cr == wr && cg == wg && cb == wb {
				return true
			}
		}
	}
	return false
}
