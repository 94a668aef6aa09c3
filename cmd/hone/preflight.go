package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/preflight"
)

func init() { subcommands = append(subcommands, newPreflightCmd) }

func newPreflightCmd() *cobra.Command {
	var (
		target, out, modelDir, freeze, python string
		ports                                 []int
	)
	c := &cobra.Command{
		Use:   "preflight",
		Short: "Check what this host can run (CPU exercise, daemon, GPU serving) and save an environment report",
		Long: `hone preflight checks and reports, each as pass / warn / fail / skip with the
reason and the fix:

  host      OS, kernel, CPU, memory, hone's version and Go build
  exercise  python3 >= 3.10, and the simulator's golden values reproduced
  ebpf      (daemon, gpu) privileges (root or CAP_BPF+CAP_PERFMON), BTF, and
            each program type the daemon uses loaded and attached for real:
            raw tracepoint, tp_btf on the socket tracepoints, uprobe, ring
            buffer; kprobes reported but never required; tracefs,
            bpf_stats_enabled, memlock
  gpu       (gpu) NVML, driver and CUDA versions, each GPU's name, UUID,
            memory, MIG and persistence mode, the topology between GPUs —
            reported, never changed
  serving   (gpu) vllm importable and its version, --freeze pip freeze to a
            lock file, --model-dir file hashes, --port free on 127.0.0.1

Targets: cpu needs nothing privileged; daemon adds the eBPF checks; gpu adds
the GPU and serving checks.

Exit codes: 0 every check passed (warnings allowed); 1 a check failed;
2 bad flags.`,
		Example: `  hone preflight
  sudo hone preflight --target daemon --out env.json
  hone preflight --target gpu --python .venv/bin/python --freeze requirements.lock.txt --model-dir ~/models/qwen --port 8000 --port 8100`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			t, err := preflight.ParseTarget(target)
			if err != nil {
				return badInput("--target: %v", err)
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
	return c
}
