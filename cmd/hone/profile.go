package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
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
	c.AddCommand(newProfileCheckCmd(), newProfileDeriveCmd(), newProfileStepsCmd())
	return c
}

func newProfileCheckCmd() *cobra.Command {
	var (
		steps  string
		output outputFormat
	)
	c := withHelp(&cobra.Command{
		Use:   "check PROFILE --steps DIR",
		Short: "Predict every measured step of DIR with PROFILE and report the errors per phase",
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
	}, "profile-check", nil)
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

func newProfileStepsCmd() *cobra.Command {
	var (
		snapshot, record, out string
		pid, budget, tp       int
	)
	c := withHelp(&cobra.Command{
		Use:   "steps --daemon SNAPSHOT --record RECORD --out DIR",
		Short: "Write a step-data directory from hone's own evidence: the daemon's engine steps joined with a replay record",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if snapshot == "" {
				return badInput("--daemon: required: a daemon snapshot (hone daemon --out) with the engine's steps")
			}
			if record == "" {
				return badInput("--record: required: the replay record of the requests the engine served")
			}
			if out == "" {
				return badInput("--out: required: the step-data directory to write")
			}
			ev, err := diagnose.ReadKernelEvidence(snapshot)
			if err != nil {
				return badInput("--daemon %s: %v", snapshot, err)
			}
			rec, err := replay.ReadRecord(record)
			if err != nil {
				return badInput("--record: %v", err)
			}
			if budget == 0 {
				budget = budgetOf(rec)
				if budget == 0 {
					return badInput("--budget: required: the record's spec does not state knobs.max_num_batched_tokens")
				}
			}
			if tp < 0 {
				return badInput("--tp %d: want >= 1", tp)
			}
			d, err := calibrate.StepsFromEvidence(ev, pid, rec, budget, tp)
			if err != nil {
				return badInput("%v", err)
			}
			if err := calibrate.WriteStepDir(out, d); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "%d steps of %s (TP %d) written to %s: %s and %s\n", len(d.Steps), d.Dir, d.TP, out, calibrate.StepsFile, calibrate.MetadataFile)
			return nil
		},
	}, "profile-steps", nil)
	f := c.Flags()
	f.StringVar(&snapshot, "daemon", "", "a daemon snapshot file with the engine's steps")
	f.StringVar(&record, "record", "", "the replay record of the requests the engine served")
	f.IntVar(&pid, "pid", 0, "the engine process whose steps to use (default: the one process with steps)")
	f.IntVar(&budget, "budget", 0, "the engine's token budget per step (default: the record's spec's knobs.max_num_batched_tokens)")
	f.IntVar(&tp, "tp", 0, "the engine's tensor-parallel size (default: the record's config.topology.tp)")
	f.StringVar(&out, "out", "", "the step-data directory to write")
	return c
}

// budgetOf is the token budget the record's spec states, 0 when none.
func budgetOf(rec *schema.Record) int {
	k, _ := rec.Config.Knobs()
	return k.MaxNumBatchedTokens
}
