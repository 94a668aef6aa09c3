package optimizer

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// Options is what hone optimize takes: its flags, by name, checked as the
// command checks them (with --explore's and --measure's defaults filled
// in), and the values cmd/hone makes of the workload and grid flags.
type Options struct {
	Spec         string        // --spec: the baseline deployment spec (required)
	OutDir       string        // --out: the log, records, traces and state (required)
	Runs         int           // --runs: independent runs per trial
	Budget       int           // --budget: trials in all
	Backend      string        // --backend: live or model
	TimeScale    string        // --time-scale: auto, spec or a factor
	MaxTimeScale float64       // --max-time-scale
	TimeBudget   time.Duration // --time-budget: 0 is none
	Force        bool          // --force: start over in an OutDir that holds an earlier run
	Explore      string        // --explore: predict or diagnose
	VLLM         string        // --vllm: the vllm executable of a vLLM spec's trials
	Profile      string        // --profile: the cost profile predictions start from
	Measure      string        // --measure: capacity or levels
	Precision    float64       // --capacity-precision
	ReferenceQPS float64       // --reference-qps: 0 is the spec's target, else half the predicted capacity
	// Workload (the workload flags and --seed), QPS (--qps) and SLO (the
	// SLO flags) are what each trial replays and is judged by.
	Workload schema.Workload
	QPS      []float64
	SLO      slo.SLO
	// Axes is the grid --explore predict ranks (the grid axis flags).
	Axes predict.Axes
	// Version and Commit are hone's, for the records.
	Version, Commit string
	// Started is when the command started: --time-budget counts from it
	// (zero: when Run starts).
	Started time.Time
	// Out gets the outcome, Log the progress and notes.
	Out, Log io.Writer
}

// cliRun is one hone optimize run: what its steps share.
type cliRun struct {
	o        Options
	base     *deploy.Spec
	dev      *DeployEvaluator
	ev       Evaluator
	deadline time.Time
}

// Run is hone optimize: it claims o.OutDir, measures the host's floor
// (emulated live trials), and runs Live until the budget is spent or ctx
// ends; SIGINT and SIGTERM end the current trial cleanly (its deployment
// torn down, the log kept) once the trials' evaluator is made. Bad input
// is a usage.Error, no verified selection a usage.Failed, a run stopped by
// a signal a usage.Interrupted.
func Run(ctx context.Context, o Options) error {
	if o.Started.IsZero() {
		o.Started = time.Now()
	}
	base, err := deploy.LoadSpec(o.Spec)
	if err != nil {
		return usage.Wrap(err)
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	unlock, err := lockOutDir(o.OutDir, o.Log)
	if err != nil {
		return err
	}
	defer unlock()
	if err := claimOutDir(o.OutDir, o.Force, o.Log); err != nil {
		return err
	}
	r := &cliRun{o: o, base: base}
	if err := r.evaluator(); err != nil {
		return err
	}
	// Ctrl-C or SIGTERM ends the current trial cleanly: its deployment is
	// torn down and the log keeps every trial so far.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	lo, err := r.liveOptions(ctx)
	if err != nil {
		return err
	}
	lg, err := Live(ctx, lo)
	if err != nil {
		return stopped(ctx, fmt.Errorf("optimize: %w (the log so far is in %s)", err, lo.LogPath))
	}
	return printOptimized(o.Out, lg, lo.LogPath, o.TimeBudget)
}

// fixedScale is --time-scale as a factor, 0 for auto or spec.
func fixedScale(timeScale string, base *deploy.Spec) (float64, error) {
	switch timeScale {
	case "auto", "spec":
		return 0, nil
	}
	v, err := strconv.ParseFloat(timeScale, 64)
	if err != nil || !(v > 0) || v > deploy.MaxTimeScale {
		return 0, usage.Errorf("--time-scale: want auto, spec or a positive factor, got %q", timeScale)
	}
	if !engine.Emulated(base.Engine) {
		return 0, usage.Errorf("--time-scale: %s: only an emulator spec has a time scale (engine %q)", timeScale, base.Engine)
	}
	return v, nil
}

// evaluator makes the trials' evaluator: deploy and replay (rescaled, for
// an emulator spec), or the exact queueing model.
func (r *cliRun) evaluator() error {
	o := r.o
	scaleFixed, err := fixedScale(o.TimeScale, r.base)
	if err != nil {
		return err
	}
	if scaleFixed > 0 {
		r.base.Emulator.TimeScale = scaleFixed
	}
	hone, err := os.Executable()
	if err != nil {
		return err
	}
	r.dev = &DeployEvaluator{Up: deploy.UpOptions{Hone: hone, VLLM: o.VLLM, StateDir: filepath.Join(o.OutDir, "state"), Owned: true},
		Workload: o.Workload, QPS: o.QPS, Runs: o.Runs, SLO: o.SLO, OutDir: o.OutDir, Hone: schema.Build{Version: o.Version, Commit: o.Commit}, Log: o.Log}
	r.ev = r.dev
	if engine.Emulated(r.base.Engine) && o.MaxTimeScale > 0 {
		r.ev = &Rescaler{Inner: r.dev, MaxScale: o.MaxTimeScale, Log: o.Log}
	}
	if o.Backend == "model" {
		r.ev = &ModelEvaluator{Workload: o.Workload, QPS: o.QPS, Runs: o.Runs, SLO: o.SLO}
	}
	return nil
}

// liveOptions measures the host's floor and the reference load where they
// are needed, and states the run for Live.
func (r *cliRun) liveOptions(ctx context.Context) (LiveOptions, error) {
	o := r.o
	if o.TimeBudget > 0 {
		r.deadline = o.Started.Add(o.TimeBudget)
	}
	floor, err := r.hostFloor(ctx)
	if err != nil {
		return LiveOptions{}, err
	}
	var pred *Predictor
	if o.Explore == "predict" {
		prof, err := emulator.ResolveProfile(o.Profile, r.base.Emulator.Profile)
		if err != nil {
			return LiveOptions{}, err
		}
		pred = &Predictor{Profile: prof, Axes: o.Axes, ProfileDir: filepath.Join(o.OutDir, "profiles")}
	}
	lo := LiveOptions{Base: r.base, Evaluator: r.ev, Budget: o.Budget, HostFloor: floor,
		Workload: o.Workload, QPS: o.QPS, Runs: o.Runs, SLO: o.SLO, LogPath: filepath.Join(o.OutDir, "log.json"), Progress: o.Log, Predictor: pred,
		Goal: predict.Goal(r.base.Objective), Deadline: r.deadline, TimeBudget: o.TimeBudget}
	if o.Measure == "capacity" {
		co := capacity.Options{Mode: capacity.Open, SLO: o.SLO, Precision: o.Precision, MinRequests: o.Workload.Requests - replay.Sessions}
		ref, err := r.referenceLoad(ctx, co)
		if err != nil {
			return lo, err
		}
		r.dev.Capacity, r.dev.ReferenceQPS, r.dev.Log = &co, ref, o.Log
		lo.Capacity, lo.ReferenceQPS = &co, ref
	}
	return lo, nil
}

// hostFloor measures the host's floor before the trials of an emulator
// spec measured live (nil otherwise), and, with --time-scale auto, makes
// each trial probe it again and run at the scale it allows.
func (r *cliRun) hostFloor(ctx context.Context) (*HostFloor, error) {
	o := r.o
	if !engine.Emulated(r.base.Engine) || o.Backend != "live" {
		return nil, nil
	}
	floorCtx := ctx // the floor counts against --time-budget
	if !r.deadline.IsZero() {
		var cancel context.CancelFunc
		floorCtx, cancel = context.WithDeadline(ctx, r.deadline)
		defer cancel()
	}
	fmt.Fprintf(o.Log, "optimize: measuring the host's floor (zero-cost engine, %g req/s, %d runs)\n", slices.Max(o.QPS), FloorRuns)
	floor, err := r.dev.MeasureFloor(floorCtx, r.base)
	if err != nil {
		if ctx.Err() == nil && floorCtx.Err() != nil {
			return nil, fmt.Errorf("optimize: --time-budget %s ended while measuring the host's floor, before any trial: %w", o.TimeBudget, err)
		}
		return nil, stopped(ctx, fmt.Errorf("optimize: host floor: %w", err))
	}
	fmt.Fprintf(o.Log, "optimize: host floor p50 %.2f / p99 %.2f ms real (dispatch lag p99 %.2f ms), baseline engine median TTFT %.2f model ms; ",
		floor.P50RealMs, floor.P99RealMs, floor.DispatchP99RealMs, floor.EngineP50TTFTMs)
	if o.TimeScale == "auto" {
		// Each trial probes the floor again and runs at the scale it
		// allows then: the specs keep the spec's.
		r.ev = &FloorScaler{Inner: r.ev, Probe: r.dev.ProbeFloor, TTFTSLOMs: o.SLO.TTFTMillis, MaxScale: o.MaxTimeScale, Log: o.Log}
		floor.CapScale(o.MaxTimeScale)
		fmt.Fprintf(o.Log, "time scale %g now (spec: %g): floor %.1f model ms; each trial probes the floor again and runs at the scale it allows then\n",
			floor.ChosenTimeScale, floor.SpecTimeScale, floor.FloorModelMs)
	} else {
		floor.ChosenTimeScale = max(r.base.Emulator.TimeScale, 0)
		if floor.ChosenTimeScale == 0 {
			floor.ChosenTimeScale = 1
		}
		floor.Settle()
		floor.Note = strings.TrimPrefix(floor.Note+"; ", "; ") + "--time-scale " + o.TimeScale + ": the scale was not chosen from the floor"
		fmt.Fprintf(o.Log, "trials run at time scale %g as asked: floor %.1f model ms\n", floor.ChosenTimeScale, floor.FloorModelMs)
	}
	if floor.Note != "" {
		fmt.Fprintf(o.Log, "optimize: warning: %s\n", floor.Note)
	}
	return floor, nil
}

// referenceLoad is the rate every capacity run also measures: --reference-qps,
// else the spec's target, else half the baseline's predicted capacity.
func (r *cliRun) referenceLoad(ctx context.Context, co capacity.Options) (float64, error) {
	ref := r.o.ReferenceQPS
	if ref == 0 {
		ref = r.base.Objective.TargetQPS
	}
	if ref != 0 {
		return ref, nil
	}
	prof, err := emulator.ResolveProfile(r.o.Profile, r.base.Emulator.Profile)
	if err != nil {
		return 0, err
	}
	res, err := predict.Capacity(ctx, r.base, predict.Options{Profile: prof, Workload: r.o.Workload, SLO: r.o.SLO}, co)
	if err != nil || res.Value <= 0 {
		return 0, usage.Errorf("--reference-qps: the baseline's capacity could not be predicted (%v%s): give --reference-qps", err, orNote(res))
	}
	ref = math.Round(res.Value/2*100) / 100
	fmt.Fprintf(r.o.Log, "optimize: reference load %g req/s: half the baseline's predicted capacity %.3g req/s (profile %s)\n", ref, res.Value, prof.Name)
	return ref, nil
}

// printOptimized prints the run's outcome; no verified selection is a
// failed check (exit 1).
func printOptimized(out io.Writer, lg *Log, logPath string, timeBudget time.Duration) error {
	fmt.Fprintf(out, "experiment log: %s (%d trials, %s)\n", logPath, len(lg.Trials), lg.Kind)
	for _, n := range lg.NotMeasured {
		fmt.Fprintf(out, "not measured (--time-budget %s): %s\n", timeBudget, n)
	}
	if lg.Selected == 0 || !lg.Verified {
		return usage.Failed{Msg: "no eligible config survived verification"}
	}
	sel := lg.Trials[lg.Selected-1]
	fmt.Fprintf(out, "selected: trial %d %s, median objective %.3f req/s (%s)\n", sel.N, sel.Key, sel.Objective, sel.Kind)
	return nil
}

// orNote is ": NOTE" of a capacity result that found nothing, else "".
func orNote(r *capacity.Result) string {
	if r == nil || r.Note == "" {
		return ""
	}
	return ": " + r.Note
}

// stopped marks err as an interruption (exit 130) when ctx was cancelled,
// by SIGINT or SIGTERM: the run ended because it was told to, not because
// nothing was eligible (exit 1), and a script that accepts 1 must not
// accept it.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return usage.Interrupted{Err: fmt.Errorf("interrupted: %w", err)}
	}
	return err
}
