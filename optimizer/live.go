package optimizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// LogSchemaVersion is the version of the live experiment log.
const LogSchemaVersion = 1

// Trial is one evaluated candidate: the live experiment log's entry. Every
// candidate is logged, failed ones too.
type Trial struct {
	N       int          `json:"n"`
	Role    string       `json:"role"` // baseline, proposal, ablation, interaction, verify
	Why     string       `json:"why"`
	Key     string       `json:"key"`
	Spec    *deploy.Spec `json:"spec"`
	Kind    schema.Kind  `json:"kind"` // simulation_only | emulated | device: never mixed
	Record  string       `json:"record,omitempty"`
	Started time.Time    `json:"started"`
	Seconds float64      `json:"seconds"`
	Error   string       `json:"error,omitempty"`

	// Objectives are the valid runs' (every level valid); Objective is
	// their median. InvalidRuns were measured and left out.
	Objectives  []float64      `json:"objectives"`
	Objective   float64        `json:"objective"`
	InvalidRuns int            `json:"invalid_runs"`
	CostGPUSec  *float64       `json:"gpu_seconds_per_request"`
	Levels      []LevelSummary `json:"levels"`
	Requests    int            `json:"requests"`
	Failed      int            `json:"failed_requests"`
	Invalid     int            `json:"invalid_outputs"`
	HitRate     *float64       `json:"prefix_hit_rate"`

	Eligible bool   `json:"eligible"`
	Reason   string `json:"reason"`
	// InvalidLevels lists every invalid level of every run ("run 2,
	// 32 req/s: invalid (client_bound: ...)"). A run with any is left out
	// of Objectives; a trial with fewer than MinValidRuns valid runs is not
	// eligible.
	InvalidLevels []string `json:"invalid_levels,omitempty"`
	Bottleneck    string   `json:"bottleneck,omitempty"`
	Diagnosis     string   `json:"diagnosis,omitempty"`
	Proposals     []string `json:"proposals,omitempty"`
	// Breakdown is the mean TTFT split per level (model ms).
	Breakdown []diagnose.LevelBreakdown `json:"breakdown,omitempty"`
	// Predicted is what the engine model predicted for this spec before
	// it was measured (predict-then-measure loop only).
	Predicted *Prediction `json:"predicted,omitempty"`
	// Capacity is each run's capacity search (capacity-measured trials:
	// then Objectives are their values), and ReferenceQPS the load every
	// run also measured, which Levels then summarise.
	Capacity     []capacity.Result `json:"capacity,omitempty"`
	ReferenceQPS float64           `json:"reference_qps,omitempty"`
	// Rescaled: the host decided the trial's first measurement, and
	// whether (Measured) and at which time scale it was measured again
	// (Rescaler); nil when the host decided nothing.
	Rescaled *Rescale `json:"rescaled,omitempty"`
	// TimeScale is the time scale the reported measurement ran at
	// (emulated trials; 0 otherwise), and Floor the host floor the trial
	// began under, which chose it (FloorScaler; nil: not probed).
	TimeScale float64       `json:"time_scale,omitempty"`
	Floor     *FloorReading `json:"floor,omitempty"`
	// Cut: the time budget ended during one of its runs, and the whole
	// runs before it are the trial's measurement; the log's NotMeasured
	// lists it too.
	Cut string `json:"cut,omitempty"`
}

// LevelSummary is one load level over a trial's runs: medians, and every
// run's value (in run order) for plots that show the spread.
type LevelSummary struct {
	OfferedQPS   float64 `json:"offered_qps"`
	P99TTFTMs    float64 `json:"p99_ttft_ms"`
	P99TPOTMs    float64 `json:"p99_tpot_ms"`
	P50TTFTMs    float64 `json:"p50_ttft_ms"`
	P50TPOTMs    float64 `json:"p50_tpot_ms"`
	EffectiveQPS float64 `json:"effective_qps"`
	PassedRuns   int     `json:"passed_runs"`
	Runs         int     `json:"runs"`

	RunP99TTFTMs    []float64 `json:"run_p99_ttft_ms"`
	RunP99TPOTMs    []float64 `json:"run_p99_tpot_ms"`
	RunEffectiveQPS []float64 `json:"run_effective_qps"`
	// RunGoodput is each run's goodput fraction at this level (the share
	// of its measured requests within the SLO's per-request limits,
	// replay.Goodput); empty in logs from before goodput was counted.
	RunGoodput []float64 `json:"run_goodput_fraction,omitempty"`
	// RunValid is each run's verdict on this level; Invalid lists the
	// reasons of the invalid ones ("run 2: client_bound: ..."). Medians
	// above are over every run; nothing decides on an invalid run's level.
	RunValid []bool   `json:"run_valid"`
	Invalid  []string `json:"invalid,omitempty"`
	// Measured is the number of measured requests per run (p99 of fewer
	// than 100 is their largest or second largest).
	Measured int `json:"measured_requests"`
}

// Log is the live experiment log, rewritten atomically after every trial.
type Log struct {
	SchemaVersion int             `json:"schema_version"`
	Kind          schema.Kind     `json:"kind"`
	Started       time.Time       `json:"started"`
	Workload      schema.Workload `json:"workload"`
	QPS           []float64       `json:"qps"`
	Runs          int             `json:"runs"`
	SLO           slo.SLO         `json:"slo"`
	Budget        int             `json:"budget"`
	// HostFloor is the host's own TTFT floor, measured before the first
	// trial (emulated trials only), and the time scale it led to.
	HostFloor      *HostFloor   `json:"host_floor,omitempty"`
	Trials         []Trial      `json:"trials"`
	Selected       int          `json:"selected"` // trial N; 0 = none eligible
	Verified       bool         `json:"verified"`
	BaselineN      int          `json:"baseline"`
	Interaction    *Interaction `json:"interaction,omitempty"`
	Decision       []string     `json:"decision"`
	SelectionRule  string       `json:"selection_rule"`
	RegressionRule string       `json:"regression_rule"`
	Done           bool         `json:"done"`
	// Predict is the predict-then-measure loop's record: the grid, its
	// ranking, and every calibration. Nil for the diagnosis-driven loop.
	Predict *PredictLog `json:"predict,omitempty"`
	// Measure is how a trial was measured: "capacity" (each run a
	// capacity search, CapacityRule) or "levels" (each run a scan of QPS,
	// the objective the largest effective QPS among passing levels).
	Measure      string       `json:"measure"`
	CapacityRule string       `json:"capacity_rule,omitempty"`
	ReferenceQPS float64      `json:"reference_qps,omitempty"`
	Goal         predict.Goal `json:"goal"`
	// TimeBudgetSeconds is --time-budget (0: none), and NotMeasured what
	// the loop would have measured next but the time budget had no room
	// for (TimeBudgetRule).
	TimeBudgetSeconds float64  `json:"time_budget_seconds,omitempty"`
	NotMeasured       []string `json:"not_measured,omitempty"`
}

// Interaction is a 2×2 reading: topology × prefix caching.
type Interaction struct {
	Factors [2]string  `json:"factors"`
	Cells   [4]int     `json:"trials"` // A1B1, A1B0, A0B1, A0B0
	Values  [4]float64 `json:"objectives"`
	Effect  float64    `json:"interaction"` // (A1B1−A1B0) − (A0B1−A0B0); 0 when a cell is unmeasured
	Text    string     `json:"text"`
	// Unmeasured names the cells whose trial has no valid measurement
	// (it failed, or too few of its runs were valid: "trial N (key):
	// reason"); their objective 0 is not a value, so the interaction is not
	// computed. A trial that passed no load level was measured: its 0 is.
	Unmeasured []string `json:"unmeasured,omitempty"`
}

// Rules of the live loop, stated once for the log and the report. The
// verdict codes come from schema.Rules.
var (
	LiveSelectionRule = "Only runs whose every level has a valid measurement (no " + schema.CodeList() + " verdict) count; eligible: at least 2 such runs, every measured request completed with " +
		"a valid output (exact length, finish reason length), and every counted run passed the SLOs at one or more load levels. A trial beats another when " +
		"every one of its runs' objectives exceeds every one of the other's (Mann-Whitney U = 0: with 3 runs each, p = 0.05 one-sided " +
		"if they did not differ) and its median is at least 2% higher. Selected: the eligible trial with the highest median objective " +
		"(" + levelsObjective + ") if it " +
		"beats the baseline, else the baseline (no change distinguishable from noise); among trials the selection does not beat, the " +
		"one closest to the baseline, then the cheaper. Every measured config competes (an ablation that beats the config it ablates " +
		"is simply a better config); re-runs are not candidates."
	LiveRegressionRule = "The selected config is re-run with the same runs. It is rejected if the re-run is not eligible, if its median " +
		"objective falls more than 10% below the first, or (for a config other than the baseline) if the re-run does not beat the " +
		"baseline by the same rule; the next eligible config is then re-run in turn, finally the baseline."
)

// levelsObjective is what a run's objective is when trials scan levels.
const levelsObjective = "largest effective QPS among passing valid levels; at a fixed GPU budget that is the lowest GPU-seconds per request"

// Evaluator is every backend behind one interface: it runs one spec and
// returns its trial, labelled with the backend's kind, never mixed in one
// log (the optimizer fills N, Role, Why, Key and Spec, and judges
// eligibility). ModelEvaluator is the exact model (simulation_only);
// DeployEvaluator deploys the emulator (emulated) or vLLM (device). A spec
// the backend cannot run is a trial with Error set, not a panic: the loop
// logs it as a failed candidate and goes on.
type Evaluator interface {
	Evaluate(ctx context.Context, spec *deploy.Spec, tag string) Trial
}

// LiveOptions configure the live loop.
type LiveOptions struct {
	Base      *deploy.Spec
	Evaluator Evaluator
	Budget    int // trials in all, verification included; >= 4
	Workload  schema.Workload
	QPS       []float64
	Runs      int
	SLO       slo.SLO
	LogPath   string
	Progress  io.Writer  // one line per trial; nil: none
	HostFloor *HostFloor // measured before the loop, for the log; nil: none
	// Predictor, when set, explores by PredictRule (predict the grid,
	// measure the most promising, calibrate) instead of by diagnosis.
	Predictor *Predictor
	// Capacity, when set, says the evaluator measures trials by capacity
	// (DeployEvaluator.Capacity, the same settings): predictions are then
	// capacities too, and ReferenceQPS is the load every trial's runs
	// also measured (for the log).
	Capacity     *capacity.Options
	ReferenceQPS float64
	// Goal is what the selection optimises (spec.objective); zero: the
	// most capacity (objective) within the budget.
	Goal predict.Goal
	// Deadline, when set, bounds the loop in time (TimeBudgetRule): no
	// trial starts that is not expected to end by it, every trial's
	// context ends at it, and TimeBudget (for the log) is what it was set
	// from. Now is the clock; nil: time.Now.
	Deadline   time.Time
	TimeBudget time.Duration
	Now        func() time.Time
}

// TimeBudgetRule states how the loop plans trials to fit its time budget.
const TimeBudgetRule = "With a time budget (--time-budget), the loop plans trials to fit: after each trial it expects the next to take as long as " +
	"the slowest so far per unit of time scale, at the last trial's scale, and the trials left are the fewer of the --budget's and those that " +
	"fit the time left; exploration keeps the same reserve (ablations, the interaction, the re-run) out of that plan, so the re-run comes " +
	"first when time is short. Every trial's measurement is stopped 20 s before the deadline (its record is written and its deployment stopped in them); a trial keeps the whole runs it measured " +
	"before it (cut: capacity searches or scans of the levels alike; fewer than 2 kept decide nothing). What was not measured for want of time, a cut trial's runs included, is listed " +
	"in the log (not_measured) and its decisions."

// Live runs the optimization loop: the baseline; proposals driven by each
// trial's diagnosis; ablations of the selection and a topology × prefix
// caching interaction; a verification re-run. Every trial is logged.
func Live(ctx context.Context, o LiveOptions) (*Log, error) {
	if o.Base == nil || o.Evaluator == nil {
		return nil, errors.New("live optimizer: a base spec and an evaluator are required")
	}
	if o.Budget < 4 {
		return nil, fmt.Errorf("budget %d: want at least 4 trials (baseline, one proposal, one ablation, a re-run)", o.Budget)
	}
	if o.Runs < 1 {
		o.Runs = 3
	}
	lg := &Log{SchemaVersion: LogSchemaVersion, Started: time.Now().UTC(), Workload: o.Workload, QPS: o.QPS, Runs: o.Runs,
		SLO: o.SLO, Budget: o.Budget, HostFloor: o.HostFloor, SelectionRule: LiveSelectionRule, RegressionRule: LiveRegressionRule,
		Trials: make([]Trial, 0, o.Budget), Measure: "levels", Goal: o.Goal} // never outgrown: pointers into it stay valid
	if o.Goal.Goal == "" {
		lg.Goal.Goal = deploy.GoalCapacity
	}
	if o.Capacity != nil {
		lg.Measure, lg.CapacityRule, lg.ReferenceQPS = "capacity", CapacityRule, o.ReferenceQPS
		lg.SelectionRule = strings.ReplaceAll(strings.Replace(strings.Replace(lg.SelectionRule, "Only runs whose every level has a valid measurement",
			"Only runs whose capacity rests on valid measurements (the search ended on a valid probe, and the passing and failing loads that bracket it have", 1), levelsObjective, "the run's capacity: the largest load meeting the SLO at steady state", 1),
			"passed the SLOs at one or more load levels", "found a capacity above 0") + " " + GoalRule(lg.Goal)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if !o.Deadline.IsZero() {
		lg.TimeBudgetSeconds = o.TimeBudget.Seconds()
	}
	l := &loop{ctx: ctx, o: o, lg: lg, tried: map[string]int{}}
	if o.Predictor != nil {
		if err := l.startPredicting(ctx); err != nil {
			return lg, err
		}
	}
	if err := l.baseline(); err != nil {
		return lg, err
	}
	if o.Predictor != nil {
		if pe := l.base.Predicted; pe != nil && pe.ObjectiveError != nil && math.Abs(*pe.ObjectiveError) > l.pred.cfg.ErrorBound {
			l.say("the baseline measured %.3f req/s against %.3f predicted (%+.1f%%, bound %.0f%%): calibrating",
				l.base.Objective, pe.Objective, 100**pe.ObjectiveError, 100*l.pred.cfg.ErrorBound)
			l.calibrate(l.base.N)
		}
		if err := l.predictThenMeasure(); err != nil {
			return lg, err
		}
	} else if err := l.proposals(); err != nil {
		return lg, err
	}
	order := rankTrialsFor(lg.Trials, l.base, l.o.Goal)
	if len(order) == 0 {
		l.say("no trial was eligible: keeping the baseline (trial %d) unverified", l.base.N)
		lg.Selected = 0
		return l.done()
	}
	best := order[0]
	l.say("best so far: trial %d (%s), median objective %.3f req/s; ablating it", best.N, best.Key, best.Objective)
	if err := l.ablations(best); err != nil {
		return lg, err
	}
	if err := l.interaction(best); err != nil {
		return lg, err
	}
	if err := l.verification(l.selection(best)); err != nil {
		return lg, err
	}
	return l.done()
}

// loop is the live loop's state between its steps.
type loop struct {
	ctx   context.Context
	o     LiveOptions
	lg    *Log
	tried map[string]int // spec key → the first trial N that measured it; re-runs are not counted
	base  *Trial
	pred  *predictor      // predict-then-measure state; nil for the diagnosis-driven loop
	took  []time.Duration // each trial's time on the loop's clock, in trial order
}

// say adds a line to the log's decision and the progress output.
func (l *loop) say(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	l.lg.Decision = append(l.lg.Decision, line)
	if l.o.Progress != nil {
		fmt.Fprintln(l.o.Progress, "optimize:", line)
	}
}

// run evaluates s as the next trial, judges it, logs it and rewrites the
// log file. An error (the log could not be written, ctx is done) ends the
// loop.
func (l *loop) run(role, why string, s *deploy.Spec) (*Trial, error) {
	o, lg := l.o, l.lg
	n := len(lg.Trials) + 1
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "optimize: trial %d/%d %s: %s (%s)\n", n, o.Budget, role, SpecKey(s), why)
	}
	var predicted *Prediction
	ctx := l.ctx
	if l.pred != nil {
		predicted = l.predictionFor(s)
		if o.Capacity != nil && predicted.Error == "" && predicted.Objective > 0 {
			ctx = capacity.WithStart(ctx, predicted.Objective) // the search starts at the prediction
		}
	}
	if !o.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, l.trialsEnd())
		defer cancel()
	}
	if per, _ := l.perScale(); per > 0 {
		ctx = withExpected(ctx, per) // the evaluator knows the scale it runs at
	}
	began := o.Now()
	t := o.Evaluator.Evaluate(ctx, s, fmt.Sprintf("%02d-%s", n, SpecKey(s)))
	l.took = append(l.took, o.Now().Sub(began))
	t.N, t.Role, t.Why, t.Key, t.Spec = n, role, why, SpecKey(s), s
	judge(&t, o.SLO)
	if l.pred != nil {
		t.Predicted = predicted
		scorePrediction(&t)
	}
	lg.Trials = append(lg.Trials, t)
	if t.Cut != "" {
		line := fmt.Sprintf("trial %d (%s): %s", n, t.Key, t.Cut)
		lg.NotMeasured = append(lg.NotMeasured, line)
		l.say("not measured: %s", line)
	}
	if lg.Kind == "" {
		lg.Kind = t.Kind
	}
	if role != "verify" {
		if _, ok := l.tried[t.Key]; !ok {
			l.tried[t.Key] = n
		}
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "optimize: trial %d: objective %.3f req/s (median of %d runs), eligible %t: %s; bottleneck %s\n",
			n, t.Objective, len(t.Objectives), t.Eligible, t.Reason, t.Bottleneck)
	}
	if err := writeLog(o.LogPath, lg); err != nil {
		return nil, err
	}
	if err := l.ctx.Err(); err != nil {
		return nil, err
	}
	return &lg.Trials[len(lg.Trials)-1], nil
}

// left is the number of trials the budget still allows: the --budget's,
// and no more than fit the time budget (TimeBudgetRule).
func (l *loop) left() int {
	n := l.o.Budget - len(l.lg.Trials)
	if fit, ok := l.fit(); ok {
		n = min(n, fit)
	}
	return max(n, 0)
}

// fit is how many trials of the expected length fit the time left; ok is
// false without a time budget or an expectation (before the first trial).
func (l *loop) fit() (int, bool) {
	if l.o.Deadline.IsZero() {
		return 0, false
	}
	rem := l.trialsEnd().Sub(l.o.Now())
	if rem <= 0 {
		return 0, true
	}
	e := l.expected()
	if e <= 0 {
		return 0, false
	}
	return int(rem / e), true
}

// TeardownMargin is how long before the time budget's deadline trials
// end: a trial cut at its deadline still reads its timelines, writes its
// record and stops its deployment (about 20 s on a 2-core host), within
// the budget.
const TeardownMargin = 20 * time.Second

// trialsEnd is when trials must have ended: the deadline less
// TeardownMargin.
func (l *loop) trialsEnd() time.Time { return l.o.Deadline.Add(-TeardownMargin) }

// reserve is how many of the trials left exploration keeps for the
// ablations, the interaction and the re-run: 4, fewer when the plan
// (the --budget, or what fits the time budget) is short.
func (l *loop) reserve() int { return max(1, min(4, len(l.lg.Trials)+l.left()-2)) }

// expected is how long the next trial is expected to take: the slowest
// trial so far per unit of time scale, at the last trial's scale; 0 before
// any trial.
func (l *loop) expected() time.Duration {
	per, last := l.perScale()
	return time.Duration(float64(per) * last)
}

// perScale is the slowest trial so far per unit of time scale (a trial
// without one counts as scale 1), and the last trial's scale.
func (l *loop) perScale() (per time.Duration, last float64) {
	last = 1
	for i, d := range l.took {
		last = 1
		if k := l.lg.Trials[i].TimeScale; k > 0 {
			last = k
		}
		per = max(per, time.Duration(float64(d)/last))
	}
	return per, last
}

// timeShort reports whether the time budget, not the --budget, limits the
// trials left.
func (l *loop) timeShort() bool {
	fit, ok := l.fit()
	return ok && fit < l.o.Budget-len(l.lg.Trials)
}

// unmeasured records what the time budget left no room for.
func (l *loop) unmeasured(what string) {
	rem := max(l.trialsEnd().Sub(l.o.Now()), 0).Round(time.Second)
	line := fmt.Sprintf("%s (the time budget leaves %s; a trial takes about %s)", what, rem, l.expected().Round(time.Second))
	l.lg.NotMeasured = append(l.lg.NotMeasured, line)
	l.say("not measured: %s", line)
}

// baseline measures the base spec as given.
func (l *loop) baseline() error {
	base, err := l.run("baseline", "the baseline as given", CloneSpec(l.o.Base))
	if err != nil {
		return err
	}
	l.base, l.lg.BaselineN = base, base.N
	return nil
}

// proposals explores: each trial's diagnosis proposes the next spec, from
// the best eligible trial so far (or, while none is eligible, the newest),
// until only the reserve is left or nothing untried is proposed.
func (l *loop) proposals() error {
	// Reserve: one re-run, two ablations, one interaction cell.
	cur := l.base
	for l.left() > l.reserve() {
		var next *Candidate
		for _, c := range Propose(cur.Spec, cur.Bottleneck) {
			if _, seen := l.tried[SpecKey(c.Spec)]; !seen {
				next = &c
				break
			}
		}
		if next == nil {
			l.say("no untried proposal for trial %d's bottleneck (%s): exploration ends", cur.N, cur.Bottleneck)
			return nil
		}
		t, err := l.run("proposal", next.Why, next.Spec)
		if err != nil {
			return err
		}
		if t.Eligible && (!cur.Eligible || t.Objective > cur.Objective) {
			cur = t
		} else if !t.Eligible && !cur.Eligible {
			cur = t // follow the diagnosis from the newest trial
		}
	}
	l.explorationShort()
	return nil
}

// ablations measures the single-factor reversals of best that were not
// measured yet, keeping one trial for the re-run and, when it is still
// missing, one for the interaction cell.
func (l *loop) ablations(best *Trial) error {
	for _, c := range Ablations(best.Spec) {
		if l.left() <= 1+interactionNeeded(l.lg, best) {
			if _, seen := l.tried[SpecKey(c.Spec)]; !seen && l.timeShort() {
				l.unmeasured(fmt.Sprintf("ablation %s: %s", SpecKey(c.Spec), c.Why))
				continue
			}
			break
		}
		if n, seen := l.tried[SpecKey(c.Spec)]; seen {
			l.say("%s: already measured as trial %d", c.Why, n)
			continue
		}
		if _, err := l.run("ablation", c.Why, c.Spec); err != nil {
			return err
		}
	}
	return nil
}

// interaction measures the missing cells of topology × prefix caching
// around best (the other topology, with the cache as selected and
// flipped), when the budget leaves room before the re-run, and reads the
// interaction when all four cells are measured.
func (l *loop) interaction(best *Trial) error {
	cells := interactionCells(best.Spec, l.base.Spec, l.tried)
	for i, cell := range cells {
		if l.left() <= 1 || (len(cells) == 2 && i == 0 && l.left() <= 2) {
			if l.timeShort() {
				for _, c := range cells[i:] {
					l.unmeasured("interaction cell " + SpecKey(c))
				}
			}
			break // the re-run comes first; half an interaction reads nothing
		}
		why := "topology × prefix caching: the other topology, the cache " + map[bool]string{true: "on", false: "off"}[cachingOn(cell)]
		if _, err := l.run("interaction", why, cell); err != nil {
			return err
		}
	}
	l.lg.Interaction = readInteraction(l.lg, best.Spec, l.base.Spec, l.tried)
	if l.lg.Interaction != nil {
		l.say("%s", l.lg.Interaction.Text)
	}
	return nil
}

// selection ranks every measured config, ablations and the interaction
// cell included: an ablation that beats the config it ablates is a better
// config, and it is what gets verified. The first is the selection, the
// rest its fallbacks.
func (l *loop) selection(best *Trial) []*Trial {
	order := rankTrialsFor(l.lg.Trials, l.base, l.o.Goal)
	if order[0] != best {
		l.say("trial %d (%s, %s) beats trial %d: %.3f vs %.3f req/s", order[0].N, order[0].Key, order[0].Why, best.N, order[0].Objective, best.Objective)
	}
	if order[0].N == l.base.N && len(order) > 1 {
		l.say("no trial beats the baseline beyond the runs' noise (best other: trial %d, %s, runs %s vs the baseline's %s): keeping the baseline",
			order[1].N, order[1].Key, fmtRuns(order[1].Objectives), fmtRuns(l.base.Objectives))
	}
	l.say("selected trial %d (%s): median objective %.3f req/s (runs %s)", order[0].N, order[0].Key, order[0].Objective, fmtRuns(order[0].Objectives))
	return order
}

// verification re-runs the selection by LiveRegressionRule; a rejected
// one falls back to the next in order while the budget lasts.
func (l *loop) verification(order []*Trial) error {
	lg := l.lg
	lg.Selected = order[0].N
	i := 0
	for ; i < len(order) && l.left() > 0; i++ {
		cand := order[i]
		v, err := l.run("verify", fmt.Sprintf("re-run of trial %d", cand.N), CloneSpec(cand.Spec))
		if err != nil {
			return err
		}
		if reason := liveRegressedFor(l.o.Goal, cand, v, l.base); reason != "" {
			l.say("trial %d rejected by the regression rule: %s", cand.N, reason)
			lg.Selected = 0
			continue
		}
		lg.Selected, lg.Verified = cand.N, true
		l.say("trial %d confirmed by its re-run (trial %d: median objective %.3f req/s)", cand.N, v.N, v.Objective)
		break
	}
	if !lg.Verified && i < len(order) && l.timeShort() {
		l.unmeasured(fmt.Sprintf("the re-run of trial %d (%s)", order[i].N, order[i].Key))
		if i == 0 {
			lg.Selected = 0
			l.say("trial %d is not verified: the time budget left no room for its re-run; nothing is selected", order[0].N)
			return nil
		}
	}
	if lg.Selected == 0 {
		l.say("no selection survived its re-run: keeping the baseline (trial %d)", l.base.N)
	}
	return nil
}

// explorationShort notes the exploration trials the time budget left no
// room for.
func (l *loop) explorationShort() {
	if l.timeShort() {
		if n := l.o.Budget - len(l.lg.Trials) - l.reserve(); n > 0 {
			l.unmeasured(fmt.Sprintf("%d exploration trial(s) the --budget allowed", n))
		}
	}
}

// done marks the log complete and writes it.
func (l *loop) done() (*Log, error) {
	l.lg.Done = true
	if p := l.lg.Predict; p != nil {
		for i := range p.Ranked {
			p.Ranked[i].Measured = l.tried[p.Ranked[i].Key]
		}
	}
	return l.lg, writeLog(l.o.LogPath, l.lg)
}

// measured reports whether t's objective is a measurement: it ran, and
// enough of its runs were valid (replay.EnoughValid).
func measured(t *Trial) bool {
	return t.Error == "" && replay.EnoughValid(len(t.Objectives), len(t.Objectives)+t.InvalidRuns)
}

// judge sets a trial's eligibility from its figures.
func judge(t *Trial, target slo.SLO) {
	switch {
	case t.Error != "":
		t.Eligible, t.Reason = false, "failed: "+t.Error
	case len(t.InvalidLevels) > 0 && len(t.Objectives) < MinValidRuns:
		t.Eligible, t.Reason = false, fmt.Sprintf("%d of %d runs have an invalid level, so its figures decide nothing: %s",
			t.InvalidRuns, t.InvalidRuns+len(t.Objectives), t.InvalidLevels[0])
	case t.Cut != "" && len(t.Objectives) < MinValidRuns:
		// The runs the cut lost were planned: one kept run cannot show
		// its noise (replay.EnoughValid of the planned runs).
		t.Eligible, t.Reason = false, fmt.Sprintf("%d valid run(s) before the time budget's cut: fewer than %d decide nothing", len(t.Objectives), MinValidRuns)
	case t.Failed > 0:
		t.Eligible, t.Reason = false, fmt.Sprintf("%d measured requests failed or timed out", t.Failed)
	case t.Invalid > 0:
		t.Eligible, t.Reason = false, fmt.Sprintf("%d outputs failed validation", t.Invalid)
	case len(t.Objectives) == 0:
		t.Eligible, t.Reason = false, "no runs"
	default:
		for _, o := range t.Objectives {
			if o <= 0 {
				t.Eligible, t.Reason = false, fmt.Sprintf("a run passed no load level (p99 TTFT ≤ %g ms, p99 TPOT ≤ %g ms)", target.TTFTMillis, target.TPOTMillis)
				return
			}
		}
		t.Eligible, t.Reason = true, "correct outputs, SLOs met at one or more levels in every run"
		if len(t.Capacity) > 0 {
			t.Reason = "correct outputs, a capacity above 0 in every counted run"
		}
		if t.InvalidRuns > 0 {
			t.Reason += fmt.Sprintf("; %d invalid run(s) left out (%s)", t.InvalidRuns, t.InvalidLevels[0])
		}
	}
	if t.Rescaled != nil {
		t.Reason += "; " + t.Rescaled.String()
	}
	if t.Cut != "" {
		t.Reason += "; " + t.Cut
	}
}

// rankTrialsFor orders eligible trials (re-runs excluded) for goal g
// (GoalRule; the zero Goal is LiveSelectionRule): the first is the
// selection, the rest follow by median objective, as fallbacks. A trial
// displaces another only when it beats it by g beyond noise (BeatsFor).
//
// It is not the exercise's ranking (highest objective, ties to the
// baseline, then the earliest call) and does not share its code: live
// objectives are medians of noisy runs, so a trial displaces the baseline
// only when it beats it run for run (Beats), and ties fall to cost before
// the distance to the baseline. Distance is the one piece both rules share.
func rankTrialsFor(ts []Trial, base *Trial, g predict.Goal) []*Trial {
	var out []*Trial
	for i := range ts {
		if ts[i].Eligible && ts[i].Role != "verify" {
			out = append(out, &ts[i])
		}
	}
	cost := func(t *Trial) float64 {
		if t.CostGPUSec == nil {
			return math.Inf(1)
		}
		return *t.CostGPUSec
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if c := compareFor(g, a, b); c != 0 {
			return c < 0
		}
		if a.Objective != b.Objective {
			return a.Objective > b.Objective
		}
		if cost(a) != cost(b) {
			return cost(a) < cost(b)
		}
		return specDistance(base.Spec, a.Spec) < specDistance(base.Spec, b.Spec)
	})
	if len(out) < 2 {
		return out
	}
	// Among the trials the best one does not beat, prefer the config
	// closest to the baseline, then the cheaper one: noise never moves the
	// selection away from the baseline.
	top := out[0]
	pick := 0
	for i, t := range out {
		if BeatsFor(g, top, t) {
			continue
		}
		p := out[pick]
		if d, dp := specDistance(base.Spec, t.Spec), specDistance(base.Spec, p.Spec); d < dp || (d == dp && cost(t) < cost(p)) {
			pick = i
		}
	}
	if pick != 0 {
		t := out[pick]
		copy(out[1:pick+1], out[0:pick])
		out[0] = t
	}
	return out
}

// MinValidRuns is how many runs valid at every level a trial needs to be
// eligible: fewer cannot show its noise (the gate's rule too).
const MinValidRuns = replay.MinValidRuns

// MinWin is the smallest median improvement that counts as a win.
const MinWin = 0.02

// Beats reports whether a is better than b beyond the runs' noise: every
// run of a has a higher objective than every run of b (the Mann-Whitney U
// statistic is 0: with 3 runs each, a result this extreme has probability
// 1/20 if the configs did not differ), and a's median is at least MinWin
// higher. A trial with a single run beats nothing: one run says nothing
// about noise.
func Beats(a, b *Trial) bool {
	if len(a.Objectives) < 2 || len(b.Objectives) < 2 {
		return false
	}
	return slices.Min(a.Objectives) > slices.Max(b.Objectives) && a.Objective >= (1+MinWin)*b.Objective
}

// GoalRule states how goal g orders and beats trials, for the log.
func GoalRule(g predict.Goal) string {
	switch g.Goal {
	case deploy.GoalCheapest:
		return fmt.Sprintf("Goal cheapest at %g req/s (spec.objective): a trial meets the target when every valid run's capacity reaches %g req/s; "+
			"trials that meet it rank first, fewest GPUs first (a config with fewer GPUs that meets the target beats one with more: the cost differs by "+
			"construction, not by noise), then by capacity with the rule above.", g.TargetQPS, g.TargetQPS)
	case deploy.GoalPerGPU:
		return "Goal capacity per GPU (spec.objective): trials rank and beat each other by capacity / GPUs, each run's capacity divided by the config's GPUs."
	}
	return "Goal capacity (spec.objective; the default): the most capacity within the GPU budget."
}

// meetsTarget: every valid run of t reaches g's target rate.
func meetsTarget(g predict.Goal, t *Trial) bool {
	return len(t.Objectives) > 0 && slices.Min(t.Objectives) >= g.TargetQPS
}

func trialGPUs(t *Trial) int {
	if t.Spec == nil {
		return 0
	}
	return t.Spec.GPUsNeeded()
}

// compareFor orders a before b (negative) by goal g; 0: g does not tell
// them apart (the objective then decides).
func compareFor(g predict.Goal, a, b *Trial) int {
	return g.CompareBy(meetsTarget(g, a), a.Objective, trialGPUs(a), meetsTarget(g, b), b.Objective, trialGPUs(b))
}

// BeatsFor is Beats by goal g: cheapest, a trial that meets the target
// with fewer GPUs beats one with more, or one that misses it; per GPU, the
// runs' capacities per GPU are compared by Beats' rule.
func BeatsFor(g predict.Goal, a, b *Trial) bool {
	switch g.Goal {
	case deploy.GoalCheapest:
		am, bm := meetsTarget(g, a), meetsTarget(g, b)
		switch {
		case am && !bm:
			return len(a.Objectives) >= 2
		case !am:
			return false
		case trialGPUs(a) < trialGPUs(b):
			return len(a.Objectives) >= 2
		case trialGPUs(a) > trialGPUs(b):
			return false
		}
	case deploy.GoalPerGPU:
		ga, gb := trialGPUs(a), trialGPUs(b)
		if ga > 0 && gb > 0 && ga != gb {
			per := func(t *Trial, n int) *Trial {
				c := &Trial{Objective: t.Objective / float64(n)}
				for _, o := range t.Objectives {
					c.Objectives = append(c.Objectives, o/float64(n))
				}
				return c
			}
			return Beats(per(a, ga), per(b, gb))
		}
	}
	return Beats(a, b)
}

func specDistance(a, b *deploy.Spec) int {
	var x, y map[string]any
	ba, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	json.Unmarshal(ba, &x)
	json.Unmarshal(bb, &y)
	return Distance(x, y)
}

// liveRegressed applies LiveRegressionRule to a selection's re-run.
//
// It is not the exercise's regression rule (exercise.RegressionRule, which
// rejects any difference at all): a live trial's figures are medians of
// noisy runs, so the re-run may fall up to 10% below the first run before
// it counts as a regression, and beside that it must still beat the
// baseline by Beats, the noise rule the selection itself used.
func liveRegressed(first, again, base *Trial) string {
	switch {
	case !again.Eligible:
		return "the re-run is not eligible: " + again.Reason
	case again.Objective < 0.9*first.Objective:
		return fmt.Sprintf("the re-run's median objective %.3f is more than 10%% below the first run's %.3f", again.Objective, first.Objective)
	case first.N != base.N && !Beats(again, base):
		return fmt.Sprintf("the re-run's objectives %s do not beat the baseline's %s beyond noise", fmtRuns(again.Objectives), fmtRuns(base.Objectives))
	}
	return ""
}

// liveRegressedFor is liveRegressed by goal g: the re-run must also beat
// the baseline by g (BeatsFor), and, cheapest, still meet the target.
func liveRegressedFor(g predict.Goal, first, again, base *Trial) string {
	if g.Goal == "" || g.Goal == deploy.GoalCapacity {
		return liveRegressed(first, again, base)
	}
	switch {
	case !again.Eligible:
		return "the re-run is not eligible: " + again.Reason
	case again.Objective < 0.9*first.Objective:
		return fmt.Sprintf("the re-run's median objective %.3f is more than 10%% below the first run's %.3f", again.Objective, first.Objective)
	case g.Goal == deploy.GoalCheapest && !meetsTarget(g, again):
		return fmt.Sprintf("the re-run's capacities %s do not all reach the target %g req/s", fmtRuns(again.Objectives), g.TargetQPS)
	case first.N != base.N && !BeatsFor(g, again, base):
		return fmt.Sprintf("the re-run (runs %s, %d GPUs) does not beat the baseline (runs %s, %d GPUs) by the goal beyond noise",
			fmtRuns(again.Objectives), trialGPUs(again), fmtRuns(base.Objectives), trialGPUs(base))
	}
	return ""
}

func fmtRuns(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(s, " / ")
}

// interactionCells are the specs still missing from topology × prefix
// caching around the selection, in the order they are measured: the other
// topology with the cache as selected, then with it flipped.
func interactionCells(s, base *deploy.Spec, tried map[string]int) []*deploy.Spec {
	other, ok := otherTopology(s, base)
	if !ok {
		return nil
	}
	flipped := CloneSpec(other)
	flipped.Knobs.PrefixCaching = boolp(!cachingOn(s))
	var out []*deploy.Spec
	for _, c := range []*deploy.Spec{other, flipped} {
		if _, seen := tried[SpecKey(c)]; !seen {
			out = append(out, c)
		}
	}
	return out
}

// interactionNeeded is how many trials the interaction still needs.
func interactionNeeded(lg *Log, best *Trial) int {
	keys := map[string]int{}
	for _, t := range lg.Trials {
		keys[t.Key] = t.N
	}
	var base *deploy.Spec
	if lg.BaselineN > 0 && lg.BaselineN <= len(lg.Trials) {
		base = lg.Trials[lg.BaselineN-1].Spec
	}
	return len(interactionCells(best.Spec, base, keys))
}

// otherTopology is the topology the interaction sets against s's: the
// other of colocated and disaggregated on s's GPUs; where s's GPUs allow
// no other (one GPU), the baseline's topology and GPUs (a cheapest config
// smaller than the baseline: replicas × prefix caching); else none.
func otherTopology(s, base *deploy.Spec) (*deploy.Spec, bool) {
	if other, ok := Colocate(s); ok {
		return other, true
	}
	if other, ok := Disaggregate(s); ok {
		return other, true
	}
	if base == nil || base.GPUsNeeded() == s.GPUsNeeded() {
		return nil, false
	}
	other := CloneSpec(s)
	other.Topology, other.GPUs, other.KV = base.Topology, base.GPUs, base.KV
	if base.Topology.Prefill != nil {
		p := *base.Topology.Prefill
		other.Topology.Prefill = &p
	}
	if base.Topology.Decode != nil {
		d := *base.Topology.Decode
		other.Topology.Decode = &d
	}
	other.GPUs.IDs = slices.Clone(base.GPUs.IDs)
	return other, SpecKey(other) != SpecKey(s)
}

func readInteraction(lg *Log, s, base *deploy.Spec, tried map[string]int) *Interaction {
	other, ok := otherTopology(s, base)
	if !ok {
		return nil
	}
	flip := func(x *deploy.Spec) *deploy.Spec {
		c := CloneSpec(x)
		c.Knobs.PrefixCaching = boolp(!cachingOn(x))
		return c
	}
	cells := [4]*deploy.Spec{s, flip(s), other, flip(other)}
	in := &Interaction{Factors: [2]string{"topology (" + SpecKey(s) + " vs " + SpecKey(other) + ")", "prefix caching"}}
	for i, c := range cells {
		n, ok := tried[SpecKey(c)]
		if !ok {
			return nil
		}
		t := &lg.Trials[n-1]
		in.Cells[i], in.Values[i] = n, t.Objective
		if !measured(t) {
			in.Unmeasured = append(in.Unmeasured, fmt.Sprintf("trial %d (%s): %s", n, SpecKey(c), t.Reason))
		}
	}
	if len(in.Unmeasured) > 0 {
		in.Text = "interaction not measured: " + strings.Join(in.Unmeasured, "; ")
		return in
	}
	in.Effect = (in.Values[0] - in.Values[1]) - (in.Values[2] - in.Values[3])
	in.Text = fmt.Sprintf("interaction: prefix caching is worth %.3f req/s on %s and %.3f req/s on %s; interaction %.3f req/s",
		in.Values[0]-in.Values[1], SpecKey(s), in.Values[2]-in.Values[3], SpecKey(other), in.Effect)
	return in
}

func writeLog(path string, lg *Log) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(lg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'))
}

// ReadLog reads a live experiment log.
func ReadLog(path string) (*Log, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read experiment log: %w", err)
	}
	var lg Log
	if err := json.Unmarshal(b, &lg); err != nil {
		return nil, fmt.Errorf("experiment log %s: %w", path, err)
	}
	if lg.SchemaVersion != LogSchemaVersion {
		return nil, fmt.Errorf("experiment log %s: schema_version %d, want %d", path, lg.SchemaVersion, LogSchemaVersion)
	}
	return &lg, nil
}
