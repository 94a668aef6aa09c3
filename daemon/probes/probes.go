// Package probes names the daemon's probe families: the programs it
// attaches together, the kernel hooks they attach to, whether the daemon
// can run without them, and what its snapshots lack then. The daemon
// attaches by this list and reports each family's state; `hone preflight`
// checks the kernel by it. It holds no eBPF code: package bpf does.
package probes

// Kind is how a family's programs attach.
type Kind string

const (
	RawTracepoint Kind = "raw_tp" // raw tracepoints
	BTFTracepoint Kind = "tp_btf" // BTF-typed tracepoints (kernel BTF)
	Uprobe        Kind = "uprobe" // uprobes on a library's entry points
)

// Family names.
const (
	Procs    = "procs"
	Syscalls = "syscalls"
	Sched    = "sched"
	Sockets  = "sockets"
	CUDA     = "cuda"
)

// Family is a set of programs the daemon attaches together.
type Family struct {
	Name string
	Kind Kind
	// Hooks are the tracepoints the programs attach to; for Uprobe, the
	// library probed.
	Hooks []string
	// Needs says what of the kernel the family needs, for a user whose
	// kernel lacks it.
	Needs string
	// Required families are the daemon's own: it does not start without
	// them. Without any other one it runs, and says what it lacks (Lost).
	Required bool
	// Lost is what snapshots and metrics lack without the family.
	Lost string
}

// All are the families, in the order the daemon attaches them.
var All = []Family{
	{Name: Procs, Kind: BTFTracepoint, Hooks: []string{"sched_process_fork", "sched_process_exec", "sched_process_exit"},
		Needs: "kernel BTF (CONFIG_DEBUG_INFO_BTF) and tp_btf programs (Linux >= 5.5)", Required: true,
		Lost: "targets' children followed from fork and exits seen as they happen"},
	{Name: Syscalls, Kind: RawTracepoint, Hooks: []string{"sys_enter", "sys_exit"},
		Needs: "raw tracepoints (Linux >= 4.17)",
		Lost:  "syscall counts and latencies (threads[].syscalls; hone_syscalls_total, hone_syscall_seconds_total)"},
	{Name: Sched, Kind: BTFTracepoint, Hooks: []string{"sched_switch", "sched_wakeup", "sched_wakeup_new"},
		Needs: "kernel BTF and tp_btf programs (Linux >= 5.5)",
		Lost:  "on-CPU, off-CPU and run-queue time (threads[].sched; hone_sched_*)"},
	{Name: Sockets, Kind: BTFTracepoint, Hooks: []string{"sock_send_length", "sock_recv_length", "inet_sock_set_state"},
		Needs: "the tracepoints sock:sock_send_length and sock:sock_recv_length (Linux >= 5.19) as tp_btf",
		Lost:  "socket traffic, KV-transfer bursts and HTTP exchanges (connections, exchanges; hone_socket_*, hone_kv_transfer_*)"},
	{Name: CUDA, Kind: Uprobe, Hooks: []string{"libcuda.so"},
		Needs: "uprobes: uprobe_multi links (Linux >= 6.6) or the uprobe PMU (CONFIG_UPROBE_EVENTS)",
		Lost:  "CUDA driver calls, host waits and engine steps (threads[].cuda, steps; hone_cuda_*)"},
}

// Lookup returns the family named name.
func Lookup(name string) (Family, bool) {
	for _, f := range All {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}
