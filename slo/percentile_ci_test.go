package slo

import (
	"math/big"
	"testing"
)

// The ranks of known intervals: the median's of 10 and of 100 are the
// textbook (2, 9) and (40, 61); p99 needs 368 values for an upper rank at
// 95%, and until a few hundred more the upper bound is the maximum.
func TestPercentileCIRanks(t *testing.T) {
	for _, c := range []struct {
		n          int
		p, conf    float64
		wlo, whi   int
		whyWritten string
	}{
		{10, 50, 95, 2, 9, "textbook median interval of 10"},
		{100, 50, 95, 40, 61, "textbook median interval of 100"},
		{5, 50, 95, 0, 0, "0.5^5 > 0.025 on both sides"},
		{6, 50, 95, 1, 6, "0.5^6 <= 0.025"},
		{35, 90, 95, 28, 0, "0.9^35 > 0.025"},
		{36, 90, 95, 29, 36, "0.9^36 <= 0.025"},
		{100, 90, 95, 84, 96, ""},
		{40, 99, 95, 38, 0, "a level of 40 measured requests: no upper bound"},
		{240, 99, 95, 234, 0, "3 runs x 80: still no upper bound"},
		{367, 99, 95, 359, 0, "0.99^367 = 0.02501 > 0.025"},
		{368, 99, 95, 360, 368, "0.99^368 = 0.02476 <= 0.025"},
		{384, 99, 95, 376, 384, "3 runs x 128"},
		{1000, 99, 95, 983, 997, ""},
		{0, 99, 95, 0, 0, "no values"},
		{100, 0, 95, 0, 0, "p out of range"},
		{100, 100, 95, 0, 0, "p out of range"},
		{100, 50, 100, 0, 0, "confidence out of range"},
	} {
		lo, hi := PercentileCI(c.n, c.p, c.conf)
		if lo != c.wlo || hi != c.whi {
			t.Errorf("PercentileCI(%d, %g, %g) = (%d, %d), want (%d, %d) (%s)", c.n, c.p, c.conf, lo, hi, c.wlo, c.whi, c.whyWritten)
		}
	}
}

func TestMinCountForCI(t *testing.T) {
	for _, c := range []struct {
		p, conf float64
		want    int
	}{{99, 95, 368}, {90, 95, 36}, {50, 95, 6}, {99, 90, 299}, {10, 95, 36}, {99, 0, 0}, {0, 95, 0}} {
		if got := MinCountForCI(c.p, c.conf); got != c.want {
			t.Errorf("MinCountForCI(%g, %g) = %d, want %d", c.p, c.conf, got, c.want)
		}
	}
}

// PercentileCI's ranks are the extreme ones its definition allows, checked
// against binomial tails in exact rational arithmetic: P(B <= lo-1) <= a <
// P(B <= lo), and P(B >= hi) <= a < P(B >= hi-1), a = (100-conf)/200.
func TestPercentileCIMatchesExactBinomial(t *testing.T) {
	for _, p := range []int64{50, 90, 99} {
		for _, conf := range []int64{90, 95} {
			a := big.NewRat(100-conf, 200)
			q := big.NewRat(p, 100)
			for n := 1; n <= 120; n++ {
				pmf := exactPMF(n, q)
				cdf := func(k int) *big.Rat { // P(B <= k)
					s := new(big.Rat)
					for i := 0; i <= k && i <= n; i++ {
						s.Add(s, pmf[i])
					}
					return s
				}
				sf := func(k int) *big.Rat { // P(B >= k)
					s := new(big.Rat)
					for i := max(k, 0); i <= n; i++ {
						s.Add(s, pmf[i])
					}
					return s
				}
				lo, hi := PercentileCI(n, float64(p), float64(conf))
				if lo > 0 && cdf(lo-1).Cmp(a) > 0 {
					t.Errorf("n=%d p=%d conf=%d: lo %d is not a bound: P(B <= %d) > a", n, p, conf, lo, lo-1)
				}
				if lo < n && cdf(lo).Cmp(a) <= 0 {
					t.Errorf("n=%d p=%d conf=%d: lo %d is not the largest bound", n, p, conf, lo)
				}
				if hi > 0 && sf(hi).Cmp(a) > 0 {
					t.Errorf("n=%d p=%d conf=%d: hi %d is not a bound: P(B >= %d) > a", n, p, conf, hi, hi)
				}
				if want := hi - 1; hi == 0 && sf(n).Cmp(a) <= 0 || hi > 1 && sf(want).Cmp(a) <= 0 {
					t.Errorf("n=%d p=%d conf=%d: hi %d is not the smallest bound", n, p, conf, hi)
				}
			}
		}
	}
}

// exactPMF is P(B = k), k = 0..n, B ~ binomial(n, q), as exact rationals.
func exactPMF(n int, q *big.Rat) []*big.Rat {
	r := new(big.Rat).Sub(big.NewRat(1, 1), q)
	out := make([]*big.Rat, n+1)
	for k := 0; k <= n; k++ {
		c := new(big.Rat).SetInt(new(big.Int).Binomial(int64(n), int64(k)))
		c.Mul(c, ratPow(q, k))
		out[k] = c.Mul(c, ratPow(r, n-k))
	}
	return out
}

func ratPow(x *big.Rat, k int) *big.Rat {
	out := big.NewRat(1, 1)
	for i := 0; i < k; i++ {
		out.Mul(out, x)
	}
	return out
}
