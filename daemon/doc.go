// Package daemon is hone's privileged tracer for serving hosts (`hone
// daemon`): it selects target processes, loads and attaches the programs of
// package bpf, reads their maps and ring buffer, samples GPUs through NVML,
// and serves what it measured as Prometheus metrics, a local JSON API and
// pprof profiles. It does not optimize, gate or attribute latency: package
// diagnose joins its snapshots with per-request timelines.
//
// # Targets
//
// Processes are selected by --pid (with their existing descendants),
// --cgroup, or --match-cmdline (default DefaultMatch: vLLM's API server,
// EngineCore and workers, and `hone sim serve`). Their children become
// targets in the kernel at fork, before they first run; exec events let a
// new matching process be picked up at once; exits are recorded and the
// measurements of exited processes move from the kernel maps into the
// daemon's memory after a few seconds.
//
// # Builds
//
// The tracer is Linux only: elsewhere the package keeps its types, Handler
// and Profile, and Run returns an error. NVML is loaded through cgo: a build
// without cgo (CGO_ENABLED=0, or a cross build such as GOARCH=arm64 on an
// amd64 host) reports nvml "unavailable (hone was built without cgo: ...)";
// build natively, as on a GH200, for GPU data.
//
// # Clocks
//
// Every kernel timestamp is CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns),
// in fields named *_monotonic_ns, so they join directly with the replay
// client's and the proxy's per-request CLOCK_MONOTONIC timestamps.
//
// # Snapshot JSON (schema_version 1)
//
// GET /v1/snapshot and `hone daemon --once --out FILE` write a Snapshot:
//
//	{
//	  "schema_version": 1,
//	  "clock": "CLOCK_MONOTONIC",
//	  "taken_monotonic_ns": N, "taken_wall": RFC3339, "started_monotonic_ns": N,
//	  "targets": [{"pid", "ppid", "comm", "cmdline",
//	               "how": "pid|descendant|cgroup|cmdline|fork",
//	               "added_monotonic_ns", "exit_monotonic_ns"}],
//	  "threads": [{"pid", "tid", "comm",
//	    "syscalls": {CLASS: {"count", "total_ns", "max_ns",
//	                         "first_monotonic_ns", "last_monotonic_ns",
//	                         "latency_log2_ns_histogram": [...]}},
//	    "sched": {"on_cpu_ns", "off_cpu_ns", "run_queue_ns", "switches", "preemptions"},
//	    "cuda": {CALL: {"count", "first_monotonic_ns", "last_monotonic_ns",
//	                    "gap_count", "gap_sum_ns", "gap_min_ns", "gap_max_ns",
//	                    "gap_log2_ns_histogram",
//	                    "wait_count", "wait_sum_ns", "wait_min_ns", "wait_max_ns",
//	                    "wait_log2_ns_histogram"}}}],
//	  "connections": [{"pid", "local": "ip:port", "remote": "ip:port",
//	    "kv_transfer", "tx_bytes", "rx_bytes", "tx_ops", "rx_ops",
//	    "first_monotonic_ns", "last_monotonic_ns",
//	    "established_monotonic_ns", "closed_monotonic_ns",
//	    "bursts": [{"direction": "tx|rx", "start_monotonic_ns",
//	                "end_monotonic_ns", "bytes", "ops", "open"}]}],
//	  "cuda": {"libraries": [{"path", "dev", "inode", "symbols",
//	                          "launch_symbols", "error"}],
//	           "launch_probes_until_monotonic_ns"},
//	  "nvml": {"status": "ok" | "unavailable (<reason>)", "driver_version",
//	           "devices": [{"index", "uuid", "name", "memory_total_bytes"}],
//	           "samples": [{"monotonic_ns", "gpu", "uuid", "utilization_ratio",
//	                        "memory_utilization_ratio", "memory_used_bytes",
//	                        "memory_total_bytes", "power_watts", "energy_joules",
//	                        "sm_clock_hertz", "pcie_tx_bytes_per_second",
//	                        "pcie_rx_bytes_per_second", "nvlink_tx_bytes",
//	                        "nvlink_rx_bytes", "processes": [{"pid",
//	                        "sm_utilization_ratio", "memory_utilization_ratio"}]}]},
//	  "bpf": {"stats_enabled", "programs": [{"name", "runs", "run_time_ns"}],
//	          "ringbuf_dropped_events", "map_full_updates", "events_read"},
//	  "daemon": {"pid", "cpu_seconds", "max_rss_bytes", "uptime_seconds", "capabilities"}
//	}
//
// Syscall classes: futex, poll (poll, select, epoll), ioctl (the GPU
// driver's path), socket (send/recv families), file (read/write families on
// any fd, sockets included: Go and Python often read sockets with read),
// other. A syscall is counted when it returns, so one that never returns
// (exit_group) is not. Latency histograms: slot i counts calls that took
// [2^i, 2^(i+1)) ns; trailing empty slots are trimmed.
//
// Scheduling: on_cpu_ns is time running; off_cpu_ns runs from switch-out to
// switch-in, run-queue wait included; run_queue_ns runs from wakeup (or
// preemption) to switch-in. Time of a thread running at snapshot time is
// counted at its next switch.
//
// Connections are seen from each socket's own side; both ends of a loopback
// connection between targets appear, mirrored. kv_transfer marks a port in
// the KV-transfer set (--kv-ports, default DefaultKVPorts). On those, sends
// and receives separated by no more than --burst-gap form a burst; "open"
// bursts may still grow.
//
// CUDA calls: launch (cuLaunchKernel*, probed only inside the
// --cuda-launches window), graph_launch, stream_synchronize,
// ctx_synchronize (with wait times from a uretprobe), memcpy_async. Gaps are
// between entries of consecutive calls of one kind on one thread.
//
// # Metrics
//
// NewRegistry's collectors export hone_* metrics (base units, _total
// counters, ratios, processes labelled by command name, never by PID):
// syscalls, scheduling, CUDA calls and waits, socket bytes and KV bursts,
// NVML gauges labelled gpu and UUID like dcgm-exporter, per-program BPF run
// counts and times (with --bpf-stats), ring-buffer drops and full-map
// updates.
package daemon
