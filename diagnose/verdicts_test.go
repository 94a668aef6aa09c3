package diagnose

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// queuedDecodeRecord is issue 43's queue on a disaggregated decode
// worker, one request, time scale 1: scheduled 100, sent 101; the proxy
// has it at 102, sends the prefill leg at 103 (the prefill worker queues
// 1 ms and prefills 5), has the answer at 110 and sends the decode leg at
// 111. The decode worker's pull ends 1.65 ms after it took the request
// in; it then waits 1427.35 ms for a seat (max-num-seqs) and takes a 4 ms
// step: queue_time_ms 1429, time_to_first_token_ms 4, the first token at
// the client at 1545 (TTFT 1445).
func queuedDecodeRecord(metrics string) (*schema.Record, proxy.Timeline) {
	rq := schema.RequestRecord{ID: replay.Sessions, RequestID: "r", Outcome: "ok", ScheduledMs: 100, SentMs: 101,
		Sent: schema.Stamp{MonoNs: stamp(101).MonoNs}, FirstMs: f(1545), FinishMs: f(1645), TTFTMs: f(1445), OutputTokens: 101,
		EngineMetrics: json.RawMessage(metrics)}
	rec := &schema.Record{Kind: "emulated", TimeScale: 1, Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{{
		Level: slo.Level{OfferedQPS: 4}, Verdict: validVerdict(), Requests: []schema.RequestRecord{rq}}}}}}
	at := func(ms float64) *proxy.Stamp { s := stamp(ms); return &s }
	tl := proxy.Timeline{RequestID: "r", Received: stamp(102), Outcome: proxy.OutcomeSuccess,
		Prefill: []proxy.Leg{{Worker: "p0", Sent: stamp(103), Answered: at(110), Status: 200,
			EngineMetrics: json.RawMessage(`{"queue_time_ms":1,"time_to_first_token_ms":5}`)}},
		Decode: &proxy.Leg{Worker: "d0", Sent: stamp(111), Answered: at(1544), Status: 200}}
	return rec, tl
}

// The decode worker's queue after the KV is decode_queue, not transfer,
// wherever the KV pull's own timing is known: the engine's statement of
// its pull (kv_transfer_time_ms) or the daemon's KV connection. Before,
// transfer held the whole queue_time_ms (1429) and decode_queue the step
// (4), and a queue for a seat was named "transfer".
func TestDecodeWorkerQueueIsNotTransfer(t *testing.T) {
	check := func(name string, a Attribution, want map[string]float64) {
		t.Helper()
		for k, v := range want {
			if math.Abs(a.Parts[k]-v) > 1e-6 {
				t.Errorf("%s: %s = %v, want %v", name, k, a.Parts[k], v)
			}
		}
	}
	rec, tl := queuedDecodeRecord(`{"queue_time_ms":1429,"time_to_first_token_ms":4,"generation_time_ms":100,"kv_transfer_time_ms":1.65}`)
	atts, err := Attribute(rec, Evidence{Timelines: []proxy.Timeline{tl}})
	if err != nil {
		t.Fatal(err)
	}
	// Client: 1 dispatch + 1 hop + 1 proxy + (110−103−6) prefill hops + 1
	// hand-off + decode hops and delivery: 1445 − 1 − 5 − 1433 = 6.
	check("kv_transfer_time_ms", atts[0], map[string]float64{Queueing: 1, Prefill: 5, Transfer: 1.65, DecodeQ: 1427.35 + 4, Client: 6})

	// vLLM: no kv_transfer_time_ms. The daemon saw the pull's bytes from
	// 111.6 to 113.25: 2.25 ms after the decode leg was sent.
	rec, tl = queuedDecodeRecord(`{"queue_time_ms":1429,"time_to_first_token_ms":4,"generation_time_ms":100}`)
	kv := []KVConn{{RXBytes: 1 << 20, FirstNs: stamp(111.6).MonoNs, LastNs: stamp(113.25).MonoNs}}
	atts, err = Attribute(rec, Evidence{Timelines: []proxy.Timeline{tl}, KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	check("daemon KV connection", atts[0], map[string]float64{Transfer: 2.25, DecodeQ: 1429 - 2.25 + 4, Client: 6})

	// Neither: the queue stays inside transfer, and the source says why.
	atts, _ = Attribute(rec, Evidence{Timelines: []proxy.Timeline{tl}})
	check("no KV timing", atts[0], map[string]float64{Transfer: 1429, DecodeQ: 4})
}

// scenario finds a planted scenario by name.
func scenario(t *testing.T, name string) plantedScenario {
	t.Helper()
	for _, sc := range plantedScenarios {
		if sc.name == name {
			return sc
		}
	}
	t.Fatalf("no planted scenario %q", name)
	return plantedScenario{}
}

// Issue 43's quiet control: the queue's tail moves by 2.2 ms under a
// 2,000 ms SLO. The growth bar was 10% of the lowest level's tail (1.2
// ms) and named queueing; it is now at least MaterialFraction of the SLO
// (100 ms): nothing is named, in every resample.
func TestImmaterialMoveNamesNothing(t *testing.T) {
	d := scenario(t, "quiet colocated control").diagnose(t)
	// The tail at 16 req/s: requests 38, 39, 37 and 35 by TTFT (prefill's
	// 0.1 ms steps reorder them), queues 2.58, 2.64, 2.52, 2.40; at 1
	// req/s every queue is 0.3.
	if g := d.Growth[Queueing]; math.Abs(g-2.235) > 1e-9 {
		t.Errorf("queueing growth %v, want 2.235 (planted)", g)
	}
	if d.Bottleneck != "none" || d.Confidence != 1 || !strings.Contains(d.Summary, "100 ms (5% of the TTFT SLO)") {
		t.Errorf("bottleneck %q confidence %v: %s", d.Bottleneck, d.Confidence, d.Summary)
	}
}

// Issue 43's stall: a 3 s freeze 1 s into the 16 req/s level of a quiet
// engine. Its TPOT check named decode before; the requests in flight
// across the freeze are an outlier set, and without them nothing is
// named: stall, proposing no capacity change.
func TestStallIsAnOutlierSet(t *testing.T) {
	d := scenario(t, "stall").diagnose(t)
	if d.Bottleneck != Stall {
		t.Fatalf("bottleneck %q: %s", d.Bottleneck, d.Summary)
	}
	// The last chunk before the freeze: 997.5 + 0.5 (request 15, sent at
	// 938.5, first token at 950, then every 10 ms); the first after it:
	// 1000.5 shifted by 3000 (request 15's next chunk). 32 of the 40
	// requests were in flight across it: 32/40 = 0.8.
	if want := "a single 3002 ms freeze at 16 req/s (run 1, 998–4000 ms into the level)"; !strings.Contains(d.Summary, want) {
		t.Errorf("summary %q, want %q", d.Summary, want)
	}
	if d.Confidence != 0.8 || !strings.Contains(d.Summary, "32 requests were in flight") {
		t.Errorf("confidence %v: %s", d.Confidence, d.Summary)
	}
	for _, p := range d.Proposals {
		if strings.Contains(p, "decode capacity") || strings.Contains(p, "max-num-seqs") {
			t.Errorf("a capacity change for a freeze: %q", p)
		}
	}
	// The same engine without the freeze: none.
	sc := scenario(t, "stall")
	sc.freeze = [2]float64{}
	if d := sc.diagnose(t); d.Bottleneck != "none" {
		t.Errorf("no freeze: bottleneck %q: %s", d.Bottleneck, d.Summary)
	}
}

// Proposals follow the config: a queue on an engine that streamed
// max-num-seqs requests at once proposes raising it, first; the same
// queue with seats to spare (or the knob unknown) does not lead with it.
func TestProposalsFollowMaxNumSeqs(t *testing.T) {
	sc := scenario(t, "decode-worker queue")
	d := sc.diagnose(t)
	// 16 req/s: first tokens 102.5 ms apart (sent 62.5 ms apart, each
	// queued 40 ms longer than the one before), each streaming 49 × 20 ms:
	// ten at once.
	if d.PeakInFlight != 10 || d.MaxNumSeqs != 2 {
		t.Errorf("peak in flight %d, max-num-seqs %d: want 10 and 2", d.PeakInFlight, d.MaxNumSeqs)
	}
	want := "raise max-num-seqs (now 2; up to 10 requests streamed at once: the queue waits for a seat)"
	if len(d.Proposals) == 0 || d.Proposals[0] != want {
		t.Errorf("proposals %q, want %q first", d.Proposals, want)
	}
	sc.knobs.MaxNumSeqs = 64
	if d := sc.diagnose(t); len(d.Proposals) == 0 || strings.Contains(d.Proposals[0], "max-num-seqs") {
		t.Errorf("64 seats, 10 used: proposals %q", d.Proposals)
	}
	q := scenario(t, "colocated queueing")
	if d := q.diagnose(t); d.Bottleneck != Queueing || len(d.Proposals) == 0 || !strings.HasPrefix(d.Proposals[0], "raise max-num-seqs (now 4;") {
		t.Errorf("queueing at max-num-seqs: %q %q", d.Bottleneck, d.Proposals)
	}
}

// The confidence is the verdict's own, not the intervals' level: the
// share of resamples that name the same part — every one for a clean
// verdict, fewer for two parts that grow alike.
func TestConfidenceIsPerVerdict(t *testing.T) {
	d := scenario(t, "decode-worker queue").diagnose(t)
	if d.Confidence != 1 || d.IntervalLevel != Confidence {
		t.Errorf("clean verdict: confidence %v interval level %v", d.Confidence, d.IntervalLevel)
	}
	// Two parts growing alike (TestSummarizeSaysWhenUncertain's).
	rng := rand.New(rand.NewPCG(7, 7))
	atts := levelAtts(1, 40, func(int) map[string]float64 { return map[string]float64{Client: 2, Prefill: 10, Queueing: 1} })
	atts = append(atts, levelAtts(16, 40, func(int) map[string]float64 {
		return map[string]float64{Client: 2, Prefill: 10 + 60*rng.Float64(), Queueing: 1 + 60*rng.Float64()}
	})...)
	d = Summarize("emulated", atts, tight, nil)
	// The named part has the larger growth in 948 of the 1000 seeded
	// resamples, though the runner-up's interval reaches it.
	if d.Uncertain == "" || d.Confidence != 0.948 {
		t.Errorf("two parts alike: %s, confidence %v", d.Label(), d.Confidence)
	}
	var b strings.Builder
	d.WriteTable(&b, false)
	if !strings.Contains(b.String(), fmt.Sprintf("confidence in the verdict: %.0f%%", 100*d.Confidence)) {
		t.Errorf("table does not state the verdict's confidence:\n%s", b.String())
	}
}

// Behind vLLM with nothing timing the KV pulls, the decode worker's queue
// cannot be told from the KV wait: the verdict is transfer, and says so,
// and the first proposal is to time the pulls — not a faster connector.
func TestUntimedKVWaitSaysSo(t *testing.T) {
	sc := scenario(t, "decode-worker queue")
	sc.kvTiming = "none"
	d := sc.diagnose(t)
	if d.Bottleneck != Transfer || !strings.Contains(d.Summary, "for 120 of 120 disaggregated requests nothing timed the KV pull") ||
		len(d.Proposals) == 0 || !strings.HasPrefix(d.Proposals[0], "time the KV pulls") {
		t.Errorf("bottleneck %q proposals %q: %s", d.Bottleneck, d.Proposals, d.Summary)
	}
}

// The growth bar's SLO floor covers the client-bound bound, so a client
// part that clears the bar is past that bound (client-bound), and the
// host's cost rising inside the bound never clears it (decideValid
// relies on it).
func TestMaterialBarCoversTheClientBound(t *testing.T) {
	if MaterialFraction < schema.ClientBoundSLOFraction {
		t.Errorf("MaterialFraction %g < replay.ClientBoundSLOFraction %g", MaterialFraction, schema.ClientBoundSLOFraction)
	}
}
