package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/replay"
)

// miniVLLM answers /tokenize (one id per whitespace-separated word) and
// streams /v1/completions in vLLM's format; enough to drive the command.
func miniVLLM(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var b struct{ Prompt string }
		json.NewDecoder(r.Body).Decode(&b)
		ids := []int{}
		for i := range strings.Fields(b.Prompt) {
			ids = append(ids, 1000+i%5000)
		}
		json.NewEncoder(w).Encode(map[string]any{"tokens": ids})
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Prompt    []int `json:"prompt"`
			MaxTokens int   `json:"max_tokens"`
		}
		json.NewDecoder(r.Body).Decode(&b)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range b.MaxTokens {
			fr := "null"
			if i == b.MaxTokens-1 {
				fr = `"length"`
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"token_ids\":[%d],\"finish_reason\":%s}]}\n\n", i, fr)
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":0,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n", len(b.Prompt), b.MaxTokens)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// runHone is runCLI with a context, for interrupts.
func runHone(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	root := newRootCmd()
	var o, e bytes.Buffer
	root.SetOut(&o)
	root.SetErr(&e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(&e, "hone:", err)
	}
	return o.String(), e.String(), exitCodeQuiet(err)
}

func TestReplayBadFlags(t *testing.T) {
	for flag, args := range map[string][]string{
		"--qps":             {"--qps", "1,fast"},
		"--kind":            {"--kind", "simulation_only"},
		"--endpoint":        {"--endpoint", "localhost:8000"},
		"--time-scale":      {"--time-scale", "0"},
		"--runs":            {"--runs", "0"},
		"--requests":        {"--requests", "4"},
		"--output-tokens":   {"--output-tokens", "0"},
		"--ttft-slo-ms":     {"--ttft-slo-ms", "-1"},
		"--request-timeout": {"--request-timeout", "0s"},
		"--gpus":            {"--gpus", "two"},
	} {
		a := append([]string{"replay", "--endpoint", "http://127.0.0.1:1", "--model", "m", "-o", filepath.Join(t.TempDir(), "r.json")}, args...)
		_, stderr, code := runHone(context.Background(), a...)
		if code != exitBadInput || !strings.Contains(stderr, flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", args, code, stderr, flag)
		}
	}
}

func TestReplayWritesRecord(t *testing.T) {
	srv := miniVLLM(t)
	dir := t.TempDir()
	out, cfg := filepath.Join(dir, "run.json"), filepath.Join(dir, "deploy.json")
	if err := os.WriteFile(cfg, []byte(`{"mode":"disaggregated","prefill":1,"decode":3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runHone(context.Background(), "replay", "--endpoint", srv.URL, "--model", "m", "--kind", "emulated",
		"--qps", "5,10", "--requests", "10", "--input-tokens", "256", "--output-tokens", "4", "--time-scale", "0.01",
		"--runs", "2", "--gpus", "4", "--config", cfg, "--precision", "bf16", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != replay.KindEmulated || rec.Backend != "emulator" || rec.GPUs != 4 || rec.TimeScale != 0.01 || len(rec.Runs) != 2 ||
		rec.Outcomes[replay.OutcomeOK] != 40 || rec.Hone.Commit == "" || rec.Config["mode"] != "disaggregated" || rec.Model.Precision != "bf16" {
		t.Fatalf("record: kind %q backend %q gpus %d scale %g runs %d outcomes %v", rec.Kind, rec.Backend, rec.GPUs, rec.TimeScale, len(rec.Runs), rec.Outcomes)
	}
	if !strings.Contains(stdout, "written to "+out) || strings.Count(stderr, "qps ") != 4 {
		t.Errorf("stdout %q\nstderr %q: want the record's path and one line per level", stdout, stderr)
	}
}

func TestReplayInterrupted(t *testing.T) {
	srv := miniVLLM(t)
	out := filepath.Join(t.TempDir(), "run.json")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, stderr, code := runHone(ctx, "replay", "--endpoint", srv.URL, "--model", "m", "--qps", "1",
		"--input-tokens", "256", "--output-tokens", "4", "--time-scale", "0.1", "-o", out)
	if code != exitFailed || !strings.Contains(stderr, "interrupted") {
		t.Fatalf("exit %d, stderr %q; want 1 and 'interrupted'", code, stderr)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Incomplete || rec.Runs[0].Levels[0].Complete {
		t.Errorf("record incomplete=%t, level complete=%t", rec.Incomplete, rec.Runs[0].Levels[0].Complete)
	}
}
