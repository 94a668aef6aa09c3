package replay

import (
	"math"
	"sort"
)

// SLO is the pair of latency objectives a load level must meet. The brief's
// defaults are p99 TTFT <= 2000 ms and p99 TPOT <= 50 ms.
type SLO struct {
	TTFTMillis float64 `json:"ttft_slo_ms"`
	TPOTMillis float64 `json:"tpot_slo_ms"`
}

// DefaultSLO is the brief's default experiment SLO.
var DefaultSLO = SLO{TTFTMillis: 2000, TPOTMillis: 50}

// Outcome is the per-request timing every backend produces, in milliseconds
// of the backend's own clock (model time for the simulator and emulator).
type Outcome struct {
	ID           int
	ArrivalMs    float64
	FirstMs      float64 // first output token
	FinishMs     float64 // last output token
	OutputTokens int
}

// TTFT is the time from arrival to the first token, in milliseconds.
func (o Outcome) TTFT() float64 { return o.FirstMs - o.ArrivalMs }

// TPOT is the mean time between output tokens after the first, in
// milliseconds: (finish-first)/(output_tokens-1). A one-token output has no
// inter-token time and reports 0.
func (o Outcome) TPOT() float64 {
	if o.OutputTokens <= 1 {
		return 0
	}
	return (o.FinishMs - o.FirstMs) / float64(o.OutputTokens-1)
}

// Level is the summary of one load level, in the exercise's JSON shape.
type Level struct {
	OfferedQPS   float64 `json:"offered_qps"`
	P99TTFTMs    float64 `json:"p99_ttft_ms"`
	P99TPOTMs    float64 `json:"p99_tpot_ms"`
	EffectiveQPS float64 `json:"effective_qps"`
	Passed       bool    `json:"passed"`
}

// NearestRank returns the p-th percentile (0 < p <= 100) of values by the
// nearest-rank method: sort, then take entry ceil(p/100*n) counting from one.
// It sorts a copy; values is left as it was. An empty input gives NaN.
func NearestRank(values []float64, p float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), values...)
	sort.Float64s(s)
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

// Summarize computes a level's figures from its outcomes: p99 TTFT and TPOT
// over the measurement requests only (warm-up requests, ids < 8, are
// excluded but have already shaped the queues), effective QPS = measured
// count / ((last measured completion - arrival of request 8)/1000), and
// pass/fail against slo.
func Summarize(offeredQPS float64, outcomes []Outcome, slo SLO) Level {
	var ttft, tpot []float64
	start, last := math.NaN(), math.Inf(-1)
	for _, o := range outcomes {
		if o.ID < Sessions {
			continue
		}
		if o.ID == Sessions {
			start = o.ArrivalMs
		}
		ttft = append(ttft, o.TTFT())
		tpot = append(tpot, o.TPOT())
		last = math.Max(last, o.FinishMs)
	}
	l := Level{OfferedQPS: offeredQPS}
	if len(ttft) == 0 {
		return l
	}
	l.P99TTFTMs = NearestRank(ttft, 99)
	l.P99TPOTMs = NearestRank(tpot, 99)
	l.EffectiveQPS = float64(len(ttft)) / ((last - start) / 1000)
	l.Passed = l.P99TTFTMs <= slo.TTFTMillis && l.P99TPOTMs <= slo.TPOTMillis
	return l
}

// Objective is the largest effective QPS among passing levels, or 0 when
// none pass.
func Objective(levels []Level) float64 {
	best := 0.0
	for _, l := range levels {
		if l.Passed && l.EffectiveQPS > best {
			best = l.EffectiveQPS
		}
	}
	return best
}
