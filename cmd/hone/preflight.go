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
	c := &cobra.Command{
		Use:   "preflight",
		Short: "Check what this host can run (CPU exercise, daemon, GPU serving) and save an environment report",
		Long: `hone preflight checks and reports, each as pass / warn / fail / skip with the
reason and the fix:

  host      OS, kernel, CPU, memory, hone's version and Go build
  exercise  python3 >= 3.10, and the simulator's golden values reproduced
  ebpf      (daemon, gpu) privileges (root or CAP_BPF+CAP_PERFMON), BTF, and
            each probe family the daemon attaches, loaded and attached for
            real on its hooks (probes-procs, -syscalls, -sched, -sockets,
            -cuda): one this kernel lacks is a warning naming what the
            daemon then lacks (procs, the daemon's own, fails); the ring
            buffer; kprobes reported but never required; tracefs,
            bpf_stats_enabled, memlock
  gpu       (gpu) NVML, driver and CUDA versions, each GPU's name, UUID,
            memory, MIG and persistence mode, the topology between GPUs —
            reported, never changed
  serving   (gpu) vllm importable and its version, --freeze pip freeze to a
            lock file, --model-dir file hashes, --port free on 127.0.0.1

Targets: cpu needs nothing privileged; daemon adds the eBPF checks; gpu adds
the GPU and serving checks.

--prove (with --target gpu, instead of the checks above) proves on this host,
with nothing but the NVIDIA driver (no Python, torch or vLLM, nothing
downloaded), that the daemon counts CUDA driver calls exactly. hone starts
itself as a workload that dlopens libcuda.so.1 (HONE_LIBCUDA overrides the
path), JIT-loads an embedded PTX kernel on GPU 0 and, under an in-process
daemon, runs counted phases: kernel launches through the exported
cuLaunchKernel and through the pointer cuGetProcAddress returns (the CUDA
runtime's path), graph launches, async and synchronous copies, context,
stream and event synchronizes, and --prove-busy of busy kernels while NVML is
sampled. Per phase and call kind it compares the calls made with the
daemon's counts (exact, missed or extra; the calls the host waits in must
each have a uretprobe return), and checks that the GPU's NVML energy counter
rose over the busy phase. It needs root (eBPF) and takes under 3 minutes;
--out writes the JSON verdict.

Exit codes: 0 every check passed (warnings allowed); 1 a check failed;
2 bad flags. With --prove: 0 pass, or skipped because there is no NVIDIA
driver (libcuda.so.1 cannot be loaded, or cuInit finds no GPU: status "no
NVIDIA driver", nothing claimed); 1 fail (a count missed or extra, a missing
uretprobe return, NVML's energy did not rise, the workload or the daemon
failed, no privilege for eBPF, a HONE_LIBCUDA that cannot be loaded, or a
hone built without cgo); 2 bad flags.`,
		Example: `  hone preflight
  sudo hone preflight --target daemon --out env.json
  hone preflight --target gpu --python .venv/bin/python --freeze requirements.lock.txt --model-dir ~/models/qwen --port 8000 --port 8100
  sudo hone preflight --target gpu --prove --out proof.json`,
		Args: cobra.NoArgs,
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
				return checkFailed{"preflight failed: " + strings.Join(r.Failed(), ", ")}
			}
			return nil
		},
	}
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
		return checkFailed{fmt.Sprintf("GPU proof failed: %s", r.Status)}
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
