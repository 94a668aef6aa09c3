package replay

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestNearestRankIndex(t *testing.T) {
	for n := 1; n <= 1000; n++ {
		want := int(math.Ceil(0.99 * float64(n)))
		if got := NearestRankIndex(n, 99); got != want {
			t.Fatalf("n=%d: index %d, want ceil(0.99*n) = %d", n, got, want)
		}
	}
	// The brief's case: 120 measured requests → entry 119.
	if got := NearestRankIndex(120, 99); got != 119 {
		t.Errorf("n=120: %d, want 119", got)
	}
	if got := NearestRankIndex(10, 50); got != 5 {
		t.Errorf("median of 10: rank %d, want 5", got)
	}
}

func TestNearestRankPicksSortedEntry(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.IntN(300)
		v := make([]float64, n)
		for i := range v {
			v[i] = r.Float64() * 1000
		}
		orig := append([]float64(nil), v...)
		got := NearestRank(v, 99)
		for i := range v {
			if v[i] != orig[i] {
				t.Fatal("NearestRank modified its input")
			}
		}
		sort.Float64s(orig)
		if want := orig[int(math.Ceil(0.99*float64(n)))-1]; got != want {
			t.Fatalf("n=%d: p99 %v, want %v", n, got, want)
		}
	}
	if !math.IsNaN(NearestRank(nil, 99)) {
		t.Error("p99 of nothing should be NaN")
	}
}

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
	l := Summarize(10, outs, DefaultSLO)
	if l.P99TTFTMs != 10 || l.P99TPOTMs != 1 || !l.Passed {
		t.Errorf("level %+v: want p99 TTFT 10, TPOT 1, passed", l)
	}
	// 10 requests from 16000 to last finish 16900+137.
	last := 16900.0 + 10 + 127
	if want := 10 / ((last - 16000) / 1000); l.EffectiveQPS != want {
		t.Errorf("effective QPS %v, want %v", l.EffectiveQPS, want)
	}
	if l := Summarize(10, outs, SLO{TTFTMillis: 9, TPOTMillis: 50}); l.Passed {
		t.Error("p99 TTFT 10 > SLO 9 should fail")
	}
	if l := Summarize(10, outs, SLO{TTFTMillis: 2000, TPOTMillis: 0.5}); l.Passed {
		t.Error("p99 TPOT 1 > SLO 0.5 should fail")
	}
}

func TestObjective(t *testing.T) {
	levels := []Level{{EffectiveQPS: 3, Passed: true}, {EffectiveQPS: 9, Passed: false}, {EffectiveQPS: 5, Passed: true}}
	if got := Objective(levels); got != 5 {
		t.Errorf("objective %v, want 5", got)
	}
	if got := Objective([]Level{{EffectiveQPS: 9}}); got != 0 {
		t.Errorf("no passing level: objective %v, want 0", got)
	}
}
