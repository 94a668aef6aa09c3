// Package daemon is hone's privileged tracer for serving hosts (`hone
// daemon`): it selects target processes, loads and attaches the programs of
// package bpf, reads their maps and ring buffer, samples GPUs through NVML,
// and serves what it measured as Prometheus metrics, a local JSON API and
// pprof profiles. It does not optimize, gate or attribute latency: package
// diagnose joins its snapshots with per-request timelines.
//
// Command (cli.go) is `hone daemon`: it checks the flags, has the pods
// --pod-selector selects watched by a PodSource (cmd/hone's uses package
// deploy/kubernetes; the tracer links no Kubernetes client) and calls Run.
//
// # Targets
//
// Processes are selected by --pid (with their existing descendants),
// --cgroup, or --match-cmdline (default DefaultMatch: every registered
// engine's process pattern, engine.ProcessPattern; today vLLM's API
// server, EngineCore and workers, and `hone sim serve`). Their children become
// targets in the kernel at fork, before they first run; exec events let a
// new matching process be picked up at once. Every target has a root: the
// selected process it descends from (itself if selected).
//
// Exits come from the sched_process_exit tracepoint (a periodic /proc
// check catches any whose event was lost). An exited process stays in the
// target table, its threads listed one by one, for retireAfter (2 s);
// then its measurements are folded out of the kernel maps and the table
// into "exited": one group per root and process name, whose counts, sums
// and histograms add up exactly what its processes did. So totals stay
// exact (in the snapshot and in the counters of /metrics, which never go
// down) while the table holds only the live processes and the last
// seconds' exits. The table is bounded (8192 + 1024 entries): past 1024
// exited entries they are folded at once, and a process that does not fit
// is counted in target_table.overflow_total (hone_target_table_overflows_total)
// while the kernel still measures it; it is folded under root_pid 0. The
// log has one line per scan ("traced N new processes (M exited)"), not one
// per process.
//
// # Probe families
//
// The programs are attached by family (package probes): procs (fork, exec,
// exit), syscalls, sched, sockets and cuda (uprobes on libcuda). A family
// the kernel refuses to load or attach (an older kernel without the socket
// tracepoints refuses the sockets' tp_btf programs at load; one without
// uprobes) costs what it measures and nothing else: the daemon logs a warning naming it and what is lost, carries on
// with the others, and says so in every snapshot ("probes") and in
// hone_probe_family_attached. procs is the daemon's own: without it the
// start fails. `hone preflight --target daemon` attaches each family's
// hooks and says which are available on the kernel.
//
// # Privileges
//
// Loading and attaching needs root, or StartCapabilities: CAP_BPF and
// CAP_PERFMON (CAP_SYS_ADMIN too for --bpf-stats, and alone on kernels
// before 6.6). Once attached, and before serving anything, the daemon
// drops, on every thread (libcap's psx): it keeps only the capabilities
// below in its effective, permitted and bounding sets, empties the
// inheritable and ambient sets, becomes --user (default nobody,
// 65534:65534, supplementary groups cleared), sets no_new_privs, makes
// itself non-dumpable and installs a seccomp filter. The listening socket
// is bound and the --out and --profile files are opened before the drop
// (and written at the end through those descriptors), so a low port or a
// directory only root may write to still work. --keep-capabilities skips
// all of it.
//
// What is kept was established by experiment (TestPrivilegeNeeds, Linux
// 6.18): map reads, updates and deletes, the ring buffer, program
// statistics and closing links need no capability (open descriptors);
// attaching a uprobe_multi link to a libcuda found later needs none (the
// program is loaded); a perf-event uprobe needs CAP_SYS_ADMIN
// (perf_event_open of a uprobe with raw samples; CAP_PERFMON is refused);
// reading /proc/PID/maps of a target run by root or another user, to find
// the libcuda it mapped, needs CAP_PERFMON (mm_access accepts
// perfmon_capable) or CAP_SYS_ADMIN; /proc/PID/cmdline, stat, comm and
// cgroup.procs need nothing. So the daemon keeps CAP_PERFMON alone where
// the kernel has uprobe_multi links (Linux >= 6.6: libcuda probes are
// attached that way), and CAP_SYS_ADMIN alone elsewhere. Kernels whose
// mm_access does not accept CAP_PERFMON would need CAP_SYS_PTRACE to read
// other users' maps; the daemon does not keep it (it could write any
// process's memory), so there libcuda of such targets found after the drop
// is not seen. After the drop /proc/PID/root of another user's process is
// out of reach: a libcuda a target maps from its own mount namespace is
// probed only if the same path in the daemon's view is the same file
// (device and inode from the maps), else reported with an error.
//
// The seccomp filter is a deny list in classic BPF, built with
// golang.org/x/sys/unix (no libseccomp): an allow list would have to
// cover everything the Go runtime, cgo (NVML) and cilium/ebpf may call.
// It answers EPERM to ptrace, process_vm_readv/writev, kexec_load,
// kexec_file_load, init_module, finit_module, delete_module, mount,
// umount2, pivot_root, chroot, the new mount API, the setuid/setgid
// family and setgroups, unshare, setns, clone with namespace flags,
// keyctl, add_key, request_key, userfaultfd, io_uring_*,
// open_by_handle_at, name_to_handle_at, reboot, swapon/swapoff, acct,
// quotactl, syslog, vhangup, clock and time setters, sethostname,
// setdomainname, iopl, ioperm, uselib, and perf_event_open where
// uprobe_multi makes it unneeded; clone3 answers ENOSYS (its flags cannot
// be inspected; libc falls back to clone); syscalls of another ABI (i386,
// x32) answer EPERM. bpf(2) stays: the daemon uses it on its maps and for
// uprobe_multi links, and cannot load programs without CAP_BPF.
//
// # API exposure
//
// On loopback the HTTP API has no authentication. --listen must be a
// loopback address (127.0.0.0/8, ::1, localhost) unless --allow-remote is
// given with --token-file: then every request must carry that bearer token
// (RequireToken; 401 otherwise), and a warning is logged. Command lines in the snapshot have likely secrets replaced by
// [REDACTED] (redactArgs): the value after a flag whose name ends in key,
// token, secret, password or credential (--api-key, --hf-token), NAME=VALUE
// arguments whose name contains KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL,
// sk-..., hf_..., GitHub, AWS, Slack and JWT tokens, bearer tokens,
// passwords in URLs, and key/token/secret/password fields inside JSON
// arguments. --match-cmdline still matches the real command line.
//
// The API's clients are held to the limits of hone's other servers
// (package guard; serveAPI, APILimits): at most --api-max-connections
// served at once (DefaultAPIConnections, fewer where the process's
// descriptors are fewer), the next ones waiting in the kernel's accept
// queue, connections idle between requests or silent for a second since
// they opened closed first to make room (the longest first); headers
// within 5 s, an answer written within 30 s, keep-alive connections closed
// after 60 s idle; and no request body: one announced gets 413 and the
// connection is closed without the rest being read. So local users that
// open connections and stall hold a bounded number of descriptors, and a
// scrape still answers.
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
// GET /v1/snapshot and `hone daemon --once --out FILE` write a Snapshot,
// whose layout package schema states once, field by field
// (schema/snapshot.go: schema.Snapshot, "schema_version" 1, "clock"
// "CLOCK_MONOTONIC"); package diagnose reads the same types. What follows
// says what the daemon puts in it.
//
// Syscall classes: futex, poll (poll, select, epoll), ioctl (the GPU
// driver's path), socket (send/recv families), file (read/write families on
// any fd, sockets included: Go and Python often read sockets with read),
// other. A syscall is counted when it is entered, so one that never returns
// (exit_group) is counted and one in progress at snapshot time is too; it
// is timed when it returns, inside a timing window
// (--syscall-timing-window of every --syscall-timing-period). Latency histograms: slot i counts calls that took
// [2^i, 2^(i+1)) ns; trailing empty slots are trimmed.
//
// Scheduling: on_cpu_ns is time running; off_cpu_ns runs from switch-out to
// switch-in, run-queue wait included; run_queue_ns runs from wakeup (or
// preemption) to switch-in. Time of a thread running at snapshot time is
// counted at its next switch.
//
// Threads lists the live threads and those of processes exited in the last
// retireAfter; earlier ones are in "exited". Closed connections are listed
// one by one (the last 8192); older ones are summed in
// closed_connections_folded.
//
// Connections are seen from each socket's own side; both ends of a loopback
// connection between targets appear, mirrored. kv_transfer marks a port in
// the KV-transfer set (--kv-ports, default DefaultKVPorts). On those, sends
// and receives separated by no more than --burst-gap form a burst; "open"
// bursts may still grow.
//
// CUDA calls: launch (cuLaunchKernel*, probed only inside the
// --cuda-launches window: by default while the daemon runs), graph_launch, stream_synchronize,
// ctx_synchronize, event_synchronize (cuEventSynchronize), memcpy_async
// (cuMemcpy*Async*) and memcpy_sync (the synchronous cuMemcpy*:
// cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, ...). The calls the host waits in (the
// synchronizes and memcpy_sync) have wait times from a uretprobe. Gaps are
// between entries of consecutive calls of one kind on one thread.
//
// Engine steps ("steps", GET /v1/steps): a process's step opens at its
// first kernel or graph launch after its previous step and closes when one
// of those waits returns, the host then holding the step's results; a wait
// with no launch since the last step closes nothing. Kernel launches are
// seen only inside the --cuda-launches window, graph launches always, so
// outside the window a step is seen only when it launches a graph (vLLM's
// CUDA graphs, full or piecewise): an eager step — vLLM's prefill chunks
// above its largest graph size, every step of hone sim serve --cuda-lib
// that computes prompt tokens — is then missed, and the requests it
// prefilled cannot be split from kernel evidence. That is why the window
// is, by default, the daemon's whole run. The latest 65,536 steps of all processes are
// kept (step_table counts the evicted). These are the step boundaries the
// per-request attribution from kernel evidence reads; hone sim serve
// --cuda-lib gives the emulator the same probe points.
//
// HTTP exchanges ("exchanges", GET /v1/exchanges): on the server's end of
// a connection whose local port is in the HTTP set (--http-ports, default
// DefaultHTTPPorts: the engines' API ports), each HTTP/1.1 request and its
// response: the request's first and last receive and bytes, the response's
// first, second and last send, their bytes and count, CLOCK_MONOTONIC like
// the steps. An exchange ends when the next request arrives on the
// connection (keep-alive) or it closes; until then it is listed "open". A
// vLLM API server writes a streamed response's head before the first token,
// so the second send carries the first token; hone sim serve writes the
// head with the first token's chunk. Requests are told apart by the
// request/response turn, so pipelined HTTP/1.1 or HTTP/2 would merge (no
// engine client uses them). The latest 65,536 closed exchanges are kept
// (exchange_table counts the evicted).
//
// # Metrics
//
// NewRegistry's collectors export hone_* metrics (base units, _total
// counters, ratios, processes labelled by command name, never by PID):
// syscalls, scheduling, CUDA calls and waits, socket bytes and KV bursts,
// NVML gauges labelled gpu and UUID like dcgm-exporter, per-program BPF run
// counts and times (with --bpf-stats), ring-buffer drops and full-map
// updates, the target table's size, capacity and overflows, and the
// exited processes folded. Exited processes count under the name they had.
package daemon
