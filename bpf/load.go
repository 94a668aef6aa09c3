//go:build linux && (386 || amd64 || arm64)

package bpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// The map and event layouts the daemon reads, named for callers outside
// this package.
type (
	SysKey     = syscallsHoneThreadKey
	SysStats   = syscallsHoneSysStats
	SchedStats = schedHoneSchedStats
	ConnKey    = socketsHoneConnKey
	ConnStats  = socketsHoneConnStats
	Burst      = socketsHoneBurst
	BurstEvent = socketsHoneBurstEvent
	Exchange   = socketsHoneExchange
	// ExchangeEvent is one HTTP request/response exchange on the server's
	// end of a connection whose local port is in the HTTP set.
	ExchangeEvent = socketsHoneExchangeEvent
	ProcEvent     = procsHoneProcEvent
	CUDAKey       = cudaHoneCudaKey
	CUDAStats     = cudaHoneCudaStats
	StepEvent     = cudaHoneStepEvent
)

// Event kinds in the ring buffer (the first uint32 of every record).
const (
	EventFork  = 1
	EventExec  = 2
	EventExit  = 3
	EventBurst = 4
	EventStep  = 5
	// EventExchange carries an ExchangeEvent.
	EventExchange = 6
)

// Port classes (SetPortClass): a port may be in both sets.
const (
	PortKV   = 1 // connections on it are KV transfers (bursts)
	PortHTTP = 2 // a server's API port: its connections' exchanges are recorded
)

// Values of the targets map.
const (
	TargetSelected = 1 // chosen by the daemon
	TargetFollowed = 2 // a child of a target, added at fork
)

// Syscall classes (SysKey.Class), in the order of SyscallClasses.
const (
	SysFutex = iota
	SysPoll
	SysIoctl
	SysSocket
	SysFile
	SysOther
)

// SyscallClasses names the syscall classes by their index.
var SyscallClasses = []string{"futex", "poll", "ioctl", "socket", "file", "other"}

// CUDA call kinds (CUDAKey.Call), in the order of CUDACalls.
const (
	CUDALaunch = iota
	CUDAGraph
	CUDAStreamSync
	CUDACtxSync
	CUDAMemcpy
	CUDAEventSync
	CUDAMemcpySync
)

// CUDACalls names the CUDA call kinds by their index. Names are stable (they
// are metric labels and snapshot keys): new kinds are appended.
var CUDACalls = []string{"launch", "graph_launch", "stream_synchronize", "ctx_synchronize", "memcpy_async",
	"event_synchronize", "memcpy_sync"}

// CUDAWaits says whether the host waits in a call kind: synchronizes and
// synchronous copies, which get a uretprobe for their wait time.
func CUDAWaits(call int) bool {
	switch call {
	case CUDAStreamSync, CUDACtxSync, CUDAEventSync, CUDAMemcpySync:
		return true
	}
	return false
}

// Drop counters (index into the drops map).
const (
	DropRingbuf = 0
	DropMapFull = 1
)

// Direction of a burst.
const (
	DirTX = 0
	DirRX = 1
)

// Options configure the programs before they are loaded.
type Options struct {
	// BurstGap is the silence that ends a burst on a KV-transfer connection.
	BurstGap time.Duration
	// PerfUprobes attaches libcuda probes as perf-event uprobes even where
	// the kernel has uprobe_multi links (Linux >= 6.6). Perf-event uprobes
	// need CAP_SYS_ADMIN at every attach (perf_event_open of a uprobe with
	// raw samples); uprobe_multi links need no capability once the
	// programs are loaded, so a daemon that has dropped its capabilities
	// can still probe a libcuda it finds later.
	PerfUprobes bool
	// SyscallSample times one syscall in SyscallSample of each target
	// thread that holds a slot (a power of two up to MaxSyscallSample; 0
	// or 1: every call) and only counts the others: SysStats.Count stays
	// exact, Timed says how many calls TotalNs, MaxNs and Hist cover.
	SyscallSample uint32
	// EditSpec, when set, is called with each family's spec just before
	// it is loaded. Tests use it to stand for a kernel that refuses a
	// family (MissingHooks in package bpftest renames its hooks).
	EditSpec func(family string, spec *ebpf.CollectionSpec)
}

// Program families: the objects Load loads one by one, by the names the
// daemon reports them under (package daemon/probes).
const (
	FamilyProcs    = "procs"
	FamilySyscalls = "syscalls"
	FamilySched    = "sched"
	FamilySockets  = "sockets"
	FamilyCUDA     = "cuda"
)

// Families are the program families, in the order Load loads them.
var Families = []string{FamilyProcs, FamilySyscalls, FamilySched, FamilySockets, FamilyCUDA}

// Objects are hone's loaded programs and maps. The shared maps (targets,
// target_bits, events, drops, inflight, thread_slots) are created once, by
// the first object, and handed to the others.
type Objects struct {
	selMu sync.Mutex // serialises the daemon's changes to targets and its bits in target_bits
	bits  []byte     // target_bits, mapped shared (hone.h): changed only with atomic or/and

	procs    procsObjects
	syscalls syscallsObjects
	sched    schedObjects
	sockets  socketsObjects
	cuda     cudaObjects

	uprobeMulti bool // the CUDA programs are loaded for uprobe_multi links
	// missing holds the load error of each family the kernel refused;
	// such a family's objects are all nil.
	missing map[string]error

	exitMu   sync.Mutex // serialises TimeSyscalls
	exitLink link.Link  // sys_exit while a timing window is open (Probes.SyscallTimingWindows)
}

// Load loads every program and map into the kernel. Nothing is attached yet.
// The procs family holds the shared maps: if it does not load, Load fails.
// Any other family the kernel refuses (a tp_btf program is checked against
// the kernel's BTF as it loads, so a kernel without its tracepoint refuses
// it then) is left out: LoadError says why, and the rest load as usual.
func Load(opts Options) (_ *Objects, err error) {
	o := &Objects{missing: map[string]error{}}
	defer func() {
		if err != nil {
			o.Close()
		}
	}()
	words := targetWords()
	procs, err := loadProcs()
	if err != nil {
		return nil, fmt.Errorf("load procs spec: %w", err)
	}
	sizeTargetBits(procs, words)
	if opts.EditSpec != nil {
		opts.EditSpec(FamilyProcs, procs)
	}
	if err := procs.LoadAndAssign(&o.procs, nil); err != nil {
		return nil, fmt.Errorf("load procs: %w", verifierDetail(err))
	}
	// The daemon's side of target_bits: mapped once, while it still holds
	// the map's descriptor (no capability is needed to write it later).
	if o.bits, err = unix.Mmap(o.procs.TargetBits.FD(), 0, int(words)*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("map target_bits: %w", err)
	}
	shared := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"targets":      o.procs.Targets,
		"target_bits":  o.procs.TargetBits,
		"events":       o.procs.Events,
		"drops":        o.procs.Drops,
		"inflight":     o.procs.Inflight,
		"thread_slots": o.procs.ThreadSlots,
	}}
	syscalls, err := loadSyscalls()
	if err != nil {
		return nil, fmt.Errorf("load syscalls spec: %w", err)
	}
	sizeTargetBits(syscalls, words)
	if err := CheckSyscallSample(opts.SyscallSample); err != nil {
		return nil, fmt.Errorf("syscall sample: %w", err)
	}
	if opts.SyscallSample > 1 {
		if err := syscalls.Variables["sample_mask"].Set(opts.SyscallSample - 1); err != nil {
			return nil, fmt.Errorf("set sample_mask: %w", err)
		}
	}
	loadFamily(o, FamilySyscalls, syscalls, &o.syscalls, shared, opts)
	sched, err := loadSched()
	if err != nil {
		return nil, fmt.Errorf("load sched spec: %w", err)
	}
	sizeTargetBits(sched, words)
	loadFamily(o, FamilySched, sched, &o.sched, shared, opts)
	spec, err := loadSockets()
	if err != nil {
		return nil, fmt.Errorf("load sockets spec: %w", err)
	}
	gap := opts.BurstGap
	if gap <= 0 {
		gap = 100 * time.Millisecond
	}
	if err := spec.Variables["burst_gap_ns"].Set(uint64(gap.Nanoseconds())); err != nil {
		return nil, fmt.Errorf("set burst_gap_ns: %w", err)
	}
	sizeTargetBits(spec, words)
	loadFamily(o, FamilySockets, spec, &o.sockets, shared, opts)
	cuda, err := loadCuda()
	if err != nil {
		return nil, fmt.Errorf("load cuda spec: %w", err)
	}
	// The feature probe loads a program: it must run now, while the caller
	// still holds CAP_BPF (cilium/ebpf caches the answer).
	if !opts.PerfUprobes && features.HaveBPFLinkUprobeMulti() == nil {
		for _, p := range cuda.Programs {
			p.AttachType = ebpf.AttachTraceUprobeMulti
		}
		o.uprobeMulti = true
	}
	sizeTargetBits(cuda, words)
	loadFamily(o, FamilyCUDA, cuda, &o.cuda, shared, opts)
	return o, nil
}

// loadFamily loads an optional family's objects into to, or records why
// the kernel refused them and leaves to empty (LoadAndAssign has closed
// what it assigned before failing).
func loadFamily[T any](o *Objects, family string, spec *ebpf.CollectionSpec, to *T, shared *ebpf.CollectionOptions, opts Options) {
	if opts.EditSpec != nil {
		opts.EditSpec(family, spec)
	}
	if err := spec.LoadAndAssign(to, shared); err != nil {
		var zero T
		*to = zero
		o.missing[family] = fmt.Errorf("load %s: %w", family, verifierDetail(err))
	}
}

// LoadError is why the kernel refused a family's programs, or nil if they
// loaded. A family that did not load has no programs or maps: its map
// accessors return nil and Attach, AttachCUDA, TimeSyscalls, SetPortClass
// and ReadSyscalls return this error.
func (o *Objects) LoadError(family string) error { return o.missing[family] }

// targetWords is how many 64-bit words the target prefilter's bitmap
// (hone.h: target_bits) needs for this host's process ids: pid_max/64
// rounded up, at most PID_MAX_LIMIT's (4,194,304/64: 512 KiB). A process
// id beyond it, should pid_max be raised later, is always passed to the
// targets map.
func targetWords() uint32 {
	const most = 4194304 / 64
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return most
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || n == 0 {
		return most
	}
	return uint32(min((n+63)/64, most))
}

// sizeTargetBits sizes an object's prefilter bitmap (every object
// declares it; one is shared).
func sizeTargetBits(spec *ebpf.CollectionSpec, words uint32) {
	if m := spec.Maps["target_bits"]; m != nil {
		m.MaxEntries = words
	}
}

func verifierDetail(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%+v", ve)
	}
	return err
}

// UprobeMulti says whether AttachCUDA attaches uprobe_multi links, which
// need no capability after loading, rather than perf-event uprobes, which
// need CAP_SYS_ADMIN at each attach.
func (o *Objects) UprobeMulti() bool { return o.uprobeMulti }

// Close releases every program and map (links are closed by their owners).
func (o *Objects) Close() error {
	if o.bits != nil {
		_ = unix.Munmap(o.bits)
		o.bits = nil
	}
	var exit error
	o.exitMu.Lock()
	if o.exitLink != nil {
		exit = o.exitLink.Close()
		o.exitLink = nil
	}
	o.exitMu.Unlock()
	return errors.Join(exit, o.cuda.Close(), o.sockets.Close(), o.sched.Close(), o.syscalls.Close(), o.procs.Close())
}

// TimeSyscalls opens (on) or closes a syscall timing window, for programs
// attached with Probes.SyscallTimingWindows: while one is open sys_exit is
// attached and target threads' calls are timed (one in SyscallSample);
// while none is, sys_enter only counts them and reads no clock, and no
// thread on the host runs sys_exit, so a process that is not a target
// pays what one sys_enter program's target check costs. Counts are exact
// either way; SysStats.Timed says how many calls were timed. A call
// entered before a window opened is not timed. Opening an open window or
// closing a closed one does nothing.
func (o *Objects) TimeSyscalls(on bool) error {
	o.exitMu.Lock()
	defer o.exitMu.Unlock()
	if on == (o.exitLink != nil) {
		return nil
	}
	if err := o.missing[FamilySyscalls]; err != nil {
		return err
	}
	if !on {
		// Detach first: a sys_exit that still runs sees the entries of
		// calls entered in the window and times them.
		err := o.exitLink.Close()
		o.exitLink = nil
		if err != nil {
			return fmt.Errorf("detach raw_tp/sys_exit: %w", err)
		}
		return o.syscalls.TimingOn.Set(uint32(0))
	}
	// Mark entries timed first: a call entered before sys_exit is
	// attached returns to it with its entry time, which is right.
	if err := o.syscalls.TimingOn.Set(uint32(1)); err != nil {
		return fmt.Errorf("set timing_on: %w", err)
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_exit", Program: o.syscalls.SysExit})
	if err != nil {
		_ = o.syscalls.TimingOn.Set(uint32(0))
		return fmt.Errorf("attach raw_tp/sys_exit: %w", err)
	}
	o.exitLink = l
	return nil
}

// Maps the daemon reads; nil for a family that did not load (LoadError).
func (o *Objects) Targets() *ebpf.Map    { return o.procs.Targets }
func (o *Objects) Events() *ebpf.Map     { return o.procs.Events }
func (o *Objects) Drops() *ebpf.Map      { return o.procs.Drops }
func (o *Objects) SysStats() *ebpf.Map   { return o.syscalls.SysStats }
func (o *Objects) SchedStats() *ebpf.Map { return o.sched.SchedStats }
func (o *Objects) Conns() *ebpf.Map      { return o.sockets.Conns }
func (o *Objects) PortClass() *ebpf.Map  { return o.sockets.PortClass }
func (o *Objects) CUDAStats() *ebpf.Map  { return o.cuda.CudaStats }
func (o *Objects) CUDAStep() *ebpf.Map   { return o.cuda.CudaStep }

// AddTarget makes a process (by its pid, the kernel's tgid) a target.
func (o *Objects) AddTarget(pid uint32) error {
	o.selMu.Lock()
	defer o.selMu.Unlock()
	v := uint32(TargetSelected)
	if err := o.procs.Targets.Update(pid, v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("add target %d: %w", pid, err)
	}
	o.setBit(pid, true)
	return nil
}

// RemoveTarget stops tracing a process. (A process's exit needs no call:
// the kernel takes it out of targets and clears its bit.)
func (o *Objects) RemoveTarget(pid uint32) error {
	o.selMu.Lock()
	defer o.selMu.Unlock()
	err := o.procs.Targets.Delete(pid)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("remove target %d: %w", pid, err)
	}
	o.setBit(pid, false)
	return nil
}

// setBit sets or clears pid's bit in target_bits, with an atomic or/and
// on its word in the shared mapping, as the programs change theirs. A pid
// beyond the bitmap needs no bit (the check asks targets).
func (o *Objects) setBit(pid uint32, on bool) {
	w, bit := int(pid/64), uint64(1)<<(pid%64)
	if (w+1)*8 > len(o.bits) {
		return
	}
	word := (*uint64)(unsafe.Pointer(&o.bits[w*8]))
	if on {
		atomic.OrUint64(word, bit)
	} else {
		atomic.AndUint64(word, ^bit)
	}
}

// SetPortClass sets the classes of a port (PortKV | PortHTTP; 0 removes
// it from both sets).
func (o *Objects) SetPortClass(port uint16, class uint8) error {
	if err := o.missing[FamilySockets]; err != nil {
		return err
	}
	return o.sockets.PortClass.Update(uint32(port), class, ebpf.UpdateAny)
}

// Programs returns every loaded program by name, for run-time statistics.
func (o *Objects) Programs() map[string]*ebpf.Program {
	all := map[string]*ebpf.Program{
		"sys_enter":        o.syscalls.SysEnter,
		"sys_exit":         o.syscalls.SysExit,
		"on_fork":          o.procs.OnFork,
		"on_exec":          o.procs.OnExec,
		"on_exit":          o.procs.OnExit,
		"on_switch":        o.sched.OnSwitch,
		"on_wakeup":        o.sched.OnWakeup,
		"on_wakeup_new":    o.sched.OnWakeupNew,
		"on_send":          o.sockets.OnSend,
		"on_recv":          o.sockets.OnRecv,
		"on_state":         o.sockets.OnState,
		"cuda_launch":      o.cuda.CudaLaunch,
		"cuda_graph":       o.cuda.CudaGraph,
		"cuda_stream_sync": o.cuda.CudaStreamSync,
		"cuda_ctx_sync":    o.cuda.CudaCtxSync,
		"cuda_memcpy":      o.cuda.CudaMemcpy,
		"cuda_event_sync":  o.cuda.CudaEventSync,
		"cuda_memcpy_sync": o.cuda.CudaMemcpySync,
		"cuda_sync_return": o.cuda.CudaSyncReturn,
	}
	for name, p := range all {
		if p == nil {
			delete(all, name) // its family did not load
		}
	}
	return all
}

// Links are attached programs; Close detaches them.
type Links []link.Link

// Close detaches every link.
func (ls Links) Close() error {
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// Probe sets for Attach.
type Probes struct {
	Syscalls bool // raw_syscalls sys_enter/sys_exit
	// SyscallTimingWindows attaches sys_exit, and with it the timing of
	// syscalls, only inside the windows Objects.TimeSyscalls opens (none
	// is open at first): sys_enter counts every call either way.
	SyscallTimingWindows bool
	Procs                bool // sched_process_fork/exec/exit (needed to follow children)
	Sched                bool // sched_switch, sched_wakeup(_new)
	Sockets              bool // sock_send_length/sock_recv_length, inet_sock_set_state
}

// Attach attaches the chosen tracepoint programs. None of them needs
// tracefs or kprobes: raw tracepoints and BTF tracepoints only. A chosen
// family that did not load is not attached: Attach returns its load error
// (LoadError) and attaches nothing.
func (o *Objects) Attach(p Probes) (_ Links, err error) {
	for _, f := range []struct {
		on     bool
		family string
	}{{p.Procs, FamilyProcs}, {p.Syscalls, FamilySyscalls}, {p.Sched, FamilySched}, {p.Sockets, FamilySockets}} {
		if err := o.missing[f.family]; f.on && err != nil {
			return nil, err
		}
	}
	var ls Links
	defer func() {
		if err != nil {
			ls.Close()
		}
	}()
	raw := func(name string, prog *ebpf.Program) error {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
		if err != nil {
			return fmt.Errorf("attach raw_tp/%s: %w", name, err)
		}
		ls = append(ls, l)
		return nil
	}
	btf := func(name string, prog *ebpf.Program) error {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return fmt.Errorf("attach tp_btf/%s: %w", name, err)
		}
		ls = append(ls, l)
		return nil
	}
	if p.Procs {
		for _, a := range []struct {
			n string
			p *ebpf.Program
		}{{"sched_process_fork", o.procs.OnFork}, {"sched_process_exec", o.procs.OnExec}, {"sched_process_exit", o.procs.OnExit}} {
			if err := btf(a.n, a.p); err != nil {
				return nil, err
			}
		}
	}
	if p.Syscalls {
		if err := raw("sys_enter", o.syscalls.SysEnter); err != nil {
			return nil, err
		}
		on := uint32(1)
		if p.SyscallTimingWindows {
			on = 0 // until TimeSyscalls opens a window
		}
		if err := o.syscalls.TimingOn.Set(on); err != nil {
			return nil, fmt.Errorf("set timing_on: %w", err)
		}
		if !p.SyscallTimingWindows {
			if err := raw("sys_exit", o.syscalls.SysExit); err != nil {
				return nil, err
			}
		}
	}
	if p.Sched {
		for _, a := range []struct {
			n string
			p *ebpf.Program
		}{{"sched_switch", o.sched.OnSwitch}, {"sched_wakeup", o.sched.OnWakeup}, {"sched_wakeup_new", o.sched.OnWakeupNew}} {
			if err := btf(a.n, a.p); err != nil {
				return nil, err
			}
		}
	}
	if p.Sockets {
		for _, a := range []struct {
			n string
			p *ebpf.Program
		}{{"sock_send_length", o.sockets.OnSend}, {"sock_recv_length", o.sockets.OnRecv}, {"inet_sock_set_state", o.sockets.OnState}} {
			if err := btf(a.n, a.p); err != nil {
				return nil, err
			}
		}
	}
	return ls, nil
}

// cudaSymbols matches the libcuda entry points hone probes, by call kind.
// The synchronous copies are the cuMemcpy* entry points without Async in
// their name (cuMemcpy, cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, cuMemcpy2D_v2,
// cuMemcpyPeer, ... and their _ptds forms): the host waits in them.
var cudaSymbols = []struct {
	call int
	re   *regexp.Regexp
}{
	{CUDALaunch, regexp.MustCompile(`^cuLaunchKernel(Ex)?(_ptsz|_ptds)?$`)},
	{CUDAGraph, regexp.MustCompile(`^cuGraphLaunch(_ptsz|_ptds)?$`)},
	{CUDAStreamSync, regexp.MustCompile(`^cuStreamSynchronize(_ptsz|_ptds)?$`)},
	{CUDACtxSync, regexp.MustCompile(`^cuCtxSynchronize(_v2)?$`)},
	{CUDAMemcpy, regexp.MustCompile(`^cuMemcpy[A-Za-z0-9]*Async(_v2)?(_ptsz|_ptds)?$`)},
	{CUDAEventSync, regexp.MustCompile(`^cuEventSynchronize(_ptsz|_ptds)?$`)},
	{CUDAMemcpySync, regexp.MustCompile(`^cuMemcpy(Peer|HtoD|DtoH|DtoD|DtoA|AtoD|HtoA|AtoH|AtoA|2D|2DUnaligned|3D|3DPeer)?(_v2)?(_ptsz|_ptds)?$`)},
}

// CUDASymbols lists, by call kind, the probed entry points a library
// exports: one name per address, so aliases are not counted twice.
func CUDASymbols(path string) (map[int][]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("%s: dynamic symbols: %w", path, err)
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].Name < syms[j].Name })
	seen := map[uint64]bool{}
	out := map[int][]string{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Section == elf.SHN_UNDEF {
			continue
		}
		if call, ok := cudaCall(s.Name); ok && !seen[s.Value] {
			seen[s.Value] = true
			out[call] = append(out[call], s.Name)
		}
	}
	return out, nil
}

// cudaCall is the call kind of a probed libcuda entry point, by name.
func cudaCall(name string) (int, bool) {
	for _, c := range cudaSymbols {
		if c.re.MatchString(name) {
			return c.call, true
		}
	}
	return 0, false
}

// AttachCUDA puts uprobes on the given call kinds' entry points in one
// libcuda file (all processes mapping it hit them; the programs keep only
// targets). Calls the host waits in (CUDAWaits) get a uretprobe too, for
// their wait time. It returns the links and the symbols probed.
func (o *Objects) AttachCUDA(path string, calls []int) (_ Links, probed []string, err error) {
	if err := o.missing[FamilyCUDA]; err != nil {
		return nil, nil, err
	}
	syms, err := CUDASymbols(path)
	if err != nil {
		return nil, nil, err
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	var ls Links
	defer func() {
		if err != nil {
			ls.Close()
		}
	}()
	progs := map[int]*ebpf.Program{
		CUDALaunch: o.cuda.CudaLaunch, CUDAGraph: o.cuda.CudaGraph,
		CUDAStreamSync: o.cuda.CudaStreamSync, CUDACtxSync: o.cuda.CudaCtxSync,
		CUDAMemcpy: o.cuda.CudaMemcpy, CUDAEventSync: o.cuda.CudaEventSync,
		CUDAMemcpySync: o.cuda.CudaMemcpySync,
	}
	for _, call := range calls {
		if o.uprobeMulti {
			if len(syms[call]) == 0 {
				continue
			}
			// One link per call kind covers all its entry points.
			l, err := ex.UprobeMulti(syms[call], progs[call], nil)
			if err != nil {
				return nil, nil, fmt.Errorf("uprobe_multi %s:%v: %w", path, syms[call], err)
			}
			ls = append(ls, l)
			if CUDAWaits(call) {
				l, err := ex.UretprobeMulti(syms[call], o.cuda.CudaSyncReturn, nil)
				if err != nil {
					return nil, nil, fmt.Errorf("uretprobe_multi %s:%v: %w", path, syms[call], err)
				}
				ls = append(ls, l)
			}
			probed = append(probed, syms[call]...)
			continue
		}
		for _, sym := range syms[call] {
			l, err := ex.Uprobe(sym, progs[call], nil)
			if err != nil {
				return nil, nil, fmt.Errorf("uprobe %s:%s: %w", path, sym, err)
			}
			ls = append(ls, l)
			if CUDAWaits(call) {
				l, err := ex.Uretprobe(sym, o.cuda.CudaSyncReturn, nil)
				if err != nil {
					return nil, nil, fmt.Errorf("uretprobe %s:%s: %w", path, sym, err)
				}
				ls = append(ls, l)
			}
			probed = append(probed, sym)
		}
	}
	return ls, probed, nil
}
