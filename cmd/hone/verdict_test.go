package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// TestReplayAndDiagnoseAgree: hone replay applies diagnose's client-bound
// rule before it writes the record, so hone diagnose report on that record
// finds no level to mark that the record does not already call invalid,
// and lists the same invalid levels (issue 43: replay printed "every level
// valid" for a record diagnose then called client_bound). A 100 ms TTFT
// SLO puts the bar (5%: 5 ms) between the dispatch lag (replay's own
// rule) and the client residual (diagnose's) on an idle host; on a busy
// one both may trip, and the two must still agree.
func TestReplayAndDiagnoseAgree(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startEmulator(t, ctx)
	out := filepath.Join(t.TempDir(), "rec.json")
	_, stderr, code := runHone(ctx, "replay", "--endpoint", url, "--model", "Qwen/Qwen2.5-Coder-0.5B-Instruct", "--qps", "4,48",
		"--requests", "24", "--input-tokens", "512", "--output-tokens", "16", "--ttft-slo-ms", "100", "--out", out)
	if code != 0 && code != exitFailed {
		t.Fatalf("replay: exit %d: %s", code, stderr)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr2, code := runHone(ctx, "diagnose", "report", "--record", out, "-o", "json")
	if code != 0 {
		t.Fatalf("diagnose: exit %d: %s", code, stderr2)
	}
	var d struct {
		InvalidLevels []string `json:"invalid_levels"`
		ClientBound   []string `json:"client_bound"`
	}
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatal(err)
	}
	stored := rec.InvalidLevels()
	if strings.Join(stored, "\n") != strings.Join(d.InvalidLevels, "\n") {
		t.Errorf("replay stored invalid levels\n%q\ndiagnose reports\n%q", stored, d.InvalidLevels)
	}
	residualOnly := 0
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			codes := map[schema.Code]bool{}
			for _, why := range l.Verdict.Reasons {
				codes[why.Code] = true
			}
			for _, m := range d.ClientBound {
				if strings.HasPrefix(m, "run ") && strings.Contains(m, l.Name()+": client_bound") && !codes[schema.ReasonClientBound] {
					t.Errorf("diagnose marked %q, which replay's record calls valid", m)
				}
			}
			if strings.Contains(stderr, "client-bound (diagnose's rule): run 1, "+l.Name()) && !strings.Contains(l.Verdict.Reasons[0].Detail, "dispatch lag") {
				residualOnly++
			}
		}
	}
	t.Logf("levels replay marked by diagnose's rule alone: %d; stored invalid: %q", residualOnly, stored)
}
