package replay

import (
	"reflect"
	"testing"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

func fp(v float64) *float64 { return &v }
func ip(v int) *int         { return &v }

// TestSummarize checks a level's figures on hand-made requests, exactly.
func TestSummarize(t *testing.T) {
	reqs, err := Generate(Params{Requests: 12, InputTokens: 100, UncachedTokens: 10, OutputTokens: 5, OfferedQPS: 2})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id int, sent, first, finish float64) schema.RequestRecord {
		return schema.RequestRecord{ID: id, Outcome: schema.OutcomeOK, Valid: true, SentMs: sent, DispatchLagMs: float64(id) / 10,
			FirstMs: fp(first), FinishMs: fp(finish), TTFTMs: fp(first - sent), TPOTMs: fp((finish - first) / 4),
			OutputTokens: 5, PromptTokens: ip(100), CachedTokens: ip(91)}
	}
	var rs []schema.RequestRecord
	for i := range 8 {
		r := mk(i, float64(i*2000), float64(i*2000+500), float64(i*2000+600))
		r.CachedTokens = ip(0)
		rs = append(rs, r)
	}
	// Measured: 8..11 at 16000, 16500, 17000, 17500 (2 qps).
	rs = append(rs, mk(8, 16000, 16100, 16140), mk(9, 16500, 16800, 16900), mk(10, 17000, 17050, 17070), mk(11, 17500, 17900, 18000))
	base := func() schema.LevelRecord {
		return schema.LevelRecord{Level: slo.Level{OfferedQPS: 2}, Complete: true, Planned: 12, Sent: 12, Outcomes: map[string]int{}, Failures: map[string]int{},
			Requests: append([]schema.RequestRecord(nil), rs...)}
	}
	l := base()
	summarizeLevel(&l, reqs, slo.SLO{TTFTMillis: 400, TPOTMillis: 25}, 4)
	// TTFTs 100, 300, 50, 400; TPOTs 10, 25, 5, 25.
	want := slo.Level{OfferedQPS: 2, P99TTFTMs: 400, P99TPOTMs: 25, EffectiveQPS: 4 / 2.0, Passed: true}
	if l.Level != want || l.P50TTFTMs != 100 || l.P90TTFTMs != 400 || l.P50TPOTMs != 10 || l.P90TPOTMs != 25 || !l.SLOMet {
		t.Fatalf("summary %+v p50/p90 ttft %g/%g tpot %g/%g", l.Level, l.P50TTFTMs, l.P90TTFTMs, l.P50TPOTMs, l.P90TPOTMs)
	}
	if l.WindowSeconds != 2 || *l.GPUSecondsPerRequest != 4*2.0/4 || *l.HitRateCachedTokens != 0.91 || !*l.CachePromiseMet || l.Measured != 4 {
		t.Errorf("window %g cost %g hit %g promise %t measured %d", l.WindowSeconds, *l.GPUSecondsPerRequest, *l.HitRateCachedTokens, *l.CachePromiseMet, l.Measured)
	}
	if l.DispatchLagP50Ms != 0.5 || l.DispatchLagP99Ms != 1.1 || l.DispatchLagMaxMs != 1.1 {
		t.Errorf("lag p50 %g p99 %g max %g", l.DispatchLagP50Ms, l.DispatchLagP99Ms, l.DispatchLagMaxMs)
	}
	// Matches the exercise's Summarize on the same timings (arrival = send).
	var outs []Outcome
	for _, r := range rs {
		outs = append(outs, Outcome{ID: r.ID, ArrivalMs: r.SentMs, FirstMs: *r.FirstMs, FinishMs: *r.FinishMs, OutputTokens: 5})
	}
	if s := Summarize(2, outs, slo.SLO{TTFTMillis: 400, TPOTMillis: 25}); s != l.Level {
		t.Errorf("Summarize %+v, live summary %+v", s, l.Level)
	}

	// One TPOT over the SLO fails the level.
	l = base()
	summarizeLevel(&l, reqs, slo.SLO{TTFTMillis: 400, TPOTMillis: 24.9}, 4)
	if l.Passed || l.SLOMet {
		t.Errorf("TPOT 25 > 24.9 passed")
	}
	// A failed measured request fails the level even when the rest meet
	// the SLO, and is counted; the window still starts at request 8's
	// scheduled arrival.
	l = base()
	l.Requests[8] = schema.RequestRecord{ID: 8, Outcome: schema.OutcomeTimeout, Invalid: "failed: timeout"}
	summarizeLevel(&l, reqs, slo.SLO{TTFTMillis: 400, TPOTMillis: 25}, 4)
	if l.Passed || !l.SLOMet || l.Measured != 3 || !reflect.DeepEqual(l.Failures, map[string]int{schema.OutcomeTimeout: 1}) || l.EffectiveQPS != 1.5 {
		t.Errorf("passed %t slo %t measured %d failures %v eff %g", l.Passed, l.SLOMet, l.Measured, l.Failures, l.EffectiveQPS)
	}
	// An invalid output (wrong length) fails the level too.
	l = base()
	l.Requests[9].Valid, l.Requests[9].Invalid = false, "output_tokens: got 4, want 5"
	summarizeLevel(&l, reqs, slo.SLO{TTFTMillis: 400, TPOTMillis: 25}, 0)
	if l.Passed || l.Invalid != 1 || l.GPUSecondsPerRequest != nil {
		t.Errorf("passed %t invalid %d cost %v (no GPUs given: no cost)", l.Passed, l.Invalid, l.GPUSecondsPerRequest)
	}
	// An incomplete level never passes.
	l = base()
	l.Complete = false
	summarizeLevel(&l, reqs, slo.SLO{TTFTMillis: 400, TPOTMillis: 25}, 4)
	if l.Passed {
		t.Errorf("incomplete level passed")
	}
}
