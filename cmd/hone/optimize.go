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
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/internal/dirlock"
	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/slo"
)

func init() { subcommands = append(subcommands, newOptimizeCmd) }

func newOptimizeCmd() *cobra.Command {
	var (
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
	)
	c := withHelp(&cobra.Command{
		Use:   "optimize --spec base.yaml --out DIR",
		Short: "Run the live optimization loop: deploy, replay, diagnose, propose, ablate, verify",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if spec == "" || out == "" {
				return badInput("--spec and --out are required")
			}
			if runs < 1 {
				return badInput("--runs: %d: want at least 1 (3 or more for the brief's controlled experiments)", runs)
			}
			if budget < 4 {
				return badInput("--budget: %d: want at least 4 trials", budget)
			}
			started := time.Now()
			if timeBudget < 0 {
				return badInput("--time-budget: %s: want 0 (none) or a duration, e.g. 30m", timeBudget)
			}
			if !(maxScale >= 0) || maxScale > deploy.MaxTimeScale {
				return badInput("--max-time-scale: want 0 (never measure again) or a factor up to %d, got %v", deploy.MaxTimeScale, maxScale)
			}
			switch {
			case measure == "" && backend == "model":
				measure = "levels"
			case measure == "":
				measure = "capacity"
			case measure != "capacity" && measure != "levels":
				return badInput("--measure: %q: want capacity (each run a capacity search) or levels (each run a scan of --qps)", measure)
			case measure == "capacity" && backend == "model":
				return badInput("--measure capacity: the exact queueing model (--backend model) scans levels; use --measure levels")
			}
			if measure != "capacity" {
				for _, n := range []string{"capacity-precision", "reference-qps"} {
					if c.Flags().Changed(n) {
						return badInput("--%s: only with --measure capacity", n)
					}
				}
			}
			if !(precision > 0 && precision < 1) {
				return badInput("--capacity-precision: want a fraction in (0, 1), e.g. 0.05, got %v", precision)
			}
			if !(referenceQPS >= 0) || referenceQPS > 1e6 {
				return badInput("--reference-qps: want 0 (from the spec's objective or the prediction) or a rate in req/s, got %v", referenceQPS)
			}
			if backend != "live" && backend != "model" {
				return badInput("--backend: %q: want live (deploy and replay) or model (the exact queueing model)", backend)
			}
			switch {
			case explore == "" && backend == "model":
				explore = "diagnose"
			case explore == "":
				explore = "predict"
			case explore != "predict" && explore != "diagnose":
				return badInput("--explore: %q: want predict (rank a predicted grid, measure the best) or diagnose (propose from each diagnosis)", explore)
			case explore == "predict" && backend == "model":
				return badInput("--explore predict: the exact model (--backend model) is itself a prediction; use --explore diagnose")
			}
			gridAxes, err := axes.Axes()
			if err != nil {
				return axisErr(err)
			}
			sc, err := wf.scan(sim.Config{Mode: sim.Colocated})
			if err != nil {
				return err
			}
			base, err := deploy.LoadSpec(spec)
			if err != nil {
				return usageError{Err: err}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			unlock, err := lockOutDir(out, c.ErrOrStderr())
			if err != nil {
				return err
			}
			defer unlock()
			if err := claimOutDir(out, force, c.ErrOrStderr()); err != nil {
				return err
			}
			hone, err := os.Executable()
			if err != nil {
				return err
			}
			scaleFixed := 0.0
			switch timeScale {
			case "auto", "spec":
			default:
				v, err := strconv.ParseFloat(timeScale, 64)
				if err != nil || !(v > 0) || v > deploy.MaxTimeScale {
					return badInput("--time-scale: want auto, spec or a positive factor, got %q", timeScale)
				}
				scaleFixed = v
			}
			if scaleFixed > 0 {
				if base.Engine != deploy.EngineEmulator {
					return badInput("--time-scale: %s: only an emulator spec has a time scale (engine %q)", timeScale, base.Engine)
				}
				base.Emulator.TimeScale = scaleFixed
			}
			v, commit := buildVersion()
			w := wf.workload(seed)
			slo := slo.SLO{TTFTMillis: sc.TTFTMillis, TPOTMillis: sc.TPOTMillis}
			dev := &optimizer.DeployEvaluator{Up: deploy.UpOptions{Hone: hone, VLLM: vllm, StateDir: filepath.Join(out, "state"), Owned: true},
				Workload: w, QPS: sc.QPS, Runs: runs, SLO: slo, OutDir: out, Hone: replay.Build{Version: v, Commit: commit}, Log: c.ErrOrStderr()}
			var ev optimizer.Evaluator = dev
			if base.Engine == deploy.EngineEmulator && maxScale > 0 {
				ev = &optimizer.Rescaler{Inner: dev, MaxScale: maxScale, Log: c.ErrOrStderr()}
			}
			if backend == "model" {
				ev = &optimizer.ModelEvaluator{Workload: w, QPS: sc.QPS, Runs: runs, SLO: slo}
			}
			logPath := filepath.Join(out, "log.json")
			// Ctrl-C or SIGTERM ends the current trial cleanly: its
			// deployment is torn down and the log keeps every trial so far.
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var deadline time.Time
			if timeBudget > 0 {
				deadline = started.Add(timeBudget)
			}
			floorCtx := ctx // the floor counts against --time-budget
			if !deadline.IsZero() {
				var cancel context.CancelFunc
				floorCtx, cancel = context.WithDeadline(ctx, deadline)
				defer cancel()
			}
			var floor *optimizer.HostFloor
			if base.Engine == deploy.EngineEmulator && backend == "live" {
				fmt.Fprintf(c.ErrOrStderr(), "optimize: measuring the host's floor (zero-cost engine, %g req/s, %d runs)\n", slices.Max(sc.QPS), optimizer.FloorRuns)
				floor, err = dev.MeasureFloor(floorCtx, base)
				if err != nil {
					if ctx.Err() == nil && floorCtx.Err() != nil {
						return fmt.Errorf("optimize: --time-budget %s ended while measuring the host's floor, before any trial: %w", timeBudget, err)
					}
					return stopped(ctx, fmt.Errorf("optimize: host floor: %w", err))
				}
				fmt.Fprintf(c.ErrOrStderr(), "optimize: host floor p50 %.2f / p99 %.2f ms real (dispatch lag p99 %.2f ms), baseline engine median TTFT %.2f model ms; ",
					floor.P50RealMs, floor.P99RealMs, floor.DispatchP99RealMs, floor.EngineP50TTFTMs)
				if timeScale == "auto" {
					// Each trial probes the floor again and runs at the
					// scale it allows then: the specs keep the spec's.
					ev = &optimizer.FloorScaler{Inner: ev, Probe: dev.ProbeFloor, TTFTSLOMs: slo.TTFTMillis, MaxScale: maxScale, Log: c.ErrOrStderr()}
					floor.CapScale(maxScale)
					fmt.Fprintf(c.ErrOrStderr(), "time scale %g now (spec: %g): floor %.1f model ms; each trial probes the floor again and runs at the scale it allows then\n",
						floor.ChosenTimeScale, floor.SpecTimeScale, floor.FloorModelMs)
				} else {
					floor.ChosenTimeScale = max(base.Emulator.TimeScale, 0)
					if floor.ChosenTimeScale == 0 {
						floor.ChosenTimeScale = 1
					}
					floor.Settle()
					floor.Note = strings.TrimPrefix(floor.Note+"; ", "; ") + "--time-scale " + timeScale + ": the scale was not chosen from the floor"
					fmt.Fprintf(c.ErrOrStderr(), "trials run at time scale %g as asked: floor %.1f model ms\n", floor.ChosenTimeScale, floor.FloorModelMs)
				}
				if floor.Note != "" {
					fmt.Fprintf(c.ErrOrStderr(), "optimize: warning: %s\n", floor.Note)
				}
			}
			var pred *optimizer.Predictor
			if explore == "predict" {
				prof, err := predictProfile(profile, base)
				if err != nil {
					return err
				}
				pred = &optimizer.Predictor{Profile: prof, Axes: gridAxes, ProfileDir: filepath.Join(out, "profiles")}
			}
			lo := optimizer.LiveOptions{Base: base, Evaluator: ev, Budget: budget, HostFloor: floor,
				Workload: w, QPS: sc.QPS, Runs: runs, SLO: slo, LogPath: logPath, Progress: c.ErrOrStderr(), Predictor: pred,
				Goal: predict.Goal(base.Objective), Deadline: deadline, TimeBudget: timeBudget}
			if measure == "capacity" {
				co := capacity.Options{Mode: capacity.Open, SLO: slo, Precision: precision, MinRequests: w.Requests - replay.Sessions}
				ref := referenceQPS
				if ref == 0 {
					ref = base.Objective.TargetQPS
				}
				if ref == 0 {
					prof, err := predictProfile(profile, base)
					if err != nil {
						return err
					}
					res, err := predict.Capacity(ctx, base, predict.Options{Profile: prof, Workload: w, SLO: slo}, co)
					if err != nil || res.Value <= 0 {
						return badInput("--reference-qps: the baseline's capacity could not be predicted (%v%s): give --reference-qps", err, orNote(res))
					}
					ref = math.Round(res.Value/2*100) / 100
					fmt.Fprintf(c.ErrOrStderr(), "optimize: reference load %g req/s: half the baseline's predicted capacity %.3g req/s (profile %s)\n", ref, res.Value, prof.Name)
				}
				dev.Capacity, dev.ReferenceQPS, dev.Log = &co, ref, c.ErrOrStderr()
				lo.Capacity, lo.ReferenceQPS = &co, ref
			}
			lg, err := optimizer.Live(ctx, lo)
			if err != nil {
				return stopped(ctx, fmt.Errorf("optimize: %w (the log so far is in %s)", err, logPath))
			}
			fmt.Fprintf(c.OutOrStdout(), "experiment log: %s (%d trials, %s)\n", logPath, len(lg.Trials), lg.Kind)
			for _, n := range lg.NotMeasured {
				fmt.Fprintf(c.OutOrStdout(), "not measured (--time-budget %s): %s\n", timeBudget, n)
			}
			if lg.Selected == 0 || !lg.Verified {
				return checkFailed{"no eligible config survived verification"}
			}
			sel := lg.Trials[lg.Selected-1]
			fmt.Fprintf(c.OutOrStdout(), "selected: trial %d %s, median objective %.3f req/s (%s)\n", sel.N, sel.Key, sel.Objective, sel.Kind)
			return nil
		},
	}, "optimize", optimizeHelp())
	wf.register(c, true)
	f := c.Flags()
	f.StringVar(&spec, "spec", "", "baseline deployment spec (YAML)")
	f.StringVar(&out, "out", "", "directory for the log, records and traces")
	f.IntVar(&runs, "runs", 3, "independent runs per trial")
	f.IntVar(&budget, "budget", 8, "trials in all, the verification re-run included")
	f.Uint64Var(&seed, "seed", replay.DefaultSeed, "workload seed")
	f.StringVar(&backend, "backend", "live", "live (deploy the spec and replay: emulated or device) | model (the exact queueing model: simulation_only)")
	f.StringVar(&timeScale, "time-scale", "auto", "emulated trials' time scale: auto (from the host's measured floor) | spec | a factor")
	f.DurationVar(&timeBudget, "time-budget", 0, "bound the whole run in time, e.g. 30m: trials are planned to fit, and what could not be measured is reported (0: no bound)")
	f.Float64Var(&maxScale, "max-time-scale", 4, "the largest time scale an emulated trial runs at: the floor's choice (--time-scale auto) is capped by it, and a trial the host made invalid is measured again up to it (0: never measured again, the floor's choice not capped)")
	f.BoolVar(&force, "force", false, "start over in an --out that holds an earlier run (which is kept as NAME.<time>.bak)")
	f.StringVar(&explore, "explore", "", "predict (default with --backend live: rank a predicted grid, measure the most promising, calibrate) | diagnose (propose from each trial's bottleneck)")
	f.StringVar(&vllm, "vllm", "", "the vllm executable of a vLLM spec's trials, e.g. .venv/bin/vllm (default: vllm on PATH), as hone deploy up --vllm")
	f.StringVar(&profile, "profile", "", "with --explore predict: the cost profile predictions start from, a built-in name or a .yaml file (default: the spec's emulator.profile)")
	f.StringVar(&measure, "measure", "", "how a trial is measured: capacity (default with --backend live: each run a capacity search) | levels (each run a scan of --qps; the default with --backend model)")
	f.Float64Var(&precision, "capacity-precision", capacity.DefaultPrecision, "with --measure capacity: the searches' relative precision")
	f.Float64Var(&referenceQPS, "reference-qps", 0, "with --measure capacity: the offered rate every run also measures, where trials' latencies are compared (0: spec.objective.target_qps, else half the baseline's predicted capacity)")
	registerGridAxes(f, &axes, optimizer.DefaultGridAxes())
	return c
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
		return interrupted{fmt.Errorf("interrupted: %w", err)}
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
