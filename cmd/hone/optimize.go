package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/internal/dirlock"
	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

func init() { subcommands = append(subcommands, newOptimizeCmd) }

func newOptimizeCmd() *cobra.Command {
	var o optimizeFlags
	c := withHelp(&cobra.Command{
		Use:   "optimize --spec base.yaml --out DIR",
		Short: "Run the live optimization loop: deploy, replay, diagnose, propose, ablate, verify",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runOptimize(c, &o)
		},
	}, "optimize", optimizeHelp())
	o.bind(c)
	return c
}

// optimizeFlags are hone optimize's flags.
type optimizeFlags struct {
	wf           workloadFlags
	spec, out    string
	runs, budget int
	seed         uint64
	timeScale    string
	maxScale     float64
	backend      string
	force        bool
	explore      string
	profile      string
	vllm         string
	axes         predict.AxisFlags
	measure      string
	precision    float64
	referenceQPS float64
	timeBudget   time.Duration
}

func (o *optimizeFlags) bind(c *cobra.Command) {
	o.wf.register(c, true)
	f := c.Flags()
	f.StringVar(&o.spec, "spec", "", "baseline deployment spec (YAML)")
	f.StringVar(&o.out, "out", "", "directory for the log, records and traces")
	f.IntVar(&o.runs, "runs", 3, "independent runs per trial")
	f.IntVar(&o.budget, "budget", 8, "trials in all, the verification re-run included")
	f.Uint64Var(&o.seed, "seed", replay.DefaultSeed, "workload seed")
	f.StringVar(&o.backend, "backend", "live", "live (deploy the spec and replay: emulated or device) | model (the exact queueing model: simulation_only)")
	f.StringVar(&o.timeScale, "time-scale", "auto", "emulated trials' time scale: auto (from the host's measured floor) | spec | a factor")
	f.DurationVar(&o.timeBudget, "time-budget", 0, "bound the whole run in time, e.g. 30m: trials are planned to fit, and what could not be measured is reported (0: no bound)")
	f.Float64Var(&o.maxScale, "max-time-scale", 4, "the largest time scale an emulated trial runs at: the floor's choice (--time-scale auto) is capped by it, and a trial the host made invalid is measured again up to it (0: never measured again, the floor's choice not capped)")
	f.BoolVar(&o.force, "force", false, "start over in an --out that holds an earlier run (which is kept as NAME.<time>.bak)")
	f.StringVar(&o.explore, "explore", "", "predict (default with --backend live: rank a predicted grid, measure the most promising, calibrate) | diagnose (propose from each trial's bottleneck)")
	f.StringVar(&o.vllm, engine.VLLM, "", "the vllm executable of a vLLM spec's trials, e.g. .venv/bin/vllm (default: vllm on PATH), as hone deploy up --vllm")
	f.StringVar(&o.profile, "profile", "", "with --explore predict: the cost profile predictions start from, a built-in name or a .yaml file (default: the spec's emulator.profile)")
	f.StringVar(&o.measure, "measure", "", "how a trial is measured: capacity (default with --backend live: each run a capacity search) | levels (each run a scan of --qps; the default with --backend model)")
	f.Float64Var(&o.precision, "capacity-precision", capacity.DefaultPrecision, "with --measure capacity: the searches' relative precision")
	f.Float64Var(&o.referenceQPS, "reference-qps", 0, "with --measure capacity: the offered rate every run also measures, where trials' latencies are compared (0: spec.objective.target_qps, else half the baseline's predicted capacity)")
	registerGridAxes(f, &o.axes, optimizer.DefaultGridAxes())
}

// check checks the flags that need nothing read, in the order hone
// optimize always checked them, and fills in --measure's and --explore's
// defaults.
func (o *optimizeFlags) check(c *cobra.Command) error {
	if o.spec == "" || o.out == "" {
		return badInput("--spec and --out are required")
	}
	if o.runs < 1 {
		return badInput("--runs: %d: want at least 1 (3 or more for controlled experiments)", o.runs)
	}
	if o.budget < 4 {
		return badInput("--budget: %d: want at least 4 trials", o.budget)
	}
	if o.timeBudget < 0 {
		return badInput("--time-budget: %s: want 0 (none) or a duration, e.g. 30m", o.timeBudget)
	}
	if !(o.maxScale >= 0) || o.maxScale > deploy.MaxTimeScale {
		return badInput("--max-time-scale: want 0 (never measure again) or a factor up to %d, got %v", deploy.MaxTimeScale, o.maxScale)
	}
	if err := o.checkMeasure(c); err != nil {
		return err
	}
	if !(o.precision > 0 && o.precision < 1) {
		return badInput("--capacity-precision: want a fraction in (0, 1), e.g. 0.05, got %v", o.precision)
	}
	if !(o.referenceQPS >= 0) || o.referenceQPS > 1e6 {
		return badInput("--reference-qps: want 0 (from the spec's objective or the prediction) or a rate in req/s, got %v", o.referenceQPS)
	}
	if o.backend != "live" && o.backend != "model" {
		return badInput("--backend: %q: want live (deploy and replay) or model (the exact queueing model)", o.backend)
	}
	switch {
	case o.explore == "" && o.backend == "model":
		o.explore = "diagnose"
	case o.explore == "":
		o.explore = "predict"
	case o.explore != "predict" && o.explore != "diagnose":
		return badInput("--explore: %q: want predict (rank a predicted grid, measure the best) or diagnose (propose from each diagnosis)", o.explore)
	case o.explore == "predict" && o.backend == "model":
		return badInput("--explore predict: the exact model (--backend model) is itself a prediction; use --explore diagnose")
	}
	return nil
}

// checkMeasure checks --measure and the flags only --measure capacity takes.
func (o *optimizeFlags) checkMeasure(c *cobra.Command) error {
	switch {
	case o.measure == "" && o.backend == "model":
		o.measure = "levels"
	case o.measure == "":
		o.measure = "capacity"
	case o.measure != "capacity" && o.measure != "levels":
		return badInput("--measure: %q: want capacity (each run a capacity search) or levels (each run a scan of --qps)", o.measure)
	case o.measure == "capacity" && o.backend == "model":
		return badInput("--measure capacity: the exact queueing model (--backend model) scans levels; use --measure levels")
	}
	if o.measure != "capacity" {
		for _, n := range []string{"capacity-precision", "reference-qps"} {
			if c.Flags().Changed(n) {
				return badInput("--%s: only with --measure capacity", n)
			}
		}
	}
	return nil
}

// fixedScale is --time-scale as a factor, 0 for auto or spec.
func (o *optimizeFlags) fixedScale(base *deploy.Spec) (float64, error) {
	switch o.timeScale {
	case "auto", "spec":
		return 0, nil
	}
	v, err := strconv.ParseFloat(o.timeScale, 64)
	if err != nil || !(v > 0) || v > deploy.MaxTimeScale {
		return 0, badInput("--time-scale: want auto, spec or a positive factor, got %q", o.timeScale)
	}
	if !engine.Emulated(base.Engine) {
		return 0, badInput("--time-scale: %s: only an emulator spec has a time scale (engine %q)", o.timeScale, base.Engine)
	}
	return v, nil
}

// optimizeRun is one hone optimize run: what its steps share.
type optimizeRun struct {
	o        *optimizeFlags
	errw     io.Writer
	base     *deploy.Spec
	w        schema.Workload
	qps      []float64
	slo      slo.SLO
	dev      *optimizer.DeployEvaluator
	ev       optimizer.Evaluator
	started  time.Time
	deadline time.Time
}

// runOptimize is hone optimize: it checks the flags, claims --out, measures
// the host's floor (emulated live trials), and runs optimizer.Live.
func runOptimize(c *cobra.Command, o *optimizeFlags) error {
	started := time.Now()
	if err := o.check(c); err != nil {
		return err
	}
	gridAxes, err := o.axes.Axes()
	if err != nil {
		return axisErr(err)
	}
	sc, err := o.wf.scan(sim.Config{Mode: sim.Colocated})
	if err != nil {
		return err
	}
	base, err := deploy.LoadSpec(o.spec)
	if err != nil {
		return usageError{Err: err}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	unlock, err := lockOutDir(o.out, c.ErrOrStderr())
	if err != nil {
		return err
	}
	defer unlock()
	if err := claimOutDir(o.out, o.force, c.ErrOrStderr()); err != nil {
		return err
	}
	r := &optimizeRun{o: o, errw: c.ErrOrStderr(), base: base, w: o.wf.workload(o.seed), qps: sc.QPS,
		slo: slo.SLO{TTFTMillis: sc.TTFTMillis, TPOTMillis: sc.TPOTMillis}, started: started}
	if err := r.evaluator(); err != nil {
		return err
	}
	// Ctrl-C or SIGTERM ends the current trial cleanly: its deployment is
	// torn down and the log keeps every trial so far.
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lo, err := r.liveOptions(ctx, gridAxes)
	if err != nil {
		return err
	}
	lg, err := optimizer.Live(ctx, lo)
	if err != nil {
		return stopped(ctx, fmt.Errorf("optimize: %w (the log so far is in %s)", err, lo.LogPath))
	}
	return printOptimized(c.OutOrStdout(), lg, lo.LogPath, o.timeBudget)
}

// evaluator makes the trials' evaluator: deploy and replay (rescaled, for
// an emulator spec), or the exact queueing model.
func (r *optimizeRun) evaluator() error {
	o := r.o
	scaleFixed, err := o.fixedScale(r.base)
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
	v, commit := buildVersion()
	r.dev = &optimizer.DeployEvaluator{Up: deploy.UpOptions{Hone: hone, VLLM: o.vllm, StateDir: filepath.Join(o.out, "state"), Owned: true},
		Workload: r.w, QPS: r.qps, Runs: o.runs, SLO: r.slo, OutDir: o.out, Hone: schema.Build{Version: v, Commit: commit}, Log: r.errw}
	r.ev = r.dev
	if engine.Emulated(r.base.Engine) && o.maxScale > 0 {
		r.ev = &optimizer.Rescaler{Inner: r.dev, MaxScale: o.maxScale, Log: r.errw}
	}
	if o.backend == "model" {
		r.ev = &optimizer.ModelEvaluator{Workload: r.w, QPS: r.qps, Runs: o.runs, SLO: r.slo}
	}
	return nil
}

// liveOptions measures the host's floor and the reference load where they
// are needed, and states the run for optimizer.Live.
func (r *optimizeRun) liveOptions(ctx context.Context, gridAxes predict.Axes) (optimizer.LiveOptions, error) {
	o := r.o
	if o.timeBudget > 0 {
		r.deadline = r.started.Add(o.timeBudget)
	}
	floor, err := r.hostFloor(ctx)
	if err != nil {
		return optimizer.LiveOptions{}, err
	}
	var pred *optimizer.Predictor
	if o.explore == "predict" {
		prof, err := emulator.ResolveProfile(o.profile, r.base.Emulator.Profile)
		if err != nil {
			return optimizer.LiveOptions{}, err
		}
		pred = &optimizer.Predictor{Profile: prof, Axes: gridAxes, ProfileDir: filepath.Join(o.out, "profiles")}
	}
	lo := optimizer.LiveOptions{Base: r.base, Evaluator: r.ev, Budget: o.budget, HostFloor: floor,
		Workload: r.w, QPS: r.qps, Runs: o.runs, SLO: r.slo, LogPath: filepath.Join(o.out, "log.json"), Progress: r.errw, Predictor: pred,
		Goal: predict.Goal(r.base.Objective), Deadline: r.deadline, TimeBudget: o.timeBudget}
	if o.measure == "capacity" {
		co := capacity.Options{Mode: capacity.Open, SLO: r.slo, Precision: o.precision, MinRequests: r.w.Requests - replay.Sessions}
		ref, err := r.referenceLoad(ctx, co)
		if err != nil {
			return lo, err
		}
		r.dev.Capacity, r.dev.ReferenceQPS, r.dev.Log = &co, ref, r.errw
		lo.Capacity, lo.ReferenceQPS = &co, ref
	}
	return lo, nil
}

// hostFloor measures the host's floor before the trials of an emulator
// spec measured live (nil otherwise), and, with --time-scale auto, makes
// each trial probe it again and run at the scale it allows.
func (r *optimizeRun) hostFloor(ctx context.Context) (*optimizer.HostFloor, error) {
	o := r.o
	if !engine.Emulated(r.base.Engine) || o.backend != "live" {
		return nil, nil
	}
	floorCtx := ctx // the floor counts against --time-budget
	if !r.deadline.IsZero() {
		var cancel context.CancelFunc
		floorCtx, cancel = context.WithDeadline(ctx, r.deadline)
		defer cancel()
	}
	fmt.Fprintf(r.errw, "optimize: measuring the host's floor (zero-cost engine, %g req/s, %d runs)\n", slices.Max(r.qps), optimizer.FloorRuns)
	floor, err := r.dev.MeasureFloor(floorCtx, r.base)
	if err != nil {
		if ctx.Err() == nil && floorCtx.Err() != nil {
			return nil, fmt.Errorf("optimize: --time-budget %s ended while measuring the host's floor, before any trial: %w", o.timeBudget, err)
		}
		return nil, stopped(ctx, fmt.Errorf("optimize: host floor: %w", err))
	}
	fmt.Fprintf(r.errw, "optimize: host floor p50 %.2f / p99 %.2f ms real (dispatch lag p99 %.2f ms), baseline engine median TTFT %.2f model ms; ",
		floor.P50RealMs, floor.P99RealMs, floor.DispatchP99RealMs, floor.EngineP50TTFTMs)
	if o.timeScale == "auto" {
		// Each trial probes the floor again and runs at the scale it
		// allows then: the specs keep the spec's.
		r.ev = &optimizer.FloorScaler{Inner: r.ev, Probe: r.dev.ProbeFloor, TTFTSLOMs: r.slo.TTFTMillis, MaxScale: o.maxScale, Log: r.errw}
		floor.CapScale(o.maxScale)
		fmt.Fprintf(r.errw, "time scale %g now (spec: %g): floor %.1f model ms; each trial probes the floor again and runs at the scale it allows then\n",
			floor.ChosenTimeScale, floor.SpecTimeScale, floor.FloorModelMs)
	} else {
		floor.ChosenTimeScale = max(r.base.Emulator.TimeScale, 0)
		if floor.ChosenTimeScale == 0 {
			floor.ChosenTimeScale = 1
		}
		floor.Settle()
		floor.Note = strings.TrimPrefix(floor.Note+"; ", "; ") + "--time-scale " + o.timeScale + ": the scale was not chosen from the floor"
		fmt.Fprintf(r.errw, "trials run at time scale %g as asked: floor %.1f model ms\n", floor.ChosenTimeScale, floor.FloorModelMs)
	}
	if floor.Note != "" {
		fmt.Fprintf(r.errw, "optimize: warning: %s\n", floor.Note)
	}
	return floor, nil
}

// referenceLoad is the rate every capacity run also measures: --reference-qps,
// else the spec's target, else half the baseline's predicted capacity.
func (r *optimizeRun) referenceLoad(ctx context.Context, co capacity.Options) (float64, error) {
	ref := r.o.referenceQPS
	if ref == 0 {
		ref = r.base.Objective.TargetQPS
	}
	if ref != 0 {
		return ref, nil
	}
	prof, err := emulator.ResolveProfile(r.o.profile, r.base.Emulator.Profile)
	if err != nil {
		return 0, err
	}
	res, err := predict.Capacity(ctx, r.base, predict.Options{Profile: prof, Workload: r.w, SLO: r.slo}, co)
	if err != nil || res.Value <= 0 {
		return 0, badInput("--reference-qps: the baseline's capacity could not be predicted (%v%s): give --reference-qps", err, orNote(res))
	}
	ref = math.Round(res.Value/2*100) / 100
	fmt.Fprintf(r.errw, "optimize: reference load %g req/s: half the baseline's predicted capacity %.3g req/s (profile %s)\n", ref, res.Value, prof.Name)
	return ref, nil
}

// printOptimized prints the run's outcome; no verified selection is a
// failed check (exit 1).
func printOptimized(out io.Writer, lg *optimizer.Log, logPath string, timeBudget time.Duration) error {
	fmt.Fprintf(out, "experiment log: %s (%d trials, %s)\n", logPath, len(lg.Trials), lg.Kind)
	for _, n := range lg.NotMeasured {
		fmt.Fprintf(out, "not measured (--time-budget %s): %s\n", timeBudget, n)
	}
	if lg.Selected == 0 || !lg.Verified {
		return checkFailed{Msg: "no eligible config survived verification"}
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
		return interrupted{Err: fmt.Errorf("interrupted: %w", err)}
	}
	return err
}

// lockOutDir takes an exclusive lock on the --out directory for this run,
// so that no other hone optimize writes there, or stops this run's
// deployments as an earlier run's leftovers. The kernel drops the lock when
// this process dies, however it dies. Where the file system has no locks,
// it warns and goes on.
func lockOutDir(out string, errw io.Writer) (unlock func(), err error) {
	unlock, err = dirlock.Lock(out, true)
	var open *fs.PathError // --out could not be opened at all
	switch {
	case errors.Is(err, dirlock.ErrBusy):
		return nil, badInput("--out %s is in use by another hone optimize: wait for it to end, or give another --out", out)
	case errors.As(err, &open):
		return nil, err
	case err != nil:
		fmt.Fprintf(errw, "optimize: warning: cannot lock --out %s (%v): nothing keeps another hone optimize out of it\n", out, err)
		return func() {}, nil
	}
	return unlock, nil
}

// The files and directories of a run in --out, in the order they are kept.
var runFiles = []string{"log.json", "records", "traces", "state"}

// claimOutDir makes --out this run's: it refuses a directory that holds an
// earlier run's log unless force, stops the deployments an earlier run left
// running under state/, then moves whatever that run left (its log,
// records, traces and state) aside as NAME.<time>.bak, so that nothing of
// it is reused or overwritten.
func claimOutDir(out string, force bool, errw io.Writer) error {
	logPath := filepath.Join(out, "log.json")
	stateDir := filepath.Join(out, "state")
	if _, err := os.Stat(logPath); err == nil && !force {
		what := logPath
		if lg, err := optimizer.ReadLog(logPath); err == nil {
			what = fmt.Sprintf("%s: %d trials, started %s", logPath, len(lg.Trials), lg.Started.Format(time.RFC3339))
		}
		msg := fmt.Sprintf("--out %s already holds an earlier run's log (%s): give a new --out directory, or --force to start over there (keeping the earlier run's log as log.json.<time>.bak, and its records, traces and state likewise)", out, what)
		if left, _ := deploy.Leftovers(stateDir); len(left) > 0 {
			var names []string
			for _, l := range left {
				names = append(names, fmt.Sprintf("%s (pids %s)", l.State.Name, joinInts(deploy.GroupPIDs(l.Live))))
			}
			msg += fmt.Sprintf("; that run left deployments running under %s: %s, which hone optimize --force stops, as does hone deploy down NAME --state-dir %s",
				stateDir, strings.Join(names, ", "), stateDir)
		}
		return badInput("%s", msg)
	}
	if err := stopLeftovers(stateDir, errw); err != nil {
		return err
	}
	// Temporary files a killed run left mid-write (this run holds the lock).
	for _, d := range []string{out, filepath.Join(out, "records")} {
		removed, err := atomicfile.RemoveStale(d)
		if err != nil {
			return fmt.Errorf("optimize: stale temporary files in %s: %w", d, err)
		}
		if len(removed) > 0 {
			fmt.Fprintf(errw, "optimize: removed %d temporary file(s) a killed run left in %s: %s\n", len(removed), d, strings.Join(removed, ", "))
		}
	}
	return keepEarlierRun(out, errw)
}

// stopLeftovers stops every deployment under stateDir that is still
// running — left by an earlier run that was killed — and reports each on
// errw. An error (exit 1) names the processes that could not be stopped.
func stopLeftovers(stateDir string, errw io.Writer) error {
	left, err := deploy.Leftovers(stateDir)
	if err != nil {
		fmt.Fprintf(errw, "optimize: warning: %v\n", err)
	}
	var stuck []string
	for _, l := range left {
		var names []string
		for _, p := range l.Live {
			names = append(names, p.Name)
		}
		fmt.Fprintf(errw, "optimize: deployment %s was left running by an earlier run (%s: pids %s): stopping it\n",
			l.State.Name, strings.Join(names, ", "), joinInts(deploy.GroupPIDs(l.Live)))
		if err := deploy.Down(l.StatePath, 5*time.Second); err != nil {
			pids := "unknown"
			if st, rerr := deploy.ReadState(l.StatePath); rerr == nil {
				pids = joinInts(deploy.GroupPIDs(st.Alive()))
			}
			stuck = append(stuck, fmt.Sprintf("%s (pids %s: %v)", l.State.Name, pids, err))
			continue
		}
		fmt.Fprintf(errw, "optimize: stopped deployment %s\n", l.State.Name)
	}
	if len(stuck) > 0 {
		return fmt.Errorf("optimize: deployments an earlier run left under %s could not be stopped: %s; stop them before using this --out",
			stateDir, strings.Join(stuck, "; "))
	}
	return nil
}

// keepEarlierRun moves an earlier run's files in out (runFiles; empty
// directories do not count) aside as NAME.<time>.bak, all with one time,
// and says so on errw.
func keepEarlierRun(out string, errw io.Writer) error {
	var found []string
	for _, name := range runFiles {
		path := filepath.Join(out, name)
		fi, err := os.Stat(path)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			if ents, err := os.ReadDir(path); err == nil && len(ents) == 0 {
				continue
			}
		}
		found = append(found, name)
	}
	if len(found) == 0 {
		return nil
	}
	base := time.Now().UTC().Format("20060102T150405Z")
	stamp := base
	for i := 2; ; i++ {
		free := true
		for _, name := range found {
			if _, err := os.Lstat(filepath.Join(out, name+"."+stamp+".bak")); err == nil {
				free = false
			}
		}
		if free {
			break
		}
		stamp = fmt.Sprintf("%s-%d", base, i)
	}
	var kept []string
	for _, name := range found {
		to := name + "." + stamp + ".bak"
		if err := os.Rename(filepath.Join(out, name), filepath.Join(out, to)); err != nil {
			return fmt.Errorf("optimize: keep the earlier run's %s: %w", name, err)
		}
		kept = append(kept, name+" as "+to)
	}
	fmt.Fprintf(errw, "optimize: --out %s held an earlier run; kept its %s\n", out, strings.Join(kept, ", "))
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, " ")
}
