package main

import (
	"github.com/spf13/pflag"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/hone-llm/hone/deploy/kubernetes"
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

// kubeClient is a client of the cluster kubeconfig names; an error is bad
// input naming --kubeconfig.
func kubeClient(kubeconfig string) (k8s.Interface, error) { return kubernetes.Client(kubeconfig) }
