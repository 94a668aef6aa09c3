package optimizer

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// FloorFraction is how much of the TTFT SLO the host's own p99 floor may
// take, in model time, at the time scale emulated trials run at: half of
// replay.ClientBoundSLOFraction, so that the measurement's own cost leaves
// as much room again before a level is judged client-bound.
const FloorFraction = schema.ClientBoundSLOFraction / 2

// ClientShareLimit is how large the host's median floor may be next to the
// baseline engine's own median TTFT (model time) before the log warns that
// the client may dominate attributions: three quarters, so the client is at
// most 3/7 of a median TTFT, clear of the client-bound median bound
// (replay.ClientBoundTTFTFraction, half the TTFT). It warns, and does not
// pick the scale: the engine's median TTFT at a light load varies by a
// third from run to run (11.5 to 18.2 model ms measured for one spec:
// where each arrival falls in a decode step), and a pick on it flipped
// between 0.25 and 0.5 across three runs of the same demo. The validity
// verdict judges every level on what it measured instead.
const ClientShareLimit = 0.75

// HostFloor is what the host itself adds to every TTFT: a replay through
// hone's proxy against the zero-cost emulator profile ("null"), at the
// highest load level, FloorRuns times (so that p99 is not one request's
// stall), before any trial; and the baseline engine's own median TTFT at
// the lowest level (model time, from its per-request metrics, which the
// time scale does not change), to which the floor is compared.
type HostFloor struct {
	OfferedQPS float64 `json:"offered_qps"`
	TimeScale  float64 `json:"time_scale"` // the scale it was measured at
	Requests   int     `json:"requests"`   // measured requests
	// Real time: what the host adds, independent of the time scale.
	P50RealMs         float64 `json:"p50_real_ms"`
	P99RealMs         float64 `json:"p99_real_ms"`
	DispatchP99RealMs float64 `json:"dispatch_lag_p99_real_ms"`
	// EngineP50TTFTMs is the baseline engine's median TTFT at the lowest
	// level, model ms (0 when it could not be read).
	EngineP50TTFTMs float64 `json:"engine_p50_ttft_model_ms"`
	// SpecTimeScale is the base spec's scale; ChosenTimeScale the one
	// this floor allows (ChooseTimeScale). With --time-scale auto each
	// trial probes the floor again and runs at the scale it allows then
	// (FloorScaler; Trial.Floor): this one is the first trial's guide.
	SpecTimeScale   float64 `json:"spec_time_scale"`
	ChosenTimeScale float64 `json:"chosen_time_scale"`
	FloorModelMs    float64 `json:"p99_floor_model_ms"` // P99RealMs / ChosenTimeScale
	MedianModelMs   float64 `json:"p50_floor_model_ms"` // P50RealMs / ChosenTimeScale
	Rule            string  `json:"rule"`
	Note            string  `json:"note,omitempty"`

	sloMs float64
}

// FloorRuns is how many passes over the highest level the floor takes.
const FloorRuns = 3

var scaleSteps = []float64{0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 4}

// FloorRule states ChooseTimeScale in words.
var FloorRule = fmt.Sprintf("trials run at the spec's time scale, or the smallest of %v above it, at which the host's p99 TTFT floor "+
	"(real ms / time scale) is at most %g%% of the TTFT SLO; the log warns when the floor's median is over %g%% of the baseline "+
	"engine's median TTFT at the lowest level (model ms)", scaleSteps, 100*FloorFraction, 100*ClientShareLimit)

// ChooseTimeScale is specScale when it keeps p99RealMs / scale <=
// FloorFraction x ttftSLOMs, else the smallest step above it that does;
// the largest step when none does.
func ChooseTimeScale(p99RealMs, specScale, ttftSLOMs float64) float64 {
	need := p99RealMs / (FloorFraction * ttftSLOMs)
	if specScale >= need {
		return specScale
	}
	if s, ok := ladderStep(max(specScale, need)); ok {
		return s
	}
	return math.Max(specScale, scaleSteps[len(scaleSteps)-1])
}

// ladderStep is the smallest of scaleSteps at or above k; ok is false
// when k is above them all.
func ladderStep(k float64) (float64, bool) {
	for _, s := range scaleSteps {
		if s >= k {
			return s, true
		}
	}
	return 0, false
}

// MeasureFloor measures the host's floor and the baseline engine's own
// TTFT (see HostFloor; 0 when it could not be read) and picks the time
// scale trials run at. Only
// emulator specs have a floor to measure.
func (e *DeployEvaluator) MeasureFloor(ctx context.Context, base *deploy.Spec) (*HostFloor, error) {
	if !engine.Emulated(base.Engine) {
		return nil, fmt.Errorf("the host floor needs the emulator (engine %q)", base.Engine)
	}
	scale := base.Emulator.TimeScale
	if scale <= 0 {
		scale = 1
	}
	null := CloneSpec(base)
	null.Emulator.Profile = "null"
	top := slices.Max(e.QPS)
	var m *meter // the floor takes minutes on a loaded host: say where it is
	if e.Log != nil {
		m = startMeter(e.Log, cmp.Or(e.ProgressEvery, ProgressEvery), "the host floor", 0, nil)
		defer m.Stop()
	}
	m.setPhase("deploying the zero-cost engine")
	rec, err := e.replayOnce(ctx, null, "hone-floor", top, FloorRuns, scale, m)
	if err != nil {
		return nil, fmt.Errorf("the zero-cost engine: %w", err)
	}
	ttft, lag := floorTTFTs(rec)
	if len(ttft) == 0 {
		return nil, fmt.Errorf("no measured request completed against the zero-cost engine")
	}
	f := &HostFloor{OfferedQPS: top, TimeScale: scale, Requests: len(ttft), sloMs: e.SLO.TTFTMillis,
		P50RealMs: slo.NearestRank(ttft, 50) * scale, P99RealMs: slo.NearestRank(ttft, 99) * scale,
		DispatchP99RealMs: lag * scale, SpecTimeScale: scale, Rule: FloorRule}
	low := slices.Min(e.QPS)
	m.setPhase("deploying the baseline for its own TTFT")
	if rec, err := e.replayOnce(ctx, CloneSpec(base), "hone-calibrate", low, 1, scale, m); err == nil {
		f.EngineP50TTFTMs = engineMedianTTFT(rec)
	}
	f.ChosenTimeScale = ChooseTimeScale(f.P99RealMs, scale, e.SLO.TTFTMillis)
	f.Settle()
	return f, nil
}

// floorTTFTs are the measured requests' TTFTs in rec (model ms) and the
// largest p99 dispatch lag of its levels.
func floorTTFTs(rec *schema.Record) (ttft []float64, lag float64) {
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			lag = max(lag, l.DispatchLagP99Ms)
			for _, q := range l.Requests {
				if q.ID >= rec.Warmups() && q.TTFTMs != nil {
					ttft = append(ttft, *q.TTFTMs)
				}
			}
		}
	}
	return ttft, lag
}

// Settle sets the floor in model time at ChosenTimeScale and the note
// that warns when it is too large for the SLO or next to the engine's TTFT.
func (f *HostFloor) Settle() {
	f.FloorModelMs = f.P99RealMs / f.ChosenTimeScale
	f.MedianModelMs = f.P50RealMs / f.ChosenTimeScale
	var warn []string
	if f.FloorModelMs > FloorFraction*f.sloMs {
		warn = append(warn, fmt.Sprintf("the p99 floor is %.1f model ms, over %g%% of the TTFT SLO: levels may be judged client-bound; use a quieter host",
			f.FloorModelMs, 100*FloorFraction))
	}
	if f.EngineP50TTFTMs > 0 && f.MedianModelMs > ClientShareLimit*f.EngineP50TTFTMs {
		warn = append(warn, fmt.Sprintf("the median floor is %.1f model ms next to the baseline engine's median TTFT of %.1f ms: "+
			"attributions may be dominated by the client; a larger --time-scale would shrink it", f.MedianModelMs, f.EngineP50TTFTMs))
	}
	if len(warn) > 0 {
		f.Note = fmt.Sprintf("at time scale %g, %s", f.ChosenTimeScale, strings.Join(warn, "; "))
	}
}

// CapScale caps ChosenTimeScale at maxScale (--max-time-scale; never
// below the spec's scale; 0: no cap), as FloorScaler caps each trial's,
// and says so in Note when the cap binds.
func (f *HostFloor) CapScale(maxScale float64) {
	want := f.ChosenTimeScale
	f.ChosenTimeScale = capScale(want, f.SpecTimeScale, maxScale)
	f.Settle()
	if f.ChosenTimeScale < want {
		f.Note = strings.TrimPrefix(f.Note+"; ", "; ") + fmt.Sprintf("the floor asks for time scale %g, above --max-time-scale %g: trials run at %g at most",
			want, maxScale, f.ChosenTimeScale)
	}
}

// replayOnce deploys s behind hone's proxy and replays one level.
func (e *DeployEvaluator) replayOnce(ctx context.Context, s *deploy.Spec, name string, qps float64, runs int, scale float64, m *meter) (*schema.Record, error) {
	s.Name = name
	s.Emulator.TimeScale = scale
	s.Emulator.TraceDir = ""
	s.Emulator.Faults = nil
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	up := e.Up
	up.Owned = true // measured, then torn down: it dies with this process
	dep, err := deploy.Up(ctx, s, up)
	if err != nil {
		return nil, fmt.Errorf("deploy: %w", err)
	}
	defer dep.Down(10 * time.Second)
	o := replay.Options{Endpoint: dep.ProxyURL(), Model: s.ServedName(), Kind: schema.KindEmulated,
		Backend: s.Engine, Workload: e.Workload, QPS: []float64{qps}, Runs: runs, SLO: e.SLO, TimeScale: scale, Hone: e.Hone}
	if m != nil {
		o.Progress = m.update
	}
	rec, err := replay.Run(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return rec, nil
}

// engineMedianTTFT is the median of the engine's own time_to_first_token_ms
// over the measured requests; 0 when the engine reported none.
func engineMedianTTFT(rec *schema.Record) float64 {
	var v []float64
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			for _, q := range l.Requests {
				// vLLM's time_to_first_token_ms runs from the first
				// scheduling: the engine's own arrival → first token adds
				// its queue_time_ms.
				if q.ID < rec.Warmups() {
					continue
				}
				if m, ok := schema.DecodeEngineMetrics(q.EngineMetrics); ok && m.TimeToFirstTokenMs != nil {
					v = append(v, *m.TimeToFirstTokenMs+*cmp.Or(m.QueueTimeMs, new(float64)))
				}
			}
		}
	}
	if len(v) == 0 {
		return 0
	}
	return slo.NearestRank(v, 50)
}
