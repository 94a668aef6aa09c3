package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
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
	var o daemonFlags
	c := withHelp(&cobra.Command{
		Use:   "daemon",
		Short: "Trace serving processes with eBPF and NVML; serve metrics, a JSON API and profiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}, "daemon", nil)
	o.bind(c)
	return c
}

// daemonFlags are hone daemon's flags; run carries the command out.
type daemonFlags struct {
	cfg                    daemon.Config
	opts                   daemon.RunOptions
	match, kvPorts         string
	cudaLaunches           string
	httpPorts              string
	noSched, noDropCaps    bool
	nvmlPeriod, scanPeriod time.Duration
	pods                   podFlags
}

// bind registers the flags on c.
func (o *daemonFlags) bind(c *cobra.Command) {
	f := c.Flags()
	f.IntSliceVar(&o.cfg.PIDs, "pid", nil, "trace these processes and their descendants (repeatable)")
	f.StringSliceVar(&o.cfg.Cgroups, "cgroup", nil, "trace the processes of this cgroup v2 directory (absolute or under /sys/fs/cgroup)")
	f.StringVar(&o.pods.selector, "pod-selector", "", "trace the processes of the Kubernetes pods on this node whose labels match this selector (e.g. "+kubernetes.DefaultServingSelector+")")
	f.StringVar(&o.pods.namespace, "pod-namespace", "", "with --pod-selector: the pods' namespace (default: all namespaces)")
	f.StringVar(&o.pods.node, "node-name", os.Getenv("NODE_NAME"), "with --pod-selector: this node's Kubernetes name (default $NODE_NAME)")
	f.StringVar(&o.pods.kubeconfig, "kubeconfig", "", "with --pod-selector: kubeconfig file (default: in-cluster credentials, else $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.match, "match-cmdline", "", "trace processes whose command line matches this regular expression (default with no other target: "+daemon.DefaultMatch+")")
	f.StringVar(&o.kvPorts, "kv-ports", daemon.DefaultKVPorts, "ports whose connections are KV transfers (list and ranges)")
	f.StringVar(&o.httpPorts, "http-ports", daemon.DefaultHTTPPorts, "serving API ports: on the server's end of their connections each HTTP request/response exchange is recorded (receipt, first, second and last send; \"\": none)")
	f.DurationVar(&o.cfg.BurstGap, "burst-gap", 100*time.Millisecond, "silence that ends a burst on a KV-transfer connection")
	f.StringVar(&o.cudaLaunches, "cuda-launches", "always", "probe every CUDA kernel launch: always, off, or for this long after start (e.g. 30s); each costs microseconds in the launching thread, and without them a step that launches no CUDA graph (an eager step: vLLM's prefill chunks above its graph sizes) is not seen, nor split by diagnose")
	f.Uint32Var(&o.cfg.SyscallSample, "syscall-sample", bpf.DefaultSyscallSample, "time one syscall in this many of each traced thread and only count the others (a power of two; 1: time every call): counts stay exact; the mean latency (total_ns / timed) is an unbiased estimate, the maximum and histogram are a sample's; on a VM whose clock is kvm-clock each timed call was measured at ~140 ns more than a counted one (make bench)")
	f.DurationVar(&o.cfg.SyscallTimingWindow, "syscall-timing-window", time.Second, "with --syscall-timing-period: how long each syscall timing window lasts")
	f.DurationVar(&o.cfg.SyscallTimingPeriod, "syscall-timing-period", 8*time.Second, "time syscalls only in one --syscall-timing-window in each period this long (the first at start), counting them always: outside a window the sys_exit program is detached, so every process on the host pays one program's target check per syscall instead of two (make bench: BenchmarkSyscallFloor); 0: always time")
	f.BoolVar(&o.noSched, "no-sched", false, "do not trace sched_switch/wakeup (on-CPU, off-CPU, run-queue time)")
	f.BoolVar(&o.cfg.BPFStats, "bpf-stats", false, "enable kernel BPF run-time statistics and export per-program run time and count")
	f.DurationVar(&o.nvmlPeriod, "nvml-period", time.Second, "NVML sampling period (0: no sampling)")
	f.DurationVar(&o.scanPeriod, "scan-period", time.Second, "how often to rescan /proc, cgroups and mapped libcuda files")
	f.StringVar(&o.opts.Listen, "listen", "127.0.0.1:9464", `address for /metrics and /v1 ("off": none; with --once, none unless given)`)
	f.BoolVar(&o.opts.Once, "once", false, "measure for --duration, write the snapshot and exit")
	f.DurationVar(&o.opts.Duration, "duration", 10*time.Second, "how long --once measures")
	f.StringVar(&o.opts.Output, "out", "", "snapshot JSON file (default with --once: stdout)")
	f.StringVar(&o.opts.Profile, "profile", "", "write a pprof profile of traced syscall time here at the end")
	f.BoolVar(&o.opts.AllowRemote, "allow-remote", false, "accept a --listen address that is not loopback (requires --token-file)")
	f.IntVar(&o.opts.API.MaxConnections, "api-max-connections", 0, fmt.Sprintf("most API clients served at once; more wait to be accepted, and connections idle or silent the longest are closed to make room (0: %d, or fewer where the process may open fewer descriptors; here %d)",
		daemon.DefaultAPIConnections, daemon.APILimits(guard.Limits{}).MaxConnections))
	f.StringVar(&o.opts.TokenFile, "token-file", "", "bearer token every API request must carry (Authorization: Bearer ...); one line, >= 16 characters, mode 600; required with --allow-remote")
	f.StringVar(&o.opts.User, "user", daemon.DefaultUser, `user (name or UID[:GID]) to become after attaching, when run as root ("root" keeps uid 0)`)
	f.BoolVar(&o.noDropCaps, "keep-capabilities", false, "do not drop privileges after attaching (capabilities, user, no_new_privs, seccomp)")
}

// run is hone daemon.
func (o *daemonFlags) run(cmd *cobra.Command) error {
	if o.match != "" {
		re, err := regexp.Compile(o.match)
		if err != nil {
			return badInput("--match-cmdline: %v", err)
		}
		o.cfg.Match = re
	}
	ports, err := daemon.ParsePorts(o.kvPorts)
	if err != nil {
		return badInput("--kv-ports: %v", err)
	}
	o.cfg.KVPorts = ports
	if o.cfg.HTTPPorts, err = daemon.ParsePorts(o.httpPorts); err != nil {
		return badInput("--http-ports: %v", err)
	}
	if o.opts.Once && o.opts.Duration <= 0 {
		return badInput("--duration: want a positive duration with --once, got %v", o.opts.Duration)
	}
	o.opts.Listen = daemonListen(o.opts.Once, o.opts.Listen, cmd.Flags().Changed("listen"))
	if _, err := daemon.CheckListen(o.opts.Listen, o.opts.AllowRemote, o.opts.TokenFile); err != nil {
		return badInput("%v", err)
	}
	if o.opts.API.MaxConnections < 0 {
		return badInput("--api-max-connections %d: want > 0 (0: automatic)", o.opts.API.MaxConnections)
	}
	if o.opts.TokenFile != "" {
		if _, err := daemon.ReadToken(o.opts.TokenFile); err != nil {
			return badInput("%v", err)
		}
	}
	if _, _, err := daemon.ParseUser(o.opts.User); err != nil {
		return badInput("--user: %v", err)
	}
	launches, err := daemon.ParseCUDALaunches(o.cudaLaunches)
	if err != nil {
		return badInput("%v", err)
	}
	o.cfg.CUDALaunches = launches
	if o.cfg.BurstGap < 0 || o.nvmlPeriod < 0 || o.scanPeriod < 0 {
		return badInput("durations must not be negative")
	}
	if err := bpf.CheckSyscallSample(o.cfg.SyscallSample); err != nil || o.cfg.SyscallSample == 0 {
		return badInput("--syscall-sample: want a power of two from 1 to %d, got %d", bpf.MaxSyscallSample, o.cfg.SyscallSample)
	}
	o.cfg.Sched = !o.noSched
	o.cfg.NVMLPeriod = o.nvmlPeriod
	o.cfg.ScanPeriod = o.scanPeriod
	o.opts.DropCaps = !o.noDropCaps
	if err := o.pods.check(); err != nil {
		return err
	}
	if o.pods.selector != "" {
		o.cfg.Pods = emptyPods{} // for New's checks: a target is given
	}
	if _, err := daemon.New(o.cfg, nil); err != nil { // flag-level checks: --pid, --cgroup
		return badInput("%v", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if o.pods.selector != "" {
		// Watched from before the privilege drop to the end.
		ps, err := o.pods.watch(ctx)
		if err != nil {
			return err
		}
		o.cfg.Pods = ps
		log.Info("pods selected", "selector", o.pods.selector, "namespace", o.pods.namespace, "node", o.pods.node, "pods", len(ps.Pods()))
	}
	return daemon.Run(ctx, o.cfg, o.opts, log)
}

// podFlags are hone daemon's --pod-selector and its companions.
type podFlags struct{ selector, namespace, node, kubeconfig string }

// check refuses companions without --pod-selector, a selector that does
// not parse and a missing node name.
func (p podFlags) check() error {
	if p.selector == "" {
		if p.namespace != "" || p.kubeconfig != "" {
			return badInput("--pod-namespace and --kubeconfig need --pod-selector")
		}
		return nil
	}
	if _, err := labels.Parse(p.selector); err != nil {
		return badInput("--pod-selector %q: %v", p.selector, err)
	}
	if p.node == "" {
		return badInput("--node-name: empty; with --pod-selector give this node's Kubernetes name (the DaemonSet sets NODE_NAME from spec.nodeName)")
	}
	return nil
}

// watch starts watching the selected pods; the first list must arrive
// within 30 s.
func (p podFlags) watch(ctx context.Context) (*kubernetes.NodePods, error) {
	cs, err := kubeClient(p.kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.WatchNodePods(ctx, cs, p.namespace, p.selector, p.node, 30*time.Second)
}

// emptyPods stands in for the watched pods in the flag-level checks.
type emptyPods struct{}

func (emptyPods) Pods() map[string]string { return nil }

// daemonListen is the address the daemon serves on: a --once run writes its
// snapshot and exits, so it binds no port unless --listen was given.
func daemonListen(once bool, listen string, explicit bool) string {
	if once && !explicit {
		return "off"
	}
	return listen
}
