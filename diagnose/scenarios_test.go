package diagnose

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// planted is what one request's engines do, model ms: the prefill (or
// colocated) engine's queue and prefill, the decode worker's KV pull,
// its queue after the KV and its first step, and the time per output
// token.
type planted struct {
	queue, prefill, pull, decodeQueue, step, itl float64
}

// plantedScenario is a held-back scenario: a record built request by
// request from planted engine timings (what vLLM's per-request metrics,
// hone's emulator's kv_transfer_time_ms and the proxy's timeline would
// say of them), so the verdict is read from the evidence as
// `hone diagnose report` reads it.
type plantedScenario struct {
	name   string
	disagg bool
	parts  func(q float64, i int) planted
	freeze [2]float64 // at 16 req/s: the engine stops from freeze[0] for freeze[1] ms (0: never)
	knobs  Knobs
	// kvTiming: what times a disaggregated request's KV pull — "" the
	// decode worker's kv_transfer_time_ms (hone's emulator), "daemon" the
	// daemon's KV connections (vLLM with a snapshot), "none" nothing
	// (vLLM alone).
	kvTiming string
	want     string
	wantNot  string // a proposal the verdict must not make
	propose  string // the first proposal's start, when it matters
}

const (
	plantedRequests = 40
	plantedOutput   = 50 // tokens per answer
)

var plantedLevels = []float64{1, 4, 16}

// build makes the scenario's record, proxy timelines and daemon KV
// connections: requests scheduled every 1000/q ms, sent 1 ms late; hops
// of 0.5 ms. Each level's clock starts 100 s after the previous one's.
func (sc plantedScenario) build() (*schema.Record, []proxy.Timeline, []KVConn) {
	rec := &schema.Record{Kind: "emulated", TimeScale: 1, SLO: slo.Default}
	run := schema.RunRecord{}
	var tls []proxy.Timeline
	var kv []KVConn
	for li, q := range plantedLevels {
		ns := func(ms float64) int64 { return int64(li+1)*100_000_000_000 + int64(ms*1e6) }
		st := func(ms float64) proxy.Stamp { return proxy.Stamp{MonoNs: ns(ms)} }
		lvl := schema.LevelRecord{Level: slo.Level{OfferedQPS: q}, Verdict: validVerdict()}
		for i := range plantedRequests {
			p := sc.parts(q, i)
			sched := float64(i) * 1000 / q
			sent := sched + 1
			id := fmt.Sprintf("%s-%g-%d", sc.name, q, i)
			var tl proxy.Timeline
			engineIn := sent + 0.5 // the engine (decode worker) took it in
			if sc.disagg {
				pa := st(sent + 2 + p.queue + p.prefill + 1)
				tl = proxy.Timeline{RequestID: id, Received: st(sent + 0.5), Outcome: proxy.OutcomeSuccess,
					Prefill: []proxy.Leg{{Worker: "p0", Sent: st(sent + 1), Answered: &pa, Status: 200,
						EngineMetrics: json.RawMessage(fmt.Sprintf(`{"queue_time_ms":%g,"time_to_first_token_ms":%g}`, p.queue, p.prefill))}},
					Decode: &proxy.Leg{Worker: "d0", Sent: st(sent + 3 + p.queue + p.prefill)}}
				engineIn = sent + 3.5 + p.queue + p.prefill
			}
			wait := p.queue // receipt → first scheduled
			run1 := p.prefill
			if sc.disagg {
				wait, run1 = p.pull+p.decodeQueue, p.step
			}
			first := engineIn + wait + run1 // at the engine
			chunks := make([]float64, plantedOutput)
			for k := range chunks {
				chunks[k] = first + 0.5 + float64(k)*p.itl
			}
			if q == 16 && sc.freeze[1] > 0 {
				for k, c := range chunks {
					if c >= sc.freeze[0] {
						chunks[k] = c + sc.freeze[1]
					}
				}
				// The engine's own figures carry the freeze where it fell.
				if d := chunks[0] - 0.5 - first; d > 0 {
					wait += d
				}
			}
			firstAt, lastAt := chunks[0], chunks[len(chunks)-1]
			gen := lastAt - firstAt
			m := map[string]float64{"queue_time_ms": wait, "time_to_first_token_ms": run1, "generation_time_ms": gen}
			switch {
			case !sc.disagg || sc.kvTiming == "none":
			case sc.kvTiming == "daemon":
				kv = append(kv, KVConn{RXBytes: 1 << 20, FirstNs: ns(engineIn + 0.1), LastNs: ns(engineIn + p.pull)})
			default:
				m["kv_transfer_time_ms"] = p.pull
			}
			mj, _ := json.Marshal(m)
			rq := schema.RequestRecord{ID: replay.Sessions + i, RequestID: id, Outcome: "ok", ScheduledMs: sched, SentMs: sent,
				Sent: schema.Stamp{MonoNs: ns(sent)}, FirstMs: f(firstAt), FinishMs: f(lastAt), TTFTMs: f(firstAt - sched),
				TPOTMs: f(gen / (plantedOutput - 1)), OutputTokens: plantedOutput, EngineMetrics: mj}
			for _, c := range chunks {
				rq.Chunks.MonoNs = append(rq.Chunks.MonoNs, ns(c))
			}
			lvl.Requests = append(lvl.Requests, rq)
			if sc.disagg {
				tls = append(tls, tl)
			}
		}
		tp := make([]float64, len(lvl.Requests))
		for i, rq := range lvl.Requests {
			tp[i] = *rq.TPOTMs
		}
		lvl.P99TPOTMs = slo.NearestRank(tp, 99)
		run.Levels = append(run.Levels, lvl)
	}
	rec.Runs = []schema.RunRecord{run}
	return rec, tls, kv
}

// diagnose reads the scenario as `hone diagnose report` does.
func (sc plantedScenario) diagnose(t *testing.T) Diagnosis {
	t.Helper()
	rec, tls, kv := sc.build()
	atts, err := Attribute(rec, Evidence{Timelines: tls, KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	tpot := map[float64]float64{}
	for _, l := range rec.Runs[0].Levels {
		tpot[l.OfferedQPS] = l.P99TPOTMs
	}
	return SummarizeKnobs(rec.Kind, atts, rec.SLO, tpot, sc.knobs)
}

// plantedScenarios: one of each kind of bottleneck issue 43 found named
// wrong or untested, and quiet controls. i runs 0..39 at each level.
var plantedScenarios = []plantedScenario{{
	// Colocated, the engine's queue grows to 780 ms at 16 req/s; it ran
	// max-num-seqs 4 at once.
	name: "colocated queueing", knobs: Knobs{MaxNumSeqs: 4}, want: Queueing, propose: "raise max-num-seqs (now 4",
	parts: func(q float64, i int) planted {
		return planted{queue: 0.5 + map[float64]float64{1: 0, 4: 2, 16: 20}[q]*float64(i), prefill: 30, itl: 20}
	},
}, {
	// A long prefill at every level: 1,200 of ~1,230 ms.
	name: "prefill", want: Prefill,
	parts: func(q float64, i int) planted { return planted{queue: 1, prefill: 1200 + float64(i%5), itl: 20} },
}, {
	// Disaggregated: the KV pull grows with load (a saturated link).
	name: "transfer", disagg: true, want: Transfer,
	parts: func(q float64, i int) planted {
		return planted{queue: 1, prefill: 20, pull: 2 + map[float64]float64{1: 0, 4: 1, 16: 15}[q]*float64(i), step: 4, itl: 20}
	},
}, {
	// Issue 43: the decode worker (max-num-seqs 2) queues after a 1.65 ms
	// pull. Named transfer, with "faster KV connector" proposed, before.
	name: "decode-worker queue", disagg: true, knobs: Knobs{MaxNumSeqs: 2}, want: DecodeQ,
	wantNot: "KV connector", propose: "raise max-num-seqs (now 2",
	parts: func(q float64, i int) planted {
		return planted{queue: 1, prefill: 20, pull: 1.65, decodeQueue: map[float64]float64{1: 0, 4: 5, 16: 40}[q] * float64(i), step: 4, itl: 20}
	},
}, {
	// The same queue behind vLLM, which does not state its pull: the
	// daemon's KV connections time it.
	name: "decode-worker queue, daemon", disagg: true, kvTiming: "daemon", knobs: Knobs{MaxNumSeqs: 2}, want: DecodeQ,
	wantNot: "KV connector", propose: "raise max-num-seqs (now 2",
	parts: func(q float64, i int) planted {
		return planted{queue: 1, prefill: 20, pull: 1.65, decodeQueue: map[float64]float64{1: 0, 4: 5, 16: 40}[q] * float64(i), step: 4, itl: 20}
	},
}, {
	// Decode steps too slow for the batch at 16 req/s: 80 ms a token.
	name: "TPOT", want: Decode,
	parts: func(q float64, i int) planted {
		return planted{queue: 1, prefill: 30, itl: map[float64]float64{1: 20, 4: 30, 16: 80}[q]}
	},
}, {
	// Issue 43: a 3 s engine freeze 1 s into the 16 req/s level, an
	// otherwise quiet engine. Named decode (TPOT) before.
	name: "stall", want: Stall, freeze: [2]float64{1000, 3000}, wantNot: "decode capacity",
	parts: func(q float64, i int) planted { return planted{queue: 0.5, prefill: 10, itl: 10} },
}, {
	// Issue 43: a quiet colocated control, p99 TTFT ~14 ms against
	// 2,000 ms; the queue's tail moves by ~2 ms. Named queueing before.
	name: "quiet colocated control", want: "none",
	parts: func(q float64, i int) planted {
		return planted{queue: 0.3 + map[float64]float64{1: 0, 4: 0.01, 16: 0.06}[q]*float64(i), prefill: 10 + float64(i%3)*0.1, itl: 10}
	},
}, {
	name: "quiet disaggregated control", disagg: true, want: "none",
	parts: func(q float64, i int) planted {
		return planted{queue: 0.5, prefill: 8, pull: 1.6 + 0.01*float64(i%4), decodeQueue: 0.02 * q * float64(i%5), step: 3, itl: 10}
	},
}}

// TestPlantedScenarios holds each planted scenario to its bottleneck and
// reports the tally. Every figure is planted, so each verdict is exact.
func TestPlantedScenarios(t *testing.T) {
	right := 0
	for _, sc := range plantedScenarios {
		d := sc.diagnose(t)
		ok := d.Bottleneck == sc.want
		if ok {
			right++
		} else {
			t.Errorf("%s: bottleneck %q, want %q: %s", sc.name, d.Bottleneck, sc.want, d.Summary)
		}
		for _, p := range d.Proposals {
			if sc.wantNot != "" && strings.Contains(p, sc.wantNot) {
				t.Errorf("%s: proposal %q does not fit", sc.name, p)
			}
		}
		if sc.propose != "" && (len(d.Proposals) == 0 || !strings.HasPrefix(d.Proposals[0], sc.propose)) {
			t.Errorf("%s: proposals %q, want %q first", sc.name, d.Proposals, sc.propose)
		}
		t.Logf("%-28s %-14s confidence %.3f  %s", sc.name, d.Label(), d.Confidence, d.Summary)
	}
	t.Logf("tally: %d of %d planted scenarios named right", right, len(plantedScenarios))
}
