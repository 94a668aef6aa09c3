package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/gate"
)

// TestGateTraceRecords gates predicted trace replays: the trace's sha256
// is the workload in the fingerprint, and a trace has no warm-ups, so
// every request is a sample (the brief's records skip ids 0-7).
func TestGateTraceRecords(t *testing.T) {
	dir := t.TempDir()
	spec := "../../examples/emulator-l4-colocated.yaml"
	trace := "../../replay/testdata/traces/shared-prefixes.jsonl"
	rec := func(name string, extra ...string) string {
		out := filepath.Join(dir, name)
		args := append([]string{"predict", "--trace", trace, "--out", out, spec}, extra...)
		if _, stderr, code := runHone(context.Background(), args...); code != 0 {
			t.Fatalf("predict --trace: exit %d: %s", code, stderr)
		}
		return out
	}
	a := rec("a.json")
	runs, err := gate.ReadRuns(a)
	if err != nil {
		t.Fatal(err)
	}
	if fp := runs[0].Fingerprint["workload"]; !strings.HasPrefix(fp, "trace=") {
		t.Errorf("workload fingerprint %q, want the trace's sha256", fp)
	}
	b, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Workload struct {
			Trace struct {
				Requests int `json:"requests"`
			} `json:"trace"`
		} `json:"workload"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if n := len(runs[0].Levels[0].Samples["p99_ttft_ms"]); n != doc.Workload.Trace.Requests || n == 0 {
		t.Errorf("%d TTFT samples, want every one of the trace's %d requests", n, doc.Workload.Trace.Requests)
	}
	bl := filepath.Join(dir, "bl.json")
	if _, stderr, code := runHone(context.Background(), "gate", "baseline", "create", a, rec("b.json"), "--out", bl); code != 0 {
		t.Fatalf("baseline create: exit %d: %s", code, stderr)
	}
	if stdout, stderr, code := runHone(context.Background(), "gate", "check", "--baseline", bl, "--candidate", rec("c.json")); code != 0 {
		t.Fatalf("check of the same trace: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// Twice the speed is another workload.
	stdout, stderr, code := runHone(context.Background(), "gate", "check", "--baseline", bl, "--candidate", rec("d.json", "--trace-speed", "2"))
	if code != 2 || !strings.Contains(stdout+stderr, "speed=2") {
		t.Fatalf("another trace speed: exit %d, want 2 naming it\n%s\n%s", code, stdout, stderr)
	}
}
