package main

import (
	"os"
	"strings"
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

// runReplay is hone replay: the flags' checks, then replay.Command.
func runReplay(c *cobra.Command, o *replayFlags) error {
	qps, clients, err := o.checkLoad(c)
	if err != nil {
		return err
	}
	if err := o.check(c, qps); err != nil {
		return err
	}
	return replay.Command(c.Context(), o.command(c, qps, clients))
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

// command states the replay the flags ask for, as replay.Command takes
// it; with --capacity, a capacity search (capacity.ReplaySearch).
func (o *replayFlags) command(c *cobra.Command, qps []float64, clients []int) replay.CommandOptions {
	timeScale := o.timeScale
	if !c.Flags().Changed("time-scale") {
		timeScale = 0 // adopt the engine's
	}
	ver, rev := buildVersion()
	co := replay.CommandOptions{
		Replay: replay.Options{
			Endpoint: o.endpoint, TokenizeEndpoint: o.tokEndpoint, Model: o.model, Kind: schema.Kind(o.kind), Backend: o.backend, Cache: o.cache,
			Workload: o.wf.workload(o.seed),
			QPS:      qps, Concurrency: clients, Runs: o.runs, SLO: o.wf.target(),
			TimeScale: timeScale, RequestTimeout: o.timeout, GPUs: o.gpus,
			ModelInfo: schema.Model{Revision: o.revision, Precision: o.precision},
			Hone:      schema.Build{Version: ver, Commit: rev}, CachedTokensReported: o.cachedReported,
		},
		Config: o.configPath, Scenario: o.scenario, Shard: o.shard, StartAt: o.startAt, LevelGap: o.levelGap,
		Trace: o.trace.path, TraceSpeed: o.trace.speed, TraceBlockSize: o.trace.blockSize, EngineBlockSize: o.trace.engineBlock,
		Record: o.out, Format: o.output.value, TTY: term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("CI") == "",
		Changed: c.Flags().Changed, Hardware: hostHardware, Judge: diagnose.JudgeRecord,
		Out: c.OutOrStdout(), Log: c.ErrOrStderr(),
	}
	if o.capf.on {
		co.Capacity = capacity.ReplaySearch{
			Search: o.capf.options(co.Replay.SLO, co.Replay.Workload.Requests-replay.Sessions, c.ErrOrStderr()),
			Format: o.output.value, Out: o.out, Stdout: c.OutOrStdout(),
		}.Run
	}
	return co
}

// newReplayMergeCmd is `hone replay merge`.
func newReplayMergeCmd() *cobra.Command {
	var (
		o      replay.MergeOptions
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
			o.Shards, o.Format, o.Judge, o.Out, o.Log = args, output.value, diagnose.JudgeRecord, c.OutOrStdout(), c.ErrOrStderr()
			return replay.Merge(c.Context(), o)
		},
	}, "replay-merge", nil)
	f := c.Flags()
	f.StringVar(&o.Record, "out", "", "where to write the merged record (required; a name ending in .gz is written gzip-compressed)")
	output.register(f, "table", "", "table", "json", formatVLLMBench)
	return c
}

// hostHardware is what the client host knows without NVML: the CPU.
func hostHardware() map[string]any {
	v, commit := buildVersion()
	return preflight.Hardware(v, commit)
}

// formatVLLMBench is -o vllm-bench-json: every level as vllm bench serve
// --save-result writes a result (replay.WriteVLLMBench).
const formatVLLMBench = replay.FormatVLLMBench
