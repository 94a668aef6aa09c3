package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/preflight"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

func init() { subcommands = append(subcommands, newReplayCmd) }

func newReplayCmd() *cobra.Command {
	var o replayFlags
	c := withHelp(&cobra.Command{
		Use:   "replay",
		Short: "Replay the coding-agent workload against a live endpoint and write a run record",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runReplay(c, &o)
		},
	}, "replay", replayHelp())
	c.AddCommand(newReplayMergeCmd())
	o.bind(c)
	return c
}

// replayFlags are hone replay's flags.
type replayFlags struct {
	wf                    workloadFlags
	endpoint, tokEndpoint string
	model, kind, backend  string
	revision, precision   string
	configPath, out       string
	scenario, cache       string
	seed                  uint64
	runs, gpus            int
	timeScale             float64
	timeout               time.Duration
	output                outputFormat
	cachedReported        bool
	shard, startAt        string
	levelGap              time.Duration
	maxConcurrency        string
	capf                  capacityFlags
	trace                 traceFlags
}

func (o *replayFlags) bind(c *cobra.Command) {
	o.wf.register(c, true)
	o.capf.register(c)
	o.trace.register(c)
	f := c.Flags()
	f.StringVar(&o.endpoint, "endpoint", "", "base URL of the OpenAI-compatible server (required)")
	f.StringVar(&o.tokEndpoint, "tokenize-endpoint", "", "base URL serving POST /tokenize, when not --endpoint")
	f.StringVar(&o.model, "model", "", "served model name (default: the endpoint's, when GET /v1/models lists exactly one)")
	f.StringVar(&o.kind, "kind", "", "assert what serves the endpoint: device (real vLLM) | emulated (hone sim serve) | unverified (default: discovered from GET /version)")
	f.StringVar(&o.backend, "backend", "", "backend label (default: vllm, emulator or unknown, from the kind found)")
	f.BoolVar(&o.cachedReported, "cached-tokens-reported", false, "the engine runs with --enable-prompt-tokens-details: a usage block without cached tokens means 0 (vLLM omits them at 0); without it, concluded once a request carries them")
	f.StringVar(&o.cache, "cache", "auto", "cold-start procedure before every level: auto | reset (POST /reset_prefix_cache) | fresh-prefixes")
	f.StringVar(&o.revision, "revision", "", "model revision, for the record")
	f.StringVar(&o.precision, "precision", "", "model precision (e.g. bf16, fp8), for the record")
	f.StringVar(&o.configPath, "config", "", "JSON file with the deployment config to store in the record")
	f.StringVar(&o.scenario, "scenario", "", "name the gate compares records under (config.scenario; default: the config's name)")
	f.StringVar(&o.out, "out", "run.json.gz", "where to write the run record (a name ending in .gz is written gzip-compressed: about 7 bytes per output token, against 18 plain)")
	o.output.register(f, "table", "", "table", "json", formatVLLMBench)
	f.Uint64Var(&o.seed, "seed", replay.DefaultSeed, "workload seed (prefix text and suffix token ids)")
	f.StringVar(&o.maxConcurrency, "max-concurrency", "", "closed-loop levels instead of --qps: clients in flight, comma-separated (e.g. 4,16)")
	f.IntVar(&o.runs, "runs", 1, "repeat the whole scan this many times (the gate wants 3 or more)")
	f.IntVar(&o.gpus, "gpus", 1, "GPUs behind the endpoint, for cost in GPU-seconds per request")
	f.Float64Var(&o.timeScale, "time-scale", 1, "engine time scale: compress the schedule by S and divide durations by S (default: the engine's stated scale, else 1)")
	f.DurationVar(&o.timeout, "request-timeout", 10*time.Minute, "per-request timeout, model time")
	f.StringVar(&o.shard, "shard", "", "send only shard INDEX of COUNT of the schedule, e.g. 0/3 (with --start-at; merge the records with 'hone replay merge')")
	f.StringVar(&o.startAt, "start-at", "", "with --shard: the instant the first level starts, the same for every shard (RFC 3339, e.g. 2026-12-01T07:00:00Z, or unix nanoseconds)")
	f.DurationVar(&o.levelGap, "level-gap", replay.DefaultLevelGap, "with --shard: model time from a level's last arrival to its drain deadline; the next level starts 1 s (real) later")
}

// runReplay is hone replay.
func runReplay(c *cobra.Command, o *replayFlags) error {
	qps, clients, err := o.checkLoad(c)
	if err != nil {
		return err
	}
	if err := o.check(c, qps); err != nil {
		return err
	}
	if err := o.resolveModel(c); err != nil {
		return err
	}
	opts, pp, err := o.options(c, qps, clients)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.capf.on {
		return replayCapacity(ctx, c, opts, o.capf, o.output.value, o.out, pp)
	}
	return o.record(ctx, c, opts, pp)
}

// checkLoad checks the output, the trace and the load flags: the levels'
// offered rates (--qps) or clients (--max-concurrency), or a capacity search.
func (o *replayFlags) checkLoad(c *cobra.Command) (qps []float64, clients []int, err error) {
	if err := o.output.check(); err != nil {
		return nil, nil, err
	}
	if err := o.trace.check(c, workloadFlagNames...); err != nil {
		return nil, nil, err
	}
	if qps, err = parseQPS(o.wf.qps); err != nil {
		return nil, nil, err
	}
	if err := o.capf.check(c, "qps", "max-concurrency", "shard", "runs"); err != nil {
		return nil, nil, err
	}
	if o.capf.on && !c.Flags().Changed("out") {
		o.out = "capacity.json"
	}
	if o.capf.on && o.output.value == formatVLLMBench {
		return nil, nil, badInput("-o %s: with --capacity the result is a capacity search, not vllm bench serve results: want table or json", formatVLLMBench)
	}
	if o.capf.on && strings.HasSuffix(o.out, ".gz") {
		return nil, nil, badInput("--out %s: with --capacity the result is a small JSON file, written plain: give a name without .gz", o.out)
	}
	if c.Flags().Changed("max-concurrency") {
		if c.Flags().Changed("qps") {
			return nil, nil, badInput("--max-concurrency: a closed loop has no offered rate: give --qps (open loop) or --max-concurrency (closed loop), not both")
		}
		if c.Flags().Changed("shard") {
			return nil, nil, badInput("--max-concurrency: a closed loop's sends depend on its own requests' ends: one process sends it (no --shard)")
		}
		if clients, err = parseConcurrency("--max-concurrency", o.maxConcurrency); err != nil {
			return nil, nil, err
		}
		qps = nil
	}
	return qps, clients, nil
}

// check checks the rest of the flags, before the first request.
func (o *replayFlags) check(c *cobra.Command, qps []float64) error {
	if err := o.wf.check(append(qps, 1)); err != nil {
		return err
	}
	if o.out == "" {
		return badInput("--out: want a path for the run record")
	}
	// Before the first request, not after the last: a missing or
	// read-only directory must not lose a run.
	if err := atomicfile.CheckWritable(o.out); err != nil {
		return badInput("--out: %v", err)
	}
	// Options treat 0 as "default"; on the command line it is a mistake.
	if o.runs < 1 {
		return badInput("--runs: want at least 1, got %d", o.runs)
	}
	if c.Flags().Changed("time-scale") && (!(o.timeScale > 0) || o.timeScale > 1e6) {
		return badInput("--time-scale: want a positive factor (0.1 for an engine run with --time-scale 0.1), got %v", o.timeScale)
	}
	switch o.cache {
	case "auto":
		o.cache = ""
	case "reset":
		o.cache = schema.CacheReset
	case "fresh-prefixes":
		o.cache = schema.CacheFreshPrefixes
	default:
		return badInput("--cache: want auto, reset or fresh-prefixes, got %q", o.cache)
	}
	if o.timeout <= 0 {
		return badInput("--request-timeout: want a positive duration, got %v", o.timeout)
	}
	if o.endpoint == "" {
		return badInput("--endpoint: required, e.g. http://127.0.0.1:8000")
	}
	return nil
}

// resolveModel takes the endpoint's one served model when --model is not
// given, as vllm bench serve does.
func (o *replayFlags) resolveModel(c *cobra.Command) error {
	if o.model == "" {
		// As vllm bench serve: the served model, when the endpoint
		// serves exactly one.
		served, err := replay.ServedModels(c.Context(), o.endpoint)
		switch {
		case err != nil:
			return badInput("--model: not given, and the endpoint's model list could not be read (%v): give the served model name", err)
		case len(served) != 1:
			return badInput("--model: not given, and the endpoint serves %d models (%s): name one", len(served), strings.Join(served, ", "))
		}
		o.model = served[0]
		fmt.Fprintf(c.ErrOrStderr(), "replay: --model not given: %s, the one model the endpoint serves\n", o.model)
	}
	return nil
}

// options states the replay the flags ask for.
func (o *replayFlags) options(c *cobra.Command, qps []float64, clients []int) (replay.Options, *replay.ProgressPrinter, error) {
	sh, err := parseShard(c, o.shard, o.startAt, o.levelGap, o.cache)
	if err != nil {
		return replay.Options{}, nil, err
	}
	cfg := map[string]any{}
	if o.configPath != "" {
		b, err := os.ReadFile(o.configPath)
		if err != nil {
			return replay.Options{}, nil, badInput("--config: %v", err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return replay.Options{}, nil, badInput("--config %s: want a JSON object: %v", o.configPath, err)
		}
	}
	if o.scenario != "" {
		cfg[schema.ConfigScenario] = o.scenario
	}
	if !c.Flags().Changed("time-scale") {
		o.timeScale = 0 // adopt the engine's
	}
	ver, rev := buildVersion()
	tty := term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("CI") == ""
	pp := &replay.ProgressPrinter{W: c.ErrOrStderr(), TTY: tty}
	opts := replay.Options{
		Endpoint: o.endpoint, TokenizeEndpoint: o.tokEndpoint, Model: o.model, Kind: schema.Kind(o.kind), Backend: o.backend, Cache: o.cache,
		Workload: o.wf.workload(o.seed),
		QPS:      qps, Concurrency: clients, Runs: o.runs, SLO: o.wf.target(),
		TimeScale: o.timeScale, RequestTimeout: o.timeout, GPUs: o.gpus, Config: cfg, Hardware: hostHardware(),
		ModelInfo: schema.Model{Revision: o.revision, Precision: o.precision},
		Hone:      schema.Build{Version: ver, Commit: rev}, Progress: pp.Update, CachedTokensReported: o.cachedReported,
		Shard: sh,
	}
	return opts, pp, nil
}

// record runs the replay (of the trace, or the workload), writes its
// record and reports it; the verdict is the exit code.
func (o *replayFlags) record(ctx context.Context, c *cobra.Command, opts replay.Options, pp *replay.ProgressPrinter) error {
	var rec *schema.Record
	var err error
	if o.trace.path != "" {
		tf, terr := o.trace.open()
		if terr != nil {
			return terr
		}
		opts.SpillDir = filepath.Dir(o.out) // the chunks wait on the record's disk, not in memory
		rec, err = replay.RunTrace(ctx, opts, tf, o.trace.speed)
	} else {
		rec, err = replay.Run(ctx, opts)
	}
	pp.Close()
	var pe *replay.ParamError
	if errors.As(err, &pe) {
		return paramErr(pe)
	}
	judgeRecord(c.ErrOrStderr(), rec, o.trace.path != "")
	// A record is written when a request was sent: one that never
	// reached the endpoint (unreachable, wrong model, no /tokenize)
	// holds nothing to keep, and must not leave a run.json behind.
	written := "no record written (no request was sent)"
	if rec != nil && sentAny(rec) {
		if werr := replay.WriteRecord(o.out, rec); werr != nil {
			return fmt.Errorf("%w (and the record could not be written: %v)", orNil(err), werr)
		}
		written = "partial record (incomplete) written to " + o.out
	}
	var me *replay.ModelError
	switch {
	case errors.As(err, &me):
		return badInput("--model: %v; %s", err, written)
	case err != nil && ctx.Err() != nil:
		return checkFailed{Msg: fmt.Sprintf("interrupted: %s", written)}
	case err != nil:
		return checkFailed{Msg: fmt.Sprintf("%v; %s", err, written)}
	}
	w := c.OutOrStdout()
	bad := rec.InvalidLevels()
	if err := writeReplayOutput(w, o.output.value, rec, o.out, bad); err != nil {
		return err
	}
	if o.output.value == "table" {
		replay.WriteTraceHitRates(w, rec)
	}
	if sh := opts.Shard; sh != nil {
		fmt.Fprintf(c.ErrOrStderr(), "shard %d/%d: merge every shard's record with 'hone replay merge'\n", sh.Index, sh.Count)
	}
	return replayVerdict(rec, bad)
}

// replayCapacity runs hone replay --capacity: each probe is one level of
// a one-run replay against the endpoint, as long as the window rule asks.
func replayCapacity(ctx context.Context, c *cobra.Command, opts replay.Options, capf capacityFlags, format, out string, pp *replay.ProgressPrinter) error {
	var kind schema.Kind
	var header *schema.Record
	probe := capacity.ReplayProber(opts, capf.mode, func(rec *schema.Record) {
		pp.Close()
		kind = rec.Kind
		if header == nil {
			header = capacity.HeaderOf(rec)
		}
	})
	res, err := capacity.Search(ctx, probe, capf.options(opts.SLO, opts.Workload.Requests-replay.Sessions, c.ErrOrStderr()))
	var pe *replay.ParamError
	var me *replay.ModelError
	switch {
	case errors.As(err, &pe):
		return paramErr(pe)
	case errors.As(err, &me):
		return badInput("--model: %v", err)
	}
	if res == nil {
		return checkFailed{Msg: fmt.Sprintf("capacity: %v", err)}
	}
	if kind == "" {
		kind = schema.KindUnverified
	}
	if werr := capacity.Write(c.OutOrStdout(), format, out, &capacity.Record{Kind: kind, Source: "endpoint " + opts.Endpoint, Header: header, Capacity: res}); werr != nil {
		return werr
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return checkFailed{Msg: fmt.Sprintf("interrupted after %d probes (written to %s)", len(res.Probes), out)}
	case err != nil:
		return checkFailed{Msg: fmt.Sprintf("capacity: %v (the probes so far are in %s)", err, out)}
	case !res.Bounded && res.Value == 0:
		return checkFailed{Msg: "capacity: " + res.Note}
	}
	return nil
}

// parseShard turns --shard, --start-at and --level-gap into the replay's
// shard; nil without --shard.
func parseShard(c *cobra.Command, shard, startAt string, gap time.Duration, cache string) (*replay.Shard, error) {
	if shard == "" {
		for _, f := range []string{"start-at", "level-gap"} {
			if c.Flags().Changed(f) {
				return nil, badInput("--%s: only with --shard", f)
			}
		}
		return nil, nil
	}
	var s replay.Shard
	i, n, ok := strings.Cut(shard, "/")
	var err1, err2 error
	s.Index, err1 = strconv.Atoi(i)
	s.Count, err2 = strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || s.Count < 1 || s.Index < 0 || s.Index >= s.Count {
		return nil, badInput("--shard: want INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/3, got %q", shard)
	}
	if startAt == "" {
		return nil, badInput("--start-at: required with --shard: the instant every shard starts the first level, e.g. %s",
			time.Now().Add(time.Minute).UTC().Format(time.RFC3339))
	}
	if ns, err := strconv.ParseInt(startAt, 10, 64); err == nil {
		s.StartAt = time.Unix(0, ns)
	} else if s.StartAt, err = time.Parse(time.RFC3339Nano, startAt); err != nil {
		return nil, badInput("--start-at: want an RFC 3339 instant (e.g. 2026-12-01T07:00:00Z) or unix nanoseconds, got %q", startAt)
	}
	if gap <= 0 {
		return nil, badInput("--level-gap: want a positive duration (model time), got %v", gap)
	}
	s.LevelGap = gap
	if cache == "" {
		return nil, badInput("--cache: with --shard, want reset or fresh-prefixes: shards cannot agree on what auto would find")
	}
	return &s, nil
}

// newReplayMergeCmd is `hone replay merge`.
func newReplayMergeCmd() *cobra.Command {
	var (
		out    string
		output outputFormat
	)
	c := withHelp(&cobra.Command{
		Use:   "merge --out RECORD SHARD_RECORD...",
		Short: "Merge the records of a sharded replay (hone replay --shard) into one record",
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			if out == "" {
				return badInput("--out: want a path for the merged record")
			}
			if err := atomicfile.CheckWritable(out); err != nil {
				return badInput("--out: %v", err)
			}
			if len(args) == 0 {
				return badInput("want every shard's record, e.g. hone replay merge --out run.json.gz shard0.json.gz shard1.json.gz")
			}
			rec, err := replay.MergeShardFiles(args...)
			if err != nil {
				return usageError{Err: err}
			}
			judgeRecord(c.ErrOrStderr(), rec, rec.Workload.Kind == schema.WorkloadTrace)
			if err := replay.WriteRecord(out, rec); err != nil {
				return err
			}
			w := c.OutOrStdout()
			bad := rec.InvalidLevels()
			if err := writeReplayOutput(w, output.value, rec, out, bad); err != nil {
				return err
			}
			switch {
			case rec.Incomplete:
				return checkFailed{Msg: fmt.Sprintf("a shard stopped early (%s): the merged record %s is incomplete", rec.Error, out)}
			}
			return replayVerdict(rec, bad)
		},
	}, "replay-merge", nil)
	f := c.Flags()
	f.StringVar(&out, "out", "", "where to write the merged record (required; a name ending in .gz is written gzip-compressed)")
	output.register(f, "table", "", "table", "json", formatVLLMBench)
	return c
}

func orNil(err error) error {
	if err == nil {
		return errors.New("run finished")
	}
	return err
}

func outcomeSummary(m map[string]int) string {
	var parts []string
	for _, o := range []string{schema.OutcomeOK, schema.OutcomeHTTPError, schema.OutcomeConnectError, schema.OutcomeStreamCut,
		schema.OutcomeMalformed, schema.OutcomeTimeout, schema.OutcomeCanceled} {
		if m[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[o], o))
		}
	}
	return strings.Join(parts, ", ")
}

// hostHardware is what the client host knows without NVML: the CPU.
func hostHardware() map[string]any {
	v, commit := buildVersion()
	return preflight.Hardware(v, commit)
}

// sentAny reports whether the replay sent at least one request.
func sentAny(rec *schema.Record) bool {
	for _, run := range rec.Runs {
		for _, l := range run.Levels {
			if l.Sent > 0 {
				return true
			}
		}
	}
	return false
}

// writeReplayTable prints the runs' objectives, every level's serving
// statistics (vllm bench serve's figures, model time) and the verdict.
// writeReplayOutput prints a record's summary as the -o format asks.
func writeReplayOutput(w io.Writer, format string, rec *schema.Record, out string, bad []string) error {
	switch format {
	case "json":
		return writeJSON(w, replaySummary(rec, out))
	case formatVLLMBench:
		return replay.WriteVLLMBench(w, rec)
	}
	writeReplayTable(w, rec, out, bad)
	return nil
}

// judgeRecord applies diagnose's client-bound rule to rec before it is
// printed or written, so that hone diagnose report finds the verdicts it
// would reach itself (one verdict per level, judged once). A trace's
// record is left as replay judged it: attributing 10^5 requests would
// hold them all again.
func judgeRecord(stderr io.Writer, rec *schema.Record, trace bool) {
	if rec == nil || trace {
		return
	}
	marked, err := diagnose.JudgeRecord(rec)
	if err != nil {
		return // nothing attributable: replay's own verdicts stand
	}
	for _, m := range marked {
		fmt.Fprintf(stderr, "client-bound (diagnose's rule): %s\n", m)
	}
}

func writeReplayTable(w io.Writer, rec *schema.Record, out string, bad []string) {
	for _, r := range rec.Runs {
		fmt.Fprintf(w, "run %d: objective %.4g req/s (%s, valid levels only)", r.Run+1, r.Objective, rec.Kind)
		if r.GPUSecondsPerRequest != nil {
			fmt.Fprintf(w, ", %.4g GPU-s/request", *r.GPUSecondsPerRequest)
		}
		fmt.Fprintln(w)
	}
	for i, s := range replay.ServeStatsByLevel(rec) {
		valid := "valid"
		if !s.Valid {
			valid = "INVALID: does not count"
		}
		load := fmt.Sprintf("%g req/s offered", s.OfferedQPS)
		if s.Concurrency > 0 {
			load = fmt.Sprintf("%d clients (closed loop)", s.Concurrency)
		}
		fmt.Fprintf(w, "\n== %s: %d run(s), %d completed, %d failed (%s, model time; %s)\n",
			load, s.Runs, s.Completed, s.Failed, rec.Kind, valid)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "request throughput\t%.2f\treq/s\t\n", s.RequestThroughput)
		fmt.Fprintf(tw, "output token throughput\t%.1f\ttok/s\t\n", s.OutputTokenThroughput)
		fmt.Fprintf(tw, "total token throughput\t%.1f\ttok/s\t\n", s.TotalTokenThroughput)
		if g := replay.LevelGoodput(rec, i); g != nil {
			fmt.Fprintf(tw, "goodput (%s)\t%.2f\treq/s\t%.1f%% of %d measured requests\t\n", g.Limits, g.QPS, 100*g.Fraction, g.Measured)
		}
		tw.Flush()
		if short := notSteadyRuns(rec, s.OfferedQPS); len(short) > 0 && s.Concurrency == 0 {
			fmt.Fprintf(w, "not at steady state (run %s): the effective rate fell more than %.0f%% short of the offered %g req/s while the SLO was met: "+
				"a burst figure (the window ends with the last requests' decode), not saturation; hone replay --capacity measures at steady state\n",
				strings.Join(short, ", "), 100*replay.SteadyTolerance, s.OfferedQPS)
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ms\tmean\tmedian\tp90\tp99\t")
		for _, m := range []struct {
			name string
			d    replay.Dist
		}{{"TTFT", s.TTFT}, {"TPOT", s.TPOT}, {"ITL", s.ITL}, {"E2E", s.E2E}} {
			if m.name == "ITL" && m.d.N == 0 && rec.ChunksDropped {
				fmt.Fprintf(tw, "ITL\tn/a (the record's chunks were dropped)\t\t\t\t\n")
				continue
			}
			if (m.name == "TPOT" || m.name == "ITL") && m.d.N == 0 && s.Completed > 0 {
				fmt.Fprintf(tw, "%s\tn/a (no request produced two tokens)\t\t\t\t\n", m.name)
				continue
			}
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", m.name, m.d.Mean, m.d.Median, m.d.P90, m.d.P99)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\ncache: %s; time scale %g\n", rec.Cache.Procedure, rec.TimeScale)
	fmt.Fprintf(w, "record (%s, %d requests: %s) written to %s\n", rec.Kind,
		rec.Validation.Valid+rec.Validation.Invalid, outcomeSummary(rec.Outcomes), out)
	for _, l := range bad {
		fmt.Fprintln(w, "INVALID", l)
	}
	failed := rec.FailedLevels()
	for _, l := range failed {
		fmt.Fprintln(w, "FAILED", l)
	}
	switch {
	case len(bad) == 0 && len(failed) == 0:
		fmt.Fprintln(w, "verdict: every level valid, no level lost requests")
	case len(failed) > 0:
		fmt.Fprintf(w, "verdict: requests failed at %d level(s): the deployment did not serve the load (see FAILED above)\n", len(failed))
	}
}

// notSteadyRuns names the runs (1-based) whose level at offered rate qps
// is NotSteady.
func notSteadyRuns(rec *schema.Record, qps float64) []string {
	var out []string
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			if l.OfferedQPS == qps && l.Concurrency == 0 && l.NotSteady {
				out = append(out, strconv.Itoa(r.Run+1))
			}
		}
	}
	return out
}

// replayVerdict is the exit status of a written, complete record: 1 when a
// level is invalid or lost requests beyond what its figures can absorb
// (replay.Record.FailedLevels), else 0.
func replayVerdict(rec *schema.Record, bad []string) error {
	var why []string
	if len(bad) > 0 {
		why = append(why, fmt.Sprintf("%d of the record's levels are invalid: they do not count", len(bad)))
	}
	if failed := rec.FailedLevels(); len(failed) > 0 {
		why = append(why, fmt.Sprintf("requests failed at %d level(s): %s", len(failed), failed[0]))
	}
	if len(why) > 0 {
		return checkFailed{Msg: strings.Join(why, "; ") + " (see above)"}
	}
	return nil
}

// formatVLLMBench is -o vllm-bench-json: every level as vllm bench serve
// --save-result writes a result (replay.WriteVLLMBench).
const formatVLLMBench = "vllm-bench-json"

// replaySummary is -o json: the record's path, kind and verdict, each run's
// objective and every level's serving statistics.
func replaySummary(rec *schema.Record, out string) map[string]any {
	runs := []map[string]any{}
	for _, r := range rec.Runs {
		runs = append(runs, map[string]any{"run": r.Run, "objective": r.Objective, "gpu_seconds_per_request": r.GPUSecondsPerRequest})
	}
	m := map[string]any{"record": out, "kind": rec.Kind, "time_scale": rec.TimeScale, "cache": rec.Cache.Procedure,
		"outcomes": rec.Outcomes, "invalid_levels": rec.InvalidLevels(), "failed_levels": rec.FailedLevels(), "runs": runs, "levels": replay.ServeStatsByLevel(rec)}
	if rec.Workload.Trace != nil {
		m["trace"] = rec.Workload.Trace
	}
	return m
}
