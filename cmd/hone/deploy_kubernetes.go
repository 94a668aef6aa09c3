package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/kubernetes"
	"github.com/hone-llm/hone/engine"
)

// Deploy targets.
const (
	targetLocal      = "local"
	targetKubernetes = "kubernetes"
)

// k8sFlags are the flags of hone deploy render|up|down --target kubernetes.
type k8sFlags struct {
	target     string
	opts       kubernetes.Options
	kubeconfig string
	daemonset  bool
	nodeKernel string
	replay     kubernetes.ReplayJob
}

func (k *k8sFlags) registerTarget(f *pflag.FlagSet) {
	f.StringVar(&k.target, "target", targetLocal, "local (processes on this host) | kubernetes")
	f.StringVar(&k.opts.Namespace, "namespace", kubernetes.DefaultNamespace, "with --target kubernetes: the namespace of every object")
}

func (k *k8sFlags) registerRender(f *pflag.FlagSet) {
	f.StringVar(&k.opts.Image, "image", kubernetes.DefaultImage(), "with --target kubernetes: the vLLM image (a v<version> tag adapts the flags to that vLLM)")
	f.StringVar(&k.opts.HoneImage, "hone-image", kubernetes.DefaultHoneImage, "with --target kubernetes: hone's image, for the proxy, emulator workers and the daemon")
	f.IntVar(&k.opts.GPUsPerNode, "gpus-per-node", kubernetes.DefaultGPUsPerNode, "with --target kubernetes: the most GPUs one node has (a worker's TP must fit)")
	f.IntVar(&k.replay.Shards, "replay-shards", 0, "with --target kubernetes and a SPEC: also render the sharded replay (hone replay --shard) as an Indexed Job of this many pods against the spec's proxy")
	f.StringVar(&k.replay.StartAt, "replay-start-at", "", "with --replay-shards: every shard's --start-at (RFC 3339 or unix ns), far enough ahead for the pods to start")
	f.StringArrayVar(&k.replay.Args, "replay-arg", nil, "with --replay-shards: a further hone replay flag for every shard (repeat: --replay-arg=--qps --replay-arg=64,128)")
	f.StringVar(&k.replay.ResultsClaim, "replay-results-claim", "", "with --replay-shards: a PersistentVolumeClaim mounted at /results for the shards' records (default: an emptyDir the records do not outlive)")
}

func (k *k8sFlags) registerCluster(f *pflag.FlagSet) {
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "with --target kubernetes: kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
}

// kube says whether --target is kubernetes; an unknown target is bad input.
func (k *k8sFlags) kube() (bool, error) {
	switch k.target {
	case targetLocal:
		return false, nil
	case targetKubernetes:
		return true, nil
	}
	return false, badInput("--target: %q is not a target: want local or kubernetes", k.target)
}

// renderKubernetes prints the spec's objects (and with --daemonset the
// daemon's) as multi-document YAML.
func renderKubernetes(c *cobra.Command, args []string, k *k8sFlags) error {
	var objs []runtime.Object
	if len(args) == 1 {
		s, err := loadSpecArg(args[0])
		if err != nil {
			return err
		}
		m, err := kubernetes.Render(s, k.opts)
		if err != nil {
			return usageError{Err: err}
		}
		objs = m.Objects
		for _, w := range m.Plan.Warnings {
			fmt.Fprintf(c.ErrOrStderr(), "hone deploy render: warning: %s\n", w)
		}
		if k.replay.Shards != 0 {
			j, err := kubernetes.RenderReplayJob(s, k.opts, k.replay)
			if err != nil {
				return usageError{Err: err}
			}
			objs = append(objs, j)
		}
	} else if k.replay.Shards != 0 {
		return badInput("--replay-shards needs a SPEC (the proxy the shards send to)")
	}
	if k.nodeKernel != "" && !k.daemonset {
		return badInput("--node-kernel: only with --daemonset (it chooses the daemon's capabilities)")
	}
	if k.daemonset {
		caps, err := daemonStartCapabilities(k.nodeKernel)
		if err != nil {
			return usageError{Err: err}
		}
		d, err := kubernetes.RenderDaemon(kubernetes.DaemonOptions{Namespace: k.opts.Namespace, HoneImage: k.opts.HoneImage,
			Capabilities: caps, NodeKernel: k.nodeKernel})
		if err != nil {
			return usageError{Err: err}
		}
		objs = append(objs, d...)
	}
	if len(objs) == 0 {
		return badInput("give a SPEC, --daemonset, or both")
	}
	y, err := kubernetes.YAML(objs)
	if err != nil {
		return err
	}
	_, err = c.OutOrStdout().Write(y)
	return err
}

func kubeClient(kubeconfig string) (k8s.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, badInput("--kubeconfig: %v", err)
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, badInput("--kubeconfig: %v", err)
	}
	return cs, nil
}

// upKubernetes applies the spec's objects and waits for their pods.
func upKubernetes(c *cobra.Command, s *deploy.Spec, k *k8sFlags, timeout time.Duration) error {
	m, err := kubernetes.Render(s, k.opts)
	if err != nil {
		return usageError{Err: err}
	}
	cs, err := kubeClient(k.kubeconfig)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errw := c.ErrOrStderr()
	applied, err := kubernetes.Apply(ctx, cs, m.Objects)
	for _, a := range applied {
		fmt.Fprintf(errw, "deploy %s: applied %s in %s\n", s.Name, a, m.Namespace)
	}
	if err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = 20 * time.Minute
		if engine.Emulated(s.Engine) {
			timeout = 2 * time.Minute
		}
	}
	last := ""
	err = kubernetes.Wait(ctx, cs, m.Namespace, s.Name, kubernetes.WantPods(m.Objects), timeout, 2*time.Second, func(r kubernetes.Readiness) {
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
	fmt.Fprintf(c.OutOrStdout(), "proxy http://%s-proxy.%s.svc:%d\nstop with: hone deploy down --target kubernetes --namespace %s %s\n",
		s.Name, m.Namespace, s.Network.ProxyPort, m.Namespace, deploy.ShellQuote(s.Name))
	return nil
}

// downKubernetes deletes the objects labelled for name.
func downKubernetes(c *cobra.Command, name string, k *k8sFlags) error {
	cs, err := kubeClient(k.kubeconfig)
	if err != nil {
		return err
	}
	deleted, err := kubernetes.Delete(c.Context(), cs, k.opts.Namespace, name)
	for _, d := range deleted {
		fmt.Fprintf(c.ErrOrStderr(), "deploy %s: deleted %s in %s\n", name, d, k.opts.Namespace)
	}
	if err != nil {
		return err
	}
	if len(deleted) == 0 {
		return usageError{Err: fmt.Errorf("no objects labelled %s in namespace %s", kubernetes.Selector(name), k.opts.Namespace)}
	}
	fmt.Fprintf(c.OutOrStdout(), "deployment %s deleted from namespace %s\n", name, k.opts.Namespace)
	return nil
}
