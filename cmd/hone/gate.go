package main

import (
	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/gate"
)

func init() { subcommands = append(subcommands, newGateCmd) }

func newGateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "gate",
		Short: "Block regressions in CI against stored baselines",
		Long: `hone gate keeps baselines of run records (raw per-run values for every
scenario × load level × metric) and checks candidates against them.

Exit codes: 0 pass, warn or improved; 1 a regression or a suspect
measurement; 2 bad input, an incomparable baseline (different environment
fingerprint, cache procedure or time scale; missing metrics) or unusable
data (no level valid on both sides).`,
	}
	c.AddCommand(newGateBaselineCmd(), newGateCheckCmd())
	return c
}

func newGateBaselineCmd() *cobra.Command {
	c := &cobra.Command{Use: "baseline", Short: "Create or update a baseline from run records"}
	c.AddCommand(newGateBaselineCreateCmd(), newGateBaselineUpdateCmd())
	return c
}

func newGateBaselineCreateCmd() *cobra.Command {
	var o gate.CreateOptions
	create := &cobra.Command{
		Use:   "create RECORD... --out baselines/NAME.json",
		Short: "Build a baseline from run records (hone replay, hone sim --output json, or capacity results)",
		Example: `  hone gate baseline create run1.json run2.json run3.json --out baselines/disagg.json
  hone gate baseline create cap1.json cap2.json cap3.json --out baselines/capacity.json   # hone replay --capacity --out capN.json`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			o.Records, o.Log = args, c.ErrOrStderr()
			return gate.CreateBaseline(c.Context(), o)
		},
	}
	create.Flags().StringVar(&o.Out, "out", "", "baseline file to write")
	create.Flags().StringVar(&o.Name, "name", "", "baseline name (default: the file name)")
	return create
}

func newGateBaselineUpdateCmd() *cobra.Command {
	var o gate.UpdateOptions
	update := &cobra.Command{
		Use:     "update --baseline B RECORD...",
		Short:   "Add runs to a baseline, keeping the newest --keep runs",
		Example: `  hone gate baseline update --baseline baselines/disagg.json run4.json`,
		Args:    cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			o.Records, o.Log = args, c.ErrOrStderr()
			return gate.UpdateBaseline(c.Context(), o)
		},
	}
	update.Flags().StringVar(&o.Baseline, "baseline", "", "baseline file to update in place (atomically)")
	update.Flags().IntVar(&o.Keep, "keep", 10, "runs to keep per series (the newest)")
	return update
}

func newGateCheckCmd() *cobra.Command {
	var (
		baseline, config string
		format           outputFormat
	)
	var candidates []string
	c := withHelp(&cobra.Command{
		Use:   "check --baseline B --candidate RECORD...",
		Short: "Compare candidate run records against a baseline and give a verdict per metric",
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if baseline == "" {
				return badInput("--baseline: required")
			}
			candidates = append(candidates, args...)
			if len(candidates) == 0 {
				return badInput("--candidate: required (one or more run records)")
			}
			if err := format.check(); err != nil {
				return err
			}
			return gate.CheckCommand(gate.CheckOptions{Baseline: baseline, Candidates: candidates, Config: config,
				Format: format.value, Out: c.OutOrStdout()})
		},
	}, "gate-check", gateCheckHelp())
	c.Flags().StringVar(&baseline, "baseline", "", "baseline file")
	c.Flags().StringSliceVar(&candidates, "candidate", nil, "candidate run record (repeatable)")
	c.Flags().StringVar(&config, "config", "", "gate config file (YAML or JSON)")
	format.register(c.Flags(), "table", "format", gate.Formats...)
	return c
}
