package diagnose

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/replay"
)

func f(x float64) *float64 { return &x }

// record builds a one-level record with one measured request: scheduled at
// 100 ms, sent at 101 ms (mono 1e9 ns), first token at 150 ms, last at 250.
func record(metrics string) *replay.Record {
	rq := replay.RequestRecord{ID: 8, RequestID: "r8", Outcome: "ok", ScheduledMs: 100, SentMs: 101,
		Sent: replay.Stamp{MonoNs: 1_000_000_000}, FirstMs: f(150), FinishMs: f(250), OutputTokens: 128}
	if metrics != "" {
		rq.EngineMetrics = json.RawMessage(metrics)
	}
	warm := replay.RequestRecord{ID: 0, RequestID: "r0", Outcome: "ok", FirstMs: f(1), FinishMs: f(2)}
	return &replay.Record{Kind: "emulated", TimeScale: 1, Runs: []replay.RunRecord{{Run: 1, Levels: []replay.LevelRecord{{
		Level: replay.Level{OfferedQPS: 4}, Requests: []replay.RequestRecord{warm, rq}}}}}}
}

func stamp(ms float64) proxy.Stamp { return proxy.Stamp{MonoNs: 1_000_000_000 + int64((ms-101)*1e6)} }

func TestAttributeWithoutProxy(t *testing.T) {
	atts, err := Attribute(record(`{"queue_time_ms":10,"time_to_first_token_ms":40,"mean_itl_ms":0.8}`), Evidence{})
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
	if a.TTFTMs != 50 || a.E2EMs != 150 {
		t.Errorf("TTFT %v E2E %v", a.TTFTMs, a.E2EMs)
	}
	// No engine metrics: the whole engine span is prefill, and the source says so.
	atts, _ = Attribute(record(""), Evidence{})
	if a := atts[0]; a.Parts[Prefill] != 49 || !strings.Contains(a.Sources[Prefill], "--enable-per-request-metrics") {
		t.Errorf("no metrics: prefill %v (%s)", a.Parts[Prefill], a.Sources[Prefill])
	}
}

func TestAttributeDisaggregatedWithRetryAndFallback(t *testing.T) {
	ans := func(ms float64) *proxy.Stamp { s := stamp(ms); return &s }
	tl := proxy.Timeline{RequestID: "r8", Received: stamp(102), Retries: 1, Outcome: proxy.OutcomeSuccess,
		Prefill: []proxy.Leg{
			{Worker: "p0", Sent: stamp(103), Answered: ans(108), Status: 503, Error: "status 503"},
			{Worker: "p1", Sent: stamp(109), Answered: ans(125), Status: 200,
				EngineMetrics: json.RawMessage(`{"queue_time_ms":4,"time_to_first_token_ms":14}`)}},
		Decode: &proxy.Leg{Worker: "d0", Sent: stamp(126), Answered: ans(127), Status: 200}}
	atts, err := Attribute(record(`{"queue_time_ms":2,"time_to_first_token_ms":20,"mean_itl_ms":1}`), Evidence{Timelines: []proxy.Timeline{tl}})
	if err != nil {
		t.Fatal(err)
	}
	a := atts[0]
	// Queueing: the failed leg (109−103 = 6) + the prefill engine's queue 4.
	// Prefill 10. Transfer: decode TTFT 20 − queue 2 − one ITL 1 = 17.
	// Decode queue 2. Client: the rest of TTFT 50.
	want := map[string]float64{Queueing: 10, Prefill: 10, Transfer: 17, DecodeQ: 2, Client: 50 - 10 - 10 - 17 - 2}
	for k, v := range want {
		if math.Abs(a.Parts[k]-v) > 1e-6 {
			t.Errorf("%s = %v, want %v", k, a.Parts[k], v)
		}
	}
	if a.Retries != 1 {
		t.Errorf("retries %d", a.Retries)
	}
	// A fallback: the decode engine prefilled; nothing is transfer.
	tl.Outcome = proxy.OutcomeFallback
	atts, _ = Attribute(record(`{"queue_time_ms":2,"time_to_first_token_ms":20,"mean_itl_ms":1}`), Evidence{Timelines: []proxy.Timeline{tl}})
	if a := atts[0]; !a.Fallback || a.Parts[Transfer] != 0 || !strings.Contains(a.Sources[Prefill], "fallback") {
		t.Errorf("fallback: %+v", a)
	}
}

func TestSummarizeNamesTheGrowingPart(t *testing.T) {
	mk := func(q float64, id int, queue float64) Attribution {
		return Attribution{OfferedQPS: q, ID: id, RequestID: "x", TTFTMs: 20 + queue,
			Parts: map[string]float64{Client: 2, Prefill: 18, Queueing: queue, Decode: 100}}
	}
	var atts []Attribution
	for i := 0; i < 20; i++ {
		atts = append(atts, mk(1, i, 0), mk(16, i, float64(i*10)))
	}
	d := Summarize("emulated", atts, replay.DefaultSLO, nil)
	if d.Bottleneck != Queueing || len(d.Proposals) == 0 || !strings.Contains(d.Proposals[0], "disaggregate") {
		t.Errorf("bottleneck %q proposals %v: %s", d.Bottleneck, d.Proposals, d.Summary)
	}
	// TTFT over the SLO already at the lowest load: the dominant part.
	slow := []Attribution{{OfferedQPS: 1, TTFTMs: 3000, Parts: map[string]float64{Prefill: 2900, Client: 100}}}
	if d := Summarize("emulated", slow, replay.DefaultSLO, nil); d.Bottleneck != Prefill {
		t.Errorf("slow prefill: %q", d.Bottleneck)
	}
	// TPOT over its SLO: decode.
	if d := Summarize("emulated", slow, replay.DefaultSLO, map[float64]float64{1: 80}); d.Bottleneck != Decode {
		t.Errorf("slow decode: %q", d.Bottleneck)
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
