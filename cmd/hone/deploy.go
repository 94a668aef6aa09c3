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
	var o deployRenderFlags
	c := withHelp(&cobra.Command{
		Use:   "render [SPEC]",
		Short: "Print every worker's exact command line and environment, and the proxy's",
		Args: func(c *cobra.Command, args []string) error {
			if o.k.target == targetKubernetes { // SPEC, --daemonset or both
				return cobra.RangeArgs(0, 1)(c, args)
			}
			return cobra.ExactArgs(1)(c, args)
		},
		RunE: func(c *cobra.Command, args []string) error {
			return o.run(c, args)
		},
	}, "deploy-render", nil)
	o.bind(c)
	return c
}

// deployRenderFlags are hone deploy render's flags; run carries the command out.
type deployRenderFlags struct {
	output      outputFormat
	vllm        string
	vllmVersion string
	k           k8sFlags
}

// bind registers the flags on c.
func (o *deployRenderFlags) bind(c *cobra.Command) {
	o.output.register(c.Flags(), "sh", "", "sh", "json")
	c.Flags().StringVar(&o.vllm, engine.VLLM, engine.FactsOf(engine.VLLM).Binary, "the vllm executable to name in vLLM commands")
	c.Flags().StringVar(&o.vllmVersion, "vllm-version", "", `the installed vLLM's version (e.g. 0.11.1), or "auto" to run --vllm --version; empty: unknown`)
	o.k.registerTarget(c.Flags())
	o.k.registerRender(c.Flags())
	c.Flags().BoolVar(&o.k.daemonset, "daemonset", false, "with --target kubernetes: also render hone's daemon (DaemonSet, Service, ServiceMonitor)")
	c.Flags().StringVar(&o.k.nodeKernel, "node-kernel", "", "with --daemonset: the GPU nodes' kernel release (uname -r; hone preflight's host.kernel), which chooses the daemon's capabilities: CAP_BPF + CAP_PERFMON from Linux 6.6, CAP_SYS_ADMIN before (empty: 6.6 or later)")
}

// run is hone deploy render.
func (o *deployRenderFlags) run(c *cobra.Command, args []string) error {
	if err := o.output.check(); err != nil {
		return err
	}
	kube, err := o.k.kube()
	if err != nil {
		return err
	}
	if kube {
		return renderKubernetes(c, args, &o.k)
	}
	if o.k.daemonset {
		return badInput("--daemonset needs --target kubernetes")
	}
	s, err := loadSpecArg(args[0])
	if err != nil {
		return err
	}
	hone := "hone"
	if engine.Emulated(s.Engine) {
		if exe, err := os.Executable(); err == nil {
			hone = exe
		}
	}
	if o.vllmVersion == "auto" {
		if !engine.FactsOf(s.Engine).Versioned {
			o.vllmVersion = ""
		} else if o.vllmVersion, err = engine.InstalledVersion(c.Context(), s.Engine, o.vllm); err != nil {
			fmt.Fprintf(c.ErrOrStderr(), "hone deploy render: %v; rendering for an unknown vLLM version\n", err)
		}
	}
	plan, err := deploy.Render(s, deploy.RenderOptions{VLLM: o.vllm, Hone: hone, VLLMVersion: o.vllmVersion})
	if err != nil {
		return usageError{Err: err}
	}
	switch o.output.value {
	case "sh":
		fmt.Fprint(c.OutOrStdout(), plan.Script([]string{hone, "proxy", "--spec", args[0]}))
	case "json":
		enc := json.NewEncoder(c.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"plan": plan, "proxy": deploy.ProxyConfig(plan)})
	}
	return nil
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
	f.StringVar(&o.VLLM, engine.VLLM, "", "the vllm executable (default: vllm on PATH)")
	f.DurationVar(&o.HealthTimeout, "health-timeout", 0, "how long to wait for every /health (default 20m for vllm, 60s for the emulator)")
	f.DurationVar(&o.Grace, "grace", 10*time.Second, "SIGTERM to SIGKILL grace when a failed start is cleaned up")
	k.registerTarget(f)
	k.registerRender(f)
	k.registerCluster(f)
	return c
}

func newDeployDownCmd() *cobra.Command {
	var o deployDownFlags
	c := withHelp(&cobra.Command{
		Use:   "down [NAME | SPEC]",
		Short: "Stop a deployment: SIGTERM every process group, SIGKILL after --grace",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return o.run(c, args)
		},
	}, "deploy-down", nil)
	o.bind(c)
	return c
}

// deployDownFlags are hone deploy down's flags; run carries the command out.
type deployDownFlags struct {
	dir   string
	grace time.Duration
	k     k8sFlags
}

// bind registers the flags on c.
func (o *deployDownFlags) bind(c *cobra.Command) {
	c.Flags().StringVar(&o.dir, "state-dir", deploy.DefaultStateDir(), "where state files are ($HONE_STATE_DIR)")
	c.Flags().DurationVar(&o.grace, "grace", 10*time.Second, "how long processes get between SIGTERM and SIGKILL")
	o.k.registerTarget(c.Flags())
	o.k.registerCluster(c.Flags())
}

// run is hone deploy down.
func (o *deployDownFlags) run(c *cobra.Command, args []string) error {
	kube, err := o.k.kube()
	if err != nil {
		return err
	}
	var name string
	switch {
	case kube && len(args) == 0:
		return badInput("--target kubernetes: name the deployment (NAME or SPEC)")
	case len(args) == 0:
		states, _ := deploy.List(o.dir)
		if len(states) != 1 {
			var names []string
			for _, s := range states {
				names = append(names, filepath.Base(filepath.Dir(s)))
			}
			if len(names) == 0 {
				return badInput("no deployment under %s", o.dir)
			}
			return badInput("several deployments under %s (%s): name one", o.dir, strings.Join(names, ", "))
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
		return downKubernetes(c, name, &o.k)
	}
	path := deploy.StatePath(o.dir, name)
	st, _ := deploy.ReadState(path)
	if err := deploy.Down(path, o.grace); err != nil {
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
