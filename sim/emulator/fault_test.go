package emulator

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/schema"
)

func TestParseFault(t *testing.T) {
	var f Faults
	for _, s := range []string{"crash-after=3", "stall=250ms@7", "cut-stream-after-tokens=5", "slow-transfer=2.5", "refuse-kv"} {
		if err := f.ParseFault(s); err != nil {
			t.Fatal(err)
		}
	}
	want := Faults{CrashAfter: 3, Stall: &Stall{Duration: 250 * time.Millisecond, Nth: 7}, CutAfter: 5, SlowTransfer: 2.5, RefuseKV: true}
	if f.CrashAfter != want.CrashAfter || *f.Stall != *want.Stall || f.CutAfter != want.CutAfter || f.SlowTransfer != want.SlowTransfer || !f.RefuseKV {
		t.Errorf("parsed %+v", f)
	}
	for _, bad := range []string{"crash-after=0", "crash-after", "stall=1s", "stall=x@1", "stall=1s@0", "cut-stream-after-tokens=-1",
		"slow-transfer=0.5", "slow-transfer=NaN", "refuse-kv=1", "explode"} {
		if err := (&Faults{}).ParseFault(bad); err == nil || !strings.Contains(err.Error(), "--fault") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}

func TestFaultCrashAfter(t *testing.T) {
	crashed := make(chan struct{})
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, Faults: Faults{CrashAfter: 2}, OnCrash: func() { close(crashed) }})
	ctx := context.Background()
	body := map[string]any{"prompt": suffix(1, 50), "max_tokens": 4}
	for i := 0; i < 2; i++ {
		if _, _, err := complete(ctx, s.URL(), body, ""); err != nil {
			t.Fatalf("request %d before the crash: %v", i+1, err)
		}
	}
	select {
	case <-crashed:
	case <-time.After(5 * time.Second):
		t.Fatal("no crash after 2 requests")
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server still running after the crash")
	}
	c := &http.Client{Timeout: 2 * time.Second}
	if r, err := c.Get(s.URL() + "/health"); err == nil {
		r.Body.Close()
		t.Fatalf("server answered after the crash: %d", r.StatusCode)
	}
}

func TestFaultStall(t *testing.T) {
	const scale = 0.1
	trace := newSyncBuffer()
	s := startServer(t, Config{Profile: "exercise", TimeScale: scale, Trace: trace,
		Faults: Faults{Stall: &Stall{Duration: 200 * time.Millisecond, Nth: 2}}})
	ctx := context.Background()
	var ttft []float64
	var wall []time.Duration
	for i := 0; i < 3; i++ {
		r := streamCompletion(ctx, s.URL(), map[string]any{"prompt": suffix(i, 128), "max_tokens": 2}, "")
		if r.err != nil {
			t.Fatal(r.err)
		}
		ttft = append(ttft, r.metrics.TimeToFirstTokenMs)
		wall = append(wall, r.first.Sub(r.sent))
	}
	// Model time is exact: 128/4096 s of prefill plus one decode step,
	// plus the stall for the second request only.
	base := 128.0/4096*1000 + 1000.0/2048
	// (1e-9 ms: vLLM's time_to_first_token_ms is first token - first
	// scheduled on the engine's float64 clock; the engine is idle, so no
	// queue comes before the scheduling.)
	for i, want := range []float64{base, base + 200, base} {
		if math.Abs(ttft[i]-want) > 1e-9 {
			t.Errorf("request %d: model TTFT %v, want %v", i+1, ttft[i], want)
		}
	}
	if min := 200 * scale * float64(time.Millisecond); float64(wall[1]) < min {
		t.Errorf("second request's wall TTFT %v, want at least the scaled stall %v", wall[1], time.Duration(min))
	}
	recs := trace.lines(t, "request")
	if len(recs) != 3 || recs[1]["stall_ms"].(float64) != 200 || recs[0]["stall_ms"].(float64) != 0 {
		t.Errorf("trace stall_ms: %v", recs)
	}
}

func TestFaultCutStream(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, Faults: Faults{CutAfter: 3}})
	ctx := context.Background()
	body := map[string]any{"prompt": suffix(1, 64), "max_tokens": 10, "ignore_eos": true}
	r := streamCompletion(ctx, s.URL(), body, "")
	if r.err == nil || len(r.tokens) != 3 || !strings.Contains(r.err.Error(), "without [DONE]") {
		t.Fatalf("cut stream: %d tokens, err %v", len(r.tokens), r.err)
	}
	// Non-streaming responses are not cut.
	nr, _, err := complete(ctx, s.URL(), body, "")
	if err != nil || nr.Usage.CompletionTokens != 10 {
		t.Fatalf("non-streaming: %+v %v", nr, err)
	}
	if got := metricValue(t, s.URL(), "hone_emulator_fault_stream_cuts_total"); got != 1 {
		t.Errorf("stream cuts %v", got)
	}
	deadline := time.Now().Add(2 * time.Second)
	for metricValue(t, s.URL(), "vllm:kv_cache_usage_perc") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the cut request's blocks were never freed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFaultSlowTransfer(t *testing.T) {
	// Exercise profile: a pull takes 8 ms of model time; slow-transfer=4
	// makes it 32. The lower bound is exact (the sender holds the trailer
	// until the modelled end); the upper bound allows 60 ms (wall, at
	// scale 1) for connection setup and wake-ups on an oversubscribed
	// machine, and still tells 8 from 4×8 + 60 apart.
	const scale = 1
	for _, c := range []struct {
		factor float64
		want   float64
	}{{1, 8}, {4, 32}} {
		p, d, _, dtrace := pdPair(t, Config{Profile: "exercise", TimeScale: scale}, Faults{SlowTransfer: c.factor})
		res, params := pdStream(context.Background(), p.URL(), d.URL(), map[string]any{"prompt": suffix(3, 200), "max_tokens": 2}, "")
		if res.err != nil || params == nil {
			t.Fatalf("factor %v: %v %v", c.factor, res.err, params)
		}
		got := res.metrics.KVTransferTimeMs
		// Model time is computed in floating point from clock readings:
		// 32 may come out as 31.9999999.
		if got < c.want-1e-6 || got > c.want+60 {
			t.Errorf("factor %v: transfer %.3f ms of model time, want %v (+60)", c.factor, got, c.want)
		}
		if rec := dtrace.lines(t, "request"); rec[0]["transfer_ms"].(float64) != got {
			t.Errorf("trace transfer_ms %v, metrics %v", rec[0]["transfer_ms"], got)
		}
	}
}

func TestFaultRefuseKV(t *testing.T) {
	p, d, _, dtrace := pdPair(t, Config{Profile: "exercise", TimeScale: 0.01}, Faults{RefuseKV: true})
	body := map[string]any{"prompt": suffix(4, 300), "max_tokens": 5, "ignore_eos": true}
	res, params := pdStream(context.Background(), p.URL(), d.URL(), body, "r1")
	if params != nil {
		t.Fatalf("refuse-kv answered with params %+v", params)
	}
	if res.err != nil || len(res.tokens) != 5 {
		t.Fatalf("decode-side prefill: %v", res.err)
	}
	rec := dtrace.lines(t, "request")[0]
	if rec["kv_pulled_tokens"].(float64) != 0 || rec["kv_bytes_received"].(float64) != 0 || rec["prefill_ms"].(float64) < 300.0/4096*1000 {
		t.Errorf("decode worker should have prefilled all 300 tokens itself: %v", rec)
	}
	// The prefill worker freed the blocks at once.
	if u := metricValue(t, p.URL(), "vllm:kv_cache_usage_perc"); u != 0 {
		t.Errorf("prefill holds blocks: usage %v", u)
	}
	colo := startServer(t, Config{Profile: "exercise", TimeScale: 0.01})
	if cr := streamCompletion(context.Background(), colo.URL(), body, ""); !slices.Equal(cr.tokens, res.tokens) {
		t.Errorf("outputs differ: %v vs %v", cr.tokens, res.tokens)
	}
}

// TestTransferLateMs: kv_transfer_late_ms is the part of
// kv_transfer_time_ms past the modelled end, the host's. At time scale
// 0.001 the exercise profile's 8 ms pull is 8 µs of wall time, less than
// a loopback dial takes, so the pull is late, by its transfer time less
// the 8 model ms; at time scale 1 with slow-transfer=50 (400 ms of wall
// time for the bytes of a 200-token prompt) it is on time: exactly 0.
func TestTransferLateMs(t *testing.T) {
	for _, c := range []struct {
		scale, factor float64
		late          bool
	}{{0.001, 1, true}, {1, 50, false}} {
		p, d, _, _ := pdPair(t, Config{Profile: "exercise", TimeScale: c.scale}, Faults{SlowTransfer: c.factor})
		res, params := pdStream(context.Background(), p.URL(), d.URL(), map[string]any{"prompt": suffix(5, 200), "max_tokens": 2}, "")
		if res.err != nil || params == nil || res.metrics == nil {
			t.Fatalf("scale %v: %v %v", c.scale, res.err, params)
		}
		m := res.metrics
		model := 8 * c.factor
		// The decode worker sums the late pulls' modelled time, which
		// replay's emulator_bound estimate reads.
		wantModel := 0.0
		if c.late {
			wantModel = model / 1000
		}
		if got := metricValue(t, d.URL(), schema.EmulatorKVPullLateModelSeconds); !near(got, wantModel, 1e-9) {
			t.Errorf("scale %v: %s = %v, want %v", c.scale, schema.EmulatorKVPullLateModelSeconds, got, wantModel)
		}
		if c.late {
			if !(m.KVTransferLateMs > 0) || !near(m.KVTransferLateMs, m.KVTransferTimeMs-model, 1e-6) {
				t.Errorf("scale %v: kv_transfer_late_ms %v, want transfer %v − model %v > 0", c.scale, m.KVTransferLateMs, m.KVTransferTimeMs, model)
			}
		} else if m.KVTransferLateMs != 0 || !near(m.KVTransferTimeMs, model, 1e-6) {
			t.Errorf("scale %v: kv_transfer_late_ms %v, transfer %v; want 0 and %v", c.scale, m.KVTransferLateMs, m.KVTransferTimeMs, model)
		}
	}
}
