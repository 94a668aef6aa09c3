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
// For p = 99 it evaluates ceil(0.99*n), the brief's expression.
func NearestRankIndex(n int, p float64) int {
	// p/100 is correctly rounded, so for p = 99 it is the same float64 as
	// the literal 0.99 and this is the brief's ceil(0.99*n) bit for bit.
	k := int(math.Ceil(p / 100 * float64(n)))
	return min(max(k, 1), n)
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
