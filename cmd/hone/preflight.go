package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/preflight"
	"github.com/hone-llm/hone/preflight/proof"
)

func init() { subcommands = append(subcommands, newPreflightCmd) }

func newPreflightCmd() *cobra.Command {
	var (
		o      preflight.CommandOptions
		target string
	)
	c := withHelp(&cobra.Command{
		Use:   "preflight",
		Short: "Check what this host can run (CPU exercise, daemon, GPU serving) and save an environment report",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			t, err := preflight.ParseTarget(target)
			if err != nil {
				return badInput("--target: %v", err)
			}
			if c.Flags().Changed("prove-busy") && !o.Prove {
				return badInput("--prove-busy: only with --prove")
			}
			o.Target, o.Stdout, o.Log = t, c.OutOrStdout(), c.ErrOrStderr()
			o.OtherChecks = o.ModelDir != "" || o.Freeze != "" || len(o.Ports) > 0 || c.Flags().Changed("python")
			o.HoneVersion, o.HoneCommit = buildVersion()
			return preflight.Command(c.Context(), o)
		},
	}, "preflight", nil)
	f := c.Flags()
	f.StringVar(&target, "target", "cpu", "cpu | daemon | gpu")
	f.StringVar(&o.Out, "out", "", "write the JSON report to this file")
	f.StringVar(&o.ModelDir, "model-dir", "", "local model directory to hash (sha256 of every file)")
	f.StringVar(&o.Freeze, "freeze", "", "write `pip freeze` of --python to this lock file")
	f.StringVar(&o.Python, "python", "python3", "Python interpreter of the serving environment")
	f.IntSliceVar(&o.Ports, "port", nil, "a port the deployment needs free on 127.0.0.1 (repeatable)")
	f.BoolVar(&o.Prove, "prove", false, "with --target gpu: prove the daemon counts CUDA driver calls exactly on this host's GPU (needs root and the NVIDIA driver only)")
	f.DurationVar(&o.ProveBusy, "prove-busy", 3*time.Second, "with --prove: how long the busy phase keeps the GPU busy (1s-60s)")
	c.AddCommand(newProofWorkloadCmd())
	return c
}

// newProofWorkloadCmd is the proof's workload, which `--prove` runs as a
// child process of hone (hidden: not for people).
func newProofWorkloadCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "proof-workload",
		Short:  "The workload of `hone preflight --target gpu --prove` (internal; reads its configuration on stdin)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return proof.RunWorkload(c.InOrStdin(), c.OutOrStdout())
		},
	}
}
