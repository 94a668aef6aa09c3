package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hone-llm/hone/preflight"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/slo"
)

func init() { subcommands = append(subcommands, newReplayCmd) }

func newReplayCmd() *cobra.Command {
	var (
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
	)
	c := &cobra.Command{
		Use:   "replay",
		Short: "Replay the coding-agent workload against a live endpoint and write a run record",
		Long: `hone replay sends the brief's workload, on real token ids, to an
OpenAI-compatible endpoint (vLLM or hone's emulator): eight sessions with
distinct code prefixes tokenized through the engine's /tokenize, open loop at
each --qps level in order (each after the previous one drained), repeated
--runs times. Every request's send and chunk arrival times (wall and
CLOCK_MONOTONIC), TTFT, TPOT, output ids hash, cached tokens and outcome go
into a JSON run record (--out), with per-level p50/p90/p99, effective QPS,
pass/fail, prefix-cache hit rates from /metrics and from cached_tokens, and
cost in GPU-seconds per request.

It then prints, per level (pooled over the runs valid at that level), what a
vllm bench serve user reads: request, output-token and total-token
throughput, and the mean, median, p90 and p99 of TTFT, TPOT, ITL and E2E
latency, in model time (-o json for the same as JSON).

The kind labels the numbers for good and is discovered, not trusted: GET
/version naming hone's emulator makes them "emulated", vLLM's own version
answer makes them "device", anything else (no /version, another project's
simulator) "unverified", which reports never show as device numbers. --kind
only asserts: a kind the endpoint contradicts is exit 2.

The time scale is discovered too: hone's emulator states its --time-scale in
GET /version and replay adopts it (the schedule runs S times as fast and
every duration is divided by S, so the record is in model time). A
--time-scale the engine contradicts is exit 2; an engine that states none
(vLLM) runs at --time-scale, default 1. --request-timeout is model time.

Every level starts cold: POST /reset_prefix_cache before it where the
endpoint serves it (hone's emulator and proxy; vLLM with
VLLM_SERVER_DEV_MODE=1), else fresh session prefixes of the same lengths
per level (seeds recorded). --cache forces one procedure.

Each level gets a validity verdict (client_bound, warm_start,
time_scale_mismatch, incomplete, counter_contamination, emulator_bound;
thresholds in the record's verdict_rule). Invalid levels are printed and
never count toward the objective.

Ctrl-C stops cleanly and writes what was measured, marked incomplete.

Exit codes: 0 the record was written complete and every level is valid;
1 the run was interrupted or failed, or a level is invalid (the record is
still written); 2 bad input (a flag, a --model the endpoint does not serve,
a --kind or --time-scale the endpoint contradicts).`,
		Example: `  hone replay --endpoint http://127.0.0.1:8000 --model Qwen/Qwen3-8B --qps 1,2,4,8,16,32 --runs 3 --out run.json
  hone replay --endpoint http://127.0.0.1:9000 --model emu --kind emulated --gpus 2 --out emu.json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			qps, err := parseQPS(wf.qps)
			if err != nil {
				return err
			}
			if err := wf.checkSLO(); err != nil {
				return err
			}
			if out == "" {
				return badInput("--out: want a path for the run record")
			}
			// Options treat 0 as "default"; on the command line it is a mistake.
			if runs < 1 {
				return badInput("--runs: want at least 1, got %d", runs)
			}
			if c.Flags().Changed("time-scale") && (!(timeScale > 0) || timeScale > 1e6) {
				return badInput("--time-scale: want a positive factor (0.1 for an engine run with --time-scale 0.1), got %v", timeScale)
			}
			switch cache {
			case "auto":
				cache = ""
			case "reset":
				cache = replay.CacheReset
			case "fresh-prefixes":
				cache = replay.CacheFreshPrefixes
			default:
				return badInput("--cache: want auto, reset or fresh-prefixes, got %q", cache)
			}
			if timeout <= 0 {
				return badInput("--request-timeout: want a positive duration, got %v", timeout)
			}
			if endpoint == "" {
				return badInput("--endpoint: required, e.g. http://127.0.0.1:8000")
			}
			if model == "" {
				return badInput("--model: required: the served model name")
			}
			cfg := map[string]any{}
			if configPath != "" {
				b, err := os.ReadFile(configPath)
				if err != nil {
					return badInput("--config: %v", err)
				}
				if err := json.Unmarshal(b, &cfg); err != nil {
					return badInput("--config %s: want a JSON object: %v", configPath, err)
				}
			}
			if scenario != "" {
				cfg["scenario"] = scenario
			}
			if !c.Flags().Changed("time-scale") {
				timeScale = 0 // adopt the engine's
			}
			ver, rev := buildVersion()
			tty := term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("CI") == ""
			pp := &replay.ProgressPrinter{W: c.ErrOrStderr(), TTY: tty}
			opts := replay.Options{
				Endpoint: endpoint, TokenizeEndpoint: tokEndpoint, Model: model, Kind: kind, Backend: backend, Cache: cache,
				Workload: replay.Workload{Seed: seed, Requests: wf.requests, InputTokens: wf.inputTokens,
					UncachedTokens: replay.DefaultUncachedTokens, OutputTokens: wf.outputTokens},
				QPS: qps, Runs: runs, SLO: slo.SLO{TTFTMillis: wf.ttftSLO, TPOTMillis: wf.tpotSLO},
				TimeScale: timeScale, RequestTimeout: timeout, GPUs: gpus, Config: cfg, Hardware: hostHardware(),
				ModelInfo: replay.Model{Revision: revision, Precision: precision},
				Hone:      replay.Build{Version: ver, Commit: rev}, Progress: pp.Update, CachedTokensReported: cachedReported,
			}
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rec, err := replay.Run(ctx, opts)
			pp.Close()
			var pe *replay.ParamError
			if errors.As(err, &pe) {
				return paramErr(pe)
			}
			// A record is written when a request was sent: one that never
			// reached the endpoint (unreachable, wrong model, no /tokenize)
			// holds nothing to keep, and must not leave a run.json behind.
			written := "no record written (no request was sent)"
			if rec != nil && sentAny(rec) {
				if werr := replay.WriteRecord(out, rec); werr != nil {
					return fmt.Errorf("%w (and the record could not be written: %v)", orNil(err), werr)
				}
				written = "partial record (incomplete) written to " + out
			}
			var me *replay.ModelError
			switch {
			case errors.As(err, &me):
				return badInput("--model: %v; %s", err, written)
			case err != nil && ctx.Err() != nil:
				return checkFailed{fmt.Sprintf("interrupted: %s", written)}
			case err != nil:
				return checkFailed{fmt.Sprintf("%v; %s", err, written)}
			}
			w := c.OutOrStdout()
			bad := rec.InvalidLevels()
			if output.value == "json" {
				if err := writeJSON(w, replaySummary(rec, out)); err != nil {
					return err
				}
			} else {
				writeReplayTable(w, rec, out, bad)
			}
			if len(bad) > 0 {
				return checkFailed{fmt.Sprintf("%d of the record's levels are invalid: they do not count (see above)", len(bad))}
			}
			return nil
		},
	}
	wf.register(c)
	f := c.Flags()
	f.StringVar(&endpoint, "endpoint", "", "base URL of the OpenAI-compatible server (required)")
	f.StringVar(&tokEndpoint, "tokenize-endpoint", "", "base URL serving POST /tokenize, when not --endpoint")
	f.StringVar(&model, "model", "", "served model name (required)")
	f.StringVar(&kind, "kind", "", "assert what serves the endpoint: device (real vLLM) | emulated (hone sim serve) | unverified (default: discovered from GET /version)")
	f.StringVar(&backend, "backend", "", "backend label (default: vllm, emulator or unknown, from the kind found)")
	f.BoolVar(&cachedReported, "cached-tokens-reported", false, "the engine runs with --enable-prompt-tokens-details: a usage block without cached tokens means 0 (vLLM omits them at 0); without it, concluded once a request carries them")
	f.StringVar(&cache, "cache", "auto", "cold-start procedure before every level: auto | reset (POST /reset_prefix_cache) | fresh-prefixes")
	f.StringVar(&revision, "revision", "", "model revision, for the record")
	f.StringVar(&precision, "precision", "", "model precision (e.g. bf16, fp8), for the record")
	f.StringVar(&configPath, "config", "", "JSON file with the deployment config to store in the record")
	f.StringVar(&scenario, "scenario", "", "name the gate compares records under (config.scenario; default: the config's name)")
	f.StringVar(&out, "out", "run.json.gz", "where to write the run record (a name ending in .gz is written gzip-compressed: about 7 bytes per output token, against 18 plain)")
	output.register(f, "table", "", "table", "json")
	f.Uint64Var(&seed, "seed", replay.DefaultSeed, "workload seed (prefix text and suffix token ids)")
	f.IntVar(&runs, "runs", 1, "repeat the whole scan this many times (the gate wants 3 or more)")
	f.IntVar(&gpus, "gpus", 1, "GPUs behind the endpoint, for cost in GPU-seconds per request")
	f.Float64Var(&timeScale, "time-scale", 1, "engine time scale: compress the schedule by S and divide durations by S (default: the engine's stated scale, else 1)")
	f.DurationVar(&timeout, "request-timeout", 10*time.Minute, "per-request timeout, model time")
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
	for _, o := range []string{replay.OutcomeOK, replay.OutcomeHTTPError, replay.OutcomeConnectError, replay.OutcomeStreamCut,
		replay.OutcomeMalformed, replay.OutcomeTimeout, replay.OutcomeCanceled} {
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
func sentAny(rec *replay.Record) bool {
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
func writeReplayTable(w io.Writer, rec *replay.Record, out string, bad []string) {
	for _, r := range rec.Runs {
		fmt.Fprintf(w, "run %d: objective %.4g req/s (%s, valid levels only)", r.Run+1, r.Objective, rec.Kind)
		if r.GPUSecondsPerRequest != nil {
			fmt.Fprintf(w, ", %.4g GPU-s/request", *r.GPUSecondsPerRequest)
		}
		fmt.Fprintln(w)
	}
	for _, s := range replay.ServeStatsByLevel(rec) {
		valid := "valid"
		if !s.Valid {
			valid = "INVALID: does not count"
		}
		fmt.Fprintf(w, "\n== %g req/s offered: %d run(s), %d completed, %d failed (%s, model time; %s)\n",
			s.OfferedQPS, s.Runs, s.Completed, s.Failed, rec.Kind, valid)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "request throughput\t%.2f\treq/s\t\n", s.RequestThroughput)
		fmt.Fprintf(tw, "output token throughput\t%.1f\ttok/s\t\n", s.OutputTokenThroughput)
		fmt.Fprintf(tw, "total token throughput\t%.1f\ttok/s\t\n", s.TotalTokenThroughput)
		tw.Flush()
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ms\tmean\tmedian\tp90\tp99\t")
		for _, m := range []struct {
			name string
			d    replay.Dist
		}{{"TTFT", s.TTFT}, {"TPOT", s.TPOT}, {"ITL", s.ITL}, {"E2E", s.E2E}} {
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
	if len(bad) == 0 {
		fmt.Fprintln(w, "verdict: every level valid")
	}
}

// replaySummary is -o json: the record's path, kind and verdict, each run's
// objective and every level's serving statistics.
func replaySummary(rec *replay.Record, out string) map[string]any {
	runs := []map[string]any{}
	for _, r := range rec.Runs {
		runs = append(runs, map[string]any{"run": r.Run, "objective": r.Objective, "gpu_seconds_per_request": r.GPUSecondsPerRequest})
	}
	return map[string]any{"record": out, "kind": rec.Kind, "time_scale": rec.TimeScale, "cache": rec.Cache.Procedure,
		"outcomes": rec.Outcomes, "invalid_levels": rec.InvalidLevels(), "runs": runs, "levels": replay.ServeStatsByLevel(rec)}
}
