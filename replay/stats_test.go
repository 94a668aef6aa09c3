package replay

import (
	"testing"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

func TestSummarizeExcludesWarmup(t *testing.T) {
	// Warm-up requests with enormous latencies must not move any figure.
	var outs []Outcome
	for i := 0; i < 8; i++ {
		outs = append(outs, Outcome{ID: i, ArrivalMs: float64(i) * 2000, FirstMs: 1e9, FinishMs: 2e9, OutputTokens: 128})
	}
	for i := 8; i < 18; i++ {
		a := 16000 + float64(i-8)*100
		outs = append(outs, Outcome{ID: i, ArrivalMs: a, FirstMs: a + 10, FinishMs: a + 10 + 127, OutputTokens: 128})
	}
	l := Summarize(10, outs, slo.Default)
	if l.P99TTFTMs != 10 || l.P99TPOTMs != 1 || !l.Passed {
		t.Errorf("level %+v: want p99 TTFT 10, TPOT 1, passed", l)
	}
	// 10 requests from 16000 to last finish 16900+137.
	last := 16900.0 + 10 + 127
	if want := 10 / ((last - 16000) / 1000); l.EffectiveQPS != want {
		t.Errorf("effective QPS %v, want %v", l.EffectiveQPS, want)
	}
	if l := Summarize(10, outs, slo.SLO{TTFTMillis: 9, TPOTMillis: 50}); l.Passed {
		t.Error("p99 TTFT 10 > SLO 9 should fail")
	}
	if l := Summarize(10, outs, slo.SLO{TTFTMillis: 2000, TPOTMillis: 0.5}); l.Passed {
		t.Error("p99 TPOT 1 > SLO 0.5 should fail")
	}
}

// A level's TPOT percentiles are over requests of two or more output
// tokens (vllm bench serve's TPOT): a one-token request's 0 does not pull
// p50 TPOT to nothing, and a level of one-token requests only has no TPOT
// (0, which the gate refuses at a valid level).
func TestLevelTPOTSkipsOneTokenRequests(t *testing.T) {
	level := func(tokens ...int) schema.LevelRecord {
		var reqs []Request
		lr := schema.LevelRecord{Outcomes: map[string]int{}, Failures: map[string]int{}, Complete: true}
		for i := range Sessions + len(tokens) {
			reqs = append(reqs, Request{ID: i, ArrivalMs: float64(i)})
			if i < Sessions {
				continue
			}
			n := tokens[i-Sessions]
			first, finish, ttft, tpot := float64(i)+10, float64(i)+10+float64(2*(n-1)), 10.0, 0.0
			if n > 1 {
				tpot = 2
			}
			lr.Requests = append(lr.Requests, schema.RequestRecord{ID: i, Outcome: schema.OutcomeOK, Valid: true, OutputTokens: n,
				FirstMs: &first, FinishMs: &finish, TTFTMs: &ttft, TPOTMs: &tpot})
		}
		SummarizeLevel(&lr, reqs, slo.Default, 1)
		return lr
	}
	if lr := level(1, 1, 1, 4, 4); lr.P50TPOTMs != 2 || lr.P99TPOTMs != 2 || lr.P50TTFTMs != 10 {
		t.Errorf("three of five one-token requests: p50 TPOT %g, p99 %g (want 2, 2), p50 TTFT %g", lr.P50TPOTMs, lr.P99TPOTMs, lr.P50TTFTMs)
	}
	if lr := level(1, 1); lr.P50TPOTMs != 0 || lr.P99TPOTMs != 0 || lr.P99TTFTMs != 10 {
		t.Errorf("one-token requests only: p50 TPOT %g, p99 %g (want 0: not measured), p99 TTFT %g", lr.P50TPOTMs, lr.P99TPOTMs, lr.P99TTFTMs)
	}
}

// A level whose effective rate falls short of the offered rate while the
// SLO is met is a burst figure, marked NotSteady; one that keeps up, or
// that fails the SLO (saturation shows in its latency), is not.
func TestLevelNotSteady(t *testing.T) {
	level := func(decodeMs, ttft float64) schema.LevelRecord {
		var reqs []Request
		lr := schema.LevelRecord{Outcomes: map[string]int{}, Failures: map[string]int{}, Complete: true}
		lr.OfferedQPS = 10
		for i := range Sessions + 40 {
			at := float64(i) * 100 // 10 req/s
			reqs = append(reqs, Request{ID: i, ArrivalMs: at})
			first := at + ttft
			finish, tpot := first+decodeMs, decodeMs/127
			lr.Requests = append(lr.Requests, schema.RequestRecord{ID: i, Outcome: schema.OutcomeOK, Valid: true, OutputTokens: 128,
				FirstMs: &first, FinishMs: &finish, TTFTMs: &ttft, TPOTMs: &tpot})
		}
		SummarizeLevel(&lr, reqs, slo.SLO{TTFTMillis: 2000, TPOTMillis: 50}, 1)
		return lr
	}
	// 40 requests over 3.9 s of arrivals, then 1 s of decode: 8.2 req/s.
	if lr := level(1000, 20); !lr.NotSteady || !lr.SLOMet || lr.EffectiveQPS > 9 {
		t.Errorf("burst: effective %.2f, slo met %t, not steady %t", lr.EffectiveQPS, lr.SLOMet, lr.NotSteady)
	}
	if lr := level(10, 20); lr.NotSteady {
		t.Errorf("keeping up: effective %.2f marked not steady", lr.EffectiveQPS)
	}
	if lr := level(1000, 3000); lr.NotSteady {
		t.Error("a level failing the SLO marked not steady")
	}
}
