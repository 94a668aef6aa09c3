package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/preflight"
	"github.com/hone-llm/hone/preflight/proof"
)

func init() { subcommands = append(subcommands, newPreflightCmd) }

func newPreflightCmd() *cobra.Command {
	var (
		target, out, modelDir, freeze, python string
		ports                                 []int
		prove                                 bool
		proveBusy                             time.Duration
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
			if c.Flags().Changed("prove-busy") && !prove {
				return badInput("--prove-busy: only with --prove")
			}
			if prove {
				return runProof(c, t, out, proveBusy, modelDir != "" || freeze != "" || len(ports) > 0 || c.Flags().Changed("python"))
			}
			for _, p := range ports {
				if p < 1 || p > 65535 {
					return badInput("--port: %d: want 1-65535", p)
				}
			}
			v, commit := buildVersion()
			r := preflight.Run(c.Context(), preflight.Options{Target: t, HoneVersion: v, HoneCommit: commit,
				ModelDir: modelDir, Freeze: freeze, Ports: ports, Python: python})
			if err := r.WriteTable(c.OutOrStdout()); err != nil {
				return err
			}
			if out != "" {
				if err := r.WriteJSON(out); err != nil {
					return fmt.Errorf("write report %s: %w", out, err)
				}
				fmt.Fprintln(c.ErrOrStderr(), "report written to", out)
			}
			if !r.Passed {
				return checkFailed{Msg: "preflight failed: " + strings.Join(r.Failed(), ", ")}
			}
			return nil
		},
	}, "preflight", nil)
	f := c.Flags()
	f.StringVar(&target, "target", "cpu", "cpu | daemon | gpu")
	f.StringVar(&out, "out", "", "write the JSON report to this file")
	f.StringVar(&modelDir, "model-dir", "", "local model directory to hash (sha256 of every file)")
	f.StringVar(&freeze, "freeze", "", "write `pip freeze` of --python to this lock file")
	f.StringVar(&python, "python", "python3", "Python interpreter of the serving environment")
	f.IntSliceVar(&ports, "port", nil, "a port the deployment needs free on 127.0.0.1 (repeatable)")
	f.BoolVar(&prove, "prove", false, "with --target gpu: prove the daemon counts CUDA driver calls exactly on this host's GPU (needs root and the NVIDIA driver only)")
	f.DurationVar(&proveBusy, "prove-busy", 3*time.Second, "with --prove: how long the busy phase keeps the GPU busy (1s-60s)")
	c.AddCommand(newProofWorkloadCmd())
	return c
}

// runProof is `hone preflight --target gpu --prove`.
func runProof(c *cobra.Command, t preflight.Target, out string, busy time.Duration, otherChecks bool) error {
	if t != preflight.TargetGPU {
		return badInput("--prove: only with --target gpu (got --target %s)", t)
	}
	if otherChecks {
		return badInput("--prove runs the GPU proof alone: run --python, --freeze, --model-dir and --port without it")
	}
	if busy < time.Second || busy > time.Minute {
		return badInput("--prove-busy: want 1s to 60s, got %v", busy)
	}
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := proof.Prove(ctx, proof.Options{Busy: busy})
	if err := r.WriteText(c.OutOrStdout()); err != nil {
		return err
	}
	if out != "" {
		if err := r.WriteJSON(out); err != nil {
			return fmt.Errorf("write verdict %s: %w", out, err)
		}
		fmt.Fprintln(c.ErrOrStderr(), "verdict written to", out)
	}
	if r.ExitCode() != 0 {
		return checkFailed{Msg: fmt.Sprintf("GPU proof failed: %s", r.Status)}
	}
	return nil
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
