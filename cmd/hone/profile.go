package main

import (
	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/calibrate"
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
		o      calibrate.ProfileCheckOptions
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
			o.Profile, o.Format, o.Out = args[0], output.value, c.OutOrStdout()
			return calibrate.ProfileCheck(o)
		},
	}, "profile-check", nil)
	c.Flags().StringVar(&o.Steps, "steps", "", "the step-data directory to predict")
	output.register(c.Flags(), "table", "", "table", "json")
	return c
}

func newProfileStepsCmd() *cobra.Command {
	var o calibrate.ProfileStepsOptions
	c := withHelp(&cobra.Command{
		Use:   "steps --daemon SNAPSHOT --record RECORD --out DIR",
		Short: "Write a step-data directory from hone's own evidence: the daemon's engine steps joined with a replay record",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Stdout = c.OutOrStdout()
			return calibrate.ProfileSteps(o)
		},
	}, "profile-steps", nil)
	f := c.Flags()
	f.StringVar(&o.Daemon, "daemon", "", "a daemon snapshot file with the engine's steps")
	f.StringVar(&o.Record, "record", "", "the replay record of the requests the engine served")
	f.IntVar(&o.PID, "pid", 0, "the engine process whose steps to use (default: the one process with steps)")
	f.IntVar(&o.Budget, "budget", 0, "the engine's token budget per step (default: the record's spec's knobs.max_num_batched_tokens)")
	f.IntVar(&o.TP, "tp", 0, "the engine's tensor-parallel size (default: the record's config.topology.tp)")
	f.StringVar(&o.Out, "out", "", "the step-data directory to write")
	return c
}
