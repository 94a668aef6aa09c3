package daemon

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fixture is a snapshot with one of everything.
func fixture() *Snapshot {
	return &Snapshot{
		SchemaVersion: SchemaVersion, Clock: "CLOCK_MONOTONIC",
		Targets: []Target{{PID: 10, Comm: "vllm", How: "cmdline"}, {PID: 11, Comm: "EngineCore", How: "fork", ExitMonotonicNS: 5}},
		Threads: []Thread{
			{PID: 10, TID: 10, Syscalls: map[string]*SyscallStats{"futex": {Count: 3, TotalNS: 3e9}, "ioctl": {Count: 2, TotalNS: 5e8}},
				Sched: &SchedStats{OnCPUNS: 2e9, OffCPUNS: 1e9, RunQueueNS: 5e8}},
			{PID: 10, TID: 12, Syscalls: map[string]*SyscallStats{"futex": {Count: 1, TotalNS: 1e9}},
				CUDA: map[string]*CUDAStats{"stream_synchronize": {Count: 4, WaitCount: 4, WaitSumNS: 2e9}, "graph_launch": {Count: 7}}},
			{PID: 11, TID: 11, Syscalls: map[string]*SyscallStats{"other": {Count: 1, TotalNS: 1}}},
		},
		Connections: []Connection{
			{PID: 10, KVTransfer: true, TXBytes: 1000, RXBytes: 10, TXOps: 2, RXOps: 1,
				Bursts: []Burst{{Direction: "tx", StartMonotonicNS: 1e9, EndMonotonicNS: 3e9, Bytes: 1000, Ops: 2}}},
			{PID: 10, TXBytes: 5, RXBytes: 7, TXOps: 1, RXOps: 1},
		},
		NVML: NVMLReport{Status: "ok", Driver: "570.1", Samples: []GPUSample{
			{Index: 0, UUID: "GPU-a", UtilizationRatio: ptr(0.5), PowerWatts: ptr(300.0), EnergyJoules: ptr(1e6),
				MemoryUsedBytes: ptr(uint64(1 << 30)), MemoryTotalBytes: ptr(uint64(141 << 30)), PCIeTXBytesPerSecond: ptr(1024.0)},
		}},
		BPF: BPFReport{StatsEnabled: true, Programs: []ProgramRun{{Name: "sys_enter", Runs: 100, RunTimeNS: 8000}}, RingbufDrops: 2},
		Probes: []ProbeStatus{{Family: "syscalls", Status: ProbeAttached}, {Family: "sched", Status: ProbeOff},
			{Family: "sockets", Status: ProbeUnavailable, Error: "no such tracepoint", Lost: "socket traffic"}},
	}
}

func TestRegistryLints(t *testing.T) {
	reg := NewRegistry(fixture)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, c := range []prometheus.Collector{threadCollector{&cachedSnapshot{src: fixture}}, netCollector{&cachedSnapshot{src: fixture}},
		gpuCollector{&cachedSnapshot{src: fixture}}, bpfCollector{&cachedSnapshot{src: fixture}}} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint %T: %s: %s", c, p.Metric, p.Text)
		}
	}
}

func TestRegistryValues(t *testing.T) {
	reg := NewRegistry(fixture)
	want := `
# HELP hone_syscalls_total Syscalls made by traced threads, by class.
# TYPE hone_syscalls_total counter
hone_syscalls_total{class="futex",process="vllm"} 4
hone_syscalls_total{class="ioctl",process="vllm"} 2
hone_syscalls_total{class="other",process="EngineCore"} 1
# HELP hone_cuda_synchronize_wait_seconds_total Time traced threads waited in CUDA synchronize calls.
# TYPE hone_cuda_synchronize_wait_seconds_total counter
hone_cuda_synchronize_wait_seconds_total{call="stream_synchronize",process="vllm"} 2
# HELP hone_socket_bytes_total Bytes traced processes sent (tx) or received (rx) on inet sockets.
# TYPE hone_socket_bytes_total counter
hone_socket_bytes_total{direction="rx",kv_transfer="false"} 7
hone_socket_bytes_total{direction="rx",kv_transfer="true"} 10
hone_socket_bytes_total{direction="tx",kv_transfer="false"} 5
hone_socket_bytes_total{direction="tx",kv_transfer="true"} 1000
# HELP hone_targets Traced processes alive now.
# TYPE hone_targets gauge
hone_targets 1
# HELP hone_gpu_power_watts Power draw.
# TYPE hone_gpu_power_watts gauge
hone_gpu_power_watts{UUID="GPU-a",gpu="0"} 300
# HELP hone_bpf_program_run_seconds_total Time each eBPF program ran (while BPF statistics are enabled).
# TYPE hone_bpf_program_run_seconds_total counter
hone_bpf_program_run_seconds_total{program="sys_enter"} 8e-06
# HELP hone_bpf_ringbuf_dropped_events_total Events lost because the ring buffer was full.
# TYPE hone_bpf_ringbuf_dropped_events_total counter
hone_bpf_ringbuf_dropped_events_total 2
# HELP hone_probe_family_attached 1 when the probe family is attached, 0 when the kernel could not attach it (/v1/snapshot probes[] says why and what is lost); families turned off (--no-sched) are absent.
# TYPE hone_probe_family_attached gauge
hone_probe_family_attached{family="sockets"} 0
hone_probe_family_attached{family="syscalls"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "hone_syscalls_total", "hone_cuda_synchronize_wait_seconds_total",
		"hone_socket_bytes_total", "hone_targets", "hone_gpu_power_watts", "hone_bpf_program_run_seconds_total", "hone_bpf_ringbuf_dropped_events_total", "hone_probe_family_attached"); err != nil {
		t.Error(err)
	}
}

// Exited processes keep counting under their name once folded, and closed
// connections once summed: the counters never go down.
func TestRegistryCountsFolded(t *testing.T) {
	src := func() *Snapshot {
		s := fixture()
		s.Exited = []ExitedGroup{{RootPID: 10, Comm: "EngineCore", Processes: 3, Threads: 3,
			Syscalls: map[string]*SyscallStats{"other": {Count: 5, TotalNS: 5}}}}
		s.TargetTable = TargetTable{Entries: 2, MaxEntries: 9216, Overflow: 4, ExitedProcesses: 3}
		s.ClosedConnections = ConnectionTotals{Connections: 1, TXBytes: [2]uint64{100, 0}}
		return s
	}
	want := `
# HELP hone_syscalls_total Syscalls made by traced threads, by class.
# TYPE hone_syscalls_total counter
hone_syscalls_total{class="futex",process="vllm"} 4
hone_syscalls_total{class="ioctl",process="vllm"} 2
hone_syscalls_total{class="other",process="EngineCore"} 6
# HELP hone_socket_bytes_total Bytes traced processes sent (tx) or received (rx) on inet sockets.
# TYPE hone_socket_bytes_total counter
hone_socket_bytes_total{direction="rx",kv_transfer="false"} 7
hone_socket_bytes_total{direction="rx",kv_transfer="true"} 10
hone_socket_bytes_total{direction="tx",kv_transfer="false"} 105
hone_socket_bytes_total{direction="tx",kv_transfer="true"} 1000
# HELP hone_target_table_overflows_total Traced processes left out of the full target table (their measurements still count).
# TYPE hone_target_table_overflows_total counter
hone_target_table_overflows_total 4
# HELP hone_exited_processes_total Exited traced processes whose measurements were folded into per-root totals.
# TYPE hone_exited_processes_total counter
hone_exited_processes_total 3
`
	if err := testutil.GatherAndCompare(NewRegistry(src), strings.NewReader(want), "hone_syscalls_total", "hone_socket_bytes_total",
		"hone_target_table_overflows_total", "hone_exited_processes_total"); err != nil {
		t.Error(err)
	}
}

// With --syscall-sample, syscall_seconds_total covers the timed calls and
// syscalls_timed_total counts them (every call when not sampled); the
// profile's estimate scales the timed mean to every call.
func TestSyscallsTimed(t *testing.T) {
	src := func() *Snapshot {
		s := fixture()
		s.Threads = []Thread{{PID: 10, TID: 10, Comm: "vllm", Syscalls: map[string]*SyscallStats{"futex": {Count: 64, Timed: 2, TotalNS: 3e9}}}}
		return s
	}
	want := `
# HELP hone_syscalls_timed_total Of hone_syscalls_total, the calls timed (syscall_seconds_total's): one in hone daemon --syscall-sample.
# TYPE hone_syscalls_timed_total counter
hone_syscalls_timed_total{class="futex",process="vllm"} 2
# HELP hone_syscall_seconds_total Time traced threads spent in their timed syscalls (one call in hone daemon --syscall-sample, 16 by default), by class; their total is about this / syscalls_timed_total * syscalls_total.
# TYPE hone_syscall_seconds_total counter
hone_syscall_seconds_total{class="futex",process="vllm"} 3
`
	if err := testutil.GatherAndCompare(NewRegistry(src), strings.NewReader(want), "hone_syscalls_timed_total", "hone_syscall_seconds_total"); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		st   SyscallStats
		want uint64
	}{
		{SyscallStats{Count: 64, Timed: 2, TotalNS: 3e9}, 96e9},
		{SyscallStats{Count: 5, Timed: 5, TotalNS: 10}, 10},
		{SyscallStats{Count: 5, TotalNS: 10}, 10}, // a snapshot from before sampling
		{SyscallStats{}, 0},
	} {
		if got := c.st.EstimatedNS(); got != c.want {
			t.Errorf("%+v: EstimatedNS %d, want %d", c.st, got, c.want)
		}
	}
}
