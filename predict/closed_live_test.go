package predict

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// TestClosedLoopLive: hone replay --max-concurrency against a live
// emulator deployment keeps at most N measured requests in flight at every
// send, and sends each request after the first N only once an earlier
// one has ended (the k-th send after the k-th end: what the record shows,
// both on the client's clock); the host decides only how soon after, which
// is bounded loosely. With -live (make test-consistency), predict
// --concurrency is held to the measured level, with the live loop's gap between an end and the send it releases replayed (as the open-loop check replays hops), at the agreement check's
// bound (engine clocks: TTFT and TPOT p50 within 5%).
func TestClosedLoopLive(t *testing.T) {
	scale := 0.25
	if *live {
		scale = *liveScale
	}
	const clients = 4
	c := liveCase{name: "closed", topology: "{kind: colocated, replicas: 1, tp: 1}", routing: deploy.SessionAffinity}
	s := liveSpec(t, c, "qwen2.5-coder-0.5b-l4", scale, honetest.FreePorts(t, 10))
	w := schema.Workload{Seed: 1, Requests: 40, InputTokens: 2048, UncachedTokens: 128, OutputTokens: 32, LengthRatio: 0.8}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rec, tls := liveReplayLoad(t, ctx, s, w, nil, []int{clients}, 1)
	if rec.Workload.LoadMode() != schema.LoadClosed || !slices.Equal(rec.Workload.Concurrency, []int{clients}) {
		t.Fatalf("record load %q %v", rec.Workload.Load, rec.Workload.Concurrency)
	}
	l := rec.Runs[0].Levels[0]
	if l.Concurrency != clients || l.Sent != w.Requests {
		t.Fatalf("level: %d clients, %d of %d sent", l.Concurrency, l.Sent, w.Requests)
	}
	var measured []schema.RequestRecord
	for _, q := range l.Requests {
		if q.ID >= replay.Sessions {
			if q.FinishMs == nil {
				t.Fatalf("request %d did not finish: %s %s", q.ID, q.Outcome, q.Error)
			}
			measured = append(measured, q)
		}
	}
	slices.SortFunc(measured, func(a, b schema.RequestRecord) int { return cmp.Compare(a.SentMs, b.SentMs) })
	var ends []float64
	for _, q := range measured {
		ends = append(ends, *q.FinishMs)
	}
	slices.Sort(ends)
	worst := 0.0
	var gaps []float64
	for k, q := range measured {
		in := 0
		for _, o := range measured {
			if o.SentMs <= q.SentMs && *o.FinishMs > q.SentMs {
				in++
			}
		}
		if in > clients {
			t.Errorf("at request %d's send (%.3f ms): %d in flight, want at most %d", q.ID, q.SentMs, in, clients)
		}
		if k < clients {
			continue
		}
		gap := q.SentMs - ends[k-clients]
		if gap < 0 {
			t.Errorf("request %d sent %.3f ms before the %d-th end: a closed loop sends only after one", q.ID, -gap, k-clients+1)
		}
		worst = max(worst, gap)
		gaps = append(gaps, gap)
	}
	// Loose and one-sided: the host's goroutine wake-up, in model ms.
	if worst > 2000 {
		t.Errorf("a send came %.1f model ms after the end that released it", worst)
	}
	t.Logf("%d clients: %d measured requests, at most %d in flight, sends at most %.2f model ms after their release", clients, len(measured), clients, worst)
	if !*live {
		return
	}
	// The live loop's gap from an end at the engine to the next arrival
	// there: the client's send lag plus both HTTP hops (client TTFT −
	// engine TTFT), as the open-loop check replays its hops.
	m := measuredFigures(t, rec, tls)
	gap := slo.Median(gaps) + m.HostTTFT
	pred, err := Run(s, Options{Workload: w, Concurrency: []int{clients}, ClosedGapMs: gap, SLO: slo.Default, KeepRequests: true})
	if err != nil {
		t.Fatal(err)
	}
	p := predictedFigures(t, pred)
	t.Logf("closed-loop gap replayed: %.2f model ms", gap)
	for _, f := range []struct {
		name       string
		pred, meas float64
	}{{"p50 TTFT", p.TTFT, m.TTFT}, {"p50 TPOT", p.TPOT, m.TPOT}} {
		e := relErr(f.pred, f.meas)
		t.Logf("%s: predicted %.2f, measured %.2f (engine clocks), %+.1f%%", f.name, f.pred, f.meas, 100*e)
		if e > liveTolerance || e < -liveTolerance {
			t.Errorf("%s: predicted %.2f, measured %.2f: %+.1f%%, beyond %.0f%%", f.name, f.pred, f.meas, 100*e, 100*liveTolerance)
		}
	}
}
