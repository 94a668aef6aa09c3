package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/sim"
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

// optimizeFlags are hone optimize's flags: most bind straight into
// optimizer.Options, whose other fields runOptimize makes of the workload,
// --seed and grid flags.
type optimizeFlags struct {
	wf   workloadFlags
	seed uint64
	axes predict.AxisFlags
	optimizer.Options
}

func (o *optimizeFlags) bind(c *cobra.Command) {
	o.wf.register(c, true)
	f := c.Flags()
	f.StringVar(&o.Spec, "spec", "", "baseline deployment spec (YAML)")
	f.StringVar(&o.OutDir, "out", "", "directory for the log, records and traces")
	f.IntVar(&o.Runs, "runs", 3, "independent runs per trial")
	f.IntVar(&o.Budget, "budget", 8, "trials in all, the verification re-run included")
	f.Uint64Var(&o.seed, "seed", replay.DefaultSeed, "workload seed")
	f.StringVar(&o.Backend, "backend", "live", "live (deploy the spec and replay: emulated or device) | model (the exact queueing model: simulation_only)")
	f.StringVar(&o.TimeScale, "time-scale", "auto", "emulated trials' time scale: auto (from the host's measured floor) | spec | a factor")
	f.DurationVar(&o.TimeBudget, "time-budget", 0, "bound the whole run in time, e.g. 30m: trials are planned to fit, and what could not be measured is reported (0: no bound)")
	f.Float64Var(&o.MaxTimeScale, "max-time-scale", 4, "the largest time scale an emulated trial runs at: the floor's choice (--time-scale auto) is capped by it, and a trial the host made invalid is measured again up to it (0: never measured again, the floor's choice not capped)")
	f.BoolVar(&o.Force, "force", false, "start over in an --out that holds an earlier run (which is kept as NAME.<time>.bak)")
	f.StringVar(&o.Explore, "explore", "", "predict (default with --backend live: rank a predicted grid, measure the most promising, calibrate) | diagnose (propose from each trial's bottleneck)")
	f.StringVar(&o.VLLM, engine.VLLM, "", "the vllm executable of a vLLM spec's trials, e.g. .venv/bin/vllm (default: vllm on PATH), as hone deploy up --vllm")
	f.StringVar(&o.Profile, "profile", "", "with --explore predict: the cost profile predictions start from, a built-in name or a .yaml file (default: the spec's emulator.profile)")
	f.StringVar(&o.Measure, "measure", "", "how a trial is measured: capacity (default with --backend live: each run a capacity search) | levels (each run a scan of --qps; the default with --backend model)")
	f.Float64Var(&o.Precision, "capacity-precision", capacity.DefaultPrecision, "with --measure capacity: the searches' relative precision")
	f.Float64Var(&o.ReferenceQPS, "reference-qps", 0, "with --measure capacity: the offered rate every run also measures, where trials' latencies are compared (0: spec.objective.target_qps, else half the baseline's predicted capacity)")
	registerGridAxes(f, &o.axes, optimizer.DefaultGridAxes())
}

// check checks the flags that need nothing read, in the order hone
// optimize always checked them, and fills in --measure's and --explore's
// defaults.
func (o *optimizeFlags) check(c *cobra.Command) error {
	if o.Spec == "" || o.OutDir == "" {
		return badInput("--spec and --out are required")
	}
	if o.Runs < 1 {
		return badInput("--runs: %d: want at least 1 (3 or more for controlled experiments)", o.Runs)
	}
	if o.Budget < 4 {
		return badInput("--budget: %d: want at least 4 trials", o.Budget)
	}
	if o.TimeBudget < 0 {
		return badInput("--time-budget: %s: want 0 (none) or a duration, e.g. 30m", o.TimeBudget)
	}
	if !(o.MaxTimeScale >= 0) || o.MaxTimeScale > deploy.MaxTimeScale {
		return badInput("--max-time-scale: want 0 (never measure again) or a factor up to %d, got %v", deploy.MaxTimeScale, o.MaxTimeScale)
	}
	if err := o.checkMeasure(c); err != nil {
		return err
	}
	if !(o.Precision > 0 && o.Precision < 1) {
		return badInput("--capacity-precision: want a fraction in (0, 1), e.g. 0.05, got %v", o.Precision)
	}
	if !(o.ReferenceQPS >= 0) || o.ReferenceQPS > 1e6 {
		return badInput("--reference-qps: want 0 (from the spec's objective or the prediction) or a rate in req/s, got %v", o.ReferenceQPS)
	}
	if o.Backend != "live" && o.Backend != "model" {
		return badInput("--backend: %q: want live (deploy and replay) or model (the exact queueing model)", o.Backend)
	}
	switch {
	case o.Explore == "" && o.Backend == "model":
		o.Explore = "diagnose"
	case o.Explore == "":
		o.Explore = "predict"
	case o.Explore != "predict" && o.Explore != "diagnose":
		return badInput("--explore: %q: want predict (rank a predicted grid, measure the best) or diagnose (propose from each diagnosis)", o.Explore)
	case o.Explore == "predict" && o.Backend == "model":
		return badInput("--explore predict: the exact model (--backend model) is itself a prediction; use --explore diagnose")
	}
	return nil
}

// checkMeasure checks --measure and the flags only --measure capacity takes.
func (o *optimizeFlags) checkMeasure(c *cobra.Command) error {
	switch {
	case o.Measure == "" && o.Backend == "model":
		o.Measure = "levels"
	case o.Measure == "":
		o.Measure = "capacity"
	case o.Measure != "capacity" && o.Measure != "levels":
		return badInput("--measure: %q: want capacity (each run a capacity search) or levels (each run a scan of --qps)", o.Measure)
	case o.Measure == "capacity" && o.Backend == "model":
		return badInput("--measure capacity: the exact queueing model (--backend model) scans levels; use --measure levels")
	}
	if o.Measure != "capacity" {
		for _, n := range []string{"capacity-precision", "reference-qps"} {
			if c.Flags().Changed(n) {
				return badInput("--%s: only with --measure capacity", n)
			}
		}
	}
	return nil
}

// runOptimize is hone optimize: it checks the flags, makes the workload,
// SLO and grid of them, and runs optimizer.Run.
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
	ro := o.Options
	ro.Workload, ro.QPS, ro.Axes = o.wf.workload(o.seed), sc.QPS, gridAxes
	ro.SLO = slo.SLO{TTFTMillis: sc.TTFTMillis, TPOTMillis: sc.TPOTMillis}
	ro.Version, ro.Commit = buildVersion()
	ro.Started, ro.Out, ro.Log = started, c.OutOrStdout(), c.ErrOrStderr()
	return optimizer.Run(c.Context(), ro)
}
