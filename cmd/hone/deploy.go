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
	var (
		output      outputFormat
		vllm        string
		vllmVersion string
		k           k8sFlags
	)
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
				return usageError{Err: err}
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
	}, "deploy-render", nil)
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
	c := withHelp(&cobra.Command{
		Use:   "up SPEC",
		Short: "Start a spec's workers and proxy, wait for /health, and leave them running",
		Args:  cobra.ExactArgs(1),
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
					return usageError{Err: err}
				}
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "proxy %s\nstate %s\nstop with: %s\n", d.ProxyURL(), d.StatePath, downCommand(s.Name, o.StateDir, c.Flags().Changed("state-dir")))
			return nil
		},
	}, "deploy-up", nil)
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
	c := withHelp(&cobra.Command{
		Use:   "down [NAME | SPEC]",
		Short: "Stop a deployment: SIGTERM every process group, SIGKILL after --grace",
		Args:  cobra.MaximumNArgs(1),
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
					return usageError{Err: err}
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
	}, "deploy-down", nil)
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
