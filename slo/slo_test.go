package slo

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
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
	// The edges clamp to [1, n].
	for _, c := range []struct {
		n    int
		p    float64
		want int
	}{{10, 0, 1}, {10, 100, 10}, {1, 0, 1}, {1, 50, 1}, {1, 99, 1}, {1, 100, 1}, {10, 150, 10}} {
		if got := NearestRankIndex(c.n, c.p); got != c.want {
			t.Errorf("NearestRankIndex(%d, %g) = %d, want %d", c.n, c.p, got, c.want)
		}
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
	if !math.IsNaN(NearestRank([]float64(nil), 99)) {
		t.Error("p99 of nothing should be NaN")
	}
}

func TestNearestRankEdges(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {20, 1}, {21, 2}, {50, 3}, {99, 5}, {100, 5}} {
		if got := NearestRank(v, c.p); got != c.want {
			t.Errorf("p%g of %v = %g, want %g", c.p, v, got, c.want)
		}
	}
	for _, p := range []float64{0, 50, 99, 100} {
		if got := NearestRank([]float64{7}, p); got != 7 {
			t.Errorf("p%g of one value = %g, want it", p, got)
		}
		if got := NearestRank([]float64{}, p); !math.IsNaN(got) {
			t.Errorf("p%g of no values = %g, want NaN", p, got)
		}
	}
	// Over an integer type: time.Duration.
	d := []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}
	if got := NearestRank(d, 50); got != 2*time.Millisecond {
		t.Errorf("p50 of %v = %v, want 2ms", d, got)
	}
	if got := NearestRank(d, 99); got != 3*time.Millisecond {
		t.Errorf("p99 of %v = %v, want 3ms", d, got)
	}
	if d[0] != 3*time.Millisecond {
		t.Error("NearestRank sorted its input")
	}
	if got := NearestRank([]time.Duration(nil), 99); got != 0 {
		t.Errorf("p99 of no durations = %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5}, // even: the mean of the middle two
		{[]float64{1, 1, 2, 10}, 1.5},
		{[]float64{-1, 1}, 0},
	} {
		orig := append([]float64(nil), c.v...)
		if got := Median(c.v); got != c.want {
			t.Errorf("median of %v = %g, want %g", c.v, got, c.want)
		}
		for i := range orig {
			if c.v[i] != orig[i] {
				t.Fatal("Median modified its input")
			}
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("median of nothing should be NaN")
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
	if got := Objective(nil); got != 0 {
		t.Errorf("no levels: objective %v, want 0", got)
	}
}

func TestMet(t *testing.T) {
	for _, c := range []struct {
		ttft, tpot float64
		want       bool
	}{
		{2000, 50, true}, // at the limits is within them
		{2000.001, 50, false},
		{2000, 50.001, false},
		{0, 0, true},
		{math.NaN(), 1, false},
		{1, math.NaN(), false},
	} {
		if got := Default.Met(c.ttft, c.tpot); got != c.want {
			t.Errorf("Default.Met(%g, %g) = %t, want %t", c.ttft, c.tpot, got, c.want)
		}
	}
}

// The seed SLO is named seed; brief, its older name, is still accepted
// and not listed; an unknown name is not an SLO.
func TestPreset(t *testing.T) {
	for _, name := range []string{"seed", "brief"} {
		if p, ok := Preset(name); !ok || p != Default {
			t.Errorf("Preset(%q) = %+v, %v; want Default", name, p, ok)
		}
	}
	if _, listed := Presets["brief"]; listed {
		t.Error("brief is listed among Presets; it is an alias only")
	}
	if _, ok := Preset("fast"); ok {
		t.Error(`Preset("fast") found an SLO`)
	}
}
