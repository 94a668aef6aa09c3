package optimizer

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// RescaleRule states Rescaler in words, for help and reports.
var RescaleRule = fmt.Sprintf("an emulated trial whose runs decided nothing only because of the measuring host (every invalid level client_bound "+
	"or emulator_bound; no failed request or output) is measured once more, one step up the ladder %v (doubling beyond) from its scale, "+
	"when that is at most the largest time scale allowed, the scale the emulator_bound verdicts estimate would clear them (rounded up to a step) is too "+
	"(client_bound's estimate is not read: it takes the load generator's lag for fixed wall time, while a generator that fell behind lags by a queue, "+
	"which a slower real-time send shrinks faster than that, so it can ask for more than the one step that clears it), "+
	"and the time budget leaves room for it; it then reports that measurement and keeps the first record, and its config's next trial starts "+
	"that many steps above the scale it begins at (and may step again). emulator_bound is the emulated engine's own clock: the step sets the "+
	"deployment's emulator.time_scale, which the engine runs at. Figures are model time, so it compares with trials at other scales; a valid "+
	"level's host share is within the verdicts' bounds at any scale", scaleSteps)

// Rescale says that a trial's first measurement, at FromScale, decided
// nothing only because of the measuring host (client_bound,
// emulator_bound). Measured: it was measured again at ToScale, which is
// what the trial reports (its Spec stays the loop's, at FromScale). Else
// it keeps its first measurement, because the scale it needs is above
// MaxScale (ToScale is then that scale), the time budget had no room
// (NoTime), or the second measurement failed (Error). Record is the first
// measurement's record, empty when that was an earlier trial's (a config's
// next trial starts at the scale it needed).
type Rescale struct {
	FromScale float64 `json:"from_scale"`
	ToScale   float64 `json:"to_scale"`
	MaxScale  float64 `json:"max_scale"`
	Measured  bool    `json:"measured"`
	// Estimate is the largest factor the first measurement's
	// emulator_bound reasons asked for (replay.Reason.Scale), 0 when one
	// had none or there were none. It refuses a step that could not reach
	// it (FromScale × Estimate, on the ladder, above MaxScale); ToScale is
	// one step above FromScale. client_bound's estimates are not read
	// (trustedEstimate).
	Estimate float64 `json:"estimate"`
	Record   string  `json:"record,omitempty"`
	Reason   string  `json:"reason"`
	Error    string  `json:"error,omitempty"`
	NoTime   string  `json:"no_time,omitempty"`
}

// String says what happened, for the trial's reason.
func (r *Rescale) String() string {
	est := "no estimate"
	if r.Estimate > 0 {
		est = fmt.Sprintf("estimate ×%.3g", r.Estimate)
	}
	switch {
	case r.Measured:
		return fmt.Sprintf("measured at time scale %g: at %g, %s", r.ToScale, r.FromScale, r.Reason)
	case r.Error != "":
		return fmt.Sprintf("at time scale %g the host decided it (%s; %s); measuring it again at %g failed: %s", r.FromScale, r.Reason, est, r.ToScale, r.Error)
	case r.NoTime != "":
		return fmt.Sprintf("at time scale %g the host decided it (%s; %s); not measured again at %g: %s", r.FromScale, r.Reason, est, r.ToScale, r.NoTime)
	}
	return fmt.Sprintf("at time scale %g the host decided it (%s; %s): it needs time scale %g, above the largest allowed %g (--max-time-scale)",
		r.FromScale, r.Reason, est, r.ToScale, r.MaxScale)
}

// Rescaler measures an emulated trial again one step up the time-scale
// ladder when its first measurement decided nothing for reasons the
// measuring host caused alone (RescaleRule). A trial with any other
// invalid reason, a vLLM trial, or one whose estimate needs more than
// MaxScale keeps its first measurement, and its Rescaled says what scale
// it would need.
type Rescaler struct {
	Inner    Evaluator
	MaxScale float64   // the largest time scale a re-measurement may use
	Log      io.Writer // progress lines; nil: none
	// Now is the clock the time budget (the context's deadline) is read
	// with; nil: time.Now.
	Now func() time.Time

	steps map[string]int // spec key → how many steps above its start it last needed
}

// Evaluate implements Evaluator.
func (r *Rescaler) Evaluate(ctx context.Context, spec *deploy.Spec, tag string) Trial {
	if !engine.Emulated(spec.Engine) || !(spec.Emulator.TimeScale > 0) {
		return r.Inner.Evaluate(ctx, spec, tag)
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	key := SpecKey(spec)
	from := spec.Emulator.TimeScale
	var t Trial
	if n := r.steps[key]; n > 0 && stepsUp(from, n) <= r.MaxScale {
		// An earlier trial of this config needed n steps above where it
		// began: start as far above where this one begins (a host that went
		// quiet begins lower, and so does this).
		k := stepsUp(from, n)
		t = r.Inner.Evaluate(ctx, withScale(spec, k), tag)
		t.Rescaled = &Rescale{FromScale: from, ToScale: k, MaxScale: r.MaxScale, Measured: true,
			Reason: fmt.Sprintf("an earlier trial of this config needed %d step(s) more", n)}
		from = k
	} else {
		t = r.Inner.Evaluate(ctx, spec, tag)
	}
	est, why, ok := hostOnly(t)
	if !ok || ctx.Err() != nil {
		return t
	}
	to := nextStep(from)
	need := to
	if est > 0 {
		need = max(to, rescaleStep(from*est))
	}
	rs := &Rescale{FromScale: from, ToScale: to, MaxScale: r.MaxScale, Estimate: est, Record: t.Record, Reason: why}
	if need > r.MaxScale || to <= from {
		rs.ToScale = need
		t.Rescaled = rs
		if r.Log != nil {
			fmt.Fprintf(r.Log, "optimize: %s: %s\n", key, rs)
		}
		return t
	}
	// A measurement takes about its scale's share of the first one's time.
	if dl, ok := ctx.Deadline(); ok && t.Seconds > 0 {
		want := time.Duration(t.Seconds * to / from * float64(time.Second))
		if left := dl.Sub(now()); left < want {
			rs.NoTime = fmt.Sprintf("the time budget leaves %s, about %s needed", left.Round(time.Second), want.Round(time.Second))
			t.Rescaled = rs
			if r.Log != nil {
				fmt.Fprintf(r.Log, "optimize: %s: %s\n", key, rs)
			}
			return t
		}
	}
	if r.Log != nil {
		fmt.Fprintf(r.Log, "optimize: %s: at time scale %g every invalid level was the host's (%s): measuring again one step up, at time scale %g\n", key, from, why, to)
	}
	t2 := r.Inner.Evaluate(ctx, withScale(spec, to), fmt.Sprintf("%s-ts%g", tag, to))
	if t2.Error != "" {
		rs.Error = t2.Error
		t.Rescaled = rs
		return t
	}
	if r.steps == nil {
		r.steps = map[string]int{}
	}
	r.steps[key] = stepsBetween(spec.Emulator.TimeScale, to)
	t2.Seconds += t.Seconds
	t2.Started = t.Started
	rs.Measured = true
	t2.Rescaled = rs
	return t2
}

// withScale is a copy of s at time scale k.
func withScale(s *deploy.Spec, k float64) *deploy.Spec {
	c := CloneSpec(s)
	c.Emulator.TimeScale = k
	return c
}

// rescaleStep is the smallest step of the floor's ladder at or above k,
// doubling beyond it, at most deploy.MaxTimeScale.
func rescaleStep(k float64) float64 {
	if s, ok := ladderStep(k); ok {
		return s
	}
	s := scaleSteps[len(scaleSteps)-1]
	for s < k && s < deploy.MaxTimeScale {
		s *= 2
	}
	return min(s, deploy.MaxTimeScale)
}

// nextStep is the ladder's step above k (rescaleStep of a hair more).
func nextStep(k float64) float64 { return rescaleStep(k * (1 + 1e-9)) }

// stepsUp is n ladder steps above k.
func stepsUp(k float64, n int) float64 {
	for range n {
		k = nextStep(k)
	}
	return k
}

// stepsBetween is how many ladder steps lead from a up to b.
func stepsBetween(a, b float64) int {
	n := 0
	for k := a; k < b && n < 64; k = nextStep(k) {
		n++
	}
	return n
}

// hostOnly reports whether t had too few valid runs to decide anything
// only because of the measuring host: no error, no failed request or
// output, and every invalid level invalid for host reasons alone. est is
// the largest of their Scale estimates that may refuse a step
// (trustedEstimate), 0 when one of those had none or there were none; why
// says so in short.
func hostOnly(t Trial) (est float64, why string, ok bool) {
	if t.Error != "" || t.Record == "" || t.Failed > 0 || t.Invalid > 0 {
		return 0, "", false
	}
	rec, err := replay.ReadRecord(t.Record)
	if err != nil || len(rec.Runs) == 0 {
		return 0, "", false
	}
	valid, unknown := 0, false
	var codes []schema.Code
	for _, run := range rec.Runs {
		if run.Verdict.Valid {
			valid++
		}
		for _, l := range run.Levels {
			for _, rs := range l.Verdict.Reasons {
				if !schema.HostReason(rs.Code) {
					return 0, "", false
				}
				if trustedEstimate(rs.Code) {
					if !(rs.Scale > 0) || math.IsInf(rs.Scale, 0) {
						unknown = true
					}
					est = max(est, rs.Scale)
				}
				if !slices.Contains(codes, rs.Code) {
					codes = append(codes, rs.Code)
				}
			}
		}
	}
	runs := len(rec.Runs)
	if len(t.Capacity) > 0 { // capacity runs count by what decided them (decidedValidly)
		valid, runs = len(t.Objectives), len(t.Objectives)+t.InvalidRuns
	}
	if replay.EnoughValid(valid, runs) || len(codes) == 0 {
		return 0, "", false
	}
	if unknown {
		est = 0
	}
	slices.Sort(codes)
	return est, fmt.Sprintf("%d of %d runs invalid: %s", runs-valid, runs, schema.JoinCodes(codes, ", ")), true
}

// trustedEstimate reports whether a host reason's Scale estimate may
// refuse the one-step re-measurement. client_bound's may not: it takes the
// load generator's dispatch lag (and diagnose's client residual) for wall
// time that stays fixed as the scale grows, but a generator that fell
// behind lags by a queue of sends, and a larger scale slows the real-time
// send rate by the same factor, which shrinks that queue faster than
// 1/scale (it empties below the generator's rate): the estimate is an
// upper bound that can lie above --max-time-scale while one step up
// clears the level. emulator_bound's counts the late KV pulls' own
// modelled time (replay's lateScale) and is kept.
func trustedEstimate(code schema.Code) bool { return code != schema.ReasonClientBound }
