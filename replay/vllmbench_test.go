package replay

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/monoclock"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// vllmBenchKeys are the keys of the result vllm bench serve --save-result
// --save-detailed writes for a generation benchmark (VLLMBenchSource:
// main_async's setup keys, benchmark()'s result dict, process_one_metric's
// mean/median/std/p<N> for ttft, tpot, itl and e2el at percentiles 90,99),
// plus hone's own key.
var vllmBenchKeys = []string{
	"date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
	"request_rate", "burstiness", "max_concurrency",
	"duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
	"request_goodput", "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
	"latencies", "start_times", "queue_times", "generated_texts", "errors", "max_output_tokens_per_s",
	"max_concurrent_requests", "rtfx",
	"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
	"mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
	"mean_itl_ms", "median_itl_ms", "std_itl_ms", "p90_itl_ms", "p99_itl_ms",
	"mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p90_e2el_ms", "p99_e2el_ms",
	"hone",
}

// benchLevel is one level at 4 req/s, time scale 0.5, window 5 s: the 8
// warm-ups, then
//
//	id  scheduled  sent    first  finish  (model ms)
//	 8  0          1       50     62
//	 9  10         10.5    40     52
//	10  1500       1500    1510   1522
//	11  2000       2000    -      -       timeout
//
// each completed one 4 chunks of one token, 2 ms real (4 model ms) apart,
// and 1000 prompt tokens.
func benchLevel(valid bool) schema.LevelRecord {
	l := schema.LevelRecord{Level: slo.Level{OfferedQPS: 4}, WindowSeconds: 5, Verdict: schema.Verdict{Valid: valid},
		StartedAt: monoclock.Stamp{UnixNs: time.Date(2026, 12, 1, 7, 0, 5, 0, time.UTC).UnixNano(), MonoNs: 1}}
	for id := range Sessions {
		l.Requests = append(l.Requests, schema.RequestRecord{ID: id, Outcome: schema.OutcomeOK, FirstMs: fp(1), FinishMs: fp(2), TTFTMs: fp(1), OutputTokens: 1})
	}
	pt := 1000
	for _, r := range []struct{ sched, sent, first float64 }{{0, 1, 50}, {10, 10.5, 40}, {1500, 1500, 1510}} {
		q := schema.RequestRecord{ID: len(l.Requests), RequestID: "r" + string(rune('0'+len(l.Requests)-Sessions)), Outcome: schema.OutcomeOK,
			ScheduledMs: r.sched, SentMs: r.sent, DispatchLagMs: r.sent - r.sched, FirstMs: fp(r.first), FinishMs: fp(r.first + 12),
			TTFTMs: fp(r.first - r.sched), TPOTMs: fp(4), OutputTokens: 4, InputTokens: 1000, PromptTokens: &pt, OutputSHA256: "h"}
		for c := range 4 {
			q.Chunks.MonoNs = append(q.Chunks.MonoNs, 7e9+int64(c)*2_000_000)
		}
		l.Requests = append(l.Requests, q)
	}
	l.Requests = append(l.Requests, schema.RequestRecord{ID: len(l.Requests), RequestID: "r3", Outcome: schema.OutcomeTimeout, ScheduledMs: 2000, SentMs: 2000,
		InputTokens: 1000, Error: "POST: context deadline exceeded"})
	l.Goodput = GoodputOf(l.Requests, Sessions, slo.PerRequest{TTFTMs: 40}, l.WindowSeconds)
	return l
}

func TestVLLMBenchResults(t *testing.T) {
	invalid := benchLevel(false)
	invalid.Requests = invalid.Requests[:Sessions+1]
	rec := &schema.Record{Kind: schema.KindEmulated, Backend: "emulator", Model: schema.Model{ID: "Qwen/Qwen3-8B"}, TimeScale: 0.5,
		Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{benchLevel(true)}}, {Run: 1, Levels: []schema.LevelRecord{invalid}}}}
	var buf bytes.Buffer
	if err := WriteVLLMBench(&buf, rec); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want one result per level:\n%s", len(lines), buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := slices.Clone(vllmBenchKeys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("keys\n%v\nwant\n%v", keys, want)
	}

	// Only the valid run is pooled; the warm-ups are left out.
	r := VLLMBenchResults(rec)[0]
	if whole, _ := json.Marshal(r); string(whole) != lines[0] {
		t.Errorf("WriteVLLMBench's line differs from json.Marshal's:\n%s\n%s", lines[0], whole)
	}
	std := math.Sqrt(800.0 / 3)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	checks := []struct {
		name      string
		got, want any
	}{
		{"date", r.Date, "20261201-070005"},
		{"backend", r.Backend + "/" + r.EndpointType, "emulator/emulator"},
		{"model", r.ModelID + "/" + r.TokenizerID, "Qwen/Qwen3-8B/Qwen/Qwen3-8B"},
		{"label", r.Label, (*string)(nil)},
		{"num_prompts", r.NumPrompts, 4},
		{"request_rate", r.RequestRate, 4.0},
		{"burstiness", r.Burstiness, "inf"},
		{"max_concurrency", r.MaxConcurrency, (*int)(nil)},
		{"duration", r.Duration, 5.0},
		{"completed/failed", [2]int{r.Completed, r.Failed}, [2]int{3, 1}},
		{"tokens", [2]int{r.TotalInputTokens, r.TotalOutputTokens}, [2]int{3000, 12}},
		{"input_lens", r.InputLens, []int{1000, 1000, 1000, 1000}},
		{"output_lens", r.OutputLens, []int{4, 4, 4, 0}},
		{"ttfts", r.TTFTs, []float64{0.05, 0.03, 0.01, 0}},
		{"latencies", r.Latencies, []float64{0.062, 0.042, 0.022, 0}},
		{"start_times", r.StartTimes, []float64{0.001, 0.0105, 1.5, 2}},
		{"queue_times", r.QueueTimes, []float64{0.001, 0.0005, 0, 0}},
		{"itls", r.ITLs, [][]float64{{0.004, 0.004, 0.004}, {0.004, 0.004, 0.004}, {0.004, 0.004, 0.004}, {}}},
		{"generated_texts", r.GeneratedTexts, []string{"", "", "", ""}},
		{"errors", r.Errors, []string{"", "", "", "POST: context deadline exceeded"}},
		// ids 8 and 9 overlap; chunks: 8 in the first second from the first send, 4 in the second.
		{"peaks", [2]float64{r.MaxOutputTokensPerS, float64(r.MaxConcurrentRequests)}, [2]float64{8, 2}},
		{"rtfx", r.RTFx, 0.0},
		// TTFT 50, 30, 10 ms; E2E 62, 42, 22 ms (nearest rank).
		{"ttft", [4]float64{r.MeanTTFTMs, r.MedianTTFTMs, r.P90TTFTMs, r.P99TTFTMs}, [4]float64{30, 30, 50, 50}},
		{"e2el", [4]float64{r.MeanE2ELMs, r.MedianE2ELMs, r.P90E2ELMs, r.P99E2ELMs}, [4]float64{42, 42, 62, 62}},
		{"tpot", [5]float64{r.MeanTPOTMs, r.MedianTPOTMs, r.StdTPOTMs, r.P90TPOTMs, r.P99TPOTMs}, [5]float64{4, 4, 0, 4, 4}},
		{"itl", [5]float64{r.MeanITLMs, r.MedianITLMs, r.StdITLMs, r.P90ITLMs, r.P99ITLMs}, [5]float64{4, 4, 0, 4, 4}},
		{"hone ids", r.Hone.RequestIDs, []string{"r0", "r1", "r2", "r3"}},
		{"hone sha", r.Hone.OutputSHA256, []string{"h", "h", "h", ""}},
		{"hone level", [4]any{r.Hone.Level, r.Hone.Runs, r.Hone.Valid, r.Hone.Kind}, [4]any{"4 req/s", 1, true, schema.KindEmulated}},
	}
	for _, c := range checks {
		g, _ := json.Marshal(c.got)
		w, _ := json.Marshal(c.want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s: got %s, want %s", c.name, g, w)
		}
	}
	if !near(r.RequestThroughput, 0.6) || !near(r.OutputThroughput, 2.4) || !near(r.TotalTokenThroughput, 602.4) {
		t.Errorf("throughputs %v %v %v, want 0.6 2.4 602.4", r.RequestThroughput, r.OutputThroughput, r.TotalTokenThroughput)
	}
	if !near(r.StdTTFTMs, std) || !near(r.StdE2ELMs, std) {
		t.Errorf("std ttft %v e2el %v, want %v (population)", r.StdTTFTMs, r.StdE2ELMs, std)
	}
	// Goodput: TTFT <= 40 ms, ids 9 and 10 of 4 measured, over 5 s.
	if r.RequestGoodput == nil || !near(*r.RequestGoodput, 0.4) || r.Hone.Goodput.Good != 2 || r.Hone.Goodput.Measured != 4 {
		t.Errorf("goodput %v %+v, want 0.4 req/s, 2 of 4", r.RequestGoodput, r.Hone.Goodput)
	}
}

func TestVLLMBenchLoads(t *testing.T) {
	closed := benchLevel(true)
	closed.Level = LevelOf(ClosedLevelKey(16))
	trace := benchLevel(true)
	trace.Requests = trace.Requests[Sessions:]
	for i := range trace.Requests {
		trace.Requests[i].ID = i
	}
	for _, c := range []struct {
		name                    string
		rec                     *schema.Record
		rate, burst, concurrent string
		prompts                 int
	}{
		{"closed", &schema.Record{Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{closed}}}}, `"inf"`, `1`, `16`, 4},
		{"trace", &schema.Record{Workload: schema.WorkloadRecord{Kind: schema.WorkloadTrace}, Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{trace}}}}, `"inf"`, `1`, `null`, 4},
	} {
		r := VLLMBenchResults(c.rec)[0]
		got := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		if got(r.RequestRate) != c.rate || got(r.Burstiness) != c.burst || got(r.MaxConcurrency) != c.concurrent || r.NumPrompts != c.prompts {
			t.Errorf("%s: request_rate %s burstiness %s max_concurrency %s num_prompts %d, want %s %s %s %d", c.name,
				got(r.RequestRate), got(r.Burstiness), got(r.MaxConcurrency), r.NumPrompts, c.rate, c.burst, c.concurrent, c.prompts)
		}
	}
	if got := VLLMBenchResults(&schema.Record{}); got == nil || len(got) != 0 {
		t.Errorf("no runs: %v, want an empty list", got)
	}
}
