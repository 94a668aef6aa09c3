package emulator

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	rtmetrics "runtime/metrics"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/slo"
)

var long = flag.Bool("long", false, "run the consistency check over the brief's full scan (6 levels × 128 requests)")
var longScale = flag.Float64("long-scale", 1, "time scale of the -long consistency scan")

// consistencyDeployment starts a fresh exercise-profile deployment (batch
// of one) for mode: the engine alone, colocated, or a prefill and a decode
// engine behind hone's P/D proxy, disaggregated. It returns the URL a
// replay sends to, the engine serving /tokenize and the engines' trace.
func consistencyDeployment(t *testing.T, ctx context.Context, mode sim.Mode, scale float64) (endpoint, tokenize string, trace *syncBuffer) {
	t.Helper()
	trace = newSyncBuffer()
	cfg := Config{Profile: "exercise", TimeScale: scale, Trace: trace}
	if mode == sim.Colocated {
		e := startServer(t, cfg)
		return e.URL(), e.URL(), trace
	}
	pc, dc := cfg, cfg
	pc.Role, dc.Role = RolePrefill, RoleDecode
	pf, dec := startServer(t, pc), startServer(t, dc)
	p, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", Mode: proxy.ModeDisaggregated, Connector: proxy.NixlConnector,
		Workers: []proxy.Worker{{Name: "p0", Role: proxy.RolePrefill, URL: pf.URL()}, {Name: "d0", Role: proxy.RoleDecode, URL: dec.URL()}}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go p.ListenAndServe(ctx, func(a string) { ready <- a }, time.Second)
	select {
	case a := <-ready:
		return "http://" + a, dec.URL(), trace
	case <-time.After(10 * time.Second):
		t.Fatal("proxy did not start")
	}
	return
}

// replayLevel plays the brief's workload at one level with hone's replay
// client against a fresh deployment and returns the level's record (model
// milliseconds) after checking that every request completed validly with
// the prefix-cache hits the workload implies.
func replayLevel(t *testing.T, mode sim.Mode, qps float64, scale float64) (*schema.LevelRecord, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	endpoint, tokenize, trace := consistencyDeployment(t, ctx, mode, scale)
	w := replay.DefaultWorkload()
	rec, err := replay.Run(ctx, replay.Options{Endpoint: endpoint, TokenizeEndpoint: tokenize, Model: Qwen25Coder05B.Name,
		Kind: schema.KindEmulated, Backend: "emulator", Workload: w, QPS: []float64{qps}, TimeScale: scale})
	if err != nil {
		t.Fatal(err)
	}
	lr := &rec.Runs[0].Levels[0]
	if len(lr.Requests) != w.Requests {
		t.Fatalf("%d requests recorded, want %d", len(lr.Requests), w.Requests)
	}
	for _, r := range lr.Requests {
		wantCached := 0
		if r.ID >= replay.Sessions {
			wantCached = w.CachedTokens()
		}
		switch {
		case r.Outcome != schema.OutcomeOK || !r.Valid:
			t.Errorf("request %d: outcome %s, invalid %q, error %q", r.ID, r.Outcome, r.Invalid, r.Error)
		case r.OutputTokens != w.OutputTokens:
			t.Errorf("request %d: %d tokens, want %d", r.ID, r.OutputTokens, w.OutputTokens)
		case r.CachedTokens == nil || *r.CachedTokens != wantCached:
			t.Errorf("request %d: cached_tokens %v, want %d", r.ID, r.CachedTokens, wantCached)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return lr, trace
}

// engineP99TTFT is the p99 TTFT of the measured requests by the engines'
// own clocks: from the receiving engine's arrival to the (decode) engine's
// first token, so it leaves out the client's side of the HTTP exchanges but
// keeps, disaggregated, the proxy's hop and the real KV transfer.
func engineP99TTFT(t *testing.T, lr *schema.LevelRecord, trace *syncBuffer, scale float64) float64 {
	measured := map[string]bool{}
	for _, r := range lr.Requests {
		if r.ID >= replay.Sessions {
			measured["cmpl-"+r.RequestID] = true
		}
	}
	arrival := map[string]float64{}
	first := map[string]float64{}
	for _, r := range trace.lines(t, "request") {
		id := r["request_id"].(string)
		if !measured[id] {
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
	if len(v) != len(measured) {
		t.Errorf("trace has %d measured requests with a first token, want %d", len(v), len(measured))
	}
	return slo.NearestRank(v, 99)
}

// checkColocatedTrace checks the engine's own ground truth against the
// brief's colocated recurrence, exactly (to float rounding), with the
// arrivals the engine saw: start = max(arrival, previous finish), first =
// start + p + d, finish = first + (out-1)·d. What is left between the
// emulator and the exact model is then transport and wake-up delay.
func checkColocatedTrace(t *testing.T, trace *syncBuffer, cache bool) {
	recs := trace.lines(t, "request")
	recs = inServiceOrder(t, recs, func(r map[string]any) float64 { return r["arrival_ms"].(float64) })
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

// checkDisaggregatedTrace checks the two engines' ground truth against the
// brief's disaggregated recurrence, exactly, with the arrivals the prefill
// engine saw and the handoffs as they really ended:
//
//	prefill_end = max(a, prefill_end') + p
//	transfer from prefill_end to ready = max(prefill_end + 8, KV bytes in)
//	first = max(ready, decode_end') + d, finish = first + (out-1)·d
//
// It returns how many handoffs ran past the modelled 8 ms (the real hop
// and pull took longer): each delays its request, and, at a level where the
// decode worker is exactly saturated (16 QPS), every later one.
func checkDisaggregatedTrace(t *testing.T, trace *syncBuffer, scale float64) int {
	t.Helper()
	pre := map[string]map[string]any{}
	var dec []map[string]any
	for _, r := range trace.lines(t, "request") {
		if r["role"] == "prefill" {
			pre[r["request_id"].(string)] = r
		} else {
			dec = append(dec, r)
		}
	}
	ms := func(r map[string]any, k string) float64 { return r[k].(float64) / 1e6 / scale }
	const d = 1000.0 / 2048
	const eps = 1e-3 // ms: CLOCK_MONOTONIC readings are rounded to the ns
	// The prefill worker serves in the order requests reached it; the
	// decode worker in the order their KV became usable, which a late
	// handoff (the host's doing) can swap: each recurrence runs in its own
	// engine's order.
	var pres []map[string]any
	for _, r := range dec {
		if pr := pre[r["request_id"].(string)]; pr != nil {
			pres = append(pres, pr)
		}
	}
	pres = inServiceOrder(t, pres, func(r map[string]any) float64 { return ms(r, "arrival_mono_ns") })
	order := map[string]int{}
	for i, pr := range pres {
		order[pr["request_id"].(string)] = i
	}
	sort.SliceStable(dec, func(i, j int) bool {
		return order[dec[i]["request_id"].(string)] < order[dec[j]["request_id"].(string)]
	})
	prefillBusy := math.Inf(-1)
	prefillEnd := map[string]float64{}
	for _, r := range dec {
		id := r["request_id"].(string)
		pr := pre[id]
		if pr == nil {
			t.Errorf("%s: no prefill trace", id)
			continue
		}
		uncached := pr["prompt_tokens"].(float64) - pr["cached_tokens"].(float64)
		end := math.Max(ms(pr, "arrival_mono_ns"), prefillBusy) + uncached/4096*1000
		if got := ms(pr, "finish_mono_ns"); math.Abs(got-end) > eps {
			t.Errorf("%s: prefill ends %.6f, recurrence %.6f", id, got, end)
		}
		prefillBusy, prefillEnd[id] = end, end
	}
	sort.SliceStable(dec, func(i, j int) bool {
		return ms(dec[i], "transfer_end_mono_ns") < ms(dec[j], "transfer_end_mono_ns")
	})
	decodeBusy := math.Inf(-1)
	late := 0
	for _, r := range dec {
		id := r["request_id"].(string)
		end, ok := prefillEnd[id]
		if !ok {
			continue
		}
		from, ready := ms(r, "transfer_start_mono_ns"), ms(r, "transfer_end_mono_ns")
		if math.Abs(from-end) > eps || ready < end+8-eps {
			t.Errorf("%s: handoff %.6f..%.6f, want from the prefill's end %.6f for at least 8 ms", id, from, ready, end)
		}
		if ready > end+8+eps {
			late++
		}
		first := math.Max(ready, decodeBusy) + d
		finish := first + (r["output_tokens"].(float64)-1)*d
		if got := ms(r, "first_token_mono_ns"); math.Abs(got-first) > eps {
			t.Errorf("%s: first token %.6f, recurrence %.6f", id, got, first)
		}
		if got := ms(r, "finish_mono_ns"); math.Abs(got-finish) > eps {
			t.Errorf("%s: finish %.6f, recurrence %.6f", id, got, finish)
		}
		decodeBusy = finish
	}
	return late
}

type consistencyCase struct {
	mode  sim.Mode
	qps   float64
	scale float64
}

// TestConsistencyWithExactModel ties the emulator to hone sim: with the
// exercise profile, the brief's workload (128 requests) and a batch of one,
// a replay by hone's own client gives each level's p99 TTFT within
// max(3%, 3 ms) of the exact model, in model time. The tolerance covers what
// the exact model does not have: HTTP and SSE on loopback (the first chunk
// echoes the 4096 prompt ids), goroutine wake-ups and, disaggregated, the
// proxy's two legs; each is a fraction of a millisecond of wall time,
// divided by the time scale.
//
// By default (make test, where every package's tests share two cores) it
// runs the first level at which each mode queues, checks the engines'
// exact recurrences in model time and holds p99 TTFT to the exact model
// from below only (a busy host can only add delay). -long (make test-consistency, which runs alone) runs the
// brief's full scan, whose unqueued levels hold the emulator to 3 ms end to
// end.
func TestConsistencyWithExactModel(t *testing.T) {
	// Time scale 1: the exercise's 0.49 ms decode step stays well above
	// the CPU cost of a token on two shared cores.
	cases := []consistencyCase{
		{sim.Colocated, 16, 1},
		{sim.Disaggregated, 32, 1},
	}
	if *long {
		cases = nil
		for _, m := range []sim.Mode{sim.Colocated, sim.Disaggregated} {
			for _, q := range []float64{1, 2, 4, 8, 16, 32} {
				cases = append(cases, consistencyCase{m, q, *longScale})
			}
		}
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/qps=%g", c.mode, c.qps), func(t *testing.T) {
			// The 16 s warm-up phase and the low levels are mostly idle:
			// the cases run side by side, as many at once as go test -parallel
			// allows (default: GOMAXPROCS).
			t.Parallel()
			want, err := sim.Scan(sim.ScanConfig{Config: sim.Config{Mode: c.mode, PrefixCache: true}, Requests: replay.DefaultWorkload().Requests,
				InputTokens: 4096, OutputTokens: 128, QPS: []float64{c.qps}, SLO: slo.Default})
			if err != nil {
				t.Fatal(err)
			}
			rt := runtimeNow()
			got, trace := replayLevel(t, c.mode, c.qps, c.scale)
			late := 0
			if c.mode == sim.Colocated {
				checkColocatedTrace(t, trace, true)
			} else {
				late = checkDisaggregatedTrace(t, trace, c.scale)
			}
			w := want.Levels[0]
			tol := math.Max(0.03*w.P99TTFTMs, 3)
			var lag []float64
			for _, r := range got.Requests {
				lag = append(lag, r.DispatchLagMs)
			}
			t.Logf("CONSISTENCY mode=%s qps=%g scale=%g sim_p99_ttft_ms=%.3f emu_p99_ttft_ms=%.3f diff_ms=%+.3f tol_ms=%.3f emu_p50_ttft_ms=%.3f engine_p99_ttft_ms=%.3f p99_dispatch_lag_ms=%.3f sim_p99_tpot_ms=%.4f emu_p99_tpot_ms=%.4f",
				c.mode, c.qps, c.scale, w.P99TTFTMs, got.P99TTFTMs, got.P99TTFTMs-w.P99TTFTMs, tol,
				got.P50TTFTMs, engineP99TTFT(t, got, trace, c.scale), slo.NearestRank(lag, 99), w.P99TPOTMs, got.P99TPOTMs)
			t.Logf("runtime while it ran (the whole test process): %s; handoffs past the modelled 8 ms: %d", rt.since(), late)
			// Every delay the host adds (dispatch lag, transport, a late
			// handoff) only moves arrivals and readiness later, and the
			// recurrences are monotone in them: the emulator's p99 cannot
			// beat the exact model's, whatever the load (the lower side is
			// the model's). How far above it lands is the host's to decide:
			// that side is held to the tolerance only by -long (make
			// test-consistency), which runs alone on a quiet machine.
			if d := got.P99TTFTMs - w.P99TTFTMs; d < -tol || (*long && d > tol) {
				// The slowest requests, to tell a stall at one instant
				// from a steady excess.
				slow := slices.Clone(got.Requests[replay.Sessions:])
				slices.SortFunc(slow, func(a, b schema.RequestRecord) int { return cmp.Compare(*b.TTFTMs, *a.TTFTMs) })
				for _, r := range slow[:3] {
					t.Logf("slow: request %d scheduled at %.1f ms, TTFT %.3f ms, dispatch lag %.3f ms", r.ID, r.ScheduledMs, *r.TTFTMs, r.DispatchLagMs)
				}
				t.Errorf("p99 TTFT %.3f ms, exact model %.3f ms: off by %.3f ms, tolerance %.3f ms", got.P99TTFTMs, w.P99TTFTMs, d, tol)
			}
		})
	}
}

// runtimeSnapshot holds the Go runtime's scheduling-latency and GC-pause
// histograms, to tell a slow level's cause (goroutines waiting to run, GC
// pauses) from the emulator's own timing.
type runtimeSnapshot []rtmetrics.Sample

func runtimeNow() runtimeSnapshot {
	s := runtimeSnapshot{{Name: "/sched/latencies:seconds"}, {Name: "/gc/pauses:seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	rtmetrics.Read(s)
	return s
}

// since describes the runtime between s and now: GC cycles, and the
// p99 and largest bucket of scheduling latency and GC pause.
func (s runtimeSnapshot) since() string {
	now := runtimeNow()
	out := fmt.Sprintf("gc_cycles=%d", now[2].Value.Uint64()-s[2].Value.Uint64())
	for i, name := range []string{"sched_latency", "gc_pause"} {
		a, b := s[i].Value.Float64Histogram(), now[i].Value.Float64Histogram()
		var total uint64
		d := make([]uint64, len(b.Counts))
		for k := range b.Counts {
			d[k] = b.Counts[k] - a.Counts[k]
			total += d[k]
		}
		var cum uint64
		p99, mx := 0.0, 0.0
		for k, c := range d {
			if c == 0 {
				continue
			}
			cum += c
			if p99 == 0 && float64(cum) >= 0.99*float64(total) {
				p99 = b.Buckets[k+1]
			}
			mx = b.Buckets[k+1]
		}
		out += fmt.Sprintf(" %s_p99_ms<=%.3g %s_max_ms<=%.3g (n=%d)", name, p99*1e3, name, mx*1e3, total)
	}
	return out
}

// serviceInversionMs bounds how much earlier a request may have arrived
// than one its engine served before it. The engine stamps arrival when the
// HTTP request comes in and queues it when parsed (as vLLM stamps in the
// API server and queues on receipt in the engine core), so two requests
// arriving together can be queued in either order: the host decides. An
// engine that was not first-come-first-served would invert by far more.
const serviceInversionMs = 50

// inServiceOrder sorts an engine's request lines in the order it served
// them (first scheduled) and checks that order is its arrival order up to
// serviceInversionMs (model ms).
func inServiceOrder(t *testing.T, recs []map[string]any, arrival func(map[string]any) float64) []map[string]any {
	t.Helper()
	sort.SliceStable(recs, func(i, j int) bool {
		return recs[i]["scheduled_mono_ns"].(float64) < recs[j]["scheduled_mono_ns"].(float64)
	})
	latest := math.Inf(-1)
	for _, r := range recs {
		a := arrival(r)
		if a < latest-serviceInversionMs {
			t.Errorf("%s arrived %.3f ms before a request served ahead of it: not first-come-first-served", r["request_id"], latest-a)
		}
		latest = math.Max(latest, a)
	}
	return recs
}
