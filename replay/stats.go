package replay

import (
	"math"

	"github.com/hone-llm/hone/slo"
)

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

// Summarize computes a level's figures from its outcomes: p99 TTFT and TPOT
// over the measurement requests only (warm-up requests, ids < 8, are
// excluded but have already shaped the queues), effective QPS = measured
// count / ((last measured completion - arrival of request 8)/1000), and
// pass/fail against target.
func Summarize(offeredQPS float64, outcomes []Outcome, target slo.SLO) slo.Level {
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
	l := slo.Level{OfferedQPS: offeredQPS}
	if len(ttft) == 0 {
		return l
	}
	l.P99TTFTMs = slo.NearestRank(ttft, 99)
	l.P99TPOTMs = slo.NearestRank(tpot, 99)
	l.EffectiveQPS = float64(len(ttft)) / ((last - start) / 1000)
	l.Passed = target.Met(l.P99TTFTMs, l.P99TPOTMs)
	return l
}
