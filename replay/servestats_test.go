package replay

import (
	"math"
	"testing"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// servedLevel has the 8 warm-ups and n measured requests: request k
// (k = 0..n-1) is scheduled at 100k ms, its first token comes k+1 ms later,
// then 3 more chunks every 2 ms real (4 model ms at scale 0.5), one token
// each; one more request failed. Window 10 s.
func servedLevel(n int, valid bool) schema.LevelRecord {
	l := schema.LevelRecord{Level: slo.Level{OfferedQPS: 4}, WindowSeconds: 10, Verdict: schema.Verdict{Valid: valid}}
	for id := range Sessions {
		l.Requests = append(l.Requests, schema.RequestRecord{ID: id, Outcome: schema.OutcomeOK, FirstMs: fp(1), FinishMs: fp(2), TTFTMs: fp(1)})
	}
	for k := range n {
		sched := 100 * float64(k)
		first := sched + float64(k+1)
		pt := 1000
		q := schema.RequestRecord{ID: Sessions + k, Outcome: schema.OutcomeOK, ScheduledMs: sched, FirstMs: fp(first), FinishMs: fp(first + 12),
			TTFTMs: fp(first - sched), TPOTMs: fp(4), OutputTokens: 4, PromptTokens: &pt}
		for c := range 4 {
			q.Chunks.MonoNs = append(q.Chunks.MonoNs, int64(c)*2_000_000)
		}
		l.Requests = append(l.Requests, q)
	}
	l.Requests = append(l.Requests, schema.RequestRecord{ID: Sessions + n, Outcome: schema.OutcomeTimeout})
	return l
}

func TestServeStats(t *testing.T) {
	rec := &schema.Record{TimeScale: 0.5, Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{servedLevel(10, true)}}, {Levels: []schema.LevelRecord{servedLevel(10, false)}}}}
	s := ServeStatsByLevel(rec)[0]
	// Only the valid run is pooled.
	if s.Runs != 1 || !s.Valid || s.Completed != 10 || s.Failed != 1 || s.DurationS != 10 {
		t.Fatalf("pooled %+v", s)
	}
	if s.RequestThroughput != 1 || s.OutputTokenThroughput != 4 || s.TotalTokenThroughput != 1004 {
		t.Errorf("throughput %v req/s %v tok/s %v total tok/s, want 1, 4, 1004", s.RequestThroughput, s.OutputTokenThroughput, s.TotalTokenThroughput)
	}
	// TTFT 1..10 ms: mean 5.5, nearest-rank median 5, p90 9, p99 10.
	if d := s.TTFT; d.N != 10 || math.Abs(d.Mean-5.5) > 1e-12 || d.Median != 5 || d.P90 != 9 || d.P99 != 10 {
		t.Errorf("TTFT %+v", d)
	}
	if d := s.E2E; d.Median != 17 || d.P99 != 22 {
		t.Errorf("E2E %+v, want TTFT + 12", d)
	}
	// ITL: 3 gaps of 2 ms real per request = 4 model ms at scale 0.5.
	if d := s.ITL; d.N != 30 || d.Mean != 4 || d.P99 != 4 || s.TPOT.N != 10 || s.TPOT.Median != 4 {
		t.Errorf("ITL %+v TPOT %+v", d, s.TPOT)
	}
	// No valid run: all are pooled and the stats say so.
	rec.Runs[0].Levels[0].Verdict.Valid = false
	if s := LevelServeStats(rec, 0); s.Runs != 2 || s.Valid || s.Completed != 20 || s.DurationS != 20 {
		t.Errorf("no valid run: %+v", s)
	}
}
