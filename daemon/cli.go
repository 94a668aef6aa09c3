package daemon

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"time"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/internal/usage"
)

// Options is what hone daemon takes: the tracer's Config and the
// RunOptions as its flags fill them, and the flags that are neither's, by
// name.
type Options struct {
	Config Config
	// Run's Listen is the address to serve on as the command states it
	// (with --once, "off" unless --listen was given).
	Run          RunOptions
	Match        string        // --match-cmdline: a regular expression
	KVPorts      string        // --kv-ports: list and ranges (ParsePorts)
	HTTPPorts    string        // --http-ports: list and ranges (ParsePorts)
	CUDALaunches string        // --cuda-launches (ParseCUDALaunches)
	NoSched      bool          // --no-sched
	KeepCaps     bool          // --keep-capabilities
	NVMLPeriod   time.Duration // --nvml-period
	ScanPeriod   time.Duration // --scan-period
	Pods         PodQuery      // --pod-selector and its companions
	// PodSource watches the pods Pods selects; needed with a selector.
	PodSource PodSource
	// Log gets the daemon's log.
	Log io.Writer
}

// PodQuery selects the Kubernetes pods whose processes are traced.
type PodQuery struct {
	Selector   string // --pod-selector: a label selector ("": no pods)
	Namespace  string // --pod-namespace ("": all namespaces)
	Node       string // --node-name: this node's Kubernetes name
	Kubeconfig string // --kubeconfig ("": in-cluster, else $KUBECONFIG, then ~/.kube/config)
}

// PodSource finds the pods a PodQuery selects. cmd/hone's watches them
// with package deploy/kubernetes, so that the tracer links no Kubernetes
// client.
type PodSource interface {
	// CheckSelector says what is wrong with a label selector.
	CheckSelector(selector string) error
	// Watch starts watching q's pods until ctx ends; it returns once
	// the first list has arrived.
	Watch(ctx context.Context, q PodQuery) (PodSet, error)
}

// Command is hone daemon: it checks o, watches the selected pods (from
// before the privilege drop to the end) and runs the daemon (Run) until
// ctx ends, or for the duration of a --once run. Bad input is a
// usage.Error.
func Command(ctx context.Context, o Options) error {
	if err := o.check(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(o.Log, nil))
	if o.Pods.Selector != "" {
		ps, err := o.PodSource.Watch(ctx, o.Pods)
		if err != nil {
			return err
		}
		o.Config.Pods = ps
		log.Info("pods selected", "selector", o.Pods.Selector, "namespace", o.Pods.Namespace, "node", o.Pods.Node, "pods", len(ps.Pods()))
	}
	return Run(ctx, o.Config, o.Run, log)
}

// check states o.Config and o.Run from the flags, refusing bad ones in
// the order the command always checked them.
func (o *Options) check() error {
	if o.Match != "" {
		re, err := regexp.Compile(o.Match)
		if err != nil {
			return usage.Errorf("--match-cmdline: %v", err)
		}
		o.Config.Match = re
	}
	ports, err := ParsePorts(o.KVPorts)
	if err != nil {
		return usage.Errorf("--kv-ports: %v", err)
	}
	o.Config.KVPorts = ports
	if o.Config.HTTPPorts, err = ParsePorts(o.HTTPPorts); err != nil {
		return usage.Errorf("--http-ports: %v", err)
	}
	if err := o.checkRun(); err != nil {
		return err
	}
	launches, err := ParseCUDALaunches(o.CUDALaunches)
	if err != nil {
		return usage.Errorf("%v", err)
	}
	o.Config.CUDALaunches = launches
	if o.Config.BurstGap < 0 || o.NVMLPeriod < 0 || o.ScanPeriod < 0 {
		return usage.Errorf("durations must not be negative")
	}
	if err := bpf.CheckSyscallSample(o.Config.SyscallSample); err != nil || o.Config.SyscallSample == 0 {
		return usage.Errorf("--syscall-sample: want a power of two from 1 to %d, got %d", bpf.MaxSyscallSample, o.Config.SyscallSample)
	}
	o.Config.Sched = !o.NoSched
	o.Config.NVMLPeriod = o.NVMLPeriod
	o.Config.ScanPeriod = o.ScanPeriod
	o.Run.DropCaps = !o.KeepCaps
	if err := o.checkPods(); err != nil {
		return err
	}
	cfg := o.Config
	if o.Pods.Selector != "" {
		cfg.Pods = emptyPods{} // for New's checks: a target is given
	}
	if _, err := New(cfg, nil); err != nil { // flag-level checks: --pid, --cgroup
		return usage.Errorf("%v", err)
	}
	return nil
}

// checkRun refuses RunOptions that Run would: a --once without a
// duration, a --listen it may not serve, a bad token file or user.
func (o *Options) checkRun() error {
	if o.Run.Once && o.Run.Duration <= 0 {
		return usage.Errorf("--duration: want a positive duration with --once, got %v", o.Run.Duration)
	}
	if _, err := CheckListen(o.Run.Listen, o.Run.AllowRemote, o.Run.TokenFile); err != nil {
		return usage.Errorf("%v", err)
	}
	if o.Run.API.MaxConnections < 0 {
		return usage.Errorf("--api-max-connections %d: want > 0 (0: automatic)", o.Run.API.MaxConnections)
	}
	if o.Run.TokenFile != "" {
		if _, err := ReadToken(o.Run.TokenFile); err != nil {
			return usage.Errorf("%v", err)
		}
	}
	if _, _, err := ParseUser(o.Run.User); err != nil {
		return usage.Errorf("--user: %v", err)
	}
	return nil
}

// checkPods refuses --pod-selector's companions without it, a selector
// that does not parse and a missing node name.
func (o *Options) checkPods() error {
	p := o.Pods
	if p.Selector == "" {
		if p.Namespace != "" || p.Kubeconfig != "" {
			return usage.Errorf("--pod-namespace and --kubeconfig need --pod-selector")
		}
		return nil
	}
	if err := o.PodSource.CheckSelector(p.Selector); err != nil {
		return usage.Errorf("--pod-selector %q: %v", p.Selector, err)
	}
	if p.Node == "" {
		return usage.Errorf("--node-name: empty; with --pod-selector give this node's Kubernetes name (the DaemonSet sets NODE_NAME from spec.nodeName)")
	}
	return nil
}

// emptyPods stands in for the watched pods in the flag-level checks.
type emptyPods struct{}

func (emptyPods) Pods() map[string]string { return nil }
