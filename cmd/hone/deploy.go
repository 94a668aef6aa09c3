package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hone-llm/hone/deploy"
)

func init() { subcommands = append(subcommands, newDeployCmd) }

func newDeployCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "deploy",
		Short: "Render, start and stop a deployment spec: engines (vLLM or the emulator) behind hone's proxy",
		Long: `A deployment spec (YAML) names the engine (vllm | emulator), the model and
its pinned revision (or a local directory, whose file hashes are recorded),
precision, the GPU budget and ids, the topology — colocated (replicas × TP)
or disaggregated (prefill and decode pools, NixlConnector or
P2pNcclConnector) — engine knobs and the proxy's routing. engine_env adds
environment variables to every engine process (names checked; those hone
sets itself, such as CUDA_VISIBLE_DEVICES, refused). cold_start says how a
measurement empties the prefix cache before every level: reset_prefix_cache
renders VLLM_SERVER_DEV_MODE=1 into every vLLM worker, since vLLM serves
POST /reset_prefix_cache only in development mode, which also serves
unauthenticated admin routes (/sleep, /collective_rpc, ...) on the worker's
port: workers listen on network.host (127.0.0.1 by default; 0.0.0.0 is
refused with it); fresh_prefixes needs nothing. Examples:
deploy/testdata/specs/ and examples/. A spec whose workers need more GPUs
than its budget is refused before anything starts.`,
	}
	c.AddCommand(newDeployRenderCmd(), newDeployUpCmd(), newDeployDownCmd())
	return c
}

func loadSpecArg(path string) (*deploy.Spec, error) {
	s, err := deploy.LoadSpec(path)
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

func newDeployRenderCmd() *cobra.Command {
	var (
		output      outputFormat
		vllm        string
		vllmVersion string
		k           k8sFlags
	)
	c := &cobra.Command{
		Use:   "render [SPEC]",
		Short: "Print every worker's exact command line and environment, and the proxy's",
		Long: `hone deploy render prints what hone deploy up would start: one shell line per
worker (environment, then argv, shell-quoted so a person can paste it), then
the proxy. hone itself never runs a shell; it executes these argv directly.

-o json prints the plan (workers with argv, env, GPUs, ports, warnings)
and the proxy configuration instead.

--vllm-version adapts vLLM commands to the installed release: flags it
lacks are left out, and a spec it cannot run (say P2pNcclConnector on a
vLLM that randomizes request ids with no switch to stop it) is refused
with the field named. "auto" asks --vllm (vllm --version); without it the
version is unknown, the commands are rendered for the newest vLLM and the
plan says so in a warning.

--target kubernetes prints the same workers as Kubernetes objects (YAML,
one document each): per pool a StatefulSet (replicas = the pool's workers;
stable pod names the proxy lists) and a headless Service, and hone's proxy
as a Deployment, Service and ConfigMap. Containers run exactly the argv and
environment printed above, but for --host 0.0.0.0, one --port per pool, no
CUDA_VISIBLE_DEVICES (the pod gets nvidia.com/gpu = its TP) and the NIXL
side-channel host from the pod IP. --daemonset adds (or, without SPEC,
prints alone) hone's daemon as a DaemonSet with a Service and a
ServiceMonitor; its container adds CAP_BPF and CAP_PERFMON, what the daemon
needs on Linux >= 6.6, or CAP_SYS_ADMIN with --node-kernel older than 6.6
(perf-event uprobes; take the release from hone preflight's host.kernel on
a GPU node). Specs a pod cannot express (a local model directory,
P2pNcclConnector, emulator trace files or faults, a worker with more GPUs
than --gpus-per-node) are refused, naming the field.

Exit codes: 0 rendered; 2 the spec is invalid, or the given vLLM version
(or --target kubernetes) cannot run it (the message names the field).`,
		Example: `  hone deploy render deploy/testdata/specs/disagg-nixl-2p2d.yaml
  hone deploy render --target kubernetes --namespace llm examples/vllm-disagg-nixl-1p1d.yaml > hone.yaml
  hone deploy render --target kubernetes --daemonset > hone-daemon.yaml
  hone deploy render --target kubernetes --daemonset --node-kernel "$(jq -r .host.kernel preflight.json)"
  hone deploy render --vllm-version auto --vllm .venv/bin/vllm examples/vllm-disagg-nixl-1p1d.yaml
  hone deploy render -o json spec.yaml | jq '.plan.workers[].argv'`,
		Args: func(c *cobra.Command, args []string) error {
			if k.target == targetKubernetes { // SPEC, --daemonset or both
				return cobra.RangeArgs(0, 1)(c, args)
			}
			return cobra.ExactArgs(1)(c, args)
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			kube, err := k.kube()
			if err != nil {
				return err
			}
			if kube {
				return renderKubernetes(c, args, &k)
			}
			if k.daemonset {
				return badInput("--daemonset needs --target kubernetes")
			}
			s, err := loadSpecArg(args[0])
			if err != nil {
				return err
			}
			hone := "hone"
			if s.Engine == deploy.EngineEmulator {
				if exe, err := os.Executable(); err == nil {
					hone = exe
				}
			}
			if vllmVersion == "auto" {
				if s.Engine != deploy.EngineVLLM {
					vllmVersion = ""
				} else if vllmVersion, err = deploy.VLLMVersion(c.Context(), vllm); err != nil {
					fmt.Fprintf(c.ErrOrStderr(), "hone deploy render: %v; rendering for an unknown vLLM version\n", err)
				}
			}
			plan, err := deploy.Render(s, deploy.RenderOptions{VLLM: vllm, Hone: hone, VLLMVersion: vllmVersion})
			if err != nil {
				return usageError{err}
			}
			switch output.value {
			case "sh":
				fmt.Fprint(c.OutOrStdout(), plan.Script([]string{hone, "proxy", "--spec", args[0]}))
			case "json":
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"plan": plan, "proxy": deploy.ProxyConfig(plan)})
			}
			return nil
		},
	}
	output.register(c.Flags(), "sh", "", "sh", "json")
	c.Flags().StringVar(&vllm, "vllm", "vllm", "the vllm executable to name in vLLM commands")
	c.Flags().StringVar(&vllmVersion, "vllm-version", "", `the installed vLLM's version (e.g. 0.11.1), or "auto" to run --vllm --version; empty: unknown`)
	k.registerTarget(c.Flags())
	k.registerRender(c.Flags())
	c.Flags().BoolVar(&k.daemonset, "daemonset", false, "with --target kubernetes: also render hone's daemon (DaemonSet, Service, ServiceMonitor)")
	c.Flags().StringVar(&k.nodeKernel, "node-kernel", "", "with --daemonset: the GPU nodes' kernel release (uname -r; hone preflight's host.kernel), which chooses the daemon's capabilities: CAP_BPF + CAP_PERFMON from Linux 6.6, CAP_SYS_ADMIN before (empty: 6.6 or later)")
	return c
}

func newDeployUpCmd() *cobra.Command {
	var o deploy.UpOptions
	var k k8sFlags
	c := &cobra.Command{
		Use:   "up SPEC",
		Short: "Start a spec's workers and proxy, wait for /health, and leave them running",
		Long: `hone deploy up starts every worker and the proxy, each in its own process
group, with logs and a state file under --state-dir/NAME/, and waits until
every /health answers (progress on stderr). It then returns, leaving the
deployment running; send requests to the proxy URL it prints, and stop it
with hone deploy down NAME. If anything fails to come up — or on Ctrl-C —
everything already started is stopped.

--target kubernetes applies the objects hone deploy render --target
kubernetes prints, by server-side apply (field manager hone, forced), to
the cluster of --kubeconfig, and waits until every pod is Ready (progress
on stderr; --health-timeout bounds it, default 20m for vllm, 2m for the
emulator). Applying again updates the objects in place.

Exit codes: 0 up and healthy; 1 a process failed to start or become
healthy (or an object failed to apply, or pods were not Ready in time);
2 the spec is invalid, a port is taken or a binary is missing.`,
		Example: `  hone deploy up deploy/testdata/specs/emulator-disagg-1p2d.yaml
  curl -sN localhost:8000/v1/completions -d '{"model":"Qwen/Qwen2.5-Coder-0.5B-Instruct","prompt":"def f():","max_tokens":8,"stream":true}'
  hone deploy down emu-disagg-1p2d
  hone deploy up --target kubernetes --kubeconfig ~/.kube/config --namespace llm examples/vllm-disagg-nixl-1p1d.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			kube, err := k.kube()
			if err != nil {
				return err
			}
			s, err := loadSpecArg(args[0])
			if err != nil {
				return err
			}
			if kube {
				return upKubernetes(c, s, &k, o.HealthTimeout)
			}
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			errw := c.ErrOrStderr()
			tty := isTerminal(errw)
			o.Progress = func(p deploy.Progress) {
				line := fmt.Sprintf("deploy %s: %d/%d healthy after %s", s.Name, p.Healthy, p.Total, p.Elapsed.Round(time.Second))
				if len(p.Waiting) > 0 {
					line += "; waiting for " + strings.Join(p.Waiting, ", ")
				}
				if tty {
					fmt.Fprintf(errw, "\r\033[K%s", line)
					if p.Done {
						fmt.Fprintln(errw)
					}
				} else {
					fmt.Fprintln(errw, line)
				}
			}
			d, err := deploy.Up(ctx, s, o)
			if tty {
				fmt.Fprintln(errw)
			}
			if err != nil {
				if errors.Is(err, deploy.ErrAlreadyUp) || strings.Contains(err.Error(), "is not free") || errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "executable file not found") {
					return usageError{err}
				}
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "proxy %s\nstate %s\nstop with: %s\n", d.ProxyURL(), d.StatePath, downCommand(s.Name, o.StateDir, c.Flags().Changed("state-dir")))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.StateDir, "state-dir", deploy.DefaultStateDir(), "where state files and logs go ($HONE_STATE_DIR)")
	f.StringVar(&o.VLLM, "vllm", "", "the vllm executable (default: vllm on PATH)")
	f.DurationVar(&o.HealthTimeout, "health-timeout", 0, "how long to wait for every /health (default 20m for vllm, 60s for the emulator)")
	f.DurationVar(&o.Grace, "grace", 10*time.Second, "SIGTERM to SIGKILL grace when a failed start is cleaned up")
	k.registerTarget(f)
	k.registerRender(f)
	k.registerCluster(f)
	return c
}

func newDeployDownCmd() *cobra.Command {
	var dir string
	var grace time.Duration
	var k k8sFlags
	c := &cobra.Command{
		Use:   "down [NAME | SPEC]",
		Short: "Stop a deployment: SIGTERM every process group, SIGKILL after --grace",
		Long: `hone deploy down reads the state file hone deploy up wrote and stops every
process group it records — the proxy, then the workers, with everything they
started — with SIGTERM, then SIGKILL after --grace. It works after hone or a
worker crashed. With no argument it stops the only deployment under
--state-dir.

--target kubernetes deletes, from --namespace of the cluster of
--kubeconfig, every Deployment, StatefulSet, DaemonSet, Service and
ConfigMap labelled app.kubernetes.io/name=hone and
app.kubernetes.io/instance=NAME; a NAME is then required.

Exit codes: 0 stopped; 1 a process survived SIGKILL (or a delete failed);
2 no such deployment.`,
		Example: `  hone deploy down emu-disagg-1p2d
  hone deploy down spec.yaml --grace 30s
  hone deploy down --target kubernetes --namespace llm brief-disagg-nixl-1p1d`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			kube, err := k.kube()
			if err != nil {
				return err
			}
			var name string
			switch {
			case kube && len(args) == 0:
				return badInput("--target kubernetes: name the deployment (NAME or SPEC)")
			case len(args) == 0:
				states, _ := deploy.List(dir)
				if len(states) != 1 {
					var names []string
					for _, s := range states {
						names = append(names, filepath.Base(filepath.Dir(s)))
					}
					if len(names) == 0 {
						return badInput("no deployment under %s", dir)
					}
					return badInput("several deployments under %s (%s): name one", dir, strings.Join(names, ", "))
				}
				name = filepath.Base(filepath.Dir(states[0]))
			case strings.HasSuffix(args[0], ".yaml") || strings.HasSuffix(args[0], ".yml"):
				s, err := loadSpecArg(args[0])
				if err != nil {
					return err
				}
				name = s.Name
			default:
				name = args[0]
			}
			if kube {
				return downKubernetes(c, name, &k)
			}
			path := deploy.StatePath(dir, name)
			st, _ := deploy.ReadState(path)
			if err := deploy.Down(path, grace); err != nil {
				if errors.Is(err, deploy.ErrNotUp) {
					return usageError{err}
				}
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "deployment %s stopped\n", name)
			if st != nil && st.Timelines != "" {
				if _, err := os.Stat(st.Timelines); err == nil {
					fmt.Fprintf(c.OutOrStdout(), "proxy timelines %s\n", st.Timelines)
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "state-dir", deploy.DefaultStateDir(), "where state files are ($HONE_STATE_DIR)")
	c.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long processes get between SIGTERM and SIGKILL")
	k.registerTarget(c.Flags())
	k.registerCluster(c.Flags())
	return c
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) && os.Getenv("CI") == ""
}

// downCommand is the command that stops deployment name: it names the state
// directory when up was given one (down would not find the state otherwise).
func downCommand(name, stateDir string, explicit bool) string {
	down := "hone deploy down " + deploy.ShellQuote(name)
	if explicit {
		down += " --state-dir " + deploy.ShellQuote(stateDir)
	}
	return down
}
