package diagnose

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

func f(x float64) *float64 { return &x }

// record builds a one-level record with one measured request: scheduled at
// 100 ms, sent at 101 ms (mono 1e9 ns), first token at 150 ms, last at 250.
func record(metrics string) *schema.Record {
	rq := schema.RequestRecord{ID: 8, RequestID: "r8", Outcome: "ok", ScheduledMs: 100, SentMs: 101,
		Sent: schema.Stamp{MonoNs: 1_000_000_000}, FirstMs: f(150), FinishMs: f(250), OutputTokens: 126}
	if metrics != "" {
		rq.EngineMetrics = json.RawMessage(metrics)
	}
	warm := schema.RequestRecord{ID: 0, RequestID: "r0", Outcome: "ok", FirstMs: f(1), FinishMs: f(2)}
	return &schema.Record{Kind: "emulated", TimeScale: 1, Runs: []schema.RunRecord{{Run: 1, Levels: []schema.LevelRecord{{
		Level: slo.Level{OfferedQPS: 4}, Verdict: validVerdict(), Requests: []schema.RequestRecord{warm, rq}}}}}}
}

// A trace record has no warm-ups (replay.Record.Warmups): its request 0
// is attributed too.
func TestAttributeTraceHasNoWarmups(t *testing.T) {
	rec := record(`{"queue_time_ms":10,"time_to_first_token_ms":30,"generation_time_ms":100,"mean_itl_ms":0.8}`)
	rec.Workload.Kind = schema.WorkloadTrace
	atts, err := Attribute(rec, Evidence{})
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 2 || atts[0].ID != 0 || atts[1].ID != 8 {
		t.Errorf("%d attributions (%+v); want requests 0 and 8: a trace's every request is measured", len(atts), atts)
	}
}

func validVerdict() schema.Verdict { return schema.Verdict{Valid: true, Reasons: []schema.Reason{}} }

func stamp(ms float64) proxy.Stamp { return proxy.Stamp{MonoNs: 1_000_000_000 + int64((ms-101)*1e6)} }

// The planted engine metrics follow vLLM's definitions
// (build_per_request_timing_metrics): queue_time_ms is receipt → first
// scheduled, time_to_first_token_ms first scheduled → first token (the
// queue is not inside it), generation_time_ms first → last token,
// mean_itl_ms generation_time_ms / (output tokens − 1).

func TestAttributeWithoutProxy(t *testing.T) {
	// The engine got the request at 104, scheduled it at 114, its first
	// token at 144, its last at 244 (125 gaps of 0.8).
	atts, err := Attribute(record(`{"queue_time_ms":10,"time_to_first_token_ms":30,"generation_time_ms":100,"mean_itl_ms":0.8}`), Evidence{})
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 1 {
		t.Fatalf("%d attributions; warm-ups must be left out", len(atts))
	}
	a := atts[0]
	// TTFT 50 = queue 10 + prefill 30 + client 10 (1 ms dispatch + 9 ms hops).
	want := map[string]float64{Queueing: 10, Prefill: 30, Client: 10, Decode: 100}
	for k, v := range want {
		if math.Abs(a.Parts[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, a.Parts[k], v)
		}
	}
	if !strings.Contains(a.Sources[Decode], "generation_time_ms") || !a.EngineMetrics {
		t.Errorf("decode source %q (engine metrics %t): want the engine's generation_time_ms", a.Sources[Decode], a.EngineMetrics)
	}
	// Without generation_time_ms: mean ITL × (tokens − 1) = 0.8 × 125, the same figure.
	atts, _ = Attribute(record(`{"queue_time_ms":10,"time_to_first_token_ms":30,"mean_itl_ms":0.8}`), Evidence{})
	if a := atts[0]; math.Abs(a.Parts[Decode]-100) > 1e-9 || !strings.Contains(a.Sources[Decode], "mean_itl_ms") {
		t.Errorf("decode %v from %q: want 0.8 × 125 from mean_itl_ms", a.Parts[Decode], a.Sources[Decode])
	}
	if a.TTFTMs != 50 || a.E2EMs != 150 {
		t.Errorf("TTFT %v E2E %v", a.TTFTMs, a.E2EMs)
	}
	// No engine metrics: the whole engine span is prefill, and the source says so.
	atts, _ = Attribute(record(""), Evidence{})
	if a := atts[0]; a.Parts[Prefill] != 49 || a.EngineMetrics || !strings.Contains(a.Sources[Prefill], "--enable-per-request-metrics") {
		t.Errorf("no metrics: prefill %v (%s)", a.Parts[Prefill], a.Sources[Prefill])
	}
}

func TestAttributeDisaggregatedWithRetryAndFallback(t *testing.T) {
	ans := func(ms float64) *proxy.Stamp { s := stamp(ms); return &s }
	tl := proxy.Timeline{RequestID: "r8", Received: stamp(102), Retries: 1, Outcome: proxy.OutcomeSuccess,
		Prefill: []proxy.Leg{
			{Worker: "p0", Sent: stamp(103), Answered: ans(108), Status: 503, Error: "status 503"},
			{Worker: "p1", Sent: stamp(109), Answered: ans(125), Status: 200,
				EngineMetrics: json.RawMessage(`{"queue_time_ms":4,"time_to_first_token_ms":10}`)}},
		Decode: &proxy.Leg{Worker: "d0", Sent: stamp(126), Answered: ans(127), Status: 200}}
	// The decode worker waited 17 ms for the KV, then 2 in its queue, then
	// took a 1 ms step: vLLM reports receipt → first scheduled (19) as
	// queue_time_ms, the step as time_to_first_token_ms.
	atts, err := Attribute(record(`{"queue_time_ms":19,"time_to_first_token_ms":1,"mean_itl_ms":1}`), Evidence{Timelines: []proxy.Timeline{tl}})
	if err != nil {
		t.Fatal(err)
	}
	a := atts[0]
	// Queueing: the failed leg (109−103 = 6) + the prefill engine's queue 4.
	// Prefill 10 (its time_to_first_token_ms as it is). Transfer: the
	// decode engine's queue_time_ms 19 (the queue after the KV is inside
	// it: vLLM does not report it apart). Decode queue: its first step 1.
	// Client: the rest of TTFT 50.
	want := map[string]float64{Queueing: 10, Prefill: 10, Transfer: 19, DecodeQ: 1, Client: 50 - 10 - 10 - 19 - 1}
	for k, v := range want {
		if math.Abs(a.Parts[k]-v) > 1e-6 {
			t.Errorf("%s = %v, want %v", k, a.Parts[k], v)
		}
	}
	if a.Retries != 1 || !a.EngineMetrics || !a.PrefillEngineMetrics {
		t.Errorf("retries %d, engine metrics %t, prefill engine metrics %t", a.Retries, a.EngineMetrics, a.PrefillEngineMetrics)
	}
	// A fallback: the decode engine prefilled (queue 2, prefill 18);
	// nothing is transfer. Queueing: receipt 102 → decode leg sent 126,
	// waiting for a prefill, + the decode engine's queue 2.
	tl.Outcome = proxy.OutcomeFallback
	atts, _ = Attribute(record(`{"queue_time_ms":2,"time_to_first_token_ms":18,"mean_itl_ms":1}`), Evidence{Timelines: []proxy.Timeline{tl}})
	if a := atts[0]; !a.Fallback || a.Parts[Transfer] != 0 || math.Abs(a.Parts[Prefill]-18) > 1e-6 ||
		math.Abs(a.Parts[Queueing]-26) > 1e-6 || !strings.Contains(a.Sources[Prefill], "fallback") {
		t.Errorf("fallback: %+v", a)
	}
}

// TestAttributeAgainstPlantedTruth builds a request whose every interval
// is known, on a time scale of 2 (stamps in real nanoseconds, figures in
// model ms), and holds each part to its planted value. The engines'
// metrics are what vLLM would send for those intervals (see above). The
// client part must be exactly the planted dispatch lag plus the planted
// hops: an engine's time left in it (the decode worker's first step, say)
// or counted twice (a queue subtracted from a TTFT that never held it)
// fails here.
func TestAttributeAgainstPlantedTruth(t *testing.T) {
	const scale = 2.0
	mono := func(ms float64) proxy.Stamp { return proxy.Stamp{MonoNs: 1_000_000_000 + int64(ms*scale*1e6)} }
	at := func(ms float64) *proxy.Stamp { s := mono(ms); return &s }
	rec := func(sent, first float64, metrics string) *schema.Record {
		rq := schema.RequestRecord{ID: 8, RequestID: "r8", Outcome: "ok", ScheduledMs: 100, SentMs: sent,
			DispatchLagMs: sent - 100, Sent: schema.Stamp{MonoNs: mono(sent).MonoNs}, FirstMs: f(first), FinishMs: f(first + 100),
			TTFTMs: f(first - 100), TTFTFromSentMs: f(first - sent), OutputTokens: 64, EngineMetrics: json.RawMessage(metrics)}
		return &schema.Record{Kind: "emulated", TimeScale: scale, Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{{
			Level: slo.Level{OfferedQPS: 4}, Verdict: validVerdict(), Requests: []schema.RequestRecord{rq}}}}}}
	}
	for _, tc := range []struct {
		name string
		rec  *schema.Record
		tl   proxy.Timeline
		want map[string]float64
	}{{
		// Scheduled 100, sent 103 (dispatch lag 3); the proxy receives at
		// 104 (hop 1) and sends the prefill leg at 105 (proxy 1); the
		// prefill engine gets it at 106 (hop 1), queues 4, prefills 10,
		// answers at 120, the proxy has it at 121 (hop 1) and hands off at
		// 123 (2); the decode engine gets it at 124 (hop 1), waits 17 for
		// KV, queues 2, takes one 1.5 ms step: first token at 144.5, at
		// the client at 146.5 (delivery 2). Client: 3 + 1+1+1+1+2+1 + 2.
		// vLLM's decode worker schedules the request once the KV is there:
		// queue_time_ms 19 (KV 17 + queue 2), time_to_first_token_ms the
		// 1.5 ms step. It does not report the 2 ms apart, so attribution
		// counts them in transfer; the client part stays exact.
		name: "disaggregated",
		rec: rec(103, 146.5, `{"queue_time_ms":19,"time_to_first_token_ms":1.5,"generation_time_ms":94.5,`+
			`"mean_itl_ms":1.5,"tokens_per_second":668.42}`),
		tl: proxy.Timeline{RequestID: "r8", Received: mono(104), Outcome: proxy.OutcomeSuccess,
			Prefill: []proxy.Leg{{Worker: "p0", Sent: mono(105), Answered: at(121), Status: 200,
				EngineMetrics: json.RawMessage(`{"queue_time_ms":4,"time_to_first_token_ms":10,"generation_time_ms":0,"tokens_per_second":100}`)}},
			Decode: &proxy.Leg{Worker: "d0", Sent: mono(123), Answered: at(145.5), Status: 200}},
		// Decode: the engine's 63 steps of 1.5 ms, not the client's
		// first → last chunk (100: it read the chunks late).
		want: map[string]float64{Client: 12, Queueing: 4, Prefill: 10, Transfer: 17 + 2, DecodeQ: 1.5, Decode: 94.5},
	}, {
		// Scheduled 100, sent 102 (lag 2), proxy 103 (hop 1), engine leg
		// sent 104 (proxy 1), engine arrival 105 (hop 1), queue 5, prefill
		// 20: first token 130, at the client 132 (delivery 2).
		name: "colocated",
		rec:  rec(102, 132, `{"queue_time_ms":5,"time_to_first_token_ms":20,"generation_time_ms":63,"mean_itl_ms":1,"tokens_per_second":771.08}`),
		tl: proxy.Timeline{RequestID: "r8", Received: mono(103), Outcome: proxy.OutcomeSuccess,
			Decode: &proxy.Leg{Worker: "c0", Sent: mono(104), Answered: at(131), Status: 200}},
		want: map[string]float64{Client: 7, Queueing: 5, Prefill: 20, Transfer: 0, DecodeQ: 0, Decode: 63},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			atts, err := Attribute(tc.rec, Evidence{Timelines: []proxy.Timeline{tc.tl}})
			if err != nil {
				t.Fatal(err)
			}
			a := atts[0]
			if !a.Timeline || len(a.Invalid) != 0 {
				t.Errorf("timeline %t invalid %v", a.Timeline, a.Invalid)
			}
			for k, v := range tc.want {
				if math.Abs(a.Parts[k]-v) > 1e-9 {
					t.Errorf("%s = %v, want %v (planted)", k, a.Parts[k], v)
				}
			}
		})
	}
}

// TestAttributeVLLMsOwnExample plants vLLM's unit-test timestamps
// (tests for build_per_request_timing_metrics: queued 1.0 s, scheduled
// 1.5 s, first token 2.0 s, last 3.0 s, 10 tokens → time_to_first_token_ms
// 500, queue_time_ms 500, generation_time_ms 1000, mean_itl_ms 1000/9,
// tokens_per_second 10/1.5) behind a client that sent at 101 ms (scheduled
// 100), reached the engine at 103 and read the first token at 1104: the
// queue is 500, the prefill 500, the client 4. Reading vLLM's TTFT as from
// arrival (TTFT − queue) would give a prefill of 0 and a client part of
// 504.
func TestAttributeVLLMsOwnExample(t *testing.T) {
	rq := schema.RequestRecord{ID: 8, RequestID: "r8", Outcome: "ok", ScheduledMs: 100, SentMs: 101, DispatchLagMs: 1,
		Sent: schema.Stamp{MonoNs: 1_000_000_000}, FirstMs: f(1104), FinishMs: f(2104), TTFTMs: f(1004), OutputTokens: 10,
		EngineMetrics: json.RawMessage(`{"time_to_first_token_ms":500.0,"generation_time_ms":1000.0,"queue_time_ms":500.0,` +
			`"mean_itl_ms":111.11111111111111,"tokens_per_second":6.666666666666667}`)}
	rec := &schema.Record{Kind: "device", TimeScale: 1, Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{{
		Level: slo.Level{OfferedQPS: 1}, Verdict: validVerdict(), Requests: []schema.RequestRecord{rq}}}}}}
	atts, err := Attribute(rec, Evidence{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]float64{Queueing: 500, Prefill: 500, Client: 4, Decode: 1000} {
		if math.Abs(atts[0].Parts[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, atts[0].Parts[k], v)
		}
	}
	d := Summarize(rec.Kind, atts, slo.Default, nil)
	if src := d.Levels[0].Sources; src[SourceEngineMetrics] != 1 || src[SourceTimeline] != 0 {
		t.Errorf("sources %v: want the request counted under engine metrics only", src)
	}
}

// The TTFT attributed is the record's, from the scheduled send: never the
// one from the actual send.
func TestAttributeReadsTTFTFromTheScheduledSend(t *testing.T) {
	r := record(`{"queue_time_ms":10,"time_to_first_token_ms":30}`)
	rq := &r.Runs[0].Levels[0].Requests[1]
	rq.TTFTMs, rq.TTFTFromSentMs = f(50), f(49)
	atts, err := Attribute(r, Evidence{})
	if err != nil {
		t.Fatal(err)
	}
	if atts[0].TTFTMs != 50 || atts[0].Parts[Client] != 10 {
		t.Errorf("TTFT %v client %v, want 50 and 10 (1 ms dispatch lag + 9 ms hops)", atts[0].TTFTMs, atts[0].Parts[Client])
	}
}

// A level's verdict travels with its attributions.
func TestAttributeCarriesTheLevelVerdict(t *testing.T) {
	r := record("")
	r.Runs[0].Levels[0].Verdict = schema.Verdict{Reasons: []schema.Reason{{Code: schema.ReasonWarmStart}, {Code: schema.ReasonClientBound}}}
	atts, _ := Attribute(r, Evidence{})
	if got := strings.Join(atts[0].Invalid, ","); got != "client_bound,warm_start" {
		t.Errorf("invalid %q", got)
	}
	r.Runs[0].Levels[0].Verdict = schema.Verdict{} // never judged
	if atts, _ := Attribute(r, Evidence{}); strings.Join(atts[0].Invalid, ",") != unjudged {
		t.Errorf("unjudged level: invalid %v", atts[0].Invalid)
	}
}

func TestParseTimelinesFormats(t *testing.T) {
	one := `{"request_id":"a","outcome":"success"}`
	for _, doc := range []string{`{"timelines":[` + one + `],"next":1}`, `[` + one + `]`, one + "\n" + `{"request_id":"b"}`} {
		tls, err := ParseTimelines([]byte(doc))
		if err != nil || len(tls) == 0 || tls[0].RequestID != "a" {
			t.Errorf("%s: %v %v", doc, tls, err)
		}
	}
	if _, err := ParseTimelines([]byte("  ")); err == nil {
		t.Error("empty accepted")
	}
}

// TestKernelSplitChoosesAndStatesUncertainty: one request, its exchange on
// the engine's API socket and the engine's steps, no engine metrics. With
// the token budget the rules put its 100 uncached tokens in three steps
// (48, 48, 4) from the first step after its receipt; without, the budget
// is inferred and the uncertainty spans the budgets that fit as well. Auto takes the kernel split, engine evidence never does, and
// kernel evidence takes it over the engine's metrics, keeping them beside.
func TestKernelSplitChoosesAndStatesUncertainty(t *testing.T) {
	ms := func(m float64) int64 { return 1_000_000_000 + int64((m-101)*1e6) } // record()'s clock: 101 ms is mono 1e9
	withTokens := func(rec *schema.Record) *schema.Record {
		rq := &rec.Runs[0].Levels[0].Requests[1]
		rq.InputTokens, rq.PromptTokens, rq.CachedTokens = 100, new(int), new(int)
		*rq.PromptTokens = 100
		return rec
	}
	ev := Evidence{Head: HeadWithFirstToken, TokenBudget: 48,
		Exchanges: []KernelExchange{{PID: 7, Local: "127.0.0.1:8000", Remote: "127.0.0.1:5000",
			ReceivedNs: ms(104), FirstSendNs: ms(144), LastSendNs: ms(244), Sends: 127}},
		Steps: map[int][]EngineStep{7: {{ms(100), ms(105)}, {ms(110), ms(120)}, {ms(120), ms(130)}, {ms(130), ms(140)}}}}
	check := func(name string, a Attribution, splitBy string, want map[string]float64, unc map[string]float64) {
		t.Helper()
		if a.SplitBy != splitBy || a.Kernel == nil {
			t.Fatalf("%s: split by %q (kernel split %v), want %q", name, a.SplitBy, a.Kernel != nil, splitBy)
		}
		for k, v := range want {
			if math.Abs(a.Parts[k]-v) > 1e-9 {
				t.Errorf("%s: %s = %v, want %v", name, k, a.Parts[k], v)
			}
		}
		for k, v := range unc {
			if math.Abs(a.Kernel.UncertaintyMs[k]-v) > 1e-9 {
				t.Errorf("%s: %s uncertainty %v, want %v", name, k, a.Kernel.UncertaintyMs[k], v)
			}
		}
	}
	atts, err := Attribute(withTokens(record("")), ev)
	if err != nil {
		t.Fatal(err)
	}
	// TTFT 50 = queue 6 (104 → 110) + prefill 30 (110 → 140) + client 14.
	check("budget 48", atts[0], "kernel", map[string]float64{Queueing: 6, Prefill: 30, Decode: 100, Client: 14},
		map[string]float64{Queueing: 0, Prefill: 4, Decode: 0})
	if atts[0].Kernel.Steps != 3 {
		t.Errorf("budget 48: %d prefill steps, want 3", atts[0].Kernel.Steps)
	}
	var b strings.Builder
	if err := Summarize("emulated", atts, slo.Default, nil).WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	if want := "mean queueing 6.00, prefill 30.00 ±4.00, decode 100.00 ms"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}

	// Unknown, the budget is inferred: of the candidates (powers of two,
	// or none) 16 and 32 cannot finish it by its send, 64 finishes it in
	// two steps (120 → 140), 128 and up in one (130 → 140), each as well
	// as the other: the smallest is taken, the other's first step its
	// uncertainty.
	ev.TokenBudget = 0
	atts, _ = Attribute(withTokens(record("")), ev)
	check("budget unknown", atts[0], "kernel", map[string]float64{Queueing: 16, Prefill: 20, Client: 14},
		map[string]float64{Queueing: 10, Prefill: 14})
	if cf := atts[0].Kernel.ChunksFrom; !strings.Contains(cf, "token budget 64, inferred") {
		t.Errorf("budget unknown: chunks from %q, want the inferred budget stated", cf)
	}

	ev.TokenBudget, ev.Source = 48, EvidenceEngine
	atts, _ = Attribute(withTokens(record("")), ev)
	check("engine evidence", atts[0], "client", map[string]float64{Prefill: 49}, nil)

	ev.Source = EvidenceKernel
	atts, _ = Attribute(withTokens(record(`{"queue_time_ms":10,"time_to_first_token_ms":30,"generation_time_ms":100}`)), ev)
	check("kernel evidence", atts[0], "kernel", map[string]float64{Queueing: 6, Prefill: 30}, nil)
	if e := atts[0].EngineParts; e[Queueing] != 10 || e[Prefill] != 30 {
		t.Errorf("kernel evidence: the engine's split kept beside is %v, want queueing 10, prefill 30", e)
	}
	if kept, left := KernelOnly(atts); len(kept) != 1 || left != 0 {
		t.Errorf("KernelOnly: %d kept, %d left out", len(kept), left)
	}

	// vLLM: the API server (7) answers, a worker (9) of its engine core
	// (8) launches the CUDA work. The same split, from the worker's steps.
	ev.Steps = map[int][]EngineStep{9: ev.Steps[7]}
	ev.Processes = []KernelProcess{{PID: 7, PPID: 1, RootPID: 7}, {PID: 8, PPID: 7, RootPID: 7}, {PID: 9, PPID: 8, RootPID: 7}}
	atts, _ = Attribute(withTokens(record("")), ev)
	check("steps in a worker process", atts[0], "kernel", map[string]float64{Queueing: 6, Prefill: 30, Decode: 100}, nil)
	if src := atts[0].Sources["kernel_split"]; !strings.Contains(src, "API server pid 7: steps of pid 9 (descendant)") {
		t.Errorf("kernel split's source %q does not say whose steps", src)
	}
	ev.Processes = nil // the tree unknown: the worker's steps are nobody's
	if atts, _ = Attribute(withTokens(record("")), ev); atts[0].Kernel != nil {
		t.Errorf("without the process tree: kernel split %+v, want none", atts[0].Kernel)
	}
	ev.StepPIDs = map[int]int{7: 9}
	atts, _ = Attribute(withTokens(record("")), ev)
	check("--step-pid", atts[0], "kernel", map[string]float64{Queueing: 6, Prefill: 30, Decode: 100}, nil)
	if ev.StepPIDs = map[int]int{7: 8}; true {
		if _, err := Attribute(withTokens(record("")), ev); err == nil || !strings.Contains(err.Error(), "--step-pid 7=8: the snapshot has no CUDA steps of pid 8") {
			t.Errorf("--step-pid to a process without steps: %v", err)
		}
	}
}

// TestStepOwners: each API server's exchanges are split by the nearest
// stepping process in the traced tree, as a daemon snapshot gives it.
func TestStepOwners(t *testing.T) {
	snap := []byte(`{"schema_version":1,"clock":"CLOCK_MONOTONIC",
"exchanges":[` + strings.Join([]string{
		`{"pid":100,"request_start_monotonic_ns":1}`, // vLLM, TP 2: API server → engine core → two workers
		`{"pid":200,"request_start_monotonic_ns":2}`, // vLLM, TP 1: the engine core steps; its API server's parent is a launcher
		`{"pid":300,"request_start_monotonic_ns":3}`, // hone sim serve: one process
		`{"pid":400,"request_start_monotonic_ns":4}`, // an API server whose engine is its sibling under the launcher
		`{"pid":500,"request_start_monotonic_ns":5}`, // two engines behind one API server (data parallel)
		`{"pid":600,"request_start_monotonic_ns":6}`, // a parent loop (outside input), no steps
		`{"pid":700,"request_start_monotonic_ns":7}`, // not traced at all
	}, ",") + `],
"steps":[` + strings.Join(stepsJSON(map[int]int{102: 40, 103: 39, 201: 20, 300: 5, 51: 8, 501: 30, 502: 10}), ",") + `],
"targets":[` + strings.Join([]string{
		`{"pid":100,"ppid":1,"root_pid":100,"comm":"vllm"}`, `{"pid":101,"ppid":100,"root_pid":100,"comm":"EngineCore_DP0"}`,
		`{"pid":102,"ppid":101,"root_pid":100,"comm":"VllmWorker-0"}`, `{"pid":103,"ppid":101,"root_pid":100,"comm":"VllmWorker-1"}`,
		`{"pid":104,"ppid":100,"root_pid":100,"comm":"resource_tracker"}`,
		`{"pid":50,"ppid":1,"root_pid":50,"comm":"launcher"}`, `{"pid":200,"ppid":50,"root_pid":50,"comm":"vllm"}`,
		`{"pid":201,"ppid":200,"root_pid":50,"comm":"EngineCore_DP0"}`,
		`{"pid":400,"ppid":50,"root_pid":50,"comm":"vllm"}`, `{"pid":51,"ppid":50,"root_pid":50,"comm":"EngineCore_DP0"}`,
		`{"pid":300,"ppid":1,"root_pid":300,"comm":"hone"}`,
		`{"pid":500,"ppid":1,"root_pid":500,"comm":"vllm"}`, `{"pid":501,"ppid":500,"root_pid":500,"comm":"EngineCore_DP0"}`,
		`{"pid":502,"ppid":500,"root_pid":500,"comm":"EngineCore_DP1"}`,
		`{"pid":600,"ppid":601,"root_pid":600},{"pid":601,"ppid":600,"root_pid":600}`,
	}, ",") + `]}`)
	k, err := ParseKernelEvidence(snap)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := StepOwners(k.Exchanges, k.Steps, k.Processes, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]StepOwner{
		100: {APIPID: 100, StepPID: 102, How: "descendant", Others: []int{103}, Lockstep: true},
		200: {APIPID: 200, StepPID: 201, How: "descendant", Lockstep: true},
		300: {APIPID: 300, StepPID: 300, How: "same process"},
		400: {APIPID: 400, StepPID: 51, How: "relative", Lockstep: true}, // not 201: that is API server 200's
		500: {APIPID: 500, StepPID: 501, How: "descendant", Others: []int{502}},
	}
	if len(owners) != len(want) {
		t.Errorf("owners %+v, want %d (600, 700: none)", owners, len(want))
	}
	for a, w := range want {
		o := owners[a]
		if o.StepPID != w.StepPID || o.How != w.How || o.Lockstep != w.Lockstep || fmt.Sprint(o.Others) != fmt.Sprint(w.Others) {
			t.Errorf("API server %d: %+v, want %+v", a, o, w)
		}
	}
	if s := owners[500].String(); !strings.Contains(s, "not in lockstep") || !strings.Contains(s, "--step-pid 500=PID") {
		t.Errorf("data-parallel owner says %q: want the ambiguity and how to choose", s)
	}
	if s := owners[100].String(); !strings.Contains(s, "tensor-parallel ranks in lockstep") {
		t.Errorf("TP owner says %q", s)
	}
	owners, err = StepOwners(k.Exchanges, k.Steps, k.Processes, map[int]int{500: 502})
	if err != nil || owners[500].StepPID != 502 || owners[500].How != "--step-pid" {
		t.Errorf("--step-pid 500=502: %+v, %v", owners[500], err)
	}
	if _, err = StepOwners(k.Exchanges, k.Steps, k.Processes, map[int]int{500: 104}); err == nil {
		t.Error("--step-pid to a process without steps: no error")
	}
}

// stepsJSON gives n one-millisecond snapshot steps of each pid.
func stepsJSON(n map[int]int) []string {
	var out []string
	for pid, k := range n {
		for i := range k {
			out = append(out, fmt.Sprintf(`{"pid":%d,"start_monotonic_ns":%d,"end_monotonic_ns":%d}`, pid, i*1_000_000, i*1_000_000+900_000))
		}
	}
	return out
}

// TestMatchWindows: greedy by gap alone gives request A the exchange that
// only B can have (received after B was sent); the augmenting pass moves
// A to its other fit so both join. A window nothing fits gets -1, and a
// whole window takes only an exchange answered inside it.
func TestMatchWindows(t *testing.T) {
	xs := []KernelExchange{
		{ReceivedNs: 5, FirstSendNs: 50, LastSendNs: 60},  // A's own
		{ReceivedNs: 20, FirstSendNs: 90, LastSendNs: 99}, // B's own
		{ReceivedNs: 200, FirstSendNs: 210, LastSendNs: 400},
	}
	wins := []window{{span: [2]int64{0, 95}}, {span: [2]int64{15, 92}}, {span: [2]int64{300, 310}}, {span: [2]int64{190, 300}, whole: true}}
	used := make([]bool, len(xs))
	got := matchWindows(xs, HeadWithFirstToken, wins, []int{0, 1, 2, 3}, used)
	if want := []int{0, 1, -1, -1}; !slices.Equal(got, want) {
		t.Errorf("matched %v, want %v", got, want)
	}
	if !used[0] || !used[1] || used[2] {
		t.Errorf("used %v: want the two matched only", used)
	}
	// Used exchanges stay out of a later match.
	if got := matchWindows(xs, HeadWithFirstToken, []window{{span: [2]int64{0, 500}}}, []int{0}, used); got[0] != 2 {
		t.Errorf("second match took %d, want the unused exchange 2", got[0])
	}
}
