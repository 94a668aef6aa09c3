package optimizer

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/slo"
)

// FloorProbeRequests is the most measured requests a floor probe sends,
// and FloorProbeMin the fewest: its p99 is then the 3rd largest of 200,
// at least the 2nd largest of 50, not one request's stall. Between them
// it sends what the highest level offers in FloorProbeSeconds of real
// time, so that a probe takes seconds (with the deployment's start and
// stop, about 5 to 7 on a 2-core host).
const (
	FloorProbeRequests = 200
	FloorProbeMin      = 50
	FloorProbeSeconds  = 3
)

// ProbeFloor is the host floor's cheap re-measurement between trials: one
// pass at the highest level against the zero-cost engine, at base's own
// time scale (FloorProbeRequests). It returns the p99 TTFT in real ms,
// what ChooseTimeScale reads.
func (e *DeployEvaluator) ProbeFloor(ctx context.Context, base *deploy.Spec) (p99RealMs float64, err error) {
	if !engine.Emulated(base.Engine) {
		return 0, fmt.Errorf("the host floor needs the emulator (engine %q)", base.Engine)
	}
	scale := base.Emulator.TimeScale
	if scale <= 0 {
		scale = 1
	}
	null := CloneSpec(base)
	null.Emulator.Profile = "null"
	top := slices.Max(e.QPS)
	pe := *e
	pe.Workload.Requests = replay.Sessions + int(math.Round(min(max(top*FloorProbeSeconds/scale, FloorProbeMin), FloorProbeRequests)))
	rec, err := pe.replayOnce(ctx, null, "hone-floor-probe", top, 1, scale, nil)
	if err != nil {
		return 0, fmt.Errorf("floor probe: %w", err)
	}
	ttft, _ := floorTTFTs(rec)
	if len(ttft) == 0 {
		return 0, fmt.Errorf("floor probe: no measured request completed against the zero-cost engine")
	}
	return slo.NearestRank(ttft, 99) * scale, nil
}

// FloorReading is the host floor a trial began under (FloorScaler): the
// probe's p99 in real ms, and the time scale it chose for the trial.
type FloorReading struct {
	P99RealMs     float64 `json:"p99_real_ms"`
	SpecTimeScale float64 `json:"spec_time_scale"`
	TimeScale     float64 `json:"time_scale"`
	FloorModelMs  float64 `json:"p99_floor_model_ms"` // P99RealMs / TimeScale
	// Error: the probe failed, and the trial ran at the scale the last
	// reading chose (the spec's when there was none).
	Error string `json:"error,omitempty"`
	// Probes is 2 when the first probe asked for more than the spec's
	// scale and a second was taken: P99RealMs is then the lower of the two.
	Probes int `json:"probes,omitempty"`
	// CappedFrom is the scale the floor asked for when it was above the
	// largest allowed (FloorScaler.MaxScale, --max-time-scale), which the
	// trial ran at instead; 0 when the cap did not bind. Note says so.
	CappedFrom float64 `json:"capped_from,omitempty"`
	Note       string  `json:"note,omitempty"`
}

// FloorScalerRule states FloorScaler in words.
var FloorScalerRule = fmt.Sprintf("before every emulated trial a probe against the zero-cost engine (the highest level's rate for %d s "+
	"of real time, %d to %d requests; seconds in all) re-measures the host's p99 floor (the lower of two probes when the first asks for more "+
	"than the spec's scale, so that one stall does not lengthen a trial), and the trial runs at the time scale it allows "+
	"by the floor's rule, at most --max-time-scale (or the spec's scale, if larger): a host that was busy and went quiet goes back to the spec's scale "+
	"at the next trial; where the cap binds, the trial runs at the cap and says so, its floor is then over the rule's bound, and its levels get their "+
	"verdicts as usual", FloorProbeSeconds, FloorProbeMin, FloorProbeRequests)

// FloorScaler runs every emulated trial at the time scale the host's floor
// allows now (ChooseTimeScale, never below the spec's), from a probe taken
// just before it, so that no trial runs at a scale chosen under a load
// that has passed. Probe is the measurement (DeployEvaluator.ProbeFloor in
// hone optimize; a script in tests).
type FloorScaler struct {
	Inner     Evaluator
	Probe     func(ctx context.Context, spec *deploy.Spec) (p99RealMs float64, err error)
	TTFTSLOMs float64
	// MaxScale is the largest scale a trial runs at (--max-time-scale;
	// never below the spec's own; 0: no cap).
	MaxScale float64
	Log      io.Writer // one line per trial; nil: none

	last float64 // the scale the last good reading chose
}

// Evaluate implements Evaluator.
func (f *FloorScaler) Evaluate(ctx context.Context, spec *deploy.Spec, tag string) Trial {
	if !engine.Emulated(spec.Engine) || f.Probe == nil {
		return f.Inner.Evaluate(ctx, spec, tag)
	}
	specScale := spec.Emulator.TimeScale
	if !(specScale > 0) {
		specScale = 1
	}
	r := &FloorReading{SpecTimeScale: specScale}
	p99, err := f.Probe(ctx, spec)
	if err == nil && capScale(ChooseTimeScale(p99, specScale, f.TTFTSLOMs), specScale, f.MaxScale) > specScale && ctx.Err() == nil {
		// A larger scale makes the trial that much longer: one stall in
		// the probe must not decide it. A busy host reads high twice.
		r.Probes = 2
		if again, err2 := f.Probe(ctx, spec); err2 == nil {
			p99 = min(p99, again)
		}
	}
	switch {
	case err != nil:
		r.Error = err.Error()
		r.TimeScale = max(f.last, specScale)
	default:
		r.P99RealMs = p99
		want := ChooseTimeScale(p99, specScale, f.TTFTSLOMs)
		r.TimeScale = capScale(want, specScale, f.MaxScale)
		r.FloorModelMs = p99 / r.TimeScale
		if r.TimeScale < want {
			r.CappedFrom = want
			r.Note = fmt.Sprintf("the floor asks for time scale %g, above --max-time-scale %g: the trial runs at %g, where the p99 floor of %.1f model ms "+
				"is over the rule's %.1f ms (%g%% of the TTFT SLO); its levels get their verdicts as usual",
				want, f.MaxScale, r.TimeScale, r.FloorModelMs, FloorFraction*f.TTFTSLOMs, 100*FloorFraction)
		}
		f.last = r.TimeScale
	}
	if f.Log != nil {
		if r.Error != "" {
			fmt.Fprintf(f.Log, "optimize: host floor probe failed (%s): trial at time scale %g (spec %g)\n", r.Error, r.TimeScale, specScale)
		} else {
			two := ""
			if r.Probes == 2 {
				two = " (the lower of 2 probes)"
			}
			fmt.Fprintf(f.Log, "optimize: host floor now p99 %.2f ms real%s: trial at time scale %g (spec %g), floor %.1f model ms%s\n",
				r.P99RealMs, two, r.TimeScale, specScale, r.FloorModelMs, noteOf(r.Note))
		}
	}
	if ctx.Err() != nil {
		return Trial{Error: "floor probe: " + ctx.Err().Error(), Floor: r}
	}
	t := f.Inner.Evaluate(ctx, withScale(spec, r.TimeScale), tag)
	t.Floor = r
	if t.TimeScale == 0 {
		t.TimeScale = r.TimeScale
		if t.Rescaled != nil && t.Rescaled.Measured {
			t.TimeScale = t.Rescaled.ToScale
		}
	}
	return t
}

// capScale is the scale want capped by the largest allowed, max (0: no
// cap), which never lowers the spec's own scale.
func capScale(want, spec, max float64) float64 {
	if max > 0 {
		return min(want, math.Max(max, spec))
	}
	return want
}
