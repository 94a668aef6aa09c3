package replay

import (
	"testing"

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
