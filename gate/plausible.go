package gate

import (
	"fmt"
	"math"
	"strings"
)

// Plausibility thresholds. A compared metric whose values break one of
// them is suspect: the numbers are more likely a measurement artefact (a
// warm cache, a wrong time scale, a client that did not send what it
// claims) than a property of the deployment, so no statistics are read
// from them. Suspect fails CI (exit 1) under its own label.
const (
	// DefaultTPOTFloorMs is the smallest plausible time per output token,
	// model time. One decode step reads every weight from GPU memory: the
	// 0.5B model in bf16 (~1 GB) on an H200 (4.8 TB/s) needs 0.2 ms for
	// that alone, before kernel launches and the engine's per-step host
	// work, and a bigger model or a slower GPU only needs longer. 0.1 ms
	// leaves a factor of two for anything cleverer (speculative decoding
	// accepting several tokens a step). A record's config can set its own
	// floor as tpot_floor_ms (hone replay --config).
	DefaultTPOTFloorMs = 0.1
	// OfferedTolerance is how far the effective QPS (or the objective) may
	// exceed the offered rate of its level, beyond the schedule's own edge
	// (N measured requests arrive over (N−1)/qps seconds, so a level whose
	// requests took no time at all would show qps·N/(N−1)): a system
	// cannot serve more than it was offered.
	OfferedTolerance = 0.05
	// ObjectiveFactor bounds the objective's change: a ratio beyond it
	// (more than 2×, or less than half) is rarely what a deployment change
	// does and often what a measurement change does (a cache that was
	// warm, another time scale).
	ObjectiveFactor = 2.0
)

// Bounds are what a run's figures can physically reach.
type Bounds struct {
	// TPOTFloorMs is the smallest plausible TPOT (model time); 0 means
	// DefaultTPOTFloorMs.
	TPOTFloorMs float64 `json:"tpot_floor_ms,omitempty"`
	// MeasuredPerLevel is the number of measured requests the workload
	// plans per level (its requests minus the warm-ups); 0 when unknown.
	MeasuredPerLevel int `json:"measured_per_level,omitempty"`
}

func (b Bounds) tpotFloor() float64 {
	if b.TPOTFloorMs > 0 {
		return b.TPOTFloorMs
	}
	return DefaultTPOTFloorMs
}

// rateLimit is the highest plausible served rate at an offered rate.
func (b Bounds) rateLimit(offered float64) float64 {
	edge := 1.0
	if n := float64(b.MeasuredPerLevel); n > 1 {
		edge = n / (n - 1)
	}
	return offered * edge * (1 + OfferedTolerance)
}

// merge keeps the more lenient of two bounds.
func (b Bounds) merge(o Bounds) Bounds {
	f := func(x, y int) int {
		if x == 0 || y == 0 {
			return 0
		}
		return min(x, y)
	}
	floor := math.Min(b.tpotFloor(), o.tpotFloor())
	if floor == DefaultTPOTFloorMs {
		floor = 0
	}
	return Bounds{TPOTFloorMs: floor, MeasuredPerLevel: f(b.MeasuredPerLevel, o.MeasuredPerLevel)}
}

// PlausibilityRule states the thresholds in words, for reports and help.
var PlausibilityRule = fmt.Sprintf("suspect when a p50 or p99 TPOT or TTFT is below %g ms (model time; a record's config tpot_floor_ms overrides), "+
	"when an effective QPS or the objective exceeds the offered rate of its level by more than %g%% beyond the schedule's edge N/(N−1), "+
	"or when the objective changes by more than %g× either way",
	DefaultTPOTFloorMs, 100*OfferedTolerance, ObjectiveFactor)

// implausible says why a compared result is suspect, or "". level is the
// same scenario's objective_level_qps result (for the objective), its
// values paired with the objective's run by run.
func implausible(r *Result, level *Result, base, cand Bounds) string {
	sides := []struct {
		name   string
		values []float64
		b      Bounds
	}{{"baseline", r.Series.Values, base}, {"candidate", r.Candidate, cand}}
	switch m := r.Series.Metric; m {
	case "p50_tpot_ms", "p99_tpot_ms", "p50_ttft_ms", "p99_ttft_ms":
		// A first token needs at least one forward pass, so a TTFT has
		// the decode step's floor too. Values <= 0 never get here: the
		// reader refuses them (exit 2) at a valid level.
		what := "a real decode step"
		if strings.Contains(m, "ttft") {
			what = "a real forward pass (the first token needs one)"
		}
		for _, s := range sides {
			floor := s.b.tpotFloor()
			if low := minOf(s.values); low < floor {
				why := fmt.Sprintf("%s %s %.4g ms is below the %g ms floor of %s (model time): "+
					"a measurement artefact (warm cache, time scale, token count), not a faster deployment", s.name, m, low, floor, what)
				if s.name == "baseline" {
					why += "; rebuild the baseline from valid, plausible records"
				}
				return why
			}
		}
	case "effective_qps":
		for _, s := range sides {
			lim := s.b.rateLimit(r.Series.OfferedQPS)
			if high := maxOf(s.values); high > lim {
				return fmt.Sprintf("%s effective QPS %.4g exceeds the offered %s req/s by more than %g%% (limit %.4g): "+
					"a system cannot serve more than it was offered", s.name, high, fmtQPS(r.Series.OfferedQPS), 100*OfferedTolerance, lim)
			}
		}
	case "objective":
		if level != nil {
			for i, s := range sides {
				lv := level.Series.Values
				if i == 1 {
					lv = level.Candidate
				}
				for j, v := range s.values {
					if j >= len(lv) {
						break
					}
					if lim := s.b.rateLimit(lv[j]); v > lim {
						return fmt.Sprintf("%s objective %.4g req/s exceeds the offered %s req/s of its highest passing level by more than %g%% (limit %.4g): "+
							"a system cannot serve more than it was offered", s.name, v, fmtQPS(lv[j]), 100*OfferedTolerance, lim)
					}
				}
			}
		}
		if b, c := r.BaseCenter, r.CandCenter; b > 0 && c > 0 && (c/b > ObjectiveFactor || c/b < 1/ObjectiveFactor) {
			return fmt.Sprintf("the objective changed %.3g× (%.4g → %.4g req/s), beyond the %g×–%g× a deployment change plausibly makes: "+
				"more likely a measurement change; check both records' cache procedure (every level must start cold) and time scale",
				c/b, b, c, 1/ObjectiveFactor, ObjectiveFactor)
		}
	}
	return ""
}
