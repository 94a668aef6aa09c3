package slo

import (
	"math"
	"slices"
)

// NearestRank returns the p-th percentile (0 < p <= 100) of values by the
// nearest-rank method: sort, then take entry ceil(p/100*n) counting from one.
// It sorts a copy; values is left as it was. An empty input gives NaN (0 for
// an integer type such as time.Duration, which has no NaN).
func NearestRank[T ~float64 | ~int64](values []T, p float64) T {
	if len(values) == 0 {
		return none[T]()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	return s[NearestRankIndex(len(s), p)-1]
}

// NearestRankIndex is the one-based rank ceil(p/100*n), clamped to [1, n].
// For p = 99 it evaluates ceil(0.99*n), the CPU exercise's definition of
// p99.
func NearestRankIndex(n int, p float64) int {
	// p/100 is correctly rounded, so for p = 99 it is the same float64 as
	// the literal 0.99 and this is the exercise's ceil(0.99*n) bit for bit.
	k := int(math.Ceil(p / 100 * float64(n)))
	return min(max(k, 1), n)
}

// PercentileCI returns the one-based ranks lo and hi of the order
// statistics x(lo) <= x(hi) of n values that bound the p-th percentile
// (0 < p < 100) of the population they were drawn from with confidence
// at least confidence percent (0 < confidence < 100), equal-tailed and
// whatever the distribution. Of n independent draws, the number below the
// percentile ξ is binomial(n, p/100), so lo is the largest rank with
// P(x(lo) > ξ) <= (100-confidence)/200 and hi the smallest with
// P(x(hi) < ξ) <= (100-confidence)/200, both computed exactly. Ties (rounded
// values) only make the closed interval [x(lo), x(hi)] cover more often.
//
// lo is 0 when no order statistic is a lower bound at that confidence, hi
// is 0 when none is an upper bound: the n values cannot bound the
// percentile on that side (for p99 at 95%, hi needs n >= 368:
// MinCountForCI). Both are 0 for n < 1 or p or confidence out of range.
func PercentileCI(n int, p, confidence float64) (lo, hi int) {
	if n < 1 || !(p > 0 && p < 100) || !(confidence > 0 && confidence < 100) {
		return 0, 0
	}
	q, alpha := p/100, (100-confidence)/200
	pmf := binomialPMF(n, q)
	below := 0.0 // P(B <= l-1): x(l) lies above the percentile
	for l := 1; l <= n; l++ {
		if below += pmf[l-1]; below > alpha {
			break
		}
		lo = l
	}
	above := 0.0 // P(B >= u): x(u) lies below the percentile
	for u := n; u >= 1; u-- {
		if above += pmf[u]; above > alpha {
			break
		}
		hi = u
	}
	return lo, hi
}

// MinCountForCI is the smallest n for which PercentileCI(n, p, confidence)
// has both ranks: 368 for p99 at 95%, 36 for p90, 6 for the median. It is 0
// when p or confidence is out of range.
func MinCountForCI(p, confidence float64) int {
	if !(p > 0 && p < 100) || !(confidence > 0 && confidence < 100) {
		return 0
	}
	// Both ranks exist once the extremes are bounds: q^n <= alpha (the
	// maximum is above ξ often enough) and (1-q)^n <= alpha (the minimum
	// below it). Start from the estimate and settle it on PercentileCI.
	q, alpha := p/100, (100-confidence)/200
	n := max(1, int(math.Ceil(math.Log(alpha)/math.Log(max(q, 1-q)))))
	has := func(n int) bool { lo, hi := PercentileCI(n, p, confidence); return lo > 0 && hi > 0 }
	for n > 1 && has(n-1) {
		n--
	}
	for !has(n) {
		n++
	}
	return n
}

// binomialPMF is P(B = k) for k = 0..n, B ~ binomial(n, q), 0 < q < 1,
// computed through logarithms so that large n neither overflows nor
// underflows the coefficients.
func binomialPMF(n int, q float64) []float64 {
	pmf := make([]float64, n+1)
	lq, l1q := math.Log(q), math.Log1p(-q)
	ln, _ := math.Lgamma(float64(n + 1))
	for k := 0; k <= n; k++ {
		lk, _ := math.Lgamma(float64(k + 1))
		lnk, _ := math.Lgamma(float64(n - k + 1))
		pmf[k] = math.Exp(ln - lk - lnk + float64(k)*lq + float64(n-k)*l1q)
	}
	return pmf
}

// Median is the middle of values, the mean of the two middle ones when
// their number is even: unlike NearestRank it interpolates. hone uses it
// across repeated runs (a trial's objective, a gate's centre), never for a
// level's per-request percentiles. It sorts a copy; an empty input gives
// NaN.
func Median(values []float64) float64 {
	n := len(values)
	if n == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// none is the percentile of no values: NaN for a floating-point T, 0 for an
// integer T.
func none[T ~float64 | ~int64]() T {
	half := 0.5
	if T(half) == 0 { // an integer T truncates 0.5 to 0
		return 0
	}
	return T(math.NaN())
}
