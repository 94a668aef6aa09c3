package optimizer

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
)

// RescaleMargin is how much more than its estimate (replay.Reason.Scale)
// a re-measurement's time scale grows: the estimate is a median's share,
// and the host's time varies from run to run.
const RescaleMargin = 1.25

// RescaleRule states Rescaler in words, for help and reports.
var RescaleRule = fmt.Sprintf("an emulated trial whose runs decided nothing only because of the measuring host (every invalid level client_bound "+
	"or emulator_bound) is measured once more, at its scale times the largest factor those verdicts estimate would clear them, times %g, "+
	"rounded up to a step of %v, when that is at most the largest time scale allowed; it then reports that measurement (figures are model time, "+
	"so it compares with the others), keeps the first record, and its re-run starts at that scale", RescaleMargin, scaleSteps)

// Rescale says that a trial's first measurement, at FromScale, decided
// nothing only because of the measuring host (client_bound,
// emulator_bound). Measured: it was measured again at ToScale, which is
// what the trial reports (its Spec stays the loop's, at FromScale); else
// ToScale, the scale the estimate asked for, is above MaxScale and the
// trial keeps its first measurement. Record is the first measurement's
// record, empty when that was an earlier trial's (a re-run starts at the
// scale its config needed).
type Rescale struct {
	FromScale float64 `json:"from_scale"`
	ToScale   float64 `json:"to_scale"`
	MaxScale  float64 `json:"max_scale"`
	Measured  bool    `json:"measured"`
	// Estimate is the largest factor the first measurement's host
	// reasons asked for (replay.Reason.Scale); ToScale is FromScale ×
	// Estimate × RescaleMargin rounded up to a step of the floor's ladder.
	Estimate float64 `json:"estimate,omitempty"`
	Record   string  `json:"record,omitempty"`
	Reason   string  `json:"reason"`
}

// String says what happened, for the trial's reason.
func (r *Rescale) String() string {
	if r.Measured {
		return fmt.Sprintf("measured at time scale %g: at %g, %s", r.ToScale, r.FromScale, r.Reason)
	}
	return fmt.Sprintf("at time scale %g the host decided it (%s; estimate ×%.3g): it needs time scale %g, above the largest allowed %g (--max-time-scale)",
		r.FromScale, r.Reason, r.Estimate, r.ToScale, r.MaxScale)
}

// Rescaler measures an emulated trial again at a larger time scale when
// its first measurement decided nothing for reasons the measuring host
// caused alone. Figures are in model time, so a trial measured at another
// scale compares with the others; only the host's share of them shrinks.
// A trial with any other invalid reason, a vLLM trial, or one whose
// estimate needs more than MaxScale keeps its first measurement, and its
// reason says what scale it would need. A config re-measured once starts
// at its larger scale the next time (the verification re-run).
type Rescaler struct {
	Inner    Evaluator
	MaxScale float64   // the largest time scale a re-measurement may use
	Log      io.Writer // progress lines; nil: none

	scales map[string]float64 // spec key → the scale that was needed
}

// Evaluate implements Evaluator.
func (r *Rescaler) Evaluate(ctx context.Context, spec *deploy.Spec, tag string) Trial {
	if spec.Engine != deploy.EngineEmulator {
		return r.Inner.Evaluate(ctx, spec, tag)
	}
	key := SpecKey(spec)
	if k := r.scales[key]; k > scaleOf(spec) {
		s := CloneSpec(spec)
		s.Emulator.TimeScale = k
		t := r.Inner.Evaluate(ctx, s, tag)
		t.Rescaled = &Rescale{FromScale: scaleOf(spec), ToScale: k, MaxScale: r.MaxScale, Measured: true, Reason: "an earlier trial of this config needed it"}
		return t
	}
	t := r.Inner.Evaluate(ctx, spec, tag)
	from := scaleOf(spec)
	est, why := hostOnly(t)
	if est == 0 || ctx.Err() != nil {
		return t
	}
	to := rescaleStep(from * est * RescaleMargin)
	if to <= from {
		to = rescaleStep(from * 2)
	}
	rs := &Rescale{FromScale: from, ToScale: to, MaxScale: r.MaxScale, Estimate: est, Record: t.Record, Reason: why}
	if to > r.MaxScale {
		t.Rescaled = rs
		return t
	}
	if r.Log != nil {
		fmt.Fprintf(r.Log, "optimize: %s: at time scale %g every invalid level was the host's (%s; estimate ×%.3g): measuring again at time scale %g\n",
			key, from, why, est, to)
	}
	if r.scales == nil {
		r.scales = map[string]float64{}
	}
	r.scales[key] = to
	s2 := CloneSpec(spec)
	s2.Emulator.TimeScale = to
	t2 := r.Inner.Evaluate(ctx, s2, fmt.Sprintf("%s-ts%g", tag, to))
	t2.Seconds += t.Seconds
	t2.Started = t.Started
	rs.Measured = true
	t2.Rescaled = rs
	return t2
}

// scaleOf is an emulator spec's time scale (1 when unset).
func scaleOf(s *deploy.Spec) float64 {
	if s.Emulator.TimeScale > 0 {
		return s.Emulator.TimeScale
	}
	return 1
}

// rescaleStep is the smallest step of the floor's ladder at or above k,
// or k itself beyond the ladder.
func rescaleStep(k float64) float64 {
	for _, s := range scaleSteps {
		if s >= k*(1-1e-9) {
			return s
		}
	}
	return k
}

// hostOnly reports, for a trial that had too few valid runs to decide
// anything and whose every invalid level was invalid only for host
// reasons with an estimate, the largest estimate and the reasons in
// short; 0 otherwise (a valid trial, a failed one, or any other reason).
func hostOnly(t Trial) (float64, string) {
	if t.Error != "" || t.Record == "" {
		return 0, ""
	}
	rec, err := replay.ReadRecord(t.Record)
	if err != nil || len(rec.Runs) == 0 {
		return 0, ""
	}
	valid, est := 0, 0.0
	var codes []string
	for _, run := range rec.Runs {
		if run.Verdict.Valid {
			valid++
		}
		for _, l := range run.Levels {
			for _, rs := range l.Verdict.Reasons {
				if !replay.HostReason(rs.Code) || !(rs.Scale > 0) || math.IsInf(rs.Scale, 0) {
					return 0, ""
				}
				est = max(est, rs.Scale)
				if !slices.Contains(codes, rs.Code) {
					codes = append(codes, rs.Code)
				}
			}
		}
	}
	if replay.EnoughValid(valid, len(rec.Runs)) || est == 0 {
		return 0, ""
	}
	slices.Sort(codes)
	return est, fmt.Sprintf("%d of %d runs invalid: %s", len(rec.Runs)-valid, len(rec.Runs), strings.Join(codes, ", "))
}
