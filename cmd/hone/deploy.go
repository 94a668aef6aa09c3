package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/kubernetes"
	"github.com/hone-llm/hone/engine"
)

func init() { subcommands = append(subcommands, newDeployCmd) }

func newDeployCmd() *cobra.Command {
	c := withHelp(&cobra.Command{
		Use:   "deploy",
		Short: "Render, start and stop a deployment spec: engines (vLLM or the emulator) behind hone's proxy",
	}, "deploy", nil)
	c.AddCommand(newDeployRenderCmd(), newDeployUpCmd(), newDeployDownCmd())
	return c
}

func loadSpecArg(path string) (*deploy.Spec, error) {
	s, err := deploy.LoadSpec(path)
	if err != nil {
		return nil, usageError{Err: err}
	}
	return s, nil
}

func newDeployRenderCmd() *cobra.Command {
	var o deploy.RenderCmdOptions
	var k k8sFlags
	var output outputFormat
	c := withHelp(&cobra.Command{
		Use:   "render [SPEC]",
		Short: "Print every worker's exact command line and environment, and the proxy's",
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
				return kubernetes.RenderCommand(kubernetes.RenderCmdOptions{Args: args, Options: k.opts, Replay: k.replay,
					Daemonset: k.daemonset, NodeKernel: k.nodeKernel, Out: c.OutOrStdout(), Log: c.ErrOrStderr()})
			}
			o.Spec, o.Daemonset, o.Format, o.Out, o.Log = args[0], k.daemonset, output.value, c.OutOrStdout(), c.ErrOrStderr()
			return deploy.RenderCommand(c.Context(), o)
		},
	}, "deploy-render", nil)
	f := c.Flags()
	output.register(f, "sh", "", "sh", "json")
	f.StringVar(&o.VLLM, engine.VLLM, engine.FactsOf(engine.VLLM).Binary, "the vllm executable to name in vLLM commands")
	f.StringVar(&o.VLLMVersion, "vllm-version", "", `the installed vLLM's version (e.g. 0.11.1), or "auto" to run --vllm --version; empty: unknown`)
	k.registerTarget(f)
	k.registerRender(f)
	f.BoolVar(&k.daemonset, "daemonset", false, "with --target kubernetes: also render hone's daemon (DaemonSet, Service, ServiceMonitor)")
	f.StringVar(&k.nodeKernel, "node-kernel", "", "with --daemonset: the GPU nodes' kernel release (uname -r; hone preflight's host.kernel), which chooses the daemon's capabilities: CAP_BPF + CAP_PERFMON from Linux 6.6, CAP_SYS_ADMIN before (empty: 6.6 or later)")
	return c
}

func newDeployUpCmd() *cobra.Command {
	var o deploy.UpCmdOptions
	var k k8sFlags
	c := withHelp(&cobra.Command{
		Use:   "up SPEC",
		Short: "Start a spec's workers and proxy, wait for /health, and leave them running",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			kube, err := k.kube()
			if err != nil {
				return err
			}
			if kube {
				return kubernetes.UpCommand(c.Context(), kubernetes.UpCmdOptions{Spec: args[0], Options: k.opts, Kubeconfig: k.kubeconfig,
					HealthTimeout: o.Up.HealthTimeout, Out: c.OutOrStdout(), Log: c.ErrOrStderr()})
			}
			o.Spec, o.StateDirGiven, o.Out, o.Log = args[0], c.Flags().Changed("state-dir"), c.OutOrStdout(), c.ErrOrStderr()
			return deploy.UpCommand(c.Context(), o)
		},
	}, "deploy-up", nil)
	f := c.Flags()
	f.StringVar(&o.Up.StateDir, "state-dir", deploy.DefaultStateDir(), "where state files and logs go ($HONE_STATE_DIR)")
	f.StringVar(&o.Up.VLLM, engine.VLLM, "", "the vllm executable (default: vllm on PATH)")
	f.DurationVar(&o.Up.HealthTimeout, "health-timeout", 0, "how long to wait for every /health (default 20m for vllm, 60s for the emulator)")
	f.DurationVar(&o.Up.Grace, "grace", 10*time.Second, "SIGTERM to SIGKILL grace when a failed start is cleaned up")
	k.registerTarget(f)
	k.registerRender(f)
	k.registerCluster(f)
	return c
}

func newDeployDownCmd() *cobra.Command {
	var o deploy.DownCmdOptions
	var k k8sFlags
	c := withHelp(&cobra.Command{
		Use:   "down [NAME | SPEC]",
		Short: "Stop a deployment: SIGTERM every process group, SIGKILL after --grace",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			kube, err := k.kube()
			if err != nil {
				return err
			}
			if kube {
				return kubernetes.DownCommand(c.Context(), kubernetes.DownCmdOptions{Args: args, Namespace: k.opts.Namespace,
					Kubeconfig: k.kubeconfig, Out: c.OutOrStdout(), Log: c.ErrOrStderr()})
			}
			o.Args, o.Out = args, c.OutOrStdout()
			return deploy.DownCommand(o)
		},
	}, "deploy-down", nil)
	c.Flags().StringVar(&o.StateDir, "state-dir", deploy.DefaultStateDir(), "where state files are ($HONE_STATE_DIR)")
	c.Flags().DurationVar(&o.Grace, "grace", 10*time.Second, "how long processes get between SIGTERM and SIGKILL")
	k.registerTarget(c.Flags())
	k.registerCluster(c.Flags())
	return c
}
