package calibrate

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

// GroupSilicon: hand-computed errors of three rows grouped by TP; the
// signed median shows the direction the APE hides (two rows 10% off in
// opposite directions: APE 10, signed 0).
func TestGroupSilicon(t *testing.T) {
	row := func(tp int, ttftPred, tpotPred float64) SiliconPrediction {
		return SiliconPrediction{Model: "m", Mode: "agg", TP: tp, ISL: 1024, OSL: 128, Concurrency: 8,
			TTFT: SiliconStat{Measured: 100, Predicted: ttftPred, APE: math.Abs(ttftPred - 100)},
			TPOT: SiliconStat{Measured: 10, Predicted: tpotPred, APE: 10 * math.Abs(tpotPred-10)}}
	}
	rows := []SiliconPrediction{row(2, 150, 9), row(4, 80, 8), row(2, 100, 11)}
	got := GroupSilicon(rows, []string{"model", "tp"})
	want := []SiliconGroup{
		{By: map[string]string{"model": "m", "tp": "2"}, Rows: 2, TTFT: SiliconErrors{MedianAPE: 25, P90APE: 50, MedianError: 25}, TPOT: SiliconErrors{MedianAPE: 10, P90APE: 10, MedianError: 0}},
		{By: map[string]string{"model": "m", "tp": "4"}, Rows: 1, TTFT: SiliconErrors{MedianAPE: 20, P90APE: 20, MedianError: -20}, TPOT: SiliconErrors{MedianAPE: 20, P90APE: 20, MedianError: -20}},
	}
	if len(got) != len(want) {
		t.Fatalf("groups: %+v", got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.By["model"] != w.By["model"] || g.By["tp"] != w.By["tp"] || g.Rows != w.Rows || g.TTFT != w.TTFT || g.TPOT != w.TPOT {
			t.Errorf("group %d: %+v, want %+v", i, g, w)
		}
	}
	var b bytes.Buffer
	writeSiliconGroups(&b, []string{"model", "tp"}, got)
	if !strings.Contains(b.String(), "-20.0") || !strings.Contains(b.String(), "+25.0") {
		t.Errorf("table:\n%s", b.String())
	}
}

// ParseSiliconBy: keys in SiliconByKeys' order, each once; an unknown key
// names the flag and the keys it takes.
func TestParseSiliconBy(t *testing.T) {
	keys, err := ParseSiliconBy("clients, tp,model,tp,")
	if err != nil || !slices.Equal(keys, []string{"model", "tp", "clients"}) {
		t.Errorf("keys %v, %v", keys, err)
	}
	if keys, err := ParseSiliconBy(""); err != nil || len(keys) != 0 {
		t.Errorf("empty: %v, %v", keys, err)
	}
	if _, err := ParseSiliconBy("tp,gpu"); err == nil || !strings.Contains(err.Error(), `--by "gpu"`) || !strings.Contains(err.Error(), "clients") {
		t.Errorf("gpu: %v", err)
	}
}
