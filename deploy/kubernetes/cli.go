package kubernetes

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/usage"
)

// Client is a client of the cluster kubeconfig names (default: $KUBECONFIG,
// then ~/.kube/config); an error is a usage.Error naming --kubeconfig.
func Client(kubeconfig string) (k8s.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, usage.Errorf("--kubeconfig: %v", err)
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, usage.Errorf("--kubeconfig: %v", err)
	}
	return cs, nil
}

// loadSpecArg loads the spec a command's argument names; an error is a
// usage.Error.
func loadSpecArg(path string) (*deploy.Spec, error) {
	s, err := deploy.LoadSpec(path)
	if err != nil {
		return nil, usage.Wrap(err)
	}
	return s, nil
}

// RenderCmdOptions is what hone deploy render --target kubernetes takes:
// the flags, by name.
type RenderCmdOptions struct {
	// Args are the command's arguments: SPEC, the deployment spec file,
	// or none (the daemon alone).
	Args []string
	// Options are --namespace, --image, --hone-image and --gpus-per-node.
	Options Options
	// Replay are --replay-shards (0: no replay Job), --replay-start-at,
	// --replay-arg and --replay-results-claim.
	Replay     ReplayJob
	Daemonset  bool   // --daemonset: also render hone's daemon
	NodeKernel string // --node-kernel: the GPU nodes' kernel release
	// Out gets the YAML, Log the warnings.
	Out, Log io.Writer
}

// RenderCommand is hone deploy render --target kubernetes: it writes the
// spec's objects (Render, and RenderReplayJob with o.Replay.Shards) and
// with o.Daemonset the daemon's (RenderDaemon) as multi-document YAML. Bad
// input is a usage.Error.
func RenderCommand(o RenderCmdOptions) error {
	var objs []runtime.Object
	if len(o.Args) == 1 {
		s, err := loadSpecArg(o.Args[0])
		if err != nil {
			return err
		}
		m, err := Render(s, o.Options)
		if err != nil {
			return usage.Wrap(err)
		}
		objs = m.Objects
		for _, w := range m.Plan.Warnings {
			fmt.Fprintf(o.Log, "hone deploy render: warning: %s\n", w)
		}
		if o.Replay.Shards != 0 {
			j, err := RenderReplayJob(s, o.Options, o.Replay)
			if err != nil {
				return usage.Wrap(err)
			}
			objs = append(objs, j)
		}
	} else if o.Replay.Shards != 0 {
		return usage.Errorf("--replay-shards needs a SPEC (the proxy the shards send to)")
	}
	if o.NodeKernel != "" && !o.Daemonset {
		return usage.Errorf("--node-kernel: only with --daemonset (it chooses the daemon's capabilities)")
	}
	if o.Daemonset {
		caps, err := daemonStartCapabilities(o.NodeKernel)
		if err != nil {
			return usage.Wrap(err)
		}
		d, err := RenderDaemon(DaemonOptions{Namespace: o.Options.Namespace, HoneImage: o.Options.HoneImage,
			Capabilities: caps, NodeKernel: o.NodeKernel})
		if err != nil {
			return usage.Wrap(err)
		}
		objs = append(objs, d...)
	}
	if len(objs) == 0 {
		return usage.Errorf("give a SPEC, --daemonset, or both")
	}
	y, err := YAML(objs)
	if err != nil {
		return err
	}
	_, err = o.Out.Write(y)
	return err
}

// UpCmdOptions is what hone deploy up --target kubernetes takes.
type UpCmdOptions struct {
	Spec string // SPEC: the deployment spec file
	// Options are --namespace, --image, --hone-image and --gpus-per-node.
	Options    Options
	Kubeconfig string // --kubeconfig
	// HealthTimeout (--health-timeout) bounds the wait for the pods; 20
	// minutes for vLLM, 2 for the emulator, when zero.
	HealthTimeout time.Duration
	// Out gets the proxy's address and how to stop the deployment, Log
	// what was applied and the pods' readiness.
	Out, Log io.Writer
}

// UpCommand is hone deploy up --target kubernetes: it applies the spec's
// objects (Apply) and waits for their pods (Wait), a line on o.Log per
// change. SIGINT and SIGTERM stop the wait. Bad input is a usage.Error.
func UpCommand(ctx context.Context, o UpCmdOptions) error {
	s, err := loadSpecArg(o.Spec)
	if err != nil {
		return err
	}
	m, err := Render(s, o.Options)
	if err != nil {
		return usage.Wrap(err)
	}
	cs, err := Client(o.Kubeconfig)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errw := o.Log
	applied, err := Apply(ctx, cs, m.Objects)
	for _, a := range applied {
		fmt.Fprintf(errw, "deploy %s: applied %s in %s\n", s.Name, a, m.Namespace)
	}
	if err != nil {
		return err
	}
	timeout := o.HealthTimeout
	if timeout <= 0 {
		timeout = 20 * time.Minute
		if engine.Emulated(s.Engine) {
			timeout = 2 * time.Minute
		}
	}
	last := ""
	err = Wait(ctx, cs, m.Namespace, s.Name, WantPods(m.Objects), timeout, 2*time.Second, func(r Readiness) {
		line := fmt.Sprintf("deploy %s: %d/%d pods Ready", s.Name, r.Ready, r.Want)
		if len(r.Waiting) > 0 {
			line += "; waiting for " + strings.Join(r.Waiting, ", ")
		}
		if line != last || r.Done { // one line per change, not per poll
			fmt.Fprintf(errw, "%s (%s)\n", line, r.Elapsed.Round(time.Second))
			last = line
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "proxy http://%s-proxy.%s.svc:%d\nstop with: hone deploy down --target kubernetes --namespace %s %s\n",
		s.Name, m.Namespace, s.Network.ProxyPort, m.Namespace, deploy.ShellQuote(s.Name))
	return nil
}

// DownCmdOptions is what hone deploy down --target kubernetes takes.
type DownCmdOptions struct {
	// Args are the command's arguments: NAME or SPEC (deploy.NameArg),
	// required.
	Args       []string
	Namespace  string // --namespace
	Kubeconfig string // --kubeconfig
	// Out gets what was deleted from where, Log each deleted object.
	Out, Log io.Writer
}

// DownCommand is hone deploy down --target kubernetes: it deletes the
// objects labelled for the deployment o names (Delete). No deployment
// named, or no objects labelled for it, is a usage.Error.
func DownCommand(ctx context.Context, o DownCmdOptions) error {
	if len(o.Args) == 0 {
		return usage.Errorf("--target kubernetes: name the deployment (NAME or SPEC)")
	}
	name, err := deploy.NameArg(o.Args[0])
	if err != nil {
		return err
	}
	cs, err := Client(o.Kubeconfig)
	if err != nil {
		return err
	}
	deleted, err := Delete(ctx, cs, o.Namespace, name)
	for _, d := range deleted {
		fmt.Fprintf(o.Log, "deploy %s: deleted %s in %s\n", name, d, o.Namespace)
	}
	if err != nil {
		return err
	}
	if len(deleted) == 0 {
		return usage.Errorf("no objects labelled %s in namespace %s", Selector(name), o.Namespace)
	}
	fmt.Fprintf(o.Out, "deployment %s deleted from namespace %s\n", name, o.Namespace)
	return nil
}
