package daemon

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hone-llm/hone/engine"
)

// DefaultMatch selects every registered engine's serving processes (vLLM's
// API server, EngineCore and workers; hone's engine emulator) when no
// --pid, --cgroup or --match-cmdline is given: each engine's
// Facts.ProcessPattern (package engine).
var DefaultMatch = engine.ProcessPattern()

// CUDALaunchesAlways, as Config.CUDALaunches, probes kernel launches for
// as long as the daemon runs.
const CUDALaunchesAlways = time.Duration(math.MaxInt64)

// ParseCUDALaunches reads --cuda-launches: "always", "off" (or 0), or how
// long after start to probe kernel launches (a Go duration, e.g. 30s).
func ParseCUDALaunches(s string) (time.Duration, error) {
	switch s {
	case "always":
		return CUDALaunchesAlways, nil
	case "off", "0":
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--cuda-launches: want always, off or a duration such as 30s, got %q", s)
	}
	return d, nil
}

// DefaultKVPorts are the ports whose connections count as KV transfers:
// every registered engine's Facts.KVPorts (vLLM's NIXL side channel, 5600
// plus one per rank, and its P2pNccl default; the range hone's engine
// emulator uses for its prefill-to-decode KV stream).
var DefaultKVPorts = engine.KVPorts()

// DefaultHTTPPorts are the API ports whose connections' HTTP exchanges are
// recorded on the server's end: vLLM's default (8000, also hone sim
// serve's) and the range hone deploy gives its workers (8100 plus one per
// worker).
const DefaultHTTPPorts = "8000,8100-8163"

// Config selects targets and probes.
type Config struct {
	PIDs    []int          // processes to trace, with their existing descendants
	Cgroups []string       // cgroup v2 directories whose processes (in the whole subtree) are traced
	Match   *regexp.Regexp // command lines to trace (NUL separators read as spaces)
	// Pods are Kubernetes pods whose processes are traced (hone daemon
	// --pod-selector), found through their cgroups (see PodSet).
	Pods PodSet

	KVPorts  []uint16      // ports of KV-transfer connections
	BurstGap time.Duration // silence that ends a burst on a KV-transfer connection
	// HTTPPorts are serving API ports: on connections whose local port is
	// one of them, each HTTP/1.1 request/response exchange is recorded
	// (Snapshot.Exchanges).
	HTTPPorts []uint16

	// CUDALaunches probes every kernel launch for this long after start
	// (0: never; CUDALaunchesAlways: while the daemon runs, hone daemon's
	// default). Each uprobe hit costs microseconds in the traced thread;
	// graph launches, synchronizes and async copies are always probed.
	// Without kernel launches a step that launches no graph (an eager
	// step: vLLM's prefill chunks above its CUDA graph sizes) is not seen,
	// and the requests it prefilled cannot be split from kernel evidence.
	CUDALaunches time.Duration

	// SyscallSample times one syscall in this many of each target thread
	// and only counts the others (a power of two; 0 or 1: every call):
	// counts stay exact, latencies are a sample (SyscallStats.Timed).
	SyscallSample uint32

	// SyscallTimingPeriod, when positive, times syscalls only in windows
	// of SyscallTimingWindow once every SyscallTimingPeriod, the first at
	// start (bpf.Objects.TimeSyscalls): outside them sys_exit is detached,
	// so the host's other processes pay one program's target check per
	// syscall instead of two. Counts stay exact; latencies are a sample of
	// the windows' calls (SyscallStats.Timed). 0: every call is timed
	// (one in SyscallSample).
	SyscallTimingPeriod time.Duration
	SyscallTimingWindow time.Duration

	Sched      bool          // sched_switch/wakeup: on-CPU, off-CPU, run-queue time
	BPFStats   bool          // enable kernel BPF run-time statistics
	ScanPeriod time.Duration // how often /proc, cgroups and mapped libraries are rescanned
	NVMLPeriod time.Duration // NVML sampling period (0: no sampling)
	NVML       NVMLOpener    // nil: the real libnvidia-ml

	perfUprobes bool // tests: perf-event uprobes even where uprobe_multi exists
	// attachFault makes the named probe families fail to attach with the
	// given error (tests: a kernel without them).
	attachFault map[string]error
	// editSpec edits each probe family's programs before they are loaded
	// (tests: a kernel that refuses a family at load, bpftest.MissingHooks).
	editSpec func(family string, spec *ebpf.CollectionSpec)
}

// PodSet is a set of pods whose processes are targets. A process belongs
// to a pod when a line of its /proc/PID/cgroup names the pod's UID the way
// the kubelet's cgroup drivers do: cgroupfs ".../pod<uid>/<container>",
// systemd "...-pod<uid, - as _>.slice/<container>.scope"; this holds on
// cgroup v1, v2 and hybrid hosts alike and needs no privilege.
type PodSet interface {
	// Pods returns the pods now in the set: UID -> "namespace/name".
	Pods() map[string]string
}

func (c *Config) defaults() {
	if c.Match == nil && len(c.PIDs) == 0 && len(c.Cgroups) == 0 && c.Pods == nil {
		c.Match = regexp.MustCompile(DefaultMatch)
	}
	if c.KVPorts == nil {
		c.KVPorts, _ = ParsePorts(DefaultKVPorts)
	}
	if c.HTTPPorts == nil {
		c.HTTPPorts, _ = ParsePorts(DefaultHTTPPorts)
	}
	if c.BurstGap <= 0 {
		c.BurstGap = 100 * time.Millisecond
	}
	if c.ScanPeriod <= 0 {
		c.ScanPeriod = time.Second
	}
	if c.SyscallSample == 0 {
		c.SyscallSample = 1
	}
}

// ParsePorts parses a comma-separated list of ports and ranges
// ("5600-5663,8100").
func ParsePorts(s string) ([]uint16, error) {
	set := map[uint16]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
		if err != nil || a == 0 {
			return nil, fmt.Errorf("port %q: want 1-65535", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 16); err != nil || b < a {
				return nil, fmt.Errorf("port range %q: want LOW-HIGH within 1-65535", part)
			}
		}
		for p := a; p <= b; p++ {
			set[uint16(p)] = true
		}
	}
	out := make([]uint16, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}
