package replay

import (
	"testing"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

func f64(v float64) *float64 { return &v }

// TestGoodputByHand counts a fixture's requests against per-request
// limits, computed by hand below.
func TestGoodputByHand(t *testing.T) {
	req := func(id int, outcome string, ttft, tpot, finish float64, out int) schema.RequestRecord {
		q := schema.RequestRecord{ID: id, Outcome: outcome, ScheduledMs: 100, OutputTokens: out}
		if outcome == schema.OutcomeOK {
			q.TTFTMs, q.TPOTMs, q.FinishMs = f64(ttft), f64(tpot), f64(finish)
		}
		return q
	}
	reqs := []schema.RequestRecord{
		req(0, schema.OutcomeOK, 9000, 900, 99999, 16), // a warm-up: never counted
		req(8, schema.OutcomeOK, 400, 40, 1100, 16),    // e2e 1000: meets all three
		req(9, schema.OutcomeOK, 600, 40, 1300, 16),    // TTFT 600 > 500
		req(10, schema.OutcomeOK, 300, 60, 1400, 16),   // TPOT 60 > 50
		req(11, schema.OutcomeOK, 300, 45, 3200, 16),   // e2e 3100 > 3000
		req(12, schema.OutcomeOK, 300, 999, 500, 1),    // one token: TPOT does not apply; meets
		req(13, schema.OutcomeTimeout, 0, 0, 0, 0),     // failed: not met
		req(14, schema.OutcomeOK, 500, 50, 3100, 16),   // exactly at every limit: meets
	}
	g, err := slo.ParsePerRequest("ttft:500,tpot:50,e2el:3000")
	if err != nil {
		t.Fatal(err)
	}
	got := GoodputOf(reqs, Sessions, g, 2.5)
	// Good: 8, 12, 14 of 7 measured; 3 / 2.5 s = 1.2 req/s.
	if got == nil || got.Good != 3 || got.Measured != 7 || got.Fraction != 3.0/7 || got.QPS != 1.2 || got.Limits != g {
		t.Fatalf("goodput %+v, want 3 of 7 good, 1.2 req/s", got)
	}
	// TTFT only: 8, 10, 11, 12, 14 (5 of 7).
	if got := GoodputOf(reqs, Sessions, slo.PerRequest{TTFTMs: 500}, 2.5); got.Good != 5 || got.QPS != 2 {
		t.Fatalf("TTFT only: %+v, want 5 good, 2 req/s", got)
	}
	if GoodputOf(reqs, Sessions, slo.PerRequest{}, 2.5) != nil || GoodputOf(reqs[:1], Sessions, g, 2.5) != nil {
		t.Error("no limits, or no measured request, must give no goodput")
	}
	// The default limits are the SLO's, per request.
	if l := (slo.SLO{TTFTMillis: 500, TPOTMillis: 50}).Limits(); l != (slo.PerRequest{TTFTMs: 500, TPOTMs: 50}) {
		t.Errorf("default limits %+v", l)
	}
}

// TestLevelGoodputPools: a level's goodput over runs counts the runs valid
// there (an invalid run's requests are left out while a valid one
// exists), its rate the pooled good requests over the summed windows.
func TestLevelGoodputPools(t *testing.T) {
	lvl := func(valid bool, good, measured int, window float64) schema.LevelRecord {
		return schema.LevelRecord{Verdict: schema.Verdict{Valid: valid}, WindowSeconds: window,
			Goodput: &schema.Goodput{Limits: slo.PerRequest{TTFTMs: 100}, Good: good, Measured: measured}}
	}
	rec := &schema.Record{Runs: []schema.RunRecord{
		{Levels: []schema.LevelRecord{lvl(true, 9, 10, 2)}},
		{Levels: []schema.LevelRecord{lvl(false, 0, 10, 9)}},
		{Levels: []schema.LevelRecord{lvl(true, 6, 10, 3)}},
	}}
	g := LevelGoodput(rec, 0)
	if g == nil || g.Good != 15 || g.Measured != 20 || g.Fraction != 0.75 || g.QPS != 3 || g.Limits.TTFTMs != 100 {
		t.Fatalf("pooled goodput %+v, want 15 of 20 over 5 s", g)
	}
	if LevelGoodput(rec, 1) != nil {
		t.Error("a level no run has: want nil")
	}
}
