package schema

import "time"

// The daemon's snapshot (GET /v1/snapshot, hone daemon --once --out FILE):
// package daemon writes it, package diagnose reads it. Timestamps named
// *_monotonic_ns are CLOCK_MONOTONIC nanoseconds, the clock of
// bpf_ktime_get_ns, so they join with other CLOCK_MONOTONIC records (the
// proxy's timelines, the replay client's requests). Limits named here
// (maxRetired, maxSteps, maxExchanges, maxCUDALibraries, maxExitedGroups,
// retireAfter) are package daemon's.

// SnapshotVersion is the version of the snapshot JSON layout, its
// "schema_version".
const SnapshotVersion = 1

// SnapshotClock is the clock of every *_monotonic_ns field, its "clock".
const SnapshotClock = "CLOCK_MONOTONIC"

// Snapshot is everything the daemon has measured so far. Timestamps named
// *_monotonic_ns are CLOCK_MONOTONIC nanoseconds, the clock of
// bpf_ktime_get_ns, so they join with other CLOCK_MONOTONIC records.
type Snapshot struct {
	SchemaVersion      int       `json:"schema_version"`
	Clock              string    `json:"clock"`
	TakenMonotonicNS   uint64    `json:"taken_monotonic_ns"`
	TakenWall          time.Time `json:"taken_wall"`
	StartedMonotonicNS uint64    `json:"started_monotonic_ns"`
	Targets            []Target  `json:"targets"`
	Threads            []Thread  `json:"threads"`
	// Exited holds the measurements of exited processes, folded per root
	// target and process name once they leave the target table.
	Exited      []ExitedGroup `json:"exited"`
	TargetTable TargetTable   `json:"target_table"`
	Connections []Connection  `json:"connections"`
	// ClosedConnections sums closed connections no longer listed one by
	// one (the oldest beyond the last maxRetired), so totals stay exact.
	ClosedConnections ConnectionTotals `json:"closed_connections_folded"`
	CUDA              CUDAReport       `json:"cuda"`
	// Steps are the engine steps the CUDA probes saw, oldest first: the
	// latest maxSteps of every process together (StepTable counts the
	// rest).
	Steps     []Step    `json:"steps"`
	StepTable KeptTable `json:"step_table"`
	// Exchanges are the HTTP request/response exchanges on the server's end
	// of connections to an API port (Config.HTTPPorts), closed ones oldest
	// first (the latest maxExchanges; ExchangeTable counts the rest), then
	// those still open.
	Exchanges     []Exchange `json:"exchanges"`
	ExchangeTable KeptTable  `json:"exchange_table"`
	NVML          NVMLReport `json:"nvml"`
	BPF           BPFReport  `json:"bpf"`
	// Probes is the state of each probe family (package probes): a
	// family the kernel could not attach says why, and what the snapshot
	// lacks without it.
	Probes []ProbeStatus `json:"probes"`
	Daemon SelfUsage     `json:"daemon"`
}

// ProbeStatus is the state of one probe family (package probes).
type ProbeStatus struct {
	Family string `json:"family"`
	// Status is ProbeAttached, ProbeUnavailable (the kernel could not
	// attach it: Error says why, Lost what the snapshot lacks) or ProbeOff
	// (not asked for: --no-sched).
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	Lost   string `json:"lost,omitempty"`
}

// ProbeStatus.Status values.
const (
	ProbeAttached    = "attached"
	ProbeUnavailable = "unavailable"
	ProbeOff         = "off"
)

// Target is a traced process.
type Target struct {
	PID     int    `json:"pid"`
	PPID    int    `json:"ppid,omitempty"`
	RootPID int    `json:"root_pid"` // the selected target it descends from (itself if selected)
	Comm    string `json:"comm"`
	// Cmdline has likely secrets replaced by [REDACTED] (package daemon's redactArgs).
	Cmdline          string `json:"cmdline,omitempty"`
	How              string `json:"how"`           // pid | descendant | cgroup | pod | cmdline | fork
	Pod              string `json:"pod,omitempty"` // namespace/name, when How is pod
	AddedMonotonicNS uint64 `json:"added_monotonic_ns"`
	ExitMonotonicNS  uint64 `json:"exit_monotonic_ns,omitempty"`
}

// ExitedGroup sums the measurements of exited processes with one root
// target and one process name: every thread's syscalls, scheduling and
// CUDA calls, added up (counts, sums and histograms added; minima, maxima,
// first and last timestamps kept). Processes whose root is unknown (the
// table was full when they started) have root_pid 0; beyond
// maxExitedGroups groups, further ones fold into root_pid 0, comm "other".
type ExitedGroup struct {
	RootPID   int                      `json:"root_pid"`
	Comm      string                   `json:"comm"`
	Processes uint64                   `json:"processes"`
	Threads   uint64                   `json:"threads"`
	Syscalls  map[string]*SyscallStats `json:"syscalls,omitempty"`
	Sched     *SchedStats              `json:"sched,omitempty"`
	CUDA      map[string]*CUDAStats    `json:"cuda,omitempty"`
}

// TargetTable describes the daemon's table of traced processes: live ones
// and those exited in the last few seconds, at most max_entries.
type TargetTable struct {
	Entries    int `json:"entries"`
	MaxEntries int `json:"max_entries"`
	// Overflow counts processes traced in the kernel but left out of the
	// table because it was full; their measurements still count, folded
	// under root_pid 0 once they exit.
	Overflow uint64 `json:"overflow_total"`
	// ExitedProcesses counts processes folded into Exited.
	ExitedProcesses uint64 `json:"exited_processes_total"`
}

// ConnectionTotals sums connections.
type ConnectionTotals struct {
	Connections uint64    `json:"connections"`
	TXBytes     [2]uint64 `json:"tx_bytes"` // [non-KV, KV]
	RXBytes     [2]uint64 `json:"rx_bytes"`
	TXOps       [2]uint64 `json:"tx_ops"`
	RXOps       [2]uint64 `json:"rx_ops"`
	Bursts      [2]uint64 `json:"bursts"`   // [tx, rx]
	BurstNS     [2]uint64 `json:"burst_ns"` // [tx, rx], first to last operation
}

// Thread holds one traced thread's measurements.
type Thread struct {
	PID      int                      `json:"pid"`
	TID      int                      `json:"tid"`
	Comm     string                   `json:"comm,omitempty"`
	Syscalls map[string]*SyscallStats `json:"syscalls,omitempty"`
	Sched    *SchedStats              `json:"sched,omitempty"`
	CUDA     map[string]*CUDAStats    `json:"cuda,omitempty"`
}

// SyscallStats are one thread's syscalls of one class.
//
// Count is every call entered (exit_group, which never returns, included).
// The daemon times one call in BPFReport.SyscallSample (--syscall-sample)
// of a thread with a slot of its own, only inside timing windows
// (BPFReport.SyscallTimingWindowMS of every SyscallTimingPeriodMS), and
// only counts the others: Timed is how many calls TotalNS, MaxNS,
// the histogram and the first and last timestamps cover (0 in snapshots
// from before sampling: read it as Count). The mean latency is TotalNS /
// Timed, and the time spent in the class about Count × that mean.
type SyscallStats struct {
	Count            uint64   `json:"count"`
	Timed            uint64   `json:"timed"`
	TotalNS          uint64   `json:"total_ns"`
	MaxNS            uint64   `json:"max_ns"`
	FirstMonotonicNS uint64   `json:"first_monotonic_ns"`
	LastMonotonicNS  uint64   `json:"last_monotonic_ns"`
	HistLog2NS       []uint32 `json:"latency_log2_ns_histogram"`
}

// EstimatedNS is the time spent in the class's calls: TotalNS when every
// call was timed, else Count × the timed calls' mean.
func (s *SyscallStats) EstimatedNS() uint64 {
	if s.Timed == 0 || s.Timed >= s.Count {
		return s.TotalNS
	}
	return uint64(float64(s.TotalNS) / float64(s.Timed) * float64(s.Count))
}

// SchedStats are one thread's scheduling times.
type SchedStats struct {
	OnCPUNS     uint64 `json:"on_cpu_ns"`
	OffCPUNS    uint64 `json:"off_cpu_ns"`
	RunQueueNS  uint64 `json:"run_queue_ns"`
	Switches    uint64 `json:"switches"`
	Preemptions uint64 `json:"preemptions"`
}

// CUDAStats are one thread's calls of one CUDA call kind.
type CUDAStats struct {
	Count            uint64   `json:"count"`
	FirstMonotonicNS uint64   `json:"first_monotonic_ns"`
	LastMonotonicNS  uint64   `json:"last_monotonic_ns"`
	GapCount         uint64   `json:"gap_count"`
	GapSumNS         uint64   `json:"gap_sum_ns"`
	GapMinNS         uint64   `json:"gap_min_ns"`
	GapMaxNS         uint64   `json:"gap_max_ns"`
	GapHistLog2NS    []uint32 `json:"gap_log2_ns_histogram"`
	WaitCount        uint64   `json:"wait_count,omitempty"`
	WaitSumNS        uint64   `json:"wait_sum_ns,omitempty"`
	WaitMinNS        uint64   `json:"wait_min_ns,omitempty"`
	WaitMaxNS        uint64   `json:"wait_max_ns,omitempty"`
	WaitHistLog2NS   []uint32 `json:"wait_log2_ns_histogram,omitempty"`
}

// Connection is one socket, seen from its own side (local, remote).
type Connection struct {
	PID                  int     `json:"pid"`
	Local                string  `json:"local"`
	Remote               string  `json:"remote"`
	KVTransfer           bool    `json:"kv_transfer"`
	TXBytes              uint64  `json:"tx_bytes"`
	RXBytes              uint64  `json:"rx_bytes"`
	TXOps                uint64  `json:"tx_ops"`
	RXOps                uint64  `json:"rx_ops"`
	FirstMonotonicNS     uint64  `json:"first_monotonic_ns,omitempty"`
	LastMonotonicNS      uint64  `json:"last_monotonic_ns,omitempty"`
	EstablishedMonotonic uint64  `json:"established_monotonic_ns,omitempty"`
	ClosedMonotonicNS    uint64  `json:"closed_monotonic_ns,omitempty"`
	Bursts               []Burst `json:"bursts,omitempty"`
}

// Burst is a run of sends or receives on a KV-transfer connection with no
// silence longer than the burst gap. Open bursts may still grow.
type Burst struct {
	Direction        string `json:"direction"` // tx | rx
	StartMonotonicNS uint64 `json:"start_monotonic_ns"`
	EndMonotonicNS   uint64 `json:"end_monotonic_ns"`
	Bytes            uint64 `json:"bytes"`
	Ops              uint64 `json:"ops"`
	Open             bool   `json:"open,omitempty"`
}

// CUDAReport says which libcuda files are probed.
type CUDAReport struct {
	Libraries         []CUDALibrary `json:"libraries"`
	LaunchProbesUntil uint64        `json:"launch_probes_until_monotonic_ns,omitempty"`
	// Skipped counts libcuda files found beyond maxCUDALibraries, not probed.
	Skipped int `json:"skipped_libraries,omitempty"`
}

// Step is one engine step of a traced process as its CUDA calls show it
// (bpf/cuda.bpf.c): it opens at the process's first kernel or graph launch
// after its previous step and closes when a synchronizing call returns,
// when the host has the step's results. On a GPU host a vLLM worker runs
// one step per batch; hone sim serve --cuda-lib makes the emulator's
// steps look the same.
type Step struct {
	PID int `json:"pid"`
	TID int `json:"tid"` // the thread whose wait closed the step
	// Call is the synchronizing call that closed it (stream_synchronize,
	// ctx_synchronize, event_synchronize, memcpy_sync).
	Call             string `json:"call"`
	StartMonotonicNS uint64 `json:"start_monotonic_ns"` // the first launch's entry
	SyncMonotonicNS  uint64 `json:"sync_monotonic_ns"`  // the closing call's entry
	EndMonotonicNS   uint64 `json:"end_monotonic_ns"`   // its return
	GraphLaunches    uint32 `json:"graph_launches"`
	// Launches counts kernel launches, probed only in the --cuda-launches
	// window: outside it a step needs a graph launch to be seen.
	Launches uint32 `json:"launches"`
}

// KeptTable counts the items of a bounded list (steps, exchanges) seen
// and those no longer listed.
type KeptTable struct {
	Total   uint64 `json:"total"`
	Evicted uint64 `json:"evicted"`  // the oldest, beyond MaxKept
	MaxKept int    `json:"max_kept"` // how many the list holds at most
}

// Exchange is one HTTP/1.1 request and its response as the kernel saw them
// on the server's end of a connection (bpf/sockets.bpf.c): the request's
// receives until the response's first send, then the response's sends until
// the next request's first receive or the close. On a vLLM API server
// (uvicorn) a streamed response's first send is its status line and headers,
// written when the handler returns the stream (before the first token), and
// the second send is the first token's chunk; hone sim serve writes the
// headers with the first chunk. Times are CLOCK_MONOTONIC, like the
// engine steps', so the two join without the engine's help.
type Exchange struct {
	PID                     int    `json:"pid"`
	Local                   string `json:"local"`
	Remote                  string `json:"remote"`
	RequestStartMonotonicNS uint64 `json:"request_start_monotonic_ns"` // first receive
	RequestEndMonotonicNS   uint64 `json:"request_end_monotonic_ns"`   // last receive before the response
	RequestBytes            uint64 `json:"request_bytes"`
	RequestReceives         uint32 `json:"request_receives"`
	FirstSendMonotonicNS    uint64 `json:"first_send_monotonic_ns,omitempty"`
	FirstSendBytes          uint32 `json:"first_send_bytes,omitempty"`
	SecondSendMonotonicNS   uint64 `json:"second_send_monotonic_ns,omitempty"`
	SecondSendBytes         uint32 `json:"second_send_bytes,omitempty"`
	LastSendMonotonicNS     uint64 `json:"last_send_monotonic_ns,omitempty"`
	ResponseBytes           uint64 `json:"response_bytes"`
	ResponseSends           uint32 `json:"response_sends"`
	// Open: the connection has not yet carried another request or closed,
	// so the response may still grow.
	Open bool `json:"open,omitempty"`
}

// CUDALibrary is one probed libcuda file (deduplicated by device and inode).
type CUDALibrary struct {
	Path    string   `json:"path"`
	Dev     uint64   `json:"dev"`
	Inode   uint64   `json:"inode"`
	Symbols []string `json:"symbols"`
	Launch  []string `json:"launch_symbols,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// BPFReport is the daemon's own kernel-side cost and losses.
type BPFReport struct {
	StatsEnabled bool `json:"stats_enabled"`
	// SyscallSample is the daemon's --syscall-sample: one call in this
	// many of a thread is timed (1: every call).
	SyscallSample uint32 `json:"syscall_sample"`
	// SyscallTimingWindowMS and SyscallTimingPeriodMS are the daemon's
	// --syscall-timing-window and --syscall-timing-period: calls are
	// timed only in windows of the first, once every the second (absent:
	// all the time); counts are exact either way.
	SyscallTimingWindowMS int64        `json:"syscall_timing_window_ms,omitempty"`
	SyscallTimingPeriodMS int64        `json:"syscall_timing_period_ms,omitempty"`
	Programs              []ProgramRun `json:"programs"`
	RingbufDrops          uint64       `json:"ringbuf_dropped_events"`
	MapFullDrops          uint64       `json:"map_full_updates"`
	EventsRead            uint64       `json:"events_read"`
}

// ProgramRun is one program's run statistics (zero unless stats are on).
type ProgramRun struct {
	Name      string `json:"name"`
	Runs      uint64 `json:"runs"`
	RunTimeNS uint64 `json:"run_time_ns"`
}

// SelfUsage is the daemon process's own resource use.
type SelfUsage struct {
	PID           int     `json:"pid"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	MaxRSSBytes   uint64  `json:"max_rss_bytes"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	Capabilities  string  `json:"capabilities,omitempty"`
	UID           int     `json:"uid"`
	NoNewPrivs    bool    `json:"no_new_privs"`
	Seccomp       bool    `json:"seccomp_filter"`
}

// NVMLReport is the GPU side of a snapshot. Status is "ok", or
// "unavailable (<reason>)" where there is no GPU or driver, in which case the
// daemon carries on without GPU data.
type NVMLReport struct {
	Status  string      `json:"status"`
	Driver  string      `json:"driver_version,omitempty"`
	Devices []GPUDevice `json:"devices,omitempty"`
	Samples []GPUSample `json:"samples,omitempty"`
}

// GPUDevice identifies a GPU.
type GPUDevice struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	MemoryBytes uint64 `json:"memory_total_bytes,omitempty"`
}

// GPUSample is one reading of one GPU. A field the device does not support
// is absent.
type GPUSample struct {
	MonotonicNS          uint64       `json:"monotonic_ns"`
	Index                int          `json:"gpu"`
	UUID                 string       `json:"uuid"`
	UtilizationRatio     *float64     `json:"utilization_ratio,omitempty"` // time a kernel was running
	MemoryUtilRatio      *float64     `json:"memory_utilization_ratio,omitempty"`
	MemoryUsedBytes      *uint64      `json:"memory_used_bytes,omitempty"`
	MemoryTotalBytes     *uint64      `json:"memory_total_bytes,omitempty"`
	PowerWatts           *float64     `json:"power_watts,omitempty"`
	EnergyJoules         *float64     `json:"energy_joules,omitempty"` // since the driver loaded
	SMClockHertz         *float64     `json:"sm_clock_hertz,omitempty"`
	PCIeTXBytesPerSecond *float64     `json:"pcie_tx_bytes_per_second,omitempty"`
	PCIeRXBytesPerSecond *float64     `json:"pcie_rx_bytes_per_second,omitempty"`
	NVLinkTXBytes        *uint64      `json:"nvlink_tx_bytes,omitempty"` // cumulative
	NVLinkRXBytes        *uint64      `json:"nvlink_rx_bytes,omitempty"`
	Processes            []GPUProcess `json:"processes,omitempty"`
}

// GPUProcess is one process's share of a GPU over the last sample period.
type GPUProcess struct {
	PID          int     `json:"pid"`
	SMUtilRatio  float64 `json:"sm_utilization_ratio"`
	MemUtilRatio float64 `json:"memory_utilization_ratio"`
}
