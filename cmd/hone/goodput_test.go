package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// TestReplayGoodput replays against a live emulator with --goodput: each
// level's goodput in the record is its measured requests counted against
// the limits, recounted here from the record's own requests, and the
// table prints it.
func TestReplayGoodput(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startEmulator(t, ctx)
	out := filepath.Join(t.TempDir(), "rec.json")
	stdout, stderr, code := runHone(ctx, "replay", "--endpoint", url, "--model", "Qwen/Qwen2.5-Coder-0.5B-Instruct", "--qps", "4,32",
		"--requests", "24", "--input-tokens", "512", "--output-tokens", "16", "--goodput", "ttft:40,e2el:400", "--out", out)
	if code != 0 && code != exitFailed { // 1: the host may make a level invalid; goodput is counted all the same
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.SLO.Goodput; got.TTFTMs != 40 || got.E2EMs != 400 || got.TPOTMs != 0 {
		t.Fatalf("record slo.goodput %+v", got)
	}
	for _, l := range rec.Runs[0].Levels {
		g := l.Goodput
		if g == nil || g.Limits != rec.SLO.Goodput || g.Measured != 16 {
			t.Fatalf("%g req/s: goodput %+v, want 16 measured against the limits", l.OfferedQPS, g)
		}
		good := 0
		for _, q := range l.Requests {
			if q.ID >= replay.Sessions && q.Outcome == schema.OutcomeOK && *q.TTFTMs <= 40 && *q.FinishMs-q.ScheduledMs <= 400 {
				good++
			}
		}
		if g.Good != good || g.Fraction != float64(good)/16 || g.QPS != float64(good)/l.WindowSeconds {
			t.Errorf("%g req/s: goodput %+v, recounted %d good over %.3f s", l.OfferedQPS, g, good, l.WindowSeconds)
		}
		t.Logf("%g req/s: %d of 16 good, %.2f req/s", l.OfferedQPS, g.Good, g.QPS)
	}
	if !strings.Contains(stdout, "goodput (ttft:40,e2el:400)") {
		t.Errorf("the table does not show goodput:\n%s", stdout)
	}
	if _, stderr, code := runHone(ctx, "replay", "--endpoint", url, "--model", "m", "--goodput", "itl:5"); code != exitBadInput || !strings.Contains(stderr, "--goodput") {
		t.Errorf("--goodput itl:5: exit %d, %q; want 2 naming --goodput", code, stderr)
	}
}

// TestPredictGoodputTable: hone predict --goodput adds goodput columns,
// which in virtual time are exact: at 30 req/s, 2 of the 56 measured
// requests stay within TTFT 40 ms and TPOT 8 ms.
func TestPredictGoodputTable(t *testing.T) {
	stdout, stderr, code := runHone(context.Background(), "predict", "--qps", "4,30", "--requests", "64", "--goodput", "tpot:8,ttft:40",
		"../../examples/emulator-l4-colocated.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"goodput  goodput_qps  passed", "100.0%", "  3.6%", "goodput: the share (and rate) of measured requests within ttft:40,tpot:8"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("predict table lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, _ = runHone(context.Background(), "predict", "--qps", "4", "--requests", "16", "../../examples/emulator-l4-colocated.yaml")
	if strings.Contains(stdout, "goodput") {
		t.Errorf("a goodput column without --goodput:\n%s", stdout)
	}
}
