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
	var (
		cfg                    daemon.Config
		opts                   daemon.RunOptions
		match, kvPorts         string
		cudaLaunches           string
		httpPorts              string
		noSched, noDropCaps    bool
		nvmlPeriod, scanPeriod time.Duration
		pods                   podFlags
	)
	c := withHelp(&cobra.Command{
		Use:   "daemon",
		Short: "Trace serving processes with eBPF and NVML; serve metrics, a JSON API and profiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if match != "" {
				re, err := regexp.Compile(match)
				if err != nil {
					return badInput("--match-cmdline: %v", err)
				}
				cfg.Match = re
			}
			ports, err := daemon.ParsePorts(kvPorts)
			if err != nil {
				return badInput("--kv-ports: %v", err)
			}
			cfg.KVPorts = ports
			if cfg.HTTPPorts, err = daemon.ParsePorts(httpPorts); err != nil {
				return badInput("--http-ports: %v", err)
			}
			if opts.Once && opts.Duration <= 0 {
				return badInput("--duration: want a positive duration with --once, got %v", opts.Duration)
			}
			opts.Listen = daemonListen(opts.Once, opts.Listen, cmd.Flags().Changed("listen"))
			if _, err := daemon.CheckListen(opts.Listen, opts.AllowRemote, opts.TokenFile); err != nil {
				return badInput("%v", err)
			}
			if opts.API.MaxConnections < 0 {
				return badInput("--api-max-connections %d: want > 0 (0: automatic)", opts.API.MaxConnections)
			}
			if opts.TokenFile != "" {
				if _, err := daemon.ReadToken(opts.TokenFile); err != nil {
					return badInput("%v", err)
				}
			}
			if _, _, err := daemon.ParseUser(opts.User); err != nil {
				return badInput("--user: %v", err)
			}
			launches, err := daemon.ParseCUDALaunches(cudaLaunches)
			if err != nil {
				return badInput("%v", err)
			}
			cfg.CUDALaunches = launches
			if cfg.BurstGap < 0 || nvmlPeriod < 0 || scanPeriod < 0 {
				return badInput("durations must not be negative")
			}
			if err := bpf.CheckSyscallSample(cfg.SyscallSample); err != nil || cfg.SyscallSample == 0 {
				return badInput("--syscall-sample: want a power of two from 1 to %d, got %d", bpf.MaxSyscallSample, cfg.SyscallSample)
			}
			cfg.Sched = !noSched
			cfg.NVMLPeriod = nvmlPeriod
			cfg.ScanPeriod = scanPeriod
			opts.DropCaps = !noDropCaps
			if err := pods.check(); err != nil {
				return err
			}
			if pods.selector != "" {
				cfg.Pods = emptyPods{} // for New's checks: a target is given
			}
			if _, err := daemon.New(cfg, nil); err != nil { // flag-level checks: --pid, --cgroup
				return badInput("%v", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			if pods.selector != "" {
				// Watched from before the privilege drop to the end.
				ps, err := pods.watch(ctx)
				if err != nil {
					return err
				}
				cfg.Pods = ps
				log.Info("pods selected", "selector", pods.selector, "namespace", pods.namespace, "node", pods.node, "pods", len(ps.Pods()))
			}
			return daemon.Run(ctx, cfg, opts, log)
		},
	}, "daemon", nil)
	f := c.Flags()
	f.IntSliceVar(&cfg.PIDs, "pid", nil, "trace these processes and their descendants (repeatable)")
	f.StringSliceVar(&cfg.Cgroups, "cgroup", nil, "trace the processes of this cgroup v2 directory (absolute or under /sys/fs/cgroup)")
	f.StringVar(&pods.selector, "pod-selector", "", "trace the processes of the Kubernetes pods on this node whose labels match this selector (e.g. "+kubernetes.DefaultServingSelector+")")
	f.StringVar(&pods.namespace, "pod-namespace", "", "with --pod-selector: the pods' namespace (default: all namespaces)")
	f.StringVar(&pods.node, "node-name", os.Getenv("NODE_NAME"), "with --pod-selector: this node's Kubernetes name (default $NODE_NAME)")
	f.StringVar(&pods.kubeconfig, "kubeconfig", "", "with --pod-selector: kubeconfig file (default: in-cluster credentials, else $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&match, "match-cmdline", "", "trace processes whose command line matches this regular expression (default with no other target: "+daemon.DefaultMatch+")")
	f.StringVar(&kvPorts, "kv-ports", daemon.DefaultKVPorts, "ports whose connections are KV transfers (list and ranges)")
	f.StringVar(&httpPorts, "http-ports", daemon.DefaultHTTPPorts, "serving API ports: on the server's end of their connections each HTTP request/response exchange is recorded (receipt, first, second and last send; \"\": none)")
	f.DurationVar(&cfg.BurstGap, "burst-gap", 100*time.Millisecond, "silence that ends a burst on a KV-transfer connection")
	f.StringVar(&cudaLaunches, "cuda-launches", "always", "probe every CUDA kernel launch: always, off, or for this long after start (e.g. 30s); each costs microseconds in the launching thread, and without them a step that launches no CUDA graph (an eager step: vLLM's prefill chunks above its graph sizes) is not seen, nor split by diagnose")
	f.Uint32Var(&cfg.SyscallSample, "syscall-sample", bpf.DefaultSyscallSample, "time one syscall in this many of each traced thread and only count the others (a power of two; 1: time every call): counts stay exact; the mean latency (total_ns / timed) is an unbiased estimate, the maximum and histogram are a sample's; on a VM whose clock is kvm-clock each timed call was measured at ~140 ns more than a counted one (make bench)")
	f.DurationVar(&cfg.SyscallTimingWindow, "syscall-timing-window", time.Second, "with --syscall-timing-period: how long each syscall timing window lasts")
	f.DurationVar(&cfg.SyscallTimingPeriod, "syscall-timing-period", 8*time.Second, "time syscalls only in one --syscall-timing-window in each period this long (the first at start), counting them always: outside a window the sys_exit program is detached, so every process on the host pays one program's target check per syscall instead of two (make bench: BenchmarkSyscallFloor); 0: always time")
	f.BoolVar(&noSched, "no-sched", false, "do not trace sched_switch/wakeup (on-CPU, off-CPU, run-queue time)")
	f.BoolVar(&cfg.BPFStats, "bpf-stats", false, "enable kernel BPF run-time statistics and export per-program run time and count")
	f.DurationVar(&nvmlPeriod, "nvml-period", time.Second, "NVML sampling period (0: no sampling)")
	f.DurationVar(&scanPeriod, "scan-period", time.Second, "how often to rescan /proc, cgroups and mapped libcuda files")
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:9464", `address for /metrics and /v1 ("off": none; with --once, none unless given)`)
	f.BoolVar(&opts.Once, "once", false, "measure for --duration, write the snapshot and exit")
	f.DurationVar(&opts.Duration, "duration", 10*time.Second, "how long --once measures")
	f.StringVar(&opts.Output, "out", "", "snapshot JSON file (default with --once: stdout)")
	f.StringVar(&opts.Profile, "profile", "", "write a pprof profile of traced syscall time here at the end")
	f.BoolVar(&opts.AllowRemote, "allow-remote", false, "accept a --listen address that is not loopback (requires --token-file)")
	f.IntVar(&opts.API.MaxConnections, "api-max-connections", 0, fmt.Sprintf("most API clients served at once; more wait to be accepted, and connections idle or silent the longest are closed to make room (0: %d, or fewer where the process may open fewer descriptors; here %d)",
		daemon.DefaultAPIConnections, daemon.APILimits(guard.Limits{}).MaxConnections))
	f.StringVar(&opts.TokenFile, "token-file", "", "bearer token every API request must carry (Authorization: Bearer ...); one line, >= 16 characters, mode 600; required with --allow-remote")
	f.StringVar(&opts.User, "user", daemon.DefaultUser, `user (name or UID[:GID]) to become after attaching, when run as root ("root" keeps uid 0)`)
	f.BoolVar(&noDropCaps, "keep-capabilities", false, "do not drop privileges after attaching (capabilities, user, no_new_privs, seccomp)")
	return c
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
