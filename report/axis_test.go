package report

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/hone-llm/hone/optimizer"
)

// fitAxis fits the axis to the data, padded, and brings the SLO onto it
// only where the data keep at least half the axis: on a log axis, the SLO
// at most as many decades above the data as they span (a factor 2 at
// least); on a linear one, at most twice their top; always where it lies
// below the data.
func TestFitAxis(t *testing.T) {
	for _, c := range []struct {
		name        string
		lo, hi, ref float64
		log         bool
		want        valueAxis
	}{
		{"TTFT far below the SLO (the demo)", 14, 75, 2000, true, valueAxis{14 / logPad, 75 * logPad, false}},
		{"TTFT near a binding SLO", 14, 400, 500, true, valueAxis{14 / logPad, 500 * logPad, true}},
		{"log: SLO as many decades above as the data span", 10, 100, 1000, true, valueAxis{10 / logPad, 1000 * logPad, true}},
		{"log: just beyond", 10, 100, 1001, true, valueAxis{10 / logPad, 100 * logPad, false}},
		{"log: flat data span a factor 2 at least", 50, 50, 200, true, valueAxis{50 / logPad, 200 * logPad, true}},
		{"log: flat data, SLO beyond", 50, 50, 201, true, valueAxis{50 / logPad, 50 * logPad, false}},
		{"log: SLO below every mark", 600, 900, 500, true, valueAxis{500 / logPad, 900 * logPad, true}},
		{"TPOT far below the SLO", 5, 11, 50, false, valueAxis{0, 11 * (1 + linearPad), false}},
		{"linear: SLO at twice the top", 5, 11, 22, false, valueAxis{0, 22 * (1 + linearPad), true}},
		{"linear: SLO beyond twice the top", 5, 11, 22.1, false, valueAxis{0, 11 * (1 + linearPad), false}},
		{"linear: SLO below the top", 5, 11, 8, false, valueAxis{0, 11 * (1 + linearPad), true}},
		{"no SLO", 5, 11, 0, false, valueAxis{0, 11 * (1 + linearPad), false}},
		{"no data: the SLO", math.Inf(1), math.Inf(-1), 50, false, valueAxis{0, 50 * (1 + linearPad), true}},
	} {
		got := fitAxis(c.lo, c.hi, c.ref, c.log)
		if !near(got.min, c.want.min) || !near(got.max, c.want.max) || got.refOn != c.want.refOn {
			t.Errorf("%s: fitAxis(%g, %g, %g, log %t) = %+v, want %+v", c.name, c.lo, c.hi, c.ref, c.log, got, c.want)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// An SLO on the axis is a labelled dashed line; one far above the data is
// labelled at the top edge with an arrow, and the caption says how far.
func TestSLOMarkText(t *testing.T) {
	off := sloMark{value: 2000, unit: "ms"}
	on := sloMark{value: 500, unit: "ms", on: true}
	for _, c := range []struct{ got, want string }{
		{off.text(), "SLO 2000 ms ↑"},
		{on.text(), "SLO 500 ms"},
		{off.caption("p99 TTFT", 73.5), "The axis is fitted to the data: the SLO (p99 TTFT ≤ 2000 ms) lies 27× above the highest mark (73.5 ms), " +
			"so it is labelled at the top edge (↑) instead of stretching the axis to it. "},
		{sloMark{value: 50, unit: "ms"}.caption("p99 TPOT", 10.8), "The axis is fitted to the data: the SLO (p99 TPOT ≤ 50 ms) lies 4.6× above the highest mark (10.8 ms), " +
			"so it is labelled at the top edge (↑) instead of stretching the axis to it. "},
		{on.caption("p99 TTFT", 400), "The axis is fitted to the data and the SLO (p99 TTFT ≤ 500 ms), drawn as a dashed line. "},
		{off.legend("p99 TTFT"), "SLO: p99 TTFT ≤ 2000 ms, above every mark: labelled at the top edge, off the axis"},
		{on.legend("p99 TTFT"), "SLO: p99 TTFT ≤ 500 ms (dashed line)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q\nwant %q", c.got, c.want)
		}
	}
}

// The level figures' value axes fit the data, not the SLO: the test log's
// p99 TPOT tops out at 10.6 ms against a 50 ms SLO, so the axis ends at
// 10.6 ms plus its padding and the caption says where the SLO is; its p99
// TTFT (every run, the invalid ones too) comes near enough to the 2000 ms
// SLO for the SLO to be drawn.
func TestLevelFigureAxes(t *testing.T) {
	d, err := newDoc(&bytes.Buffer{}, testLog("emulated", 40))
	if err != nil {
		t.Fatal(err)
	}
	f := d.levelFigure(tpot)
	top := (6 + 32.0/8) * 1.06 // the largest run at the top level
	if y := f.plot.Y; y.Min != 0 || !near(y.Max, top*(1+linearPad)) {
		t.Errorf("p99 TPOT axis %g to %g, want 0 to %g", y.Min, y.Max, top*(1+linearPad))
	}
	if want := "the SLO (p99 TPOT ≤ 50 ms) lies 4.7× above the highest mark (10.6 ms), so it is labelled at the top edge"; !strings.Contains(f.caption, want) {
		t.Errorf("caption %q lacks %q", f.caption, want)
	}
	f = d.levelFigure(ttft)
	if y := f.plot.Y; !near(y.Max, 2000*logPad) || !strings.Contains(f.caption, "drawn as a dashed line") {
		t.Errorf("p99 TTFT axis to %g (want %g, the SLO on it), caption %q", y.Max, 2000*logPad, f.caption)
	}
	// The last level's marks are not on the x axis's edge.
	if x := f.plot.X; x.Max <= 32+dodgeStep(d.lg.QPS, 2)/2 {
		t.Errorf("x axis ends at %g, on the last level's marks", x.Max)
	}
}

// Every run of every trial is drawn: a run with an invalid level is left
// out of its trial's objective and drawn hollow with its reason; its value
// is recomputed from its levels, as the replay computes a run's objective;
// the counted runs keep the log's objectives.
func TestObjectiveRuns(t *testing.T) {
	lg := testLog("emulated", 40)
	d, err := newDoc(&bytes.Buffer{}, lg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &optimizer.Trial{N: 9, Objectives: []float64{4.1, 3.9}, Objective: 4, Levels: []optimizer.LevelSummary{
		{OfferedQPS: 2, RunP99TTFTMs: []float64{50, 60, 55}, RunP99TPOTMs: []float64{8, 8, 8}, RunEffectiveQPS: []float64{2, 1.9, 2}, RunValid: []bool{true, true, true}},
		{OfferedQPS: 4, RunP99TTFTMs: []float64{90, 2500, 80}, RunP99TPOTMs: []float64{9, 9, 9}, RunEffectiveQPS: []float64{3.9, 3.2, 4},
			RunValid: []bool{true, false, true}, Invalid: []string{"run 2: client_bound: p99 dispatch lag 300 ms"}},
		{OfferedQPS: 8, RunP99TTFTMs: []float64{3000, 1500, 3100}, RunP99TPOTMs: []float64{9, 9, 9}, RunEffectiveQPS: []float64{5, 6.5, 5},
			RunValid: []bool{true, false, true}, Invalid: []string{"run 2: emulator_bound: 12 KV pulls late"}},
	}}
	got := d.objectiveRuns(tr)
	want := []objectiveRun{{value: 4.1, valid: true}, {value: 6.5, reasons: []string{"client_bound", "emulator_bound"}}, {value: 3.9, valid: true}}
	if len(got) != len(want) {
		t.Fatalf("%d runs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].value != want[i].value || got[i].valid != want[i].valid || strings.Join(got[i].reasons, ",") != strings.Join(want[i].reasons, ",") {
			t.Errorf("run %d: %+v, want %+v", i+1, got[i], want[i])
		}
	}

	// In the figure: the test log's trial 4 has every run invalid at 32
	// req/s, trial 2 its run 2 at 24 req/s; both are drawn and named, and
	// the axis leaves room above the highest mark.
	f := d.objectiveFigure()
	for _, s := range []string{"Hollow grey points are runs left out of their trial's objective because a level of theirs was invalid: " +
		"trial 2, run 2 (client_bound); trial 4, runs 1, 2, 3 (client_bound).", "recomputed from their levels"} {
		if !strings.Contains(f.caption, s) {
			t.Errorf("caption %q lacks %q", f.caption, s)
		}
	}
	top := 0.0
	for _, tr := range d.all() {
		top = max(top, tr.Objective)
		for _, r := range d.objectiveRuns(tr) {
			top = max(top, r.value)
		}
	}
	if y := f.plot.Y; y.Min != 0 || y.Max < 1.05*top {
		t.Errorf("objective axis %g to %g: the highest mark, %g, is within 5%% of its top", y.Min, y.Max, top)
	}
}

// A load axis is labelled at round steps, four to ten of them.
func TestLinearTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []string
	}{
		{0, 26, []string{"0", "5", "10", "15", "20", "25"}},
		{0, 49.4, []string{"0", "10", "20", "30", "40"}},
		{0, 4.2, []string{"0", "1", "2", "3", "4"}},
		{0, 1000, []string{"0", "200", "400", "600", "800", "1000"}},
		{10, 11.5, []string{"10.0", "10.2", "10.4", "10.6", "10.8", "11.0", "11.2", "11.4"}},
	} {
		var got []string
		for _, tk := range (linearTicks{}).Ticks(c.lo, c.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%g–%g: %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
}
