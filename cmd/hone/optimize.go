package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/optimizer"
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
		backend      string
	)
	c := &cobra.Command{
		Use:   "optimize --spec base.yaml --out DIR",
		Short: "Run the live optimization loop: deploy, replay, diagnose, propose, ablate, verify",
		Long: `hone optimize starts from a deployment spec (the baseline) and spends at most
--budget trials. Each trial deploys the spec (emulator or vLLM workers behind
hone's proxy), replays the workload --runs times at every --qps level,
attributes every request's latency and names the bottleneck, then tears the
deployment down. The next config is chosen from that diagnosis, on the same
model, precision, GPU budget, arrival sequence, prewarm, output length and
tokens. After exploring it ablates the selected config's optimizations,
completes a topology × prefix-caching interaction, and re-runs the winner.

Selection: ` + optimizer.LiveSelectionRule + `

Regression: ` + optimizer.LiveRegressionRule + `

Before the first trial of an emulator spec, hone measures the host's own
floor: a replay of the highest level through hone's proxy against a
zero-cost engine (emulator profile "null"), and the baseline engine's own
median TTFT at the lowest level. With --time-scale auto (the default) ` + optimizer.FloorRule + `,
so that the host does not decide what is measured. "spec" keeps the spec's
scale (the floor is still measured and logged); a number sets the scale.

--backend model runs the same loop on the brief's exact queueing model
instead (simulation_only, seconds in all): it deploys nothing and refuses, as
a failed trial naming the spec field, what the model cannot express (tensor
parallelism, engine knobs, more than 1P1D).

Every trial, failed ones too, goes to DIR/log.json (rewritten atomically after
each trial); records to DIR/records/, emulator ground truth to DIR/traces/.
Emulated trials are labelled emulated, never device.

Exit codes: 0 a verified selection; 1 nothing eligible or verified; 2 bad input.`,
		Example: `  hone optimize --spec examples/emulator-l4-colocated.yaml --out results/demo --runs 3 --qps 2,8,16,32 --requests 48
  hone report --log results/demo/log.json --out results/demo/report.md`,
		Args: cobra.NoArgs,
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
			if backend != "live" && backend != "model" {
				return badInput("--backend: %q: want live (deploy and replay) or model (the exact queueing model)", backend)
			}
			sc, err := wf.scan(sim.Config{Mode: sim.Colocated})
			if err != nil {
				return err
			}
			base, err := deploy.LoadSpec(spec)
			if err != nil {
				return usageError{err}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
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
				if err != nil || !(v > 0) || v > 1e6 {
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
			w := replay.Workload{Seed: seed, Requests: sc.Requests, InputTokens: sc.InputTokens,
				UncachedTokens: replay.DefaultUncachedTokens, OutputTokens: sc.OutputTokens}
			slo := slo.SLO{TTFTMillis: sc.TTFTMillis, TPOTMillis: sc.TPOTMillis}
			dev := &optimizer.DeployEvaluator{Up: deploy.UpOptions{Hone: hone, StateDir: filepath.Join(out, "state")},
				Workload: w, QPS: sc.QPS, Runs: runs, SLO: slo, OutDir: out, Hone: replay.Build{Version: v, Commit: commit}}
			var ev optimizer.Evaluator = dev
			if backend == "model" {
				ev = &optimizer.ModelEvaluator{Workload: w, QPS: sc.QPS, Runs: runs, SLO: slo}
			}
			logPath := filepath.Join(out, "log.json")
			// Ctrl-C or SIGTERM ends the current trial cleanly: its
			// deployment is torn down and the log keeps every trial so far.
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var floor *optimizer.HostFloor
			if base.Engine == deploy.EngineEmulator && backend == "live" {
				fmt.Fprintf(c.ErrOrStderr(), "optimize: measuring the host's floor (zero-cost engine, %g req/s, %d runs)\n", slices.Max(sc.QPS), optimizer.FloorRuns)
				floor, err = dev.MeasureFloor(ctx, base)
				if err != nil {
					return fmt.Errorf("optimize: host floor: %w", err)
				}
				fmt.Fprintf(c.ErrOrStderr(), "optimize: host floor p50 %.2f / p99 %.2f ms real (dispatch lag p99 %.2f ms), baseline engine median TTFT %.2f model ms; ",
					floor.P50RealMs, floor.P99RealMs, floor.DispatchP99RealMs, floor.EngineP50TTFTMs)
				if timeScale == "auto" {
					base.Emulator.TimeScale = floor.ChosenTimeScale
					fmt.Fprintf(c.ErrOrStderr(), "trials run at time scale %g (spec: %g): floor %.1f model ms\n",
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
			lg, err := optimizer.Live(ctx, optimizer.LiveOptions{Base: base, Evaluator: ev, Budget: budget, HostFloor: floor,
				Workload: w, QPS: sc.QPS, Runs: runs, SLO: slo, LogPath: logPath, Progress: c.ErrOrStderr()})
			if err != nil {
				return fmt.Errorf("optimize: %w (the log so far is in %s)", err, logPath)
			}
			fmt.Fprintf(c.OutOrStdout(), "experiment log: %s (%d trials, %s)\n", logPath, len(lg.Trials), lg.Kind)
			if lg.Selected == 0 || !lg.Verified {
				return checkFailed{"no eligible config survived verification"}
			}
			sel := lg.Trials[lg.Selected-1]
			fmt.Fprintf(c.OutOrStdout(), "selected: trial %d %s, median objective %.3f req/s (%s)\n", sel.N, sel.Key, sel.Objective, sel.Kind)
			return nil
		},
	}
	wf.register(c)
	f := c.Flags()
	f.StringVar(&spec, "spec", "", "baseline deployment spec (YAML)")
	f.StringVar(&out, "out", "", "directory for the log, records and traces")
	f.IntVar(&runs, "runs", 3, "independent runs per trial")
	f.IntVar(&budget, "budget", 8, "trials in all, the verification re-run included")
	f.Uint64Var(&seed, "seed", replay.DefaultSeed, "workload seed")
	f.StringVar(&backend, "backend", "live", "live (deploy the spec and replay: emulated or device) | model (the exact queueing model: simulation_only)")
	f.StringVar(&timeScale, "time-scale", "auto", "emulated trials' time scale: auto (from the host's measured floor) | spec | a factor")
	return c
}
