package emulator

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// The "metrics" object must follow vLLM's definitions
// (build_per_request_timing_metrics, vllm/entrypoints/generate/base/
// serving.py): time_to_first_token_ms runs from the first scheduling, not
// from arrival, and queue_time_ms from the engine core's receipt to that
// scheduling. These tests plant a queue and hold every key to the
// emulator's own trace, in model time: an emulator measuring TTFT from
// arrival (as hone's once did) fails them, so diagnose, which subtracts
// nothing from vLLM's TTFT, is tested against what vLLM sends.

// sseData reads an event stream and returns every data payload except
// [DONE]; first, when not nil, is called once at the first payload.
func sseData(ctx context.Context, base string, body map[string]any, first func()) ([]string, error) {
	resp, err := postJSON(ctx, base+"/v1/completions", body, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var out []string
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return out, nil
		}
		if len(out) == 0 && first != nil {
			first()
		}
		out = append(out, data)
	}
	return nil, fmt.Errorf("stream ended without [DONE]: %v", sc.Err())
}

// traceOf returns the trace's request line whose request_id ends in id.
func traceOf(t *testing.T, tr *syncBuffer, id string) map[string]any {
	t.Helper()
	for _, l := range tr.lines(t, "request") {
		if strings.HasSuffix(l["request_id"].(string), id) {
			return l
		}
	}
	t.Fatalf("no trace line for %s", id)
	return nil
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// TestRequestMetricsFollowVLLMForAQueuedRequest: on the exercise profile
// (one sequence at a time, prefill 4096 tok/s, d = 1000/2048 ms per
// sampled token) request B arrives while A decodes, so it queues until A's
// last token. vLLM's time_to_first_token_ms is then B's own prefill step
// (128/4096 s + d), the same as on an idle engine; the queue is
// queue_time_ms alone.
func TestRequestMetricsFollowVLLMForAQueuedRequest(t *testing.T) {
	const scale = 1.0
	trace := newSyncBuffer()
	s := startServer(t, Config{Profile: "exercise", TimeScale: scale, Trace: trace})
	ctx := context.Background()
	const d = 1000.0 / 2048
	started := make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		_, err := sseData(ctx, s.URL(), map[string]any{"prompt": suffix(1, 128), "max_tokens": 200, "ignore_eos": true,
			"stream": true, "stream_options": map[string]any{"include_usage": true}}, func() { close(started) })
		doneA <- err
	}()
	select {
	case <-started:
	case err := <-doneA:
		t.Fatalf("A: %v", err)
	} // A is decoding: about 199 × d ≈ 97 ms of model time to go
	const n = 20
	b := streamCompletion(ctx, s.URL(), map[string]any{"prompt": suffix(2, 128), "max_tokens": n, "ignore_eos": true}, "req-b")
	if err := <-doneA; err != nil {
		t.Fatalf("A: %v", err)
	}
	if b.err != nil || b.metrics == nil || len(b.tokens) != n {
		t.Fatalf("B: err %v, %d tokens, metrics %+v", b.err, len(b.tokens), b.metrics)
	}
	m := b.metrics
	tb := traceOf(t, trace, "req-b")
	ta := trace.lines(t, "request")[0]
	if ta["request_id"] == tb["request_id"] {
		ta = trace.lines(t, "request")[1]
	}
	num := func(l map[string]any, k string) float64 { return l[k].(float64) }
	mono := func(l map[string]any, k string) float64 { return num(l, k) / 1e6 / scale } // ns → model ms
	// B queued behind A: it was first scheduled at A's last token.
	aLast := num(ta, "arrival_ms") + num(ta, "e2e_ms")
	wantQueue := aLast - num(tb, "arrival_ms")
	if wantQueue < 20 {
		t.Fatalf("B queued %.3f ms: the test needs a request that queued (A's last token at %.3f, B's arrival at %.3f)",
			wantQueue, aLast, num(tb, "arrival_ms"))
	}
	const tol = 1e-9 // model ms: the same float64 clock readings, subtracted in another order
	if !near(m.QueueTimeMs, wantQueue, tol) || !near(m.QueueTimeMs, num(tb, "queue_ms"), tol) {
		t.Errorf("queue_time_ms %v, want first scheduled − arrival = %v (trace queue_ms %v)", m.QueueTimeMs, wantQueue, num(tb, "queue_ms"))
	}
	if got := mono(tb, "scheduled_mono_ns") - mono(tb, "arrival_mono_ns"); !near(m.QueueTimeMs, got, 1e-5) {
		t.Errorf("queue_time_ms %v, trace scheduled − arrival on CLOCK_MONOTONIC %v", m.QueueTimeMs, got)
	}
	// TTFT from the first scheduling: B's own step, exactly; never from arrival.
	wantTTFT := 128.0/4096*1000 + d
	if !near(m.TimeToFirstTokenMs, wantTTFT, tol) || !near(m.TimeToFirstTokenMs, num(tb, "prefill_ms"), tol) {
		t.Errorf("time_to_first_token_ms %v, want scheduled → first token = %v (trace prefill_ms %v)",
			m.TimeToFirstTokenMs, wantTTFT, num(tb, "prefill_ms"))
	}
	if fromArrival := num(tb, "ttft_ms"); !near(m.TimeToFirstTokenMs+m.QueueTimeMs, fromArrival, tol) {
		t.Errorf("time_to_first_token_ms %v + queue_time_ms %v, want the trace's arrival → first token %v",
			m.TimeToFirstTokenMs, m.QueueTimeMs, fromArrival)
	}
	if got := mono(tb, "first_token_mono_ns") - mono(tb, "scheduled_mono_ns"); !near(m.TimeToFirstTokenMs, got, 1e-5) {
		t.Errorf("time_to_first_token_ms %v, trace first token − scheduled on CLOCK_MONOTONIC %v", m.TimeToFirstTokenMs, got)
	}
	// Decode: first → last token, (n − 1) steps of d.
	if wantGen := float64(n-1) * d; !near(m.GenerationTimeMs, wantGen, 1e-9) || !near(m.GenerationTimeMs, num(tb, "decode_ms"), tol) {
		t.Errorf("generation_time_ms %v, want first → last token = %v (trace decode_ms %v)", m.GenerationTimeMs, wantGen, num(tb, "decode_ms"))
	}
	if m.MeanITLMs == nil || !near(*m.MeanITLMs, m.GenerationTimeMs/(n-1), 1e-12) || !near(*m.MeanITLMs, d, 1e-9) {
		t.Errorf("mean_itl_ms %v, want generation_time_ms / (n − 1) = %v", m.MeanITLMs, d)
	}
	// Output throughput over first scheduled → last token (TTFT included).
	if want := n / (m.TimeToFirstTokenMs + m.GenerationTimeMs) * 1000; m.TokensPerSecond == nil || !near(*m.TokensPerSecond, want, 1e-9) {
		t.Errorf("tokens_per_second %v, want %v", m.TokensPerSecond, want)
	}
	// hone's extensions agree with vLLM's keys where they mean the same.
	if m.PrefillTimeMs != m.TimeToFirstTokenMs || m.DecodeTimeMs != m.GenerationTimeMs || m.TimeScale != scale {
		t.Errorf("extensions: prefill_time_ms %v decode_time_ms %v time_scale %v", m.PrefillTimeMs, m.DecodeTimeMs, m.TimeScale)
	}
	if !near(m.E2ETimeMs, m.QueueTimeMs+m.TimeToFirstTokenMs+m.GenerationTimeMs, tol) {
		t.Errorf("e2e_time_ms %v != queue + TTFT + generation", m.E2ETimeMs)
	}
}

// TestRequestMetricsOnADecodeWorker: vLLM schedules a remote-prefill
// request only once its pulled KV is usable, so the decode worker's
// queue_time_ms holds the KV wait (the exercise profile's 8 ms pull) and
// its time_to_first_token_ms is its first step alone.
func TestRequestMetricsOnADecodeWorker(t *testing.T) {
	const scale = 1.0
	p, d, ptrace, dtrace := pdPair(t, Config{Profile: "exercise", TimeScale: scale}, Faults{})
	res, params := pdStream(context.Background(), p.URL(), d.URL(),
		map[string]any{"prompt": suffix(7, 300), "max_tokens": 4, "ignore_eos": true}, "req-pd")
	if res.err != nil || params == nil || res.metrics == nil {
		t.Fatalf("%v %v %+v", res.err, params, res.metrics)
	}
	m := res.metrics
	tr := traceOf(t, dtrace, "req-pd")
	num := func(k string) float64 { return tr[k].(float64) }
	// Trace: queue_ms runs from KV usable (transfer_end) to the first
	// scheduling, prefill_ms from there to the first token. vLLM's queue
	// is receipt → first scheduled: the KV wait and that queue together.
	wantQueue := num("ttft_ms") - num("prefill_ms")
	kvWait := (num("transfer_end_mono_ns") - num("arrival_mono_ns")) / 1e6 / scale
	if !near(m.QueueTimeMs, wantQueue, 1e-9) || !near(m.QueueTimeMs, kvWait+num("queue_ms"), 1e-5) || kvWait <= 0 {
		t.Errorf("queue_time_ms %v, want receipt → first scheduled %v = KV wait %v + queue after it %v",
			m.QueueTimeMs, wantQueue, kvWait, num("queue_ms"))
	}
	if !near(m.TimeToFirstTokenMs, num("prefill_ms"), 1e-9) || m.TimeToFirstTokenMs >= m.QueueTimeMs {
		t.Errorf("time_to_first_token_ms %v, want the first step alone (trace prefill_ms %v)", m.TimeToFirstTokenMs, num("prefill_ms"))
	}
	if m.KVTransferTimeMs != num("transfer_ms") {
		t.Errorf("kv_transfer_time_ms %v, trace transfer_ms %v", m.KVTransferTimeMs, num("transfer_ms"))
	}
	// The prefill worker's answer: one token, so no mean ITL (vLLM: null).
	pl := traceOf(t, ptrace, "req-pd")
	if pl["output_tokens"].(float64) != 1 {
		t.Fatalf("prefill leg output %v", pl["output_tokens"])
	}
}

// TestRequestMetricsPlacement: as vLLM, a non-streaming answer carries
// "metrics" at the top level; a stream carries it on the final usage
// chunk (choices []) only, never on a content chunk; one output token has
// no mean_itl_ms.
func TestRequestMetricsPlacement(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.05})
	ctx := context.Background()
	nr, _, err := complete(ctx, s.URL(), map[string]any{"prompt": suffix(3, 64), "max_tokens": 1}, "")
	if err != nil || nr.Metrics == nil {
		t.Fatalf("non-streaming: %v %+v", err, nr)
	}
	if nr.Metrics.MeanITLMs != nil || nr.Metrics.TokensPerSecond == nil {
		t.Errorf("one token: mean_itl_ms %v (want absent), tokens_per_second %v", nr.Metrics.MeanITLMs, nr.Metrics.TokensPerSecond)
	}
	events, err := sseData(ctx, s.URL(), map[string]any{"prompt": suffix(4, 64), "max_tokens": 3, "ignore_eos": true,
		"stream": true, "stream_options": map[string]any{"include_usage": true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range events {
		var ch struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   json.RawMessage   `json:"usage"`
			Metrics json.RawMessage   `json:"metrics"`
		}
		if err := json.Unmarshal([]byte(e), &ch); err != nil {
			t.Fatal(err)
		}
		usageChunk := len(ch.Choices) == 0 && len(ch.Usage) > 0 && string(ch.Usage) != "null"
		if last := i == len(events)-1; usageChunk != last {
			t.Errorf("event %d: usage chunk %t, want only the last event", i, usageChunk)
		}
		if has := len(ch.Metrics) > 0 && string(ch.Metrics) != "null"; has != usageChunk {
			t.Errorf("event %d: metrics %s, want them on the usage chunk only", i, ch.Metrics)
		}
	}
	t.Run("no usage chunk, no metrics", func(t *testing.T) {
		// vLLM (completion/serving.py): "In streaming, metrics ride on this
		// final usage chunk, which is only emitted when usage reporting is
		// enabled".
		events, err := sseData(ctx, s.URL(), map[string]any{"prompt": suffix(5, 64), "max_tokens": 3, "ignore_eos": true,
			"stream": true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range events {
			if strings.Contains(e, `"metrics"`) {
				t.Errorf("event %d carries metrics without stream_options.include_usage (vLLM sends none): %s", i, e)
			}
		}
	})
}
