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

// TestReplayVLLMBenchJSON replays two levels against a live emulator with
// -o vllm-bench-json: stdout is one vllm bench serve result per level, in
// order, whose per-request lists and totals are the record's measured
// requests.
func TestReplayVLLMBenchJSON(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startEmulator(t, ctx)
	out := filepath.Join(t.TempDir(), "rec.json")
	stdout, stderr, code := runHone(ctx, "replay", "--endpoint", url, "--model", "Qwen/Qwen2.5-Coder-0.5B-Instruct", "--qps", "4,32",
		"--requests", "24", "--input-tokens", "512", "--output-tokens", "16", "--out", out, "-o", "vllm-bench-json")
	if code != 0 && code != exitFailed { // 1: the host may make a level invalid; the output is written all the same
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one result per level:\n%s", len(lines), stdout)
	}
	for i, line := range lines {
		var r replay.VLLMBenchResult
		var keys map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if err := json.Unmarshal([]byte(line), &keys); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"duration", "completed", "request_throughput", "ttfts", "itls", "p99_ttft_ms", "mean_e2el_ms", "hone"} {
			if _, ok := keys[k]; !ok {
				t.Errorf("line %d: no %q", i, k)
			}
		}
		l := rec.Runs[0].Levels[i]
		outTok, completed := 0, 0
		for _, q := range l.Requests {
			if q.ID >= replay.Sessions && q.Outcome == schema.OutcomeOK {
				outTok += q.OutputTokens
				completed++
			}
		}
		if r.NumPrompts != 16 || len(r.TTFTs) != 16 || len(r.ITLs) != 16 || r.Completed != completed || r.TotalOutputTokens != outTok ||
			r.RequestRate != l.OfferedQPS || r.ModelID != "Qwen/Qwen2.5-Coder-0.5B-Instruct" || r.Hone.Kind != schema.KindEmulated {
			t.Errorf("level %d: num_prompts %d, %d ttfts, %d itls, completed %d, %d output tokens, rate %v, model %q, kind %q; "+
				"want 16, 16, 16, %d, %d, %g", i, r.NumPrompts, len(r.TTFTs), len(r.ITLs), r.Completed, r.TotalOutputTokens,
				r.RequestRate, r.ModelID, r.Hone.Kind, completed, outTok, l.OfferedQPS)
		}
		for k, itl := range r.ITLs {
			if r.OutputLens[k] == 16 && len(itl) != 15 {
				t.Errorf("level %d request %d: %d itls for 16 one-token chunks", i, k, len(itl))
			}
		}
	}
	if _, stderr, code := runHone(ctx, "replay", "--endpoint", url, "--model", "m", "--capacity", "-o", "vllm-bench-json"); code != exitBadInput || !strings.Contains(stderr, "vllm-bench-json") {
		t.Errorf("--capacity -o vllm-bench-json: exit %d, %q; want 2 naming the format", code, stderr)
	}
}
