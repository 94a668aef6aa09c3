package main

import (
	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/sim/emulator"
)

func init() { subcommands = append(subcommands, newCalibrateCmd) }

func newCalibrateCmd() *cobra.Command {
	var o calibrate.RunOptions
	var output outputFormat
	c := withHelp(&cobra.Command{
		Use:   "calibrate (--records R1,R2 | --steps DIR ...) --out PROFILE.yaml",
		Short: "Fit a linear cost profile to measured records, so that predictions match the device",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			o.Format, o.Stdout, o.Log = output.value, c.OutOrStdout(), c.ErrOrStderr()
			return calibrate.Run(o)
		},
	}, "calibrate", nil)
	f := c.Flags()
	f.StringSliceVar(&o.Records, "records", nil, "run records to calibrate against (comma-separated, or the flag repeated)")
	f.StringVar(&o.Profile, "profile", "", "start profile: a built-in name or a .yaml file (default: the first record's spec's emulator.profile, else "+emulator.DefaultProfile+")")
	f.StringVar(&o.Out, "out", "", "write the calibrated profile here (.yaml)")
	f.IntVar(&o.MaxIter, "max-iter", calibrate.DefaultMaxIter, "most Levenberg–Marquardt iterations")
	f.BoolVar(&o.Force, "force", false, "write the profile even when it predicts its own records worse than the start profile")
	bindCalibrateStepsFlags(f, &o.Steps)
	output.register(f, "table", "", "table", "json")
	return c
}
