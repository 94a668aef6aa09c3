package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/sim/emulator"
)

func init() { subcommands = append(subcommands, newProfileCmd) }

func newProfileCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "profile",
		Short: "Check cost profiles against measured engine steps, or derive one where none were measured",
		Long: `hone profile works on the emulator's cost profiles (sim/emulator/PROFILES.md):
the GPU time model that hone sim serve, hone predict and hone optimize share.`,
	}
	c.AddCommand(newProfileCheckCmd(), newProfileDeriveCmd())
	return c
}

func newProfileCheckCmd() *cobra.Command {
	var (
		steps  string
		output outputFormat
	)
	c := &cobra.Command{
		Use:   "check PROFILE --steps DIR",
		Short: "Predict every measured step of DIR with PROFILE and report the errors per phase",
		Long: `hone profile check predicts the latency of every engine step in a step-data
directory (fpm_metrics_detail.csv + vllm_metadata.json, as hone calibrate
--steps reads) with PROFILE (a built-in name or a .yaml file) at the
directory's tensor-parallel size, and reports the absolute percentage error
APE = |predicted − measured| / measured × 100 per phase: context (prompt
chunks only), decode (decodes only), mixed (both), and over all steps: the
number of steps, the median and the 90th percentile (nearest rank).

With async scheduling vLLM sometimes books one step's time on its
neighbour (807 ms then 11.5 ms where two ~410 ms steps ran); two
consecutive steps measured > 1.5× and < 1/1.5× of their predictions whose
sum is within 20% of the predicted sum are scored as one step against
their sum, and counted (misbooked_pairs).

-o json prints, stably (tools outside hone read it):
  {"tp": N, "phases": {"context": {"steps": n, "median_ape": x, "p90_ape": y},
   "decode": {...}, "mixed": {...}}, "all": {...}, "misbooked_pairs": k,
   "profile": NAME, "profile_source": KIND, "data": DIR}

Exit codes: 0 checked; 2 bad input (the profile, the directory, or a flag).`,
		Example: `  hone profile check profiles/qwen3-32b-b300.yaml --steps testdata/aiconfigurator/fpm-qwen3-32b-b300/tp4
  hone profile check profiles/qwen3-32b-b300.yaml --steps DIR -o json`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return badInput("hone profile check: want one PROFILE argument (a built-in name or a .yaml file), got %d", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			if steps == "" {
				return badInput("--steps: required: a step-data directory to check the profile against")
			}
			p, err := emulator.LookupProfile(args[0])
			if err != nil {
				return badInput("PROFILE: %v", err)
			}
			data, err := loadStepDirs("--steps", []string{steps})
			if err != nil {
				return err
			}
			res, err := calibrate.CheckSteps(p, data[0])
			if err != nil {
				return badInput("%v", err)
			}
			if output.value == "json" {
				return writeJSON(c.OutOrStdout(), res)
			}
			writeCheckTable(c.OutOrStdout(), res)
			return nil
		},
	}
	c.Flags().StringVar(&steps, "steps", "", "the step-data directory to predict")
	output.register(c.Flags(), "table", "", "table", "json")
	return c
}

func writeCheckTable(w io.Writer, r *calibrate.CheckResult) {
	fmt.Fprintf(w, "profile %s (%s) predicting %s at TP %d (%d mis-booked pairs scored as one)\n", r.Profile, r.ProfileSource, r.Data, r.TP, r.MisbookedPairs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tsteps\tmedian APE\tp90 APE")
	for _, ph := range calibrate.Phases {
		s := r.Phases[ph]
		fmt.Fprintf(tw, "%s\t%d\t%.2f%%\t%.2f%%\n", ph, s.Steps, s.MedianAPE, s.P90APE)
	}
	fmt.Fprintf(tw, "all\t%d\t%.2f%%\t%.2f%%\n", r.All.Steps, r.All.MedianAPE, r.All.P90APE)
	tw.Flush()
	for _, w2 := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", w2)
	}
}
