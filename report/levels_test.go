package report

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/slo"
)

func TestP99Note(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{1, "p99 of 1 requests is their largest"},
		{40, "p99 of 40 requests is their largest"},
		{99, "p99 of 99 requests is their largest"},
		{100, "p99 of 100 requests is their second largest"},
		{150, "p99 of 150 requests is their second largest"},
		{199, "p99 of 199 requests is their second largest"},
		{200, ""},
		{201, ""},
		{1000, ""},
	} {
		if got := p99Note(c.n); got != c.want {
			t.Errorf("p99Note(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got, want := p99Explained(250), "n = 250 measured requests per run and level: rank ceil(0.99·250) = 248"; got != want {
		t.Errorf("p99Explained(250) = %q, want %q", got, want)
	}
}

func TestLevelVerdicts(t *testing.T) {
	reason := func(run int) string {
		return fmt.Sprintf("run %d: client_bound: p99 dispatch lag 300 ms > 100 ms", run)
	}
	for _, c := range []struct {
		name      string
		l         optimizer.LevelSummary
		cell      string
		ttft      string
		bad       []int
		invalid   bool
		medianRun spread
	}{
		{"valid", optimizer.LevelSummary{Runs: 3, P99TTFTMs: 20, RunP99TTFTMs: []float64{30, 10, 20}, RunValid: []bool{true, true, true}},
			"valid", "20.0 (10.0–30.0)", nil, false, spread{median: 20, min: 10, max: 30, n: 3}},
		{"one run invalid: the median of the other two", optimizer.LevelSummary{Runs: 3, P99TTFTMs: 20, RunP99TTFTMs: []float64{30, 90, 20},
			RunValid: []bool{true, false, true}, Invalid: []string{reason(2)}},
			"**invalid: client_bound** (run 2 of 3)", "25.0 (20.0–30.0)", []int{2}, true, spread{median: 25, min: 20, max: 30, n: 2}},
		{"every run invalid: the log's median, marked", optimizer.LevelSummary{Runs: 2, P99TTFTMs: 70, RunP99TTFTMs: []float64{60, 80},
			RunValid: []bool{false, false}, Invalid: []string{reason(1), "run 2: warm_start: hit rate 0.9", reason(2)}},
			"**invalid: client_bound, warm_start**", "*70.0, no valid run*", []int{1, 2}, true, spread{}},
		{"no RunValid: the reasons name the invalid run", optimizer.LevelSummary{Runs: 3, RunP99TTFTMs: []float64{1, 2, 3}, Invalid: []string{reason(3)}},
			"**invalid: client_bound** (run 3 of 3)", "1.5 (1.0–2.0)", []int{3}, true, spread{median: 1.5, min: 1, max: 2, n: 2}},
		{"a log without per-run values", optimizer.LevelSummary{Runs: 3, P99TTFTMs: 42},
			"valid", "42.0", nil, false, spread{median: 42, min: 42, max: 42, n: 1}},
	} {
		l := &c.l
		if got := verdictCell(l); got != c.cell {
			t.Errorf("%s: verdict %q, want %q", c.name, got, c.cell)
		}
		if got := spreadCell(l, ttft, "%.1f"); got != c.ttft {
			t.Errorf("%s: p99 TTFT cell %q, want %q", c.name, got, c.ttft)
		}
		if bad, _ := invalidRuns(l); !slices.Equal(bad, c.bad) {
			t.Errorf("%s: invalid runs %v, want %v", c.name, bad, c.bad)
		}
		if got := levelInvalid(l); got != c.invalid {
			t.Errorf("%s: invalid %t, want %t", c.name, got, c.invalid)
		}
		if got := validSpread(levelRuns(l, ttft)); got != c.medianRun {
			t.Errorf("%s: spread %+v, want %+v", c.name, got, c.medianRun)
		}
	}
}

func TestLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range (logTicks{}).Ticks(0.05, 2500) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"0.1", "1", "10", "100", "1000"}; !slices.Equal(labels, want) {
		t.Errorf("labels over 0.05–2500 (five decades) %v, want %v", labels, want)
	}
	labels = nil
	for _, tk := range (logTicks{}).Ticks(40, 2500) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"50", "100", "200", "500", "1000", "2000"}; !slices.Equal(labels, want) {
		t.Errorf("labels over 40–2500 %v, want %v", labels, want)
	}
	labels = nil
	for _, tk := range (logTicks{}).Ticks(84, 478) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"90", "100", "200", "300", "400"}; !slices.Equal(labels, want) {
		t.Errorf("labels over 84–478 %v, want %v", labels, want)
	}
}

// TestLevelTableGoodput: a log whose levels carry every run's goodput
// gains a goodput column (percent, median over valid runs with the range)
// and a sentence naming the limits; one without it has neither.
func TestLevelTableGoodput(t *testing.T) {
	lg := testLog("emulated", 40)
	lg.SLO.Goodput = slo.PerRequest{TTFTMs: 500, E2EMs: 3000}
	tr := &lg.Trials[0]
	for i := range tr.Levels {
		l := &tr.Levels[i]
		l.RunGoodput = make([]float64, len(l.RunP99TTFTMs))
		for j := range l.RunGoodput {
			l.RunGoodput[j] = 1 - 0.1*float64(j)
		}
	}
	var b bytes.Buffer
	d, err := newDoc(&b, lg)
	if err != nil {
		t.Fatal(err)
	}
	d.levelTable(tr)
	out := b.String()
	for _, want := range []string{"goodput (ttft:500,e2el:3000), %", "| 90.0 (80.0–100.0) |", "within the per-request limits ttft:500,e2el:3000"} {
		if !strings.Contains(out, want) {
			t.Errorf("level table lacks %q:\n%s", want, out)
		}
	}
	tr.Levels[0].RunGoodput = nil // one level without it: no column
	b.Reset()
	d.levelTable(tr)
	if strings.Contains(b.String(), "goodput") {
		t.Errorf("a column for a log where a level has no goodput:\n%s", b.String())
	}
}
