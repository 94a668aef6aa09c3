package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

func init() { subcommands = append(subcommands, newPredictCmd) }

// predictNote says what a predicted figure is, under every table.
const predictNote = "predicted: the emulator's scheduler in virtual time with the profile's cost model; not a measurement"

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

// run is hone predict.
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
	opts := predict.Options{Profile: prof,
		Workload: o.wf.workload(replay.DefaultSeed),
		QPS:      sc.QPS, SLO: sc.SLO, KeepRequests: o.out != ""}
	if c.Flags().Changed("concurrency") {
		if c.Flags().Changed("qps") {
			return badInput("--concurrency: a closed loop has no offered rate: give --qps (open loop) or --concurrency (closed loop), not both")
		}
		if opts.Concurrency, err = parseConcurrency("--concurrency", o.concurrency); err != nil {
			return err
		}
		opts.QPS = nil
	}
	if o.capf.on && o.grid {
		co := o.capf.options(sc.SLO, opts.Workload.Requests-replay.Sessions, nil)
		opts.Capacity, opts.QPS = &co, nil
	}
	if o.grid {
		return runPredictGrid(c, spec, ax, opts, o.top, o.out, o.output.value)
	}
	if o.capf.on {
		res, err := predict.CapacityRecord(c.Context(), spec, opts, o.capf.options(sc.SLO, opts.Workload.Requests-replay.Sessions, c.ErrOrStderr()))
		if err != nil {
			var pe *replay.ParamError
			if errors.As(err, &pe) {
				return paramErr(pe)
			}
			return badInput("%s: cannot predict: %v", args[0], err)
		}
		return capacity.Write(c.OutOrStdout(), o.output.value, o.out, res)
	}
	var rec *schema.Record
	if o.trace.path != "" {
		tf, terr := o.trace.open()
		if terr != nil {
			return terr
		}
		rec, err = predict.RunTrace(spec, opts, tf, o.trace.speed)
	} else {
		rec, err = predict.Run(spec, opts)
	}
	if err != nil {
		var pe *replay.ParamError
		if errors.As(err, &pe) {
			return paramErr(pe)
		}
		return badInput("%s: cannot predict: %v", args[0], err)
	}
	if o.out != "" {
		if err := replay.WriteRecord(o.out, rec); err != nil {
			return err
		}
	}
	w := c.OutOrStdout()
	if o.output.value == "json" {
		return writeJSON(w, withoutRequests(rec))
	}
	writePredictTable(w, spec, prof.Name, rec)
	replay.WriteTraceHitRates(w, rec)
	if o.out != "" {
		fmt.Fprintf(w, "record (%s, profile %s) written to %s\n", rec.Kind, prof.Name, o.out)
	}
	return nil
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
		return badInput("--grid-%s: %q is invalid: want %s", ae.Field, ae.Value, ae.Want)
	}
	return usageError{Err: err}
}

// withoutRequests is rec without its per-request records: -o json prints
// the summaries (--out keeps everything).
func withoutRequests(rec *schema.Record) *schema.Record {
	r := *rec
	r.Runs = make([]schema.RunRecord, len(rec.Runs))
	for i, run := range rec.Runs {
		run.Levels = append([]schema.LevelRecord(nil), run.Levels...)
		for j := range run.Levels {
			run.Levels[j].Requests = nil
		}
		r.Runs[i] = run
	}
	return &r
}

func writePredictTable(w io.Writer, spec *deploy.Spec, profile string, rec *schema.Record) {
	fmt.Fprintf(w, "kind: %s  profile: %s  spec: %s  gpus: %d  SLO: p99 TTFT <= %g ms, p99 TPOT <= %g ms\n",
		rec.Kind, emulator.ProfileLabel(profile), spec.Name, spec.GPUsNeeded(), rec.SLO.TTFTMillis, rec.SLO.TPOTMillis)
	fmt.Fprintf(w, "profile %s: %s\n", profile, emulator.ValidationNote(profile))
	if len(rec.Runs) == 0 {
		fmt.Fprintln(w, "no levels")
		return
	}
	run := rec.Runs[0]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	first := "offered_qps"
	if rec.Workload.LoadMode() == schema.LoadClosed {
		first = "clients"
	}
	// Goodput gets a column when --goodput set its limits (by default they
	// are the SLO's own, per request: the record still has it).
	goodput := rec.SLO.Goodput.Set()
	head := first + "\tp50_ttft_ms\tp90_ttft_ms\tp99_ttft_ms\tp50_tpot_ms\tp90_tpot_ms\tp99_tpot_ms\teffective_qps\tgpu_s_per_req\thit_rate\t"
	if goodput {
		head += "goodput\tgoodput_qps\t"
	}
	fmt.Fprintln(tw, head+"passed\t")
	for _, l := range run.Levels {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.4f\t%s\t%s\t", levelNumber(l.Level),
			l.P50TTFTMs, l.P90TTFTMs, l.P99TTFTMs, l.P50TPOTMs, l.P90TPOTMs, l.P99TPOTMs, l.EffectiveQPS,
			optFloat(l.GPUSecondsPerRequest, "%.4g"), optPercent(l.HitRateCachedTokens))
		if goodput {
			if g := l.Goodput; g != nil {
				fmt.Fprintf(tw, "%.1f%%\t%.4f\t", 100*g.Fraction, g.QPS)
			} else {
				fmt.Fprint(tw, "-\t-\t")
			}
		}
		fmt.Fprintf(tw, "%t\t\n", l.Passed)
	}
	tw.Flush()
	if goodput {
		fmt.Fprintf(w, "goodput: the share (and rate) of measured requests within %s\n", rec.SLO.Goodput)
	}
	fmt.Fprintf(w, "objective: %s req/s (largest effective QPS among passing levels)",
		strconv.FormatFloat(run.Objective, 'g', -1, 64))
	if run.GPUSecondsPerRequest != nil {
		fmt.Fprintf(w, ", %.4g GPU-s/request at that level", *run.GPUSecondsPerRequest)
	}
	fmt.Fprintln(w)
	if e := predict.Edge(rec, rec.SLO, predict.EdgeMargin); e != "" {
		fmt.Fprintf(w, "too close to call: %s; a measurement may land one level higher or lower\n", e)
	}
	fmt.Fprintln(w, predictNote)
}

func optFloat(v *float64, format string) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf(format, *v)
}

func optPercent(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// gridRow is one ranked point as the grid's table and -o json show it.
type gridRow struct {
	Rank      int          `json:"rank"`
	Name      string       `json:"name"`
	GPUs      int          `json:"gpus"`
	Objective float64      `json:"objective"`
	Cost      *float64     `json:"gpu_seconds_per_request"`
	P99TTFTMs *float64     `json:"p99_ttft_ms"` // at the objective's level
	P99TPOTMs *float64     `json:"p99_tpot_ms"`
	Pareto    bool         `json:"pareto"`
	Edge      string       `json:"edge,omitempty"` // why the objective is too close to call
	Error     string       `json:"error,omitempty"`
	Spec      *deploy.Spec `json:"spec"`
}

// gridResult is --grid's -o json (Ranked cut to --top) and --out (Points:
// every point, ranked, with its record's levels).
type gridResult struct {
	Kind      schema.Kind     `json:"kind"`
	Profile   string          `json:"profile"`
	Base      string          `json:"base"`
	Budget    int             `json:"budget"`
	Specs     int             `json:"specs"`
	Failed    int             `json:"failed"`
	SLO       slo.SLO         `json:"slo"`
	QPS       []float64       `json:"qps"`
	Workload  schema.Workload `json:"workload"`
	Axes      predict.Axes    `json:"axes"`
	Ranked    []gridRow       `json:"ranked,omitempty"`
	Pareto    []gridRow       `json:"pareto"`
	Points    []predict.Point `json:"points,omitempty"`
	Rule      string          `json:"rule"`
	Predicted string          `json:"predicted"`
}

const gridRule = "ranked by objective (largest effective QPS among passing levels) descending, then GPU-seconds per request at that level, then GPUs, then name; the Pareto front holds the specs with an objective above 0 that no other spec matches or beats on both objective and cost while beating on one"

// gridCapacityRule states --grid --capacity's order for the spec's
// objective.
func gridCapacityRule(o deploy.Objective) string {
	what := "capacity (the largest load meeting the SLO at steady state) descending"
	switch o.Goal {
	case deploy.GoalCheapest:
		what = fmt.Sprintf("spec.objective cheapest at %g req/s: the specs whose capacity reaches %g req/s first, fewest GPUs first, then capacity descending", o.TargetQPS, o.TargetQPS)
	case deploy.GoalPerGPU:
		what = "capacity per GPU descending, then capacity"
	}
	return "ranked by " + what + ", then GPU-seconds per request at capacity (GPUs / capacity), then GPUs, then name; the Pareto front holds the specs no other matches or beats on both capacity and cost while beating on one"
}

func runPredictGrid(c *cobra.Command, base *deploy.Spec, axes predict.Axes, opts predict.Options, top int, out, format string) error {
	specs, err := predict.Grid(base, axes)
	if err != nil {
		var ae *replay.ParamError
		if errors.As(err, &ae) {
			return axisErr(err)
		}
		return badInput("--grid: %v", err)
	}
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pp := &gridProgress{w: c.ErrOrStderr(), tty: term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("CI") == "", start: time.Now()}
	points := predict.Evaluate(ctx, specs, opts, pp.update)
	pp.close(len(specs))

	ranked := predict.Rank(points)
	rule := gridRule
	if opts.Capacity != nil {
		ranked = predict.RankGoal(points, predict.Goal(base.Objective))
		rule = gridCapacityRule(base.Objective)
	}
	front := predict.ParetoFront(points)
	onFront := map[string]bool{}
	for _, p := range front {
		onFront[p.Name()] = true
	}
	res := gridResult{Kind: predict.Kind, Profile: opts.Profile.Name, Base: base.Name, Budget: base.GPUs.Budget, Specs: len(specs),
		SLO: opts.SLO, QPS: opts.QPS, Workload: opts.Workload, Axes: axes, Rule: rule, Predicted: predictNote}
	var failed []predict.Point
	for _, p := range ranked {
		if p.Err != "" {
			failed = append(failed, p)
		}
	}
	res.Failed = len(failed)
	rank := map[string]int{}
	for i, p := range ranked {
		rank[p.Name()] = i + 1
	}
	row := func(p predict.Point) gridRow {
		r := gridRow{Rank: rank[p.Name()], Name: p.Name(), GPUs: p.GPUs, Objective: p.Objective, Cost: p.CostGPUSecPerReq,
			Pareto: onFront[p.Name()], Edge: p.Edge, Error: p.Err, Spec: p.Spec}
		if l := objectiveLevel(p); l != nil {
			r.P99TTFTMs, r.P99TPOTMs = &l.P99TTFTMs, &l.P99TPOTMs
		}
		return r
	}
	for _, p := range front {
		res.Pareto = append(res.Pareto, row(p))
	}
	if out != "" {
		all := res
		all.Points = ranked
		b, err := json.MarshalIndent(all, "", "  ")
		if err != nil {
			return fmt.Errorf("encode grid: %w", err)
		}
		if err := atomicfile.Write(out, append(b, '\n')); err != nil {
			return fmt.Errorf("write grid %s: %w", out, err)
		}
	}
	for _, p := range ranked[:min(top, len(ranked))] {
		res.Ranked = append(res.Ranked, row(p))
	}
	w := c.OutOrStdout()
	if format == "json" {
		if err := writeJSON(w, res); err != nil {
			return err
		}
	} else {
		writeGridTable(w, res, failed, out)
	}
	switch {
	case ctx.Err() != nil:
		return checkFailed{Msg: fmt.Sprintf("interrupted: the specs not predicted are marked (%d of %d failed or skipped)", len(failed), len(specs))}
	case len(failed) == len(specs):
		return checkFailed{Msg: fmt.Sprintf("no spec of the grid could be predicted: %s: %s", failed[0].Name(), failed[0].Err)}
	}
	return nil
}

// objectiveLevel is the level a point's objective comes from: the passing
// level with the largest effective QPS; nil when none passed.
func objectiveLevel(p predict.Point) *schema.LevelRecord {
	if c := p.Capacity; c != nil {
		for _, pr := range c.Probes {
			if pr.Pass && pr.Load == c.Value {
				l := &schema.LevelRecord{}
				l.P99TTFTMs, l.P99TPOTMs = pr.P99TTFTMs, pr.P99TPOTMs
				return l
			}
		}
		return nil
	}
	if p.Record == nil || len(p.Record.Runs) == 0 {
		return nil
	}
	var best *schema.LevelRecord
	levels := p.Record.Runs[0].Levels
	for i := range levels {
		if l := &levels[i]; l.Passed && (best == nil || l.EffectiveQPS > best.EffectiveQPS) {
			best = l
		}
	}
	return best
}

func writeGridTable(w io.Writer, res gridResult, failed []predict.Point, out string) {
	fmt.Fprintf(w, "kind: %s  profile: %s  base: %s  grid: %d specs within %d GPUs  SLO: p99 TTFT <= %g ms, p99 TPOT <= %g ms\n",
		res.Kind, emulator.ProfileLabel(res.Profile), res.Base, res.Specs, res.Budget, res.SLO.TTFTMillis, res.SLO.TPOTMillis)
	fmt.Fprintf(w, "profile %s: %s\n", res.Profile, emulator.ValidationNote(res.Profile))
	fmt.Fprintf(w, "\ntop %d of %d (--top; * on the Pareto front; ~ too close to call), %s\n", len(res.Ranked), res.Specs, strings.SplitN(res.Rule, ";", 2)[0])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\tspec\tgpus\tobjective_qps\tgpu_s_per_req\tp99_ttft_ms\tp99_tpot_ms\tpareto\tedge")
	for _, r := range res.Ranked {
		writeGridRow(tw, r)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nPareto front, objective against GPU-s/request (%d specs, cheapest first):\n", len(res.Pareto))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\tspec\tgpus\tobjective_qps\tgpu_s_per_req\tp99_ttft_ms\tp99_tpot_ms\tpareto\tedge")
	for _, r := range res.Pareto {
		writeGridRow(tw, r)
	}
	tw.Flush()
	edges := 0
	for _, r := range res.Ranked {
		if r.Edge != "" {
			edges++
		}
	}
	if edges > 0 {
		fmt.Fprintf(w, "\n~ too close to call (%d of the %d shown): the objective rests on a level whose predicted p99 lies within %.0f%% of an SLO limit, "+
			"so a measurement may land one level higher or lower (-o json's edge says which level and limit)\n", edges, len(res.Ranked), 100*predict.EdgeMargin)
	}
	if len(failed) > 0 {
		fmt.Fprintf(w, "\n%d specs could not be predicted:\n", len(failed))
		for i, p := range failed {
			if i == 10 {
				fmt.Fprintf(w, "  ... and %d more (see --out)\n", len(failed)-i)
				break
			}
			fmt.Fprintf(w, "  %s: %s\n", p.Name(), p.Err)
		}
	}
	if out != "" {
		fmt.Fprintf(w, "\nevery point written to %s\n", out)
	}
	fmt.Fprintln(w, predictNote)
}

func writeGridRow(w io.Writer, r gridRow) {
	mark, edge := "", ""
	if r.Pareto {
		mark = "*"
	}
	if r.Edge != "" {
		edge = "~"
	}
	obj := strconv.FormatFloat(r.Objective, 'f', 3, 64)
	if r.Error != "" {
		obj = "error"
	}
	fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Rank, r.Name, r.GPUs, obj, optFloat(r.Cost, "%.4g"),
		optFloat(r.P99TTFTMs, "%.2f"), optFloat(r.P99TPOTMs, "%.2f"), mark, edge)
}

// gridProgress shows a grid's progress on stderr: on a terminal a line
// redrawn in place with the rate and ETA; elsewhere a line every 10 s; and
// a summary line at the end.
type gridProgress struct {
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time
	drawn bool
}

func (p *gridProgress) update(done, total int) {
	el := time.Since(p.start)
	rate := float64(done) / max(el.Seconds(), 1e-9)
	eta := time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second)
	line := fmt.Sprintf("predict: %d/%d specs  %.0f specs/s  ETA %s", done, total, rate, eta)
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K"+line)
		p.drawn = true
		return
	}
	if time.Since(p.last) >= 10*time.Second && done < total {
		if !p.last.IsZero() {
			fmt.Fprintln(p.w, line)
		}
		p.last = time.Now()
	}
}

func (p *gridProgress) close(total int) {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintf(p.w, "predict: %d specs in %s\n", total, time.Since(p.start).Round(time.Millisecond))
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

// levelNumber is a level's load as the table's first column gives it: its
// offered rate, or its clients.
func levelNumber(l slo.Level) string {
	if l.Concurrency > 0 {
		return strconv.Itoa(l.Concurrency)
	}
	return strconv.FormatFloat(l.OfferedQPS, 'g', -1, 64)
}
