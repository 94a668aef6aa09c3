package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// TestDiagnoseAutoUsesKernelSplit: a record without engine metrics and a
// daemon snapshot, hone diagnose report with the default --evidence auto.
// The request the snapshot's exchange and steps join is split from them
// (split_by kernel: queueing 6 ms, from its receipt at 104 to its first
// step at 110); the one no exchange fits is named per level with its
// reason, in the table and the JSON, and left out, never given client
// timing's queueing of 0.
func TestDiagnoseAutoUsesKernelSplit(t *testing.T) {
	dir := t.TempDir()
	mono := func(ms float64) int64 { return 1_000_000_000 + int64((ms-101)*1e6) }
	f := func(v float64) *float64 { return &v }
	n := func(v int) *int { return &v }
	req := func(id int, rid string, at float64) schema.RequestRecord {
		return schema.RequestRecord{ID: id, RequestID: rid, Outcome: "ok", ScheduledMs: at - 1, SentMs: at,
			Sent: schema.Stamp{MonoNs: mono(at)}, FirstMs: f(at + 49), FinishMs: f(at + 149), OutputTokens: 126,
			InputTokens: 100, PromptTokens: n(100), CachedTokens: n(0), Status: 200, PromptSHA256: strings.Repeat("0", 64)}
	}
	rec := schema.Record{SchemaVersion: schema.SchemaVersion, Kind: schema.KindEmulated, TimeScale: 1, SLO: slo.Default,
		Workload: schema.WorkloadRecord{Workload: schema.Workload{Seed: 1, Requests: 10, InputTokens: 100, UncachedTokens: 100, OutputTokens: 126}, QPS: []float64{4}, Runs: 1},
		Model:    schema.Model{ID: "m"}, Validation: schema.Validation{Valid: 2, Reasons: map[string]int{}},
		Hardware: map[string]any{},
		Config:   map[string]any{}, Outcomes: map[string]int{"ok": 2}, RequestTimeoutMs: 600000,
		Runs: []schema.RunRecord{{Run: 1, Levels: []schema.LevelRecord{{Level: slo.Level{OfferedQPS: 4},
			Verdict: schema.Verdict{Valid: true, Reasons: []schema.Reason{}}, PromptsSHA256: strings.Repeat("0", 64),
			Outcomes: map[string]int{"ok": 2}, Failures: map[string]int{},
			Requests: []schema.RequestRecord{req(8, "r8", 101), req(9, "r9", 1101)}}}}}}
	snap := map[string]any{"schema_version": 1, "clock": "CLOCK_MONOTONIC",
		"exchanges": []map[string]any{{"pid": 7, "local": "127.0.0.1:8000", "remote": "127.0.0.1:5000",
			"request_start_monotonic_ns": mono(104), "first_send_monotonic_ns": mono(144), "last_send_monotonic_ns": mono(244), "response_sends": 127}},
		"steps": []map[string]any{{"pid": 7, "start_monotonic_ns": mono(110), "end_monotonic_ns": mono(140)}}}
	write := func(name string, v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r, s := write("rec.json", rec), write("snap.json", snap)

	out, errs, code := runCLI(t, "", "diagnose", "report", "--record", r, "--daemon", s, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Requests []struct {
			RequestID string             `json:"request_id"`
			SplitBy   string             `json:"split_by"`
			Parts     map[string]float64 `json:"parts_ms"`
		} `json:"requests"`
		Unjoined []struct {
			Requests, Unjoined int
			Reasons            map[string]int
			IDs                []string `json:"request_ids"`
		} `json:"unjoined"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Requests) != 1 || got.Requests[0].RequestID != "r8" || got.Requests[0].SplitBy != "kernel" || got.Requests[0].Parts["queueing"] != 6 {
		t.Errorf("requests %+v: want r8 alone, split by kernel with queueing 6 ms", got.Requests)
	}
	if len(got.Unjoined) != 1 || got.Unjoined[0].Unjoined != 1 || got.Unjoined[0].Requests != 2 || len(got.Unjoined[0].IDs) != 1 ||
		got.Unjoined[0].IDs[0] != "r9" || got.Unjoined[0].Reasons[diagnose.UnjoinedNoExchange] != 1 {
		t.Errorf("unjoined %+v: want r9, of 2, for want of an exchange", got.Unjoined)
	}
	out, errs, code = runCLI(t, "", "diagnose", "report", "--record", r, "--daemon", s)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if want := "kernel evidence: run 1, 4 req/s: 1 of 2 measured requests not split, left out: 1 " + diagnose.UnjoinedNoExchange; !strings.Contains(out, want) {
		t.Errorf("table lacks %q:\n%s", want, out)
	}
}
