package report

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/replay"
)

func TestReport(t *testing.T) {
	cost := 0.2
	lv := []optimizer.LevelSummary{{OfferedQPS: 4, P99TTFTMs: 100, P99TPOTMs: 8, EffectiveQPS: 3.9, PassedRuns: 3, Runs: 3},
		{OfferedQPS: 16, P99TTFTMs: 3000, P99TPOTMs: 9, EffectiveQPS: 9, PassedRuns: 0, Runs: 3}}
	lg := &optimizer.Log{SchemaVersion: 1, Kind: "emulated", Workload: replay.DefaultWorkload(), QPS: []float64{4, 16}, Runs: 3,
		SLO: replay.DefaultSLO, BaselineN: 1, Selected: 2, Verified: true, Decision: []string{"selected trial 2"},
		Trials: []optimizer.Trial{
			{N: 1, Role: "baseline", Key: "coloc", Objectives: []float64{3.9, 3.9, 3.8}, Objective: 3.9, CostGPUSec: &cost, Levels: lv, Eligible: true},
			{N: 2, Role: "proposal", Key: "disagg", Objectives: []float64{7.8, 7.9, 7.7}, Objective: 7.8, Levels: lv, Eligible: true},
			{N: 3, Role: "ablation", Key: "disagg-nocache", Why: "ablation: prefix caching off", Objective: 0, Eligible: false, Reason: "a run passed no load level"},
		}}
	dir := t.TempDir()
	var b bytes.Buffer
	if err := Write(&b, lg, Options{PlotDir: dir, Command: "hone optimize --spec x"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"**All figures in this report are EMULATED**", "| selected (trial 2) | `disagg` | 7.800 |",
		"Objective +100.0% vs the baseline", "no: a run passed no load level", "ablation: prefix caching off (trial 3): objective 0.000 vs 7.800 req/s (-100.0%)",
		"hone optimize --spec x", "not GPU measurements"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, f := range []string{"p99_ttft.png", "objective.png"} {
		fh, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(fh); err != nil {
			t.Errorf("%s is not a PNG: %v", f, err)
		}
		fh.Close()
	}
	if err := Write(&b, &optimizer.Log{}, Options{}); err == nil {
		t.Error("an empty log rendered")
	}
}
