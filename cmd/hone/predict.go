package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/sim/emulator"
)

func init() { subcommands = append(subcommands, newPredictCmd) }

// gridAxes are the grid axes' names (replay.ParamError.Field), in flag order; axis A is
// the flag --grid-A.
var gridAxes = []string{"tp", "max-num-seqs", "max-num-batched-tokens", "prefix-caching", "routing", "enforce-eager",
	"gpu-memory-utilization"}

func newPredictCmd() *cobra.Command {
	var o predictFlags
	c := withHelp(&cobra.Command{
		Use:   "predict SPEC",
		Short: "Predict a deployment spec's latency, throughput and cost in virtual time, without deploying it",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return o.run(c, args)
		},
	}, "predict", predictHelp())
	o.bind(c)
	return c
}

// predictFlags are hone predict's flags; run carries the command out.
type predictFlags struct {
	wf           workloadFlags
	profile, out string
	output       outputFormat
	grid         bool
	top          int
	axes         predict.AxisFlags
	concurrency  string
	capf         capacityFlags
	trace        traceFlags
}

// bind registers the flags on c.
func (o *predictFlags) bind(c *cobra.Command) {
	o.wf.register(c, true)
	f := c.Flags()
	f.StringVar(&o.profile, "profile", "", "emulator profile: a built-in name or a .yaml file (default: the spec's emulator.profile, else "+emulator.DefaultProfile+")")
	f.StringVar(&o.out, "out", "", "write the result here: the run record, or with --grid every point (JSON)")
	o.output.register(f, "table", "", "table", "json")
	f.StringVar(&o.concurrency, "concurrency", "", "closed-loop levels instead of --qps: clients in flight, comma-separated (e.g. 1,8,32)")
	f.BoolVar(&o.grid, "grid", false, "predict every deployment within the spec's GPU budget on the --grid-* axes and rank them")
	f.IntVar(&o.top, "top", 20, "with --grid: how many of the ranked specs to print")
	registerGridAxes(f, &o.axes, predict.DefaultAxes())
	o.capf.register(c)
	o.trace.register(c)
}

// check checks the output, trace, grid and capacity flags.
func (o *predictFlags) check(c *cobra.Command) error {
	if err := o.output.check(); err != nil {
		return err
	}
	if err := o.trace.check(c, workloadFlagNames...); err != nil {
		return err
	}
	if !o.grid {
		for _, name := range append([]string{"top"}, gridFlagNames()...) {
			if c.Flags().Changed(name) {
				return badInput("--%s: only with --grid", name)
			}
		}
	}
	if o.top < 1 {
		return badInput("--top: want at least 1, got %d", o.top)
	}
	if err := o.capf.check(c, "qps", "concurrency"); err != nil {
		return err
	}
	return nil
}

// run is hone predict: the flags turned into predict.CommandOptions.
func (o *predictFlags) run(c *cobra.Command, args []string) error {
	if err := o.check(c); err != nil {
		return err
	}
	sc, err := o.wf.scan(sim.Config{})
	if err != nil {
		return err
	}
	var ax predict.Axes
	if o.grid {
		if ax, err = o.axes.Axes(); err != nil {
			return axisErr(err)
		}
	}
	spec, err := loadSpecArg(args[0])
	if err != nil {
		return err
	}
	prof, err := emulator.ResolveProfile(o.profile, spec.Emulator.Profile)
	if err != nil {
		return err
	}
	co := predict.CommandOptions{SpecArg: args[0], Spec: spec, Grid: o.grid, Axes: ax, Top: o.top, OutPath: o.out,
		Format: o.output.value, Out: c.OutOrStdout(), Log: c.ErrOrStderr(),
		Options: predict.Options{Profile: prof, Workload: o.wf.workload(replay.DefaultSeed), QPS: sc.QPS, SLO: sc.SLO}}
	if c.Flags().Changed("concurrency") {
		if c.Flags().Changed("qps") {
			return badInput("--concurrency: a closed loop has no offered rate: give --qps (open loop) or --concurrency (closed loop), not both")
		}
		if co.Options.Concurrency, err = parseConcurrency("--concurrency", o.concurrency); err != nil {
			return err
		}
		co.Options.QPS = nil
	}
	if o.capf.on {
		capOpts := o.capf.options(sc.SLO, co.Options.Workload.Requests-replay.Sessions, nil)
		co.Capacity = &capOpts
	}
	if o.trace.path != "" {
		if co.Trace, err = o.trace.open(); err != nil {
			return err
		}
		co.TraceSpeed = o.trace.speed
	}
	return predict.Command(c.Context(), co)
}

// registerGridAxes defines the --grid-* axis flags (hone predict --grid,
// hone optimize) with defaults d.
func registerGridAxes(f *pflag.FlagSet, axes *predict.AxisFlags, d predict.Axes) {
	f.StringVar(&axes.TP, "grid-tp", joinList(d.TP), "tensor-parallel sizes a pool may use (default: every power of two within the budget)")
	f.StringVar(&axes.MaxNumSeqs, "grid-max-num-seqs", joinList(d.MaxNumSeqs), "max_num_seqs values (0: the engine's default)")
	f.StringVar(&axes.MaxNumBatchedTokens, "grid-max-num-batched-tokens", joinList(d.MaxNumBatchedTokens), "max_num_batched_tokens values (0: the engine's default; below max_num_seqs: skipped)")
	f.StringVar(&axes.PrefixCaching, "grid-prefix-caching", joinList(d.PrefixCaching), "prefix caching: true, false or both")
	f.StringVar(&axes.Routing, "grid-routing", joinList(d.Routing), "routing policies, tried where a pool has two workers or more")
	f.StringVar(&axes.EnforceEager, "grid-enforce-eager", joinList(d.EnforceEager), "enforce_eager: false (CUDA graphs), true (eager) or both")
	f.StringVar(&axes.GPUMemoryUtilization, "grid-gpu-memory-utilization", joinList(d.GPUMemoryUtilization), "gpu_memory_utilization values (0: the engine's default)")
}

func gridFlagNames() []string {
	var out []string
	for _, a := range gridAxes {
		out = append(out, "grid-"+a)
	}
	return out
}

func joinList[T any](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ",")
}

// axisErr names the --grid-* flag of a bad axis.
func axisErr(err error) error {
	var ae *replay.ParamError
	if errors.As(err, &ae) {
		return predict.AxisUsage(ae)
	}
	return usageError{Err: err}
}

// parseConcurrency parses a list of clients given to flag, naming the flag
// on error.
func parseConcurrency(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, badInput("%s: %q is not a number of clients (want integers >= 1, comma-separated, e.g. 1,8,32)", flag, f)
		}
		out = append(out, n)
	}
	return out, nil
}
