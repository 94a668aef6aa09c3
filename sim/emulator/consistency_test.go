package emulator

import (
	"context"
	"flag"
	"fmt"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/sim"
)

var long = flag.Bool("long", false, "run the consistency check over the brief's full scan (6 levels × 128 requests)")
var longScale = flag.Float64("long-scale", 1, "time scale of the -long consistency scan")

// replayLevel plays the brief's workload at one level against a fresh
// exercise-profile deployment (batch of one) and returns its outcomes in
// model milliseconds.
func replayLevel(t *testing.T, mode sim.Mode, cache bool, qps float64, requests int, scale float64) ([]replay.Outcome, *syncBuffer) {
	t.Helper()
	reqs, err := replay.Generate(replay.Params{Requests: requests, InputTokens: 4096,
		UncachedTokens: replay.DefaultUncachedTokens, OutputTokens: 128, OfferedQPS: qps})
	if err != nil {
		t.Fatal(err)
	}
	trace := newSyncBuffer()
	cfg := Config{Profile: "exercise", TimeScale: scale, DisablePrefixCaching: !cache, Trace: trace}
	var prefill, decode *Server
	switch mode {
	case sim.Colocated:
		decode = startServer(t, cfg)
	case sim.Disaggregated:
		pc := cfg
		pc.Role = RolePrefill
		prefill = startServer(t, pc)
		dc := cfg
		dc.Role = RoleDecode
		decode = startServer(t, dc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now().Add(100 * time.Millisecond)
	outs := make([]replay.Outcome, len(reqs))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := append(sessionPrefix(r.Session, r.InputTokens-replay.DefaultUncachedTokens), suffix(r.ID, replay.DefaultUncachedTokens)...)
			body := map[string]any{"prompt": prompt, "max_tokens": r.OutputTokens, "min_tokens": r.OutputTokens,
				"ignore_eos": true, "temperature": 0}
			at := t0.Add(time.Duration(r.ArrivalMs * scale * 1e6))
			sleepCtx(ctx, time.Until(at))
			id := fmt.Sprintf("req-%d", r.ID)
			var res streamResult
			if mode == sim.Colocated {
				res = streamCompletion(ctx, decode.URL(), body, id)
			} else {
				res, _ = pdStream(ctx, prefill.URL(), decode.URL(), body, id)
			}
			wantCached := 0
			if cache && !r.Warmup() {
				wantCached = r.CachedTokens
			}
			switch {
			case res.err != nil:
				res.err = fmt.Errorf("request %d: %w", r.ID, res.err)
			case len(res.tokens) != r.OutputTokens:
				res.err = fmt.Errorf("request %d: %d tokens, want %d", r.ID, len(res.tokens), r.OutputTokens)
			case res.usage == nil || res.usage.PromptTokensDetails == nil:
				res.err = fmt.Errorf("request %d: no usage.prompt_tokens_details", r.ID)
			case res.usage.PromptTokensDetails.CachedTokens != wantCached:
				res.err = fmt.Errorf("request %d: cached_tokens %d, want %d", r.ID, res.usage.PromptTokensDetails.CachedTokens, wantCached)
			}
			mu.Lock()
			defer mu.Unlock()
			if res.err != nil {
				errs = append(errs, res.err)
				return
			}
			// Open loop: times count from the scheduled send, so a late
			// send is the client's delay, not a shorter queue.
			outs[i] = replay.Outcome{ID: r.ID, ArrivalMs: r.ArrivalMs, OutputTokens: len(res.tokens),
				FirstMs:  r.ArrivalMs + float64(res.first.Sub(at))/1e6/scale,
				FinishMs: r.ArrivalMs + float64(res.last.Sub(at))/1e6/scale}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return outs, trace
}

// engineP99TTFT is the p99 TTFT of the measured requests by the engines'
// own clocks: from the receiving engine's arrival to the (decode) engine's
// first token, so it leaves out the client's side of the HTTP exchanges but
// keeps, disaggregated, the proxy's hop and the real KV transfer.
func engineP99TTFT(t *testing.T, trace *syncBuffer, scale float64) float64 {
	arrival := map[string]float64{}
	first := map[string]float64{}
	for _, r := range trace.lines(t, "request") {
		id := r["request_id"].(string)
		var n int
		if _, err := fmt.Sscanf(id, "cmpl-req-%d", &n); err != nil || n < replay.Sessions {
			continue
		}
		switch r["role"] {
		case "prefill":
			arrival[id] = r["arrival_mono_ns"].(float64)
		case "decode":
			first[id] = r["first_token_mono_ns"].(float64)
		default:
			arrival[id] = r["arrival_mono_ns"].(float64)
			first[id] = r["first_token_mono_ns"].(float64)
		}
	}
	var v []float64
	for id, f := range first {
		v = append(v, (f-arrival[id])/1e6/scale)
	}
	return replay.NearestRank(v, 99)
}

// checkColocatedTrace checks the engine's own ground truth against the
// brief's colocated recurrence, exactly (to float rounding), with the
// arrivals the engine saw: start = max(arrival, previous finish), first =
// start + p + d, finish = first + (out-1)·d. What is left between the
// emulator and the exact model is then transport and wake-up delay.
func checkColocatedTrace(t *testing.T, trace *syncBuffer, cache bool) {
	recs := trace.lines(t, "request")
	sort.Slice(recs, func(i, j int) bool { return recs[i]["arrival_ms"].(float64) < recs[j]["arrival_ms"].(float64) })
	const d = 1000.0 / 2048
	busy := 0.0
	for _, r := range recs {
		a := r["arrival_ms"].(float64)
		uncached := r["prompt_tokens"].(float64) - r["cached_tokens"].(float64)
		start := math.Max(a, busy)
		first := start + uncached/4096*1000 + d
		finish := first + (r["output_tokens"].(float64)-1)*d
		gotFirst := a + r["ttft_ms"].(float64)
		gotFinish := a + r["e2e_ms"].(float64)
		if math.Abs(gotFirst-first) > 1e-6 || math.Abs(gotFinish-finish) > 1e-6 {
			t.Errorf("%s: engine first %.6f finish %.6f, recurrence %.6f %.6f", r["request_id"], gotFirst, gotFinish, first, finish)
		}
		busy = finish
	}
}

type consistencyCase struct {
	mode     sim.Mode
	qps      float64
	requests int
	scale    float64
}

// TestConsistencyWithExactModel ties the emulator to hone sim: with the
// exercise profile and a batch of one, a replay of the brief's workload
// gives each level's p99 TTFT within max(3%, 3 ms) of the exact model, in
// model time. The tolerance covers what the exact model does not have:
// HTTP and SSE on loopback, goroutine wake-ups and (disaggregated) the
// proxy's second leg, each a fraction of a millisecond of wall time,
// divided by the time scale. Levels are chosen so that both the
// 3 ms (unloaded) and the 3% (queueing) sides of the tolerance are tested
// in each mode; -long runs the full scan.
func TestConsistencyWithExactModel(t *testing.T) {
	// Time scale 1: the exercise's 0.49 ms decode step stays well above
	// the CPU cost of a token on two shared cores (at 0.1 the engine falls
	// behind and TPOT doubles). By default, the brief's full workload (128
	// requests) at the first level where each mode queues: the 3% side of
	// the tolerance, which absorbs the tens of milliseconds an
	// oversubscribed machine can delay a token. -long runs the brief's full
	// scan, whose unqueued levels hold the emulator to 3 ms end to end and
	// need a machine that is not oversubscribed. The cases run in parallel:
	// the 16 s warm-up phase is mostly idle.
	cases := []consistencyCase{
		{sim.Colocated, 16, 128, 1},
		{sim.Disaggregated, 32, 128, 1},
	}
	if *long {
		cases = nil
		for _, m := range []sim.Mode{sim.Colocated, sim.Disaggregated} {
			for _, q := range []float64{1, 2, 4, 8, 16, 32} {
				cases = append(cases, consistencyCase{m, q, 128, *longScale})
			}
		}
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/qps=%g/n=%d", c.mode, c.qps, c.requests), func(t *testing.T) {
			if !*long {
				t.Parallel()
			}
			want, err := sim.Scan(sim.ScanConfig{Config: sim.Config{Mode: c.mode, PrefixCache: true}, Requests: c.requests,
				InputTokens: 4096, OutputTokens: 128, QPS: []float64{c.qps}, SLO: replay.DefaultSLO})
			if err != nil {
				t.Fatal(err)
			}
			outs, trace := replayLevel(t, c.mode, true, c.qps, c.requests, c.scale)
			if c.mode == sim.Colocated {
				checkColocatedTrace(t, trace, true)
			}
			got := replay.Summarize(c.qps, outs, replay.DefaultSLO)
			w := want.Levels[0]
			tol := math.Max(0.03*w.P99TTFTMs, 3)
			var ttft []float64
			for _, o := range outs[replay.Sessions:] {
				ttft = append(ttft, o.TTFT())
			}
			t.Logf("CONSISTENCY mode=%s qps=%g requests=%d scale=%g sim_p99_ttft_ms=%.3f emu_p99_ttft_ms=%.3f diff_ms=%+.3f tol_ms=%.3f emu_p50_ttft_ms=%.3f engine_p99_ttft_ms=%.3f sim_p99_tpot_ms=%.4f emu_p99_tpot_ms=%.4f",
				c.mode, c.qps, c.requests, c.scale, w.P99TTFTMs, got.P99TTFTMs, got.P99TTFTMs-w.P99TTFTMs, tol,
				replay.NearestRank(ttft, 50), engineP99TTFT(t, trace, c.scale), w.P99TPOTMs, got.P99TPOTMs)
			if d := math.Abs(got.P99TTFTMs - w.P99TTFTMs); d > tol {
				t.Errorf("p99 TTFT %.3f ms, exact model %.3f ms: off by %.3f ms, tolerance %.3f ms", got.P99TTFTMs, w.P99TTFTMs, d, tol)
			}
		})
	}
}
