package optimizer

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// PredictRule is the predict-then-measure loop's exploration, stated once
// for the log and the report.
const PredictRule = "Before anything is measured, the engine model (the emulator's scheduler in virtual time with the cost profile) " +
	"predicts every config of the grid around the baseline within its GPU budget and ranks them (predicted objective, then cost). " +
	"Measured next, in predicted order: the best untried config, then the best untried config of each topology class (topology, " +
	"pool sizes and tensor parallelism) among the top ranks. Every trial is logged with its prediction; when a measured objective " +
	"misses its prediction by more than the error bound, the profile is calibrated on every record so far (hone calibrate's least " +
	"squares) and the grid re-ranked with it. Exploration stops when no untried config is predicted to beat the measured best by " +
	"more than its noise band (the larger of 2% and the best trial's run-to-run spread), or when only the reserve for ablations, " +
	"the interaction and the re-run is left."

// Predictor makes Live predict before it measures (PredictRule).
type Predictor struct {
	// Profile is the cost model to start from.
	Profile *emulator.Profile
	// Axes span the grid around the base spec (predict.Grid).
	Axes predict.Axes
	// ErrorBound is the relative objective error beyond which the
	// profile is recalibrated; 0: DefaultErrorBound.
	ErrorBound float64
	// TopRanks is how deep in the ranking topology classes are looked
	// for; 0: DefaultTopRanks.
	TopRanks int
	// ProfileDir receives every calibrated profile as
	// calibrated-after-trial-N.yaml; "": not written.
	ProfileDir string
}

// DefaultGridAxes are hone optimize's grid axes: the engine's defaults
// and one alternative for each knob, prefix caching and routing both
// ways, CUDA graphs and eager.
func DefaultGridAxes() predict.Axes {
	return predict.Axes{
		MaxNumSeqs:           []int{0, 64},
		MaxNumBatchedTokens:  []int{0, 8192},
		PrefixCaching:        []bool{true, false},
		Routing:              []string{deploy.SessionAffinity, deploy.RoundRobin},
		EnforceEager:         []bool{false, true},
		GPUMemoryUtilization: []float64{0},
	}
}

// Defaults of the predict-then-measure loop.
const (
	DefaultErrorBound = 0.10
	DefaultTopRanks   = 10
)

// Prediction is what the engine model predicted for a trial's spec
// before it was measured, and, once measured, how far off it was.
type Prediction struct {
	Profile    string           `json:"profile"`
	Objective  float64          `json:"objective"`
	CostGPUSec *float64         `json:"gpu_seconds_per_request"`
	Rank       int              `json:"rank"` // in the grid ranking it was taken from; 0: not a grid point
	Levels     []PredictedLevel `json:"levels"`
	Error      string           `json:"error,omitempty"` // the prediction failed
	// Edge says why the predicted objective is too close to call
	// (predict.Edge): a deciding level's p99 within predict.EdgeMargin of
	// an SLO limit, so a measurement may land a level higher or lower. ""
	// when not.
	Edge string `json:"edge,omitempty"`
	// ObjectiveError is (measured − predicted) / measured of the
	// objective; nil when the measured objective is 0 or the trial failed.
	ObjectiveError *float64 `json:"objective_error"`
}

// PredictedLevel is one load level of a prediction.
type PredictedLevel struct {
	OfferedQPS   float64 `json:"offered_qps"`
	P50TTFTMs    float64 `json:"p50_ttft_ms"`
	P50TPOTMs    float64 `json:"p50_tpot_ms"`
	P99TTFTMs    float64 `json:"p99_ttft_ms"`
	P99TPOTMs    float64 `json:"p99_tpot_ms"`
	EffectiveQPS float64 `json:"effective_qps"`
	Passed       bool    `json:"passed"`
}

// PredictLog is the predict-then-measure loop's part of the log.
type PredictLog struct {
	Rule       string  `json:"rule"`
	ErrorBound float64 `json:"error_bound"`
	GridSize   int     `json:"grid_size"`
	// Profiles in the order they were used: the start, then each
	// calibrated one.
	Profiles []string `json:"profiles"`
	// Seconds spent predicting (every ranking of the grid).
	Seconds float64 `json:"seconds"`
	// Ranked is the top of the latest ranking (with its Pareto front
	// marked); Measured names the trial that measured a config.
	Ranked       []RankedSpec  `json:"ranked"`
	Calibrations []Calibration `json:"calibrations"`
	StopReason   string        `json:"stop_reason"`
}

// RankedSpec is one config of a ranking.
type RankedSpec struct {
	Rank       int      `json:"rank"`
	Key        string   `json:"key"`
	Name       string   `json:"name"`
	Objective  float64  `json:"objective"`
	CostGPUSec *float64 `json:"gpu_seconds_per_request"`
	GPUs       int      `json:"gpus"`
	Pareto     bool     `json:"pareto"`
	Measured   int      `json:"measured_trial,omitempty"`
}

// Calibration is one refit of the profile.
type Calibration struct {
	AfterTrial   int                     `json:"after_trial"`
	Trials       []int                   `json:"trials"` // whose records it was fitted to
	From         string                  `json:"from"`
	To           string                  `json:"to"`
	Path         string                  `json:"path,omitempty"`
	Coefficients []calibrate.Coefficient `json:"coefficients"`
	// MedianAbsError of the measured trials' objectives, before and after.
	ErrorBefore *float64 `json:"median_abs_objective_error_before"`
	ErrorAfter  *float64 `json:"median_abs_objective_error_after"`
	Notes       []string `json:"notes,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// predictor is the loop's prediction state.
type predictor struct {
	cfg     Predictor
	profile *emulator.Profile
	grid    []*deploy.Spec
	ranked  []predict.Point        // current ranking
	front   []predict.Point        // its Pareto front, cheapest first
	byKey   map[string]*Prediction // current prediction of every grid config
	rankOf  map[string]int
}

func (l *loop) predictOptions() predict.Options {
	o := predict.Options{Profile: l.pred.profile, Workload: l.o.Workload, QPS: l.o.QPS, SLO: l.o.SLO}
	if l.o.Capacity != nil {
		co := *l.o.Capacity
		o.Capacity, o.QPS = &co, nil
	}
	return o
}

// rank predicts the whole grid with the current profile.
func (l *loop) rank() {
	p := l.pred
	start := time.Now()
	pts := predict.Evaluate(l.ctx, p.grid, l.predictOptions(), nil)
	p.ranked = predict.Rank(pts)
	if l.o.Capacity != nil {
		p.ranked = predict.RankGoal(pts, l.o.Goal)
	}
	p.byKey, p.rankOf = map[string]*Prediction{}, map[string]int{}
	front := map[string]bool{}
	p.front = predict.ParetoFront(pts)
	for _, f := range p.front {
		front[SpecKey(f.Spec)] = true
	}
	lg := l.lg.Predict
	lg.Ranked = lg.Ranked[:0]
	for i, pt := range p.ranked {
		k := SpecKey(pt.Spec)
		if _, dup := p.byKey[k]; dup {
			continue
		}
		p.byKey[k] = predictionOf(pt, p.profile.Name, i+1)
		p.rankOf[k] = i + 1
		if len(lg.Ranked) < 20 {
			lg.Ranked = append(lg.Ranked, RankedSpec{Rank: i + 1, Key: k, Name: pt.Spec.Name, Objective: pt.Objective,
				CostGPUSec: pt.CostGPUSecPerReq, GPUs: pt.GPUs, Pareto: front[k], Measured: l.tried[k]})
		}
	}
	lg.Seconds += time.Since(start).Seconds()
	best := "none"
	if len(p.ranked) > 0 {
		best = fmt.Sprintf("%s at %.3f req/s", SpecKey(p.ranked[0].Spec), p.ranked[0].Objective)
	}
	l.say("predicted %d configs with profile %s in %.1f s: best %s", len(p.grid), p.profile.Name, time.Since(start).Seconds(), best)
}

// predictionOf turns a predicted point into a trial's prediction.
func predictionOf(pt predict.Point, profile string, rank int) *Prediction {
	pr := &Prediction{Profile: profile, Objective: pt.Objective, CostGPUSec: pt.CostGPUSecPerReq, Rank: rank, Error: pt.Err, Edge: pt.Edge}
	if pt.Record != nil && len(pt.Record.Runs) > 0 {
		for _, l := range pt.Record.Runs[0].Levels {
			pr.Levels = append(pr.Levels, PredictedLevel{OfferedQPS: l.OfferedQPS, P50TTFTMs: l.P50TTFTMs, P50TPOTMs: l.P50TPOTMs,
				P99TTFTMs: l.P99TTFTMs, P99TPOTMs: l.P99TPOTMs, EffectiveQPS: l.EffectiveQPS, Passed: l.Passed})
		}
	}
	return pr
}

// predictionFor is the current prediction of s: the ranking's when s is a
// grid config, else predicted now.
func (l *loop) predictionFor(s *deploy.Spec) *Prediction {
	if p, ok := l.pred.byKey[SpecKey(s)]; ok {
		c := *p
		return &c
	}
	return predictionOf(predict.PointOf(s, l.predictOptions()), l.pred.profile.Name, 0)
}

// scorePrediction sets the trial's objective error once it is measured.
func scorePrediction(t *Trial) {
	p := t.Predicted
	if p == nil || p.Error != "" || t.Error != "" || t.Objective <= 0 {
		return
	}
	e := (t.Objective - p.Objective) / t.Objective
	p.ObjectiveError = &e
}

// predictThenMeasure is the exploration of PredictRule.
func (l *loop) predictThenMeasure() error {
	bound := l.pred.cfg.ErrorBound
	for l.left() > l.reserve() {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		best := l.measuredBest()
		// The most capacity within the budget rarely needs the smaller
		// configs: they are measured for it only while the budget leaves
		// room beside the exploration (with capacity measurement).
		roomy := l.o.Goal.Goal == deploy.GoalCheapest || l.o.Goal.Goal == deploy.GoalPerGPU || l.left() > l.reserve()+2
		if f := l.smallerOnFront(); f != nil && l.o.Capacity != nil && roomy {
			why := fmt.Sprintf("on the predicted Pareto front with %d GPU(s), fewer than any measured config: %.3f req/s at %.4f GPU-s/request (%s)",
				f.GPUs, f.Objective, *f.CostGPUSecPerReq, l.pred.profile.Name)
			if _, err := l.run("proposal", why, f.Spec); err != nil {
				return err
			}
			continue
		}
		next := l.nextCandidate()
		if next == nil {
			l.lg.Predict.StopReason = "every config the ranking offers was measured"
			l.say("exploration ends: %s", l.lg.Predict.StopReason)
			return nil
		}
		if best != nil {
			band := noiseBand(best)
			if !promising(l.o.Goal, *next, best, band) {
				by := fmt.Sprintf("by more than its noise band %.1f%%", 100*band)
				switch l.o.Goal.Goal {
				case deploy.GoalCheapest:
					by = fmt.Sprintf("by the goal (cheapest at %g req/s: the target with fewer than its %d GPUs, or with as many and more capacity beyond its noise band %.1f%%)",
						l.o.Goal.TargetQPS, trialGPUs(best), 100*band)
				case deploy.GoalPerGPU:
					by = fmt.Sprintf("in capacity per GPU by more than its noise band %.1f%%", 100*band)
				}
				l.lg.Predict.StopReason = fmt.Sprintf("no untried config is predicted to beat the measured best (trial %d, %.3f req/s on %d GPU(s)) %s: the best untried, %s, is predicted at %.3f req/s on %d GPU(s)",
					best.N, best.Objective, trialGPUs(best), by, SpecKey(next.Spec), next.Objective, next.GPUs)
				l.say("exploration ends: %s", l.lg.Predict.StopReason)
				return nil
			}
		}
		why := fmt.Sprintf("predicted rank %d of %d (%s): %.3f req/s", l.pred.rankOf[SpecKey(next.Spec)], len(l.pred.grid), l.pred.profile.Name, next.Objective)
		t, err := l.run("proposal", why, next.Spec)
		if err != nil {
			return err
		}
		if pe := t.Predicted; pe != nil && pe.ObjectiveError != nil && math.Abs(*pe.ObjectiveError) > bound {
			edge := ""
			if pe.Edge != "" {
				edge = " (the prediction was too close to call: " + pe.Edge + ")"
			}
			l.say("trial %d measured %.3f req/s against %.3f predicted (%+.1f%%, bound %.0f%%)%s: calibrating", t.N, t.Objective, pe.Objective, 100**pe.ObjectiveError, 100*bound, edge)
			l.calibrate(t.N)
		}
	}
	l.lg.Predict.StopReason = "the exploration budget is spent (the rest is reserved for ablations, the interaction and the re-run)"
	if l.timeShort() {
		l.lg.Predict.StopReason = "the time budget is spent for exploration (the rest is reserved for ablations, the interaction and the re-run)"
	}
	l.explorationShort()
	return nil
}

// measuredBest is the eligible measured trial best by the goal (then the
// highest median objective), or nil.
func (l *loop) measuredBest() *Trial {
	var best *Trial
	for i := range l.lg.Trials {
		t := &l.lg.Trials[i]
		if !t.Eligible || t.Role == "verify" {
			continue
		}
		if best == nil {
			best = t
			continue
		}
		if c := compareFor(l.o.Goal, t, best); c < 0 || c == 0 && t.Objective > best.Objective {
			best = t
		}
	}
	return best
}

// promising reports whether an untried config, predicted at next, could
// beat the measured best by goal g beyond its noise band: a higher
// objective (per GPU for capacity_per_gpu) by more than the band, or,
// cheapest, the target predicted met with fewer GPUs.
func promising(g predict.Goal, next predict.Point, best *Trial, band float64) bool {
	bg := trialGPUs(best)
	switch g.Goal {
	case deploy.GoalCheapest:
		bm := meetsTarget(g, best)
		switch {
		case !g.Meets(next.Objective) && bm:
			return false
		case g.Meets(next.Objective) && !bm:
			return true
		case bm && next.GPUs < bg:
			return true
		case bm && next.GPUs > bg:
			return false
		}
	case deploy.GoalPerGPU:
		if next.GPUs > 0 && bg > 0 {
			return next.Objective/float64(next.GPUs) > best.Objective/float64(bg)*(1+band)
		}
	}
	return next.Objective > best.Objective*(1+band)
}

// noiseBand is the relative band within which a trial's objective cannot
// be told from another: the larger of MinWin and its runs' spread.
func noiseBand(t *Trial) float64 {
	band := MinWin
	if len(t.Objectives) > 1 && t.Objective > 0 {
		band = max(band, (slices.Max(t.Objectives)-slices.Min(t.Objectives))/t.Objective)
	}
	return band
}

// nextCandidate is the next config to measure: the best untried one, and
// after it the best untried of each topology class not yet measured
// among the top ranks.
func (l *loop) nextCandidate() *predict.Point {
	p := l.pred
	measuredClass := map[string]bool{}
	for _, t := range l.lg.Trials {
		if t.Spec != nil {
			measuredClass[topologyClass(t.Spec)] = true
		}
	}
	var first *predict.Point
	for i := range p.ranked {
		pt := &p.ranked[i]
		if pt.Err != "" || pt.Objective <= 0 {
			continue
		}
		if _, seen := l.tried[SpecKey(pt.Spec)]; seen {
			continue
		}
		if first == nil {
			first = pt
		}
		if i < max(p.cfg.TopRanks, 1) && !measuredClass[topologyClass(pt.Spec)] {
			return pt
		}
	}
	return first
}

// smallerOnFront is the cheapest untried config of the predicted Pareto
// front (capacity against GPU-seconds per request) that uses fewer GPUs
// than every measured config, or nil: a deployment smaller than the budget
// that the model says no other beats on both is measured, not only
// ranked, whatever the goal.
func (l *loop) smallerOnFront() *predict.Point {
	fewest := math.MaxInt
	for _, t := range l.lg.Trials {
		if t.Spec != nil {
			fewest = min(fewest, t.Spec.GPUsNeeded())
		}
	}
	for i := range l.pred.front {
		f := &l.pred.front[i]
		if _, seen := l.tried[SpecKey(f.Spec)]; !seen && f.GPUs < fewest && f.CostGPUSecPerReq != nil {
			return f
		}
	}
	return nil
}

// topologyClass is a config's topology, pool sizes and tensor parallelism.
func topologyClass(s *deploy.Spec) string {
	t := s.Topology
	if t.Kind == deploy.Disaggregated && t.Prefill != nil && t.Decode != nil {
		return fmt.Sprintf("disagg-%dp%dd-tp%d.%d", t.Prefill.Replicas, t.Decode.Replicas, t.Prefill.TP, t.Decode.TP)
	}
	return fmt.Sprintf("coloc-r%d-tp%d", max(t.Replicas, 1), max(t.TP, 1))
}

// calibrate refits the profile to every measured record so far, re-scores
// the trials' predictions and re-ranks the grid. A failed calibration is
// logged and the profile kept.
func (l *loop) calibrate(after int) {
	p := l.pred
	c := Calibration{AfterTrial: after, From: p.profile.Name}
	var inputs []calibrate.Input
	for _, t := range l.lg.Trials {
		if t.Record == "" || t.Error != "" {
			continue
		}
		in, err := calibrate.InputFromRecord(t.Record)
		if err != nil {
			c.Notes = append(c.Notes, fmt.Sprintf("trial %d: %v", t.N, err))
			continue
		}
		inputs = append(inputs, in)
		c.Trials = append(c.Trials, t.N)
	}
	c.ErrorBefore = calibrate.JSONNumber(l.medianAbsError())
	defer func() { l.lg.Predict.Calibrations = append(l.lg.Predict.Calibrations, c) }()
	if len(inputs) == 0 {
		c.Error = "no measured record to calibrate on"
		l.say("calibration after trial %d: %s; the profile stays %s", after, c.Error, p.profile.Name)
		return
	}
	res, err := calibrate.Calibrate(inputs, calibrate.Config{Start: p.profile})
	if err != nil {
		c.Error = err.Error()
		l.say("calibration after trial %d failed (%v); the profile stays %s", after, err, p.profile.Name)
		return
	}
	prof := res.Profile
	prof.Name = fmt.Sprintf("%s-calibrated-after-trial-%d", baseProfileName(p.cfg.Profile), after)
	c.To, c.Coefficients, c.Notes = prof.Name, res.Coefficients, append(c.Notes, res.Notes...)
	if dir := p.cfg.ProfileDir; dir != "" {
		path := filepath.Join(dir, prof.Name+".yaml")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			if err := emulator.WriteProfileFile(path, prof); err == nil {
				c.Path = path
			} else {
				c.Notes = append(c.Notes, "write profile: "+err.Error())
			}
		}
	}
	p.profile = prof
	l.lg.Predict.Profiles = append(l.lg.Predict.Profiles, prof.Name)
	l.rank()
	// The measured trials' predictions keep what was predicted before
	// they ran; the error after is what the new profile predicts for them.
	var errs []float64
	for i := range l.lg.Trials {
		t := &l.lg.Trials[i]
		if t.Spec == nil || t.Objective <= 0 || t.Error != "" {
			continue
		}
		np := l.predictionFor(t.Spec)
		if np.Error == "" {
			errs = append(errs, math.Abs(t.Objective-np.Objective)/t.Objective)
		}
	}
	c.ErrorAfter = calibrate.JSONNumber(slo.Median(errs))
	l.say("calibrated %s → %s on %d records: median |objective error| %s → %s", c.From, c.To, len(inputs), fmtPct(c.ErrorBefore), fmtPct(c.ErrorAfter))
}

// medianAbsError is the median |objective error| of the measured trials'
// predictions.
func (l *loop) medianAbsError() float64 {
	var errs []float64
	for _, t := range l.lg.Trials {
		if t.Predicted != nil && t.Predicted.ObjectiveError != nil {
			errs = append(errs, math.Abs(*t.Predicted.ObjectiveError))
		}
	}
	return slo.Median(errs)
}

func fmtPct(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

func baseProfileName(p *emulator.Profile) string {
	if p == nil {
		return "profile"
	}
	return p.Name
}

// startPredicting builds the grid and its first ranking, before the
// baseline is measured.
func (l *loop) startPredicting(ctx context.Context) error {
	cfg := *l.o.Predictor
	if cfg.Profile == nil {
		return fmt.Errorf("predict-then-measure: a starting profile is required")
	}
	if cfg.ErrorBound <= 0 {
		cfg.ErrorBound = DefaultErrorBound
	}
	if cfg.TopRanks <= 0 {
		cfg.TopRanks = DefaultTopRanks
	}
	grid, err := predict.Grid(l.o.Base, cfg.Axes)
	if err != nil {
		return fmt.Errorf("predict-then-measure: %w", err)
	}
	l.pred = &predictor{cfg: cfg, profile: cfg.Profile, grid: grid}
	l.lg.Predict = &PredictLog{Rule: PredictRule, ErrorBound: cfg.ErrorBound, GridSize: len(grid), Profiles: []string{cfg.Profile.Name},
		Ranked: []RankedSpec{}, Calibrations: []Calibration{}}
	l.rank()
	return ctx.Err()
}
