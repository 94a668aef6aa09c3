package optimizer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
)

// FloorFraction is how much of the TTFT SLO the host's own p99 floor may
// take, in model time, at the time scale emulated trials run at: half of
// replay.ClientBoundSLOFraction, so that the measurement's own cost leaves
// as much room again before a level is judged client-bound.
const FloorFraction = replay.ClientBoundSLOFraction / 2

// HostFloor is what the host itself adds to every TTFT: a replay through
// hone's proxy against the zero-cost emulator profile ("null"), at the
// highest load level, FloorRuns times (so that p99 is not one request's
// stall), before any trial.
type HostFloor struct {
	OfferedQPS float64 `json:"offered_qps"`
	TimeScale  float64 `json:"time_scale"` // the scale it was measured at
	Requests   int     `json:"requests"`   // measured requests
	// Real time: what the host adds, independent of the time scale.
	P50RealMs         float64 `json:"p50_real_ms"`
	P99RealMs         float64 `json:"p99_real_ms"`
	DispatchP99RealMs float64 `json:"dispatch_lag_p99_real_ms"`
	// SpecTimeScale is the base spec's scale; ChosenTimeScale the one
	// every trial runs at: the smallest of the usual steps (0.05, 0.1,
	// 0.2, 0.25, 0.5, 1, 2, 4) that is at least the spec's and keeps the p99
	// floor at or below FloorFraction of the TTFT SLO in model time.
	SpecTimeScale   float64 `json:"spec_time_scale"`
	ChosenTimeScale float64 `json:"chosen_time_scale"`
	FloorModelMs    float64 `json:"p99_floor_model_ms"` // P99RealMs / ChosenTimeScale
	Rule            string  `json:"rule"`
	Note            string  `json:"note,omitempty"`
}

// FloorRuns is how many passes over the highest level the floor takes.
const FloorRuns = 3

var scaleSteps = []float64{0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 4}

// ChooseTimeScale is specScale when it keeps p99RealMs / scale <=
// FloorFraction x ttftSLOMs, else the smallest step above it that does;
// the largest step when none does.
func ChooseTimeScale(p99RealMs, specScale, ttftSLOMs float64) float64 {
	need := p99RealMs / (FloorFraction * ttftSLOMs)
	if specScale >= need {
		return specScale
	}
	for _, s := range scaleSteps {
		if s >= specScale && s >= need {
			return s
		}
	}
	return math.Max(specScale, scaleSteps[len(scaleSteps)-1])
}

// MeasureFloor deploys base with the zero-cost emulator profile behind
// hone's proxy, replays the workload's highest level once, and picks the
// time scale trials run at. Only emulator specs have a floor to measure.
func (e *DeployEvaluator) MeasureFloor(ctx context.Context, base *deploy.Spec) (*HostFloor, error) {
	if base.Engine != deploy.EngineEmulator {
		return nil, fmt.Errorf("the host floor needs the emulator (engine %q)", base.Engine)
	}
	s := CloneSpec(base)
	s.Name = "hone-floor"
	s.Emulator.Profile = "null"
	s.Emulator.TraceDir = ""
	s.Emulator.Faults = nil
	scale := s.Emulator.TimeScale
	if scale <= 0 {
		scale = 1
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("floor spec: %w", err)
	}
	dep, err := deploy.Up(ctx, s, e.Up)
	if err != nil {
		return nil, fmt.Errorf("deploy the zero-cost engine: %w", err)
	}
	defer dep.Down(10 * time.Second)
	top := slices.Max(e.QPS)
	rec, err := replay.Run(ctx, replay.Options{Endpoint: dep.ProxyURL(), Model: s.ServedName(), Kind: replay.KindEmulated,
		Backend: "emulator", Workload: e.Workload, QPS: []float64{top}, Runs: FloorRuns, SLO: e.SLO, TimeScale: scale, Hone: e.Hone})
	if err != nil {
		return nil, fmt.Errorf("replay against the zero-cost engine: %w", err)
	}
	var ttft []float64
	lag := 0.0
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			lag = max(lag, l.DispatchLagP99Ms)
			for _, q := range l.Requests {
				if q.ID >= replay.Sessions && q.TTFTMs != nil {
					ttft = append(ttft, *q.TTFTMs)
				}
			}
		}
	}
	if len(ttft) == 0 {
		return nil, fmt.Errorf("no measured request completed against the zero-cost engine")
	}
	f := &HostFloor{OfferedQPS: top, TimeScale: scale, Requests: len(ttft),
		P50RealMs: replay.NearestRank(ttft, 50) * scale, P99RealMs: replay.NearestRank(ttft, 99) * scale,
		DispatchP99RealMs: lag * scale, SpecTimeScale: scale,
		Rule: fmt.Sprintf("trials run at the smallest of %v at least the spec's time scale that keeps the host's p99 TTFT floor "+
			"(real ms / time scale) at or below %g%% of the %g ms TTFT SLO", scaleSteps, 100*FloorFraction, e.SLO.TTFTMillis)}
	f.ChosenTimeScale = ChooseTimeScale(f.P99RealMs, scale, e.SLO.TTFTMillis)
	f.FloorModelMs = f.P99RealMs / f.ChosenTimeScale
	if f.FloorModelMs > FloorFraction*e.SLO.TTFTMillis {
		f.Note = fmt.Sprintf("even at time scale %g the floor is %.1f model ms, over %g%% of the SLO: levels may be judged client-bound; use a quieter host",
			f.ChosenTimeScale, f.FloorModelMs, 100*FloorFraction)
	}
	return f, nil
}
