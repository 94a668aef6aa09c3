package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/sim/emulator"
)

func init() { subcommands = append(subcommands, newCalibrateCmd) }

func newCalibrateCmd() *cobra.Command {
	var (
		records      []string
		profile, out string
		maxIter      int
		output       outputFormat
		st           stepFlags
		force        bool
	)
	c := &cobra.Command{
		Use:   "calibrate (--records R1,R2 | --steps DIR ...) --out PROFILE.yaml",
		Short: "Fit a linear cost profile to measured records, so that predictions match the device",
		Long: `hone calibrate fits the emulator's linear cost form to measured run records
(hone replay, hone optimize: kind emulated or device), so that hone predict and
the emulator reproduce what was measured. Each record's config is the
deployment spec it measured; calibrate predicts every record's deployment in
virtual time (hone predict's engine) with the record's workload, offered
rates and SLO, and adjusts the coefficients until the predictions match the
measurement request by request (Levenberg–Marquardt least squares on
relative errors).

What is fitted, per engine step (PROFILES.md, linear):
  step_base_ms            every step (host overhead, weights read, launches)
  decode_per_seq_ms       each sequence decoding in the step
  prefill_per_token_ms    each new prompt token prefilled
  prefill_per_context_ms  each cached token a prefill chunk attends to
  eager_step_ms           added under --enforce-eager: only when some records
                          run eager and some do not
and per KV transfer, only when some record is disaggregated:
  transfer_fixed_ms       each pull's fixed cost
  transfer_ms_per_mib     each MiB pulled (gpu.link_bytes_sec)

Evidence: every valid request of every valid level, warm-ups included (their
cold prompts separate the per-token from the per-context cost). Where the
records carry the engine's per-request metrics (vLLM
--enable-per-request-metrics, hone's emulator): time to first token from
the first scheduling, mean inter-token latency, the KV transfer time, and
for disaggregated requests the prefill leg (the client's TTFT less the
decode worker's queue and TTFT). Without them: the client's TPOT, the
warm-ups' TTFT and each level's mean TTFT. Batches of different sizes
separate the step base from the per-sequence cost: give records with
several offered rates. What the records cannot determine keeps the start
profile's value and is reported with the reason.

The start is --profile (a built-in name or a .yaml file), else the first
record's spec's emulator.profile, else the default; a roofline profile is
first approximated by the linear form. The result, written to --out, is a
linear profile usable anywhere a profile is: hone predict --profile FILE,
hone sim serve --profile FILE, or a spec's emulator.profile. It keeps the
start's model, GPU memory and serving defaults, and holds for the deployment
shape (tensor parallelism) it was measured on.

The table shows each coefficient with its standard error (± one, and
relative), the start value, and whether it was fitted; the residual RMS
(relative) at the start and after; and per record and level the measured p50
TTFT and TPOT (median over the record's runs) against the predictions with
the start profile (before) and the calibrated one (after).

With --steps DIR (repeatable) instead of --records, calibrate fits the
step-cost form (PROFILES.md, steps) to measured forward passes: each DIR
holds fpm_metrics_detail.csv (one row per engine step: prefill tokens and
requests, cached prefill tokens, their prompt-length variance, decode
requests and their KV tokens, latency_ms) and vllm_metadata.json (the
effective config; the TP size is read from it), as vLLM's forward-pass
metrics publish them (testdata/aiconfigurator/fpm-qwen3-32b-b300/ is an
example). --model names the model's Hugging Face config.json, --gpu the
GPU (for its memory and spec), --allreduce a measured all-reduce table
(custom_allreduce_perf.parquet) whose latencies the TP term uses (else the
GPU's spec). Give two or more TP sizes so the host part and the GPU part
separate and the profile predicts any TP; with one, it holds for that TP.
Mis-booked step pairs (async scheduling booking one step's time on its
neighbour) are fitted as one step; outliers are down-weighted (Huber);
standard errors come from a block bootstrap. The profile written holds
each coefficient's standard error, the residuals per phase and the
data's provenance (source.yaml beside a step file). Check it against
steps it was not fitted on with hone profile check.

Standard errors are cluster-robust: the residuals of one level of one run
share its queue and are not independent, so the classical formula would
state errors many times too small; they are computed over those clusters
(never below the classical figure). A calibrated profile that predicts its
own records worse than the start (the objectives' or the levels' p50
TTFT/TPOT mean relative error up by more than a point) is reported and
not written: exit 1, unless --force.

Exit codes: 0 calibrated and written; 1 the profile could not be written,
or was not because it predicts its records worse than the start;
2 bad input (a flag, a record, its spec, the start profile, step data, or
records calibration cannot use).`,
		Example: `  hone calibrate --records results/colo.json,results/pd.json --out l4-calibrated.yaml
  hone calibrate --records r1.json --records r2.json --profile qwen2.5-coder-0.5b-l4 --out fit.yaml -o json
  hone predict --profile l4-calibrated.yaml examples/emulator-l4-colocated.yaml
  hone calibrate --steps testdata/aiconfigurator/fpm-qwen3-32b-b300/tp1 --steps testdata/aiconfigurator/fpm-qwen3-32b-b300/tp2 \
    --model testdata/aiconfigurator/model_configs/Qwen--Qwen3-32B_config.json --gpu b300_sxm \
    --allreduce testdata/aiconfigurator/systems/data/b300_sxm/comm/vllm/0.19.0/custom_allreduce_perf.parquet --out qwen3-32b-b300.yaml`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			if len(st.dirs) > 0 {
				if len(records) > 0 {
					return badInput("--steps and --records: give one: steps fit the step-cost form, records the linear form")
				}
				return runCalibrateSteps(c.OutOrStdout(), st, out, output.value)
			}
			if len(records) == 0 {
				return badInput("--records: required: the run records to calibrate against (comma-separated or repeated)")
			}
			if out == "" {
				return badInput("--out: required: the profile file to write (.yaml)")
			}
			if ext := strings.ToLower(filepath.Ext(out)); ext != ".yaml" && ext != ".yml" {
				return badInput("--out %s: want a .yaml or .yml path (--profile reads profile files by that extension)", out)
			}
			if maxIter < 1 {
				return badInput("--max-iter: want at least 1, got %d", maxIter)
			}
			var inputs []calibrate.Input
			for _, p := range records {
				if p == "" {
					return badInput("--records: an empty path")
				}
				in, err := calibrate.InputFromRecord(p)
				if err != nil {
					return badInput("--records: %v", err)
				}
				inputs = append(inputs, in)
			}
			cfg := calibrate.Config{MaxIter: maxIter}
			if profile != "" {
				p, err := emulator.LookupProfile(profile)
				if err != nil {
					return badInput("--profile: %v", err)
				}
				cfg.Start = p
			}
			if term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("CI") == "" {
				cfg.Progress = c.ErrOrStderr()
			}
			res, err := calibrate.Calibrate(inputs, cfg)
			if err != nil {
				return badInput("%v", err)
			}
			// A fit that predicts its own records worse than its start is
			// reported, not written, unless forced.
			worse := res.Worse()
			write := worse == "" || force
			if write {
				if err := emulator.WriteProfileFile(out, res.Profile); err != nil {
					return err
				}
			}
			w := c.OutOrStdout()
			if output.value == "json" {
				if err := writeJSON(w, res); err != nil {
					return err
				}
			} else {
				writeCalibrateTable(w, res, len(inputs), out, write)
			}
			if !write {
				return fmt.Errorf("not written: the calibrated profile predicts its own records worse than %s (%s); --force writes it anyway", res.Start.Name, worse)
			}
			if worse != "" {
				fmt.Fprintf(c.ErrOrStderr(), "warning: written with --force although it predicts its own records worse than %s (%s)\n", res.Start.Name, worse)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&records, "records", nil, "run records to calibrate against (comma-separated, or the flag repeated)")
	f.StringVar(&profile, "profile", "", "start profile: a built-in name or a .yaml file (default: the first record's spec's emulator.profile, else "+emulator.DefaultProfile+")")
	f.StringVar(&out, "out", "", "write the calibrated profile here (.yaml)")
	f.IntVar(&maxIter, "max-iter", calibrate.DefaultMaxIter, "most Levenberg–Marquardt iterations")
	f.BoolVar(&force, "force", false, "write the profile even when it predicts its own records worse than the start profile")
	st.register(f)
	output.register(f, "table", "", "table", "json")
	return c
}

func writeCalibrateTable(w io.Writer, res *calibrate.Result, records int, out string, written bool) {
	conv := "converged"
	if !res.Converged {
		conv = "not converged"
	}
	fmt.Fprintf(w, "calibrated %s from %d records: %d observations, %d iterations (%s), %d predictions of every record\n",
		res.Start.Name, records, res.Observations, res.Iterations, conv, res.Evaluations)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "coefficient\tvalue\t± std err\trel\tstart\tfitted")
	for _, co := range res.Coefficients {
		se, rel, fitted := "-", "-", "yes"
		if !math.IsNaN(co.StdErr) {
			se = fmt.Sprintf("± %.3g", co.StdErr)
		}
		if !math.IsNaN(co.RelStdErr) && !math.IsInf(co.RelStdErr, 0) {
			rel = fmt.Sprintf("%.2g%%", 100*co.RelStdErr)
		}
		if !co.Fitted {
			fitted = "no: " + co.Why
		}
		fmt.Fprintf(tw, "%s\t%.6g\t%s\t%s\t%.6g\t%s\n", co.Name, co.Value, se, rel, co.Start, fitted)
	}
	tw.Flush()
	fmt.Fprintf(w, "residual RMS (relative error): %.4g at the start, %.4g calibrated\n", res.StartRMSResidual, res.RMSResidual)

	fmt.Fprintf(w, "\np50 predicted vs measured (relative error), before: %s, after: %s\n", res.Start.Name, res.Profile.Name)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "record\toffered_qps\tttft_ms measured\tbefore\tafter\tafter*\ttpot_ms measured\tbefore\tafter\tafter*")
	for _, e := range res.PredictionError {
		nan := math.NaN()
		g := calibrate.LevelPrediction{P50TTFTMs: nan, P50TPOTMs: nan, TTFTRelErr: nan, TPOTRelErr: nan}
		if e.AfterGivenArrivals != nil {
			g = *e.AfterGivenArrivals
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Input, e.OfferedQPS,
			fmtMs(e.MeasuredP50TTFTMs), fmtPred(e.Before.P50TTFTMs, e.Before.TTFTRelErr), fmtPred(e.After.P50TTFTMs, e.After.TTFTRelErr),
			fmtPred(g.P50TTFTMs, g.TTFTRelErr),
			fmtMs(e.MeasuredP50TPOTMs), fmtPred(e.Before.P50TPOTMs, e.Before.TPOTRelErr), fmtPred(e.After.P50TPOTMs, e.After.TPOTRelErr),
			fmtPred(g.P50TPOTMs, g.TPOTRelErr))
	}
	tw.Flush()
	fmt.Fprintln(w, "before, after: from the schedule alone, as hone predict says beforehand; after*: each run predicted with the arrivals its record shows (the client's and the proxy's hops included), the median")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "record\tobjective_qps measured\tbefore\tafter")
	for _, o := range res.Objective {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Input, fmtQPS(o.Measured), fmtPredQPS(o.Before, o.BeforeRelErr), fmtPredQPS(o.After, o.AfterRelErr))
	}
	tw.Flush()
	if len(res.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range res.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	if !written {
		fmt.Fprintf(w, "\nprofile %s NOT written to %s: it predicts its own records worse than %s\n", res.Profile.Name, out, res.Start.Name)
		return
	}
	fmt.Fprintf(w, "\nprofile %s written to %s (linear): use it with hone predict --profile %s, hone sim serve --profile %s, or a spec's emulator.profile\n",
		res.Profile.Name, out, out, out)
}

func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtPred(v, rel float64) string {
	if math.IsNaN(rel) {
		return fmtMs(v)
	}
	return fmt.Sprintf("%.2f (%+.1f%%)", v, 100*rel)
}

func fmtQPS(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", v)
}

func fmtPredQPS(v, rel float64) string {
	if math.IsNaN(rel) {
		return fmtQPS(v)
	}
	return fmt.Sprintf("%.3f (%+.1f%%)", v, 100*rel)
}
