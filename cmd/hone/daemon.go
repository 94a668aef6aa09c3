package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/daemon"
	"github.com/hone-llm/hone/deploy/kubernetes"
	"github.com/hone-llm/hone/internal/guard"
)

func init() { subcommands = append(subcommands, newDaemonCmd) }

func newDaemonCmd() *cobra.Command {
	var o daemon.Options
	c := withHelp(&cobra.Command{
		Use:   "daemon",
		Short: "Trace serving processes with eBPF and NVML; serve metrics, a JSON API and profiles",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Run.Listen = daemonListen(o.Run.Once, o.Run.Listen, c.Flags().Changed("listen"))
			o.PodSource, o.Log = kubePods{}, c.ErrOrStderr()
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return daemon.Command(ctx, o)
		},
	}, "daemon", nil)
	bindDaemonFlags(c, &o)
	return c
}

// bindDaemonFlags registers hone daemon's flags on c into o.
func bindDaemonFlags(c *cobra.Command, o *daemon.Options) {
	f := c.Flags()
	f.IntSliceVar(&o.Config.PIDs, "pid", nil, "trace these processes and their descendants (repeatable)")
	f.StringSliceVar(&o.Config.Cgroups, "cgroup", nil, "trace the processes of this cgroup v2 directory (absolute or under /sys/fs/cgroup)")
	f.StringVar(&o.Pods.Selector, "pod-selector", "", "trace the processes of the Kubernetes pods on this node whose labels match this selector (e.g. "+kubernetes.DefaultServingSelector+")")
	f.StringVar(&o.Pods.Namespace, "pod-namespace", "", "with --pod-selector: the pods' namespace (default: all namespaces)")
	f.StringVar(&o.Pods.Node, "node-name", os.Getenv("NODE_NAME"), "with --pod-selector: this node's Kubernetes name (default $NODE_NAME)")
	f.StringVar(&o.Pods.Kubeconfig, "kubeconfig", "", "with --pod-selector: kubeconfig file (default: in-cluster credentials, else $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.Match, "match-cmdline", "", "trace processes whose command line matches this regular expression (default with no other target: "+daemon.DefaultMatch+")")
	f.StringVar(&o.KVPorts, "kv-ports", daemon.DefaultKVPorts, "ports whose connections are KV transfers (list and ranges)")
	f.StringVar(&o.HTTPPorts, "http-ports", daemon.DefaultHTTPPorts, "serving API ports: on the server's end of their connections each HTTP request/response exchange is recorded (receipt, first, second and last send; \"\": none)")
	f.DurationVar(&o.Config.BurstGap, "burst-gap", 100*time.Millisecond, "silence that ends a burst on a KV-transfer connection")
	f.StringVar(&o.CUDALaunches, "cuda-launches", "always", "probe every CUDA kernel launch: always, off, or for this long after start (e.g. 30s); each costs microseconds in the launching thread, and without them a step that launches no CUDA graph (an eager step: vLLM's prefill chunks above its graph sizes) is not seen, nor split by diagnose")
	f.Uint32Var(&o.Config.SyscallSample, "syscall-sample", bpf.DefaultSyscallSample, "time one syscall in this many of each traced thread and only count the others (a power of two; 1: time every call): counts stay exact; the mean latency (total_ns / timed) is an unbiased estimate, the maximum and histogram are a sample's; on a VM whose clock is kvm-clock each timed call was measured at ~140 ns more than a counted one (make bench)")
	f.DurationVar(&o.Config.SyscallTimingWindow, "syscall-timing-window", time.Second, "with --syscall-timing-period: how long each syscall timing window lasts")
	f.DurationVar(&o.Config.SyscallTimingPeriod, "syscall-timing-period", 8*time.Second, "time syscalls only in one --syscall-timing-window in each period this long (the first at start), counting them always: outside a window the sys_exit program is detached, so every process on the host pays one program's target check per syscall instead of two (make bench: BenchmarkSyscallFloor); 0: always time")
	f.BoolVar(&o.NoSched, "no-sched", false, "do not trace sched_switch/wakeup (on-CPU, off-CPU, run-queue time)")
	f.BoolVar(&o.Config.BPFStats, "bpf-stats", false, "enable kernel BPF run-time statistics and export per-program run time and count")
	f.DurationVar(&o.NVMLPeriod, "nvml-period", time.Second, "NVML sampling period (0: no sampling)")
	f.DurationVar(&o.ScanPeriod, "scan-period", time.Second, "how often to rescan /proc, cgroups and mapped libcuda files")
	f.StringVar(&o.Run.Listen, "listen", "127.0.0.1:9464", `address for /metrics and /v1 ("off": none; with --once, none unless given)`)
	f.BoolVar(&o.Run.Once, "once", false, "measure for --duration, write the snapshot and exit")
	f.DurationVar(&o.Run.Duration, "duration", 10*time.Second, "how long --once measures")
	f.StringVar(&o.Run.Output, "out", "", "snapshot JSON file (default with --once: stdout)")
	f.StringVar(&o.Run.Profile, "profile", "", "write a pprof profile of traced syscall time here at the end")
	f.BoolVar(&o.Run.AllowRemote, "allow-remote", false, "accept a --listen address that is not loopback (requires --token-file)")
	f.IntVar(&o.Run.API.MaxConnections, "api-max-connections", 0, fmt.Sprintf("most API clients served at once; more wait to be accepted, and connections idle or silent the longest are closed to make room (0: %d, or fewer where the process may open fewer descriptors; here %d)",
		daemon.DefaultAPIConnections, daemon.APILimits(guard.Limits{}).MaxConnections))
	f.StringVar(&o.Run.TokenFile, "token-file", "", "bearer token every API request must carry (Authorization: Bearer ...); one line, >= 16 characters, mode 600; required with --allow-remote")
	f.StringVar(&o.Run.User, "user", daemon.DefaultUser, `user (name or UID[:GID]) to become after attaching, when run as root ("root" keeps uid 0)`)
	f.BoolVar(&o.KeepCaps, "keep-capabilities", false, "do not drop privileges after attaching (capabilities, user, no_new_privs, seccomp)")
}

// kubePods is hone daemon's daemon.PodSource: the pods of this node that
// a label selector selects, watched with package deploy/kubernetes.
type kubePods struct{}

func (kubePods) CheckSelector(selector string) error {
	_, err := labels.Parse(selector)
	return err
}

// Watch starts watching the selected pods; the first list must arrive
// within 30 s.
func (kubePods) Watch(ctx context.Context, q daemon.PodQuery) (daemon.PodSet, error) {
	cs, err := kubeClient(q.Kubeconfig)
	if err != nil {
		return nil, err
	}
	ps, err := kubernetes.WatchNodePods(ctx, cs, q.Namespace, q.Selector, q.Node, 30*time.Second)
	if err != nil {
		return nil, err // not a nil *NodePods in a PodSet
	}
	return ps, nil
}

// daemonListen is the address the daemon serves on: a --once run writes its
// snapshot and exits, so it binds no port unless --listen was given.
func daemonListen(once bool, listen string, explicit bool) string {
	if once && !explicit {
		return "off"
	}
	return listen
}
