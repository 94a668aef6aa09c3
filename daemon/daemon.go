//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/daemon/probes"
)

// Daemon traces its target processes. Start it, read Snapshot at any time,
// Close it to detach everything.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	self    int
	started time.Time
	startNS uint64

	objs   *bpf.Objects
	links  bpf.Links
	rd     *ringbuf.Reader
	stats  io.Closer
	nvml   *NVMLSampler
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// foldMu is held for writing while measurements move from the kernel
	// maps into exited (retire), and for reading while a snapshot reads
	// both, so that a snapshot counts each measurement exactly once.
	foldMu sync.RWMutex
	// scanMu keeps a scan (which may attach probes) and the privilege
	// drop apart: an attach must not see the capability sets change.
	scanMu sync.Mutex
	// foldNow asks the loop to fold exited processes before their time:
	// the table holds too many of them.
	foldNow chan struct{}

	mu            sync.Mutex
	targets       map[int]*Target // live targets and those exited < retireAfter ago
	exitedPending int             // entries of targets that have exited
	orphanExits   map[int]orphanExit
	pidsDone      map[int]bool // --pid targets that exited
	exited        map[exitedKey]*ExitedGroup
	table         TargetTable // Overflow and ExitedProcesses
	maxTargets    int
	logNew        []string // "pid (how)" of targets added since the last log line, the first few
	logNewCount   int
	logExited     int
	logAddErrs    int
	comms         map[int]string // tid -> comm, remembered for threads that exit
	bursts        map[bpf.ConnKey][]Burst
	steps         kept[Step]     // the latest maxSteps, oldest first
	exchanges     kept[Exchange] // the latest maxExchanges closed, oldest first
	cuda          map[[2]uint64]*cudaLib
	cudaSkipped   map[[2]uint64]bool // libcuda files beyond maxCUDALibraries (up to 4096)
	probes        []ProbeStatus      // per family (package probes), set by Start
	launchUntil   uint64
	eventsRead    uint64
	retiredConns  []Connection
	closedFolded  ConnectionTotals
	retires       int
	suspects      map[int]*Target // live entries found gone at the last check for lost exits
	lostSuspects  map[int]bool    // unknown pids in the maps found gone at the last check
	caps          string
}

// orphanExit is the exit of a traced process that is not in the table
// (it overflowed, or its fork event was lost).
type orphanExit struct {
	ts   uint64
	comm string
}

// defaultMaxTargets bounds the target table: the kernel's targets map
// (8192 live processes) and room for exited ones awaiting their fold.
const defaultMaxTargets = 8192 + maxExitedDetail

// maxExitedDetail is how many exited processes the table keeps, one by
// one, before folding them early, ahead of retireAfter.
const maxExitedDetail = 1024

// logNewMax is how many new targets a log line names.
const logNewMax = 8

type cudaLib struct {
	info        CUDALibrary
	path        string
	links       bpf.Links
	launchLinks bpf.Links
}

// checkTimingWindows checks --syscall-timing-window and
// --syscall-timing-period: with a period, a window from 1 ms to less than
// the period.
func checkTimingWindows(window, period time.Duration) error {
	switch {
	case period < 0:
		return fmt.Errorf("--syscall-timing-period: want 0 (always time) or a positive duration, got %v", period)
	case period == 0:
		return nil
	case window < time.Millisecond || window >= period:
		return fmt.Errorf("--syscall-timing-window: want at least 1ms and less than --syscall-timing-period (%v), got %v", period, window)
	}
	return nil
}

// New checks the configuration; Start does the work.
func New(cfg Config, log *slog.Logger) (*Daemon, error) {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for _, p := range cfg.PIDs {
		if p <= 0 {
			return nil, fmt.Errorf("--pid %d: want a positive process id", p)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err != nil {
			return nil, fmt.Errorf("--pid %d: no such process", p)
		}
	}
	for _, c := range cfg.Cgroups {
		if _, err := cgroupPIDs(c); err != nil {
			return nil, fmt.Errorf("--cgroup %s: %w", c, err)
		}
	}
	if err := checkTimingWindows(cfg.SyscallTimingWindow, cfg.SyscallTimingPeriod); err != nil {
		return nil, err
	}
	return &Daemon{
		cfg:         cfg,
		log:         log,
		self:        os.Getpid(),
		foldNow:     make(chan struct{}, 1),
		targets:     map[int]*Target{},
		orphanExits: map[int]orphanExit{},
		pidsDone:    map[int]bool{},
		exited:      map[exitedKey]*ExitedGroup{},
		maxTargets:  defaultMaxTargets,
		comms:       map[int]string{},
		bursts:      map[bpf.ConnKey][]Burst{},
		steps:       kept[Step]{table: KeptTable{MaxKept: maxSteps}},
		exchanges:   kept[Exchange]{table: KeptTable{MaxKept: maxExchanges}},
		cuda:        map[[2]uint64]*cudaLib{},
		cudaSkipped: map[[2]uint64]bool{},
	}, nil
}

// Start loads and attaches the programs, selects the first targets, probes
// their libcuda and starts the background readers. It returns once
// everything that exists now is traced.
func (d *Daemon) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	d.started = time.Now()
	d.startNS = monotonicNow()
	if d.cfg.BPFStats {
		if d.stats, err = ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err != nil {
			return fmt.Errorf("enable BPF run-time statistics: %w", err)
		}
	}
	if d.objs, err = bpf.Load(bpf.Options{BurstGap: d.cfg.BurstGap, PerfUprobes: d.cfg.perfUprobes, SyscallSample: d.cfg.SyscallSample,
		EditSpec: d.cfg.editSpec}); err != nil {
		return err
	}
	class := map[uint16]uint8{}
	for _, p := range d.cfg.KVPorts {
		class[p] |= bpf.PortKV
	}
	for _, p := range d.cfg.HTTPPorts {
		class[p] |= bpf.PortHTTP
	}
	if !d.loaded(probes.Sockets) {
		class = nil // no socket programs to classify ports for: attachProbes reports the family
	}
	for p, c := range class {
		if err := d.objs.SetPortClass(p, c); err != nil {
			return fmt.Errorf("port %d: %w", p, err)
		}
	}
	if d.rd, err = ringbuf.NewReader(d.objs.Events()); err != nil {
		return fmt.Errorf("ring buffer reader: %w", err)
	}
	windows := d.cfg.SyscallTimingPeriod > 0
	if err := d.attachProbes(windows); err != nil {
		return err
	}
	if windows && d.attached(probes.Syscalls) {
		if err := d.objs.TimeSyscalls(true); err != nil {
			return err
		}
	}
	if d.cfg.CUDALaunches > 0 {
		d.launchUntil = d.startNS + uint64(d.cfg.CUDALaunches.Nanoseconds())
	}
	ctx, d.cancel = context.WithCancel(ctx)
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.readEvents() }()
	d.scan(true)
	if d.cfg.NVMLPeriod > 0 {
		d.nvml = OpenNVML(d.cfg.NVML)
		d.nvml.Sample()
		d.log.Info("nvml: " + d.nvml.Status())
	} else {
		d.nvml = disabledNVML("sampling off")
	}
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.loop(ctx) }()
	return nil
}

// Close detaches every probe and frees the kernel objects.
func (d *Daemon) Close() error {
	if d.cancel != nil {
		d.cancel()
	}
	var errs []error
	if d.rd != nil {
		errs = append(errs, d.rd.Close())
	}
	d.wg.Wait()
	d.mu.Lock()
	for _, l := range d.cuda {
		errs = append(errs, l.links.Close(), l.launchLinks.Close())
	}
	d.mu.Unlock()
	errs = append(errs, d.links.Close())
	if d.objs != nil {
		errs = append(errs, d.objs.Close())
	}
	if d.stats != nil {
		errs = append(errs, d.stats.Close())
	}
	if d.nvml != nil {
		d.nvml.Close()
	}
	return errors.Join(errs...)
}

func (d *Daemon) loop(ctx context.Context) {
	scan := time.NewTicker(d.cfg.ScanPeriod)
	defer scan.Stop()
	var sample <-chan time.Time
	if d.cfg.NVMLPeriod > 0 && d.nvml.Available() {
		t := time.NewTicker(d.cfg.NVMLPeriod)
		defer t.Stop()
		sample = t.C
	}
	// Syscall timing windows: the first opened at Start; each closes
	// after SyscallTimingWindow and the next opens SyscallTimingPeriod
	// after the last one opened (Objects.Close detaches an open one).
	var window <-chan time.Time
	var toggle func()
	timing := true
	if d.cfg.SyscallTimingPeriod > 0 && d.attached(probes.Syscalls) {
		t := time.NewTimer(d.cfg.SyscallTimingWindow)
		defer t.Stop()
		window = t.C
		toggle = func() {
			timing = !timing
			if err := d.objs.TimeSyscalls(timing); err != nil {
				d.log.Warn("syscall timing window", "open", timing, "err", err)
			}
			if timing {
				t.Reset(d.cfg.SyscallTimingWindow)
			} else {
				t.Reset(d.cfg.SyscallTimingPeriod - d.cfg.SyscallTimingWindow)
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-window:
			toggle()
		case <-scan.C:
			d.scan(false)
		case <-d.foldNow:
			d.retire(true)
		case <-sample:
			d.nvml.Sample()
		}
	}
}

// scan selects new targets, probes newly mapped libcuda files, ends the
// launch-probe window and retires the measurements of exited processes.
// The descendants of --pid targets are looked up on the first scan only:
// children forked later become targets in the kernel, at fork.
func (d *Daemon) scan(first bool) {
	d.scanMu.Lock()
	defer d.scanMu.Unlock()
	type found struct {
		pid      int
		how, pod string
	}
	var pids []found
	add := func(p int, how string) { pids = append(pids, found{pid: p, how: how}) }
	d.mu.Lock()
	for _, p := range d.cfg.PIDs {
		if !d.pidsDone[p] { // an exited --pid is not traced again under a reused pid
			add(p, "pid")
		}
	}
	d.mu.Unlock()
	if len(d.cfg.PIDs) > 0 && first {
		for _, p := range descendants(d.cfg.PIDs) {
			add(p, "descendant")
		}
	}
	for _, c := range d.cfg.Cgroups {
		ps, err := cgroupPIDs(c)
		if err != nil {
			d.log.Warn("cgroup", "path", c, "err", err)
		}
		for _, p := range ps {
			add(p, "cgroup")
		}
	}
	var pods map[string]string
	if d.cfg.Pods != nil {
		pods = d.cfg.Pods.Pods()
	}
	if d.cfg.Match != nil || len(pods) > 0 {
		for _, p := range allPIDs() {
			if len(pods) > 0 {
				if uid := podOfCgroup(procCgroup(p), pods); uid != "" {
					pids = append(pids, found{pid: p, how: "pod", pod: pods[uid]})
					continue
				}
			}
			if d.cfg.Match != nil {
				if cl := procCmdline(p); cl != "" && d.cfg.Match.MatchString(cl) {
					add(p, "cmdline")
				}
			}
		}
	}
	for _, p := range pids {
		d.addTarget(p.pid, p.how, p.pod)
	}
	d.scanCUDA()
	d.retire(false)
	d.logTargets()
}

// addTarget makes a process the daemon selected a target (a child found
// as a descendant joins its parent's root).
func (d *Daemon) addTarget(pid int, how, pod string) {
	if pid == d.self {
		return
	}
	d.mu.Lock()
	if t, ok := d.targets[pid]; ok && t.ExitMonotonicNS == 0 {
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	if !procAlive(pid) {
		return // gone already, or a zombie: its exit has passed
	}
	ppid := procPPID(pid)
	t := &Target{PID: pid, PPID: ppid, RootPID: pid, How: how, Pod: pod, AddedMonotonicNS: monotonicNow(),
		Comm: procComm(pid, pid), Cmdline: procCmdlineRedacted(pid)}
	if how == "pid" {
		t.PPID = 0
	}
	d.mu.Lock()
	if how == "descendant" {
		if p := d.targets[ppid]; p != nil {
			t.RootPID = p.RootPID
		}
	}
	d.insertLocked(t)
	d.mu.Unlock()
	if err := d.objs.AddTarget(uint32(pid)); err != nil {
		d.mu.Lock()
		d.logAddErrs++
		d.mu.Unlock()
		return
	}
	// A process that exited while it was being added left no exit event
	// to clear it from the kernel's map: its pid, once reused, would make
	// an unrelated process a target. Take it out again.
	if !procAlive(pid) {
		_ = d.objs.RemoveTarget(uint32(pid))
		d.mu.Lock()
		if t.ExitMonotonicNS == 0 && d.targets[pid] == t {
			t.ExitMonotonicNS = monotonicNow()
			t.exitUnreported = true
			d.exitedPending++
		}
		d.mu.Unlock()
	}
}

// insertLocked puts t in the table, or counts an overflow when the table
// is full even after folding exited entries. The caller holds d.mu.
func (d *Daemon) insertLocked(t *Target) {
	if old, ok := d.targets[t.PID]; ok && old.ExitMonotonicNS != 0 {
		// A reused pid before the old process was folded: the kernel
		// keys measurements by pid and tid, so the old ones add up with
		// the new process's and are folded with them; count the process.
		d.exitedPending--
		d.groupLocked(old.RootPID, old.Comm, "").Processes++
		d.table.ExitedProcesses++
	} else if !ok && len(d.targets) >= d.maxTargets {
		d.table.Overflow++
		d.askFold()
		return
	}
	d.targets[t.PID] = t
	d.logNewCount++
	if len(d.logNew) < logNewMax {
		d.logNew = append(d.logNew, fmt.Sprintf("%d (%s)", t.PID, t.How))
	}
}

// askFold asks the loop to fold exited processes now.
func (d *Daemon) askFold() {
	select {
	case d.foldNow <- struct{}{}:
	default:
	}
}

// logTargets writes one line for the targets added and exited since the
// last one, instead of a line per process.
func (d *Daemon) logTargets() {
	d.mu.Lock()
	n, x, errs, names := d.logNewCount, d.logExited, d.logAddErrs, d.logNew
	d.logNewCount, d.logExited, d.logAddErrs, d.logNew = 0, 0, 0, nil
	live := len(d.targets) - d.exitedPending
	overflow := d.table.Overflow
	d.mu.Unlock()
	if n == 0 && x == 0 && errs == 0 {
		return
	}
	attrs := []any{"live", live}
	if len(names) > 0 {
		more := ""
		if n > len(names) {
			more = fmt.Sprintf(" and %d more", n-len(names))
		}
		attrs = append(attrs, "new", strings.Join(names, ", ")+more)
	}
	if overflow > 0 {
		attrs = append(attrs, "table_overflow_total", overflow)
	}
	if errs > 0 {
		attrs = append(attrs, "kernel_map_full", errs)
	}
	d.log.Info(fmt.Sprintf("traced %d new processes (%d exited)", n, x), attrs...)
}

func (d *Daemon) readEvents() {
	var rec ringbuf.Record
	for {
		if err := d.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			d.log.Warn("ring buffer", "err", err)
			continue
		}
		d.handleEvent(rec.RawSample)
	}
}

func (d *Daemon) handleEvent(raw []byte) {
	if len(raw) < 4 {
		return
	}
	d.mu.Lock()
	d.eventsRead++
	d.mu.Unlock()
	switch binary.LittleEndian.Uint32(raw) {
	case bpf.EventFork, bpf.EventExec, bpf.EventExit:
		var e bpf.ProcEvent
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &e); err != nil {
			return
		}
		d.procEvent(&e)
	case bpf.EventBurst:
		var e bpf.BurstEvent
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &e); err != nil {
			return
		}
		d.mu.Lock()
		bs := append(d.bursts[e.Conn], Burst{Direction: dirName(e.Dir), StartMonotonicNS: e.StartNs,
			EndMonotonicNS: e.EndNs, Bytes: e.Bytes, Ops: e.Ops})
		if len(bs) > 1024 { // keep the latest per connection
			bs = bs[len(bs)-1024:]
		}
		d.bursts[e.Conn] = bs
		d.mu.Unlock()
	case bpf.EventStep:
		var e bpf.StepEvent
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &e); err != nil {
			return
		}
		call := ""
		if int(e.Call) < len(bpf.CUDACalls) {
			call = bpf.CUDACalls[e.Call]
		}
		d.mu.Lock()
		d.steps.add(Step{PID: int(e.Tgid), TID: int(e.Tid), Call: call, StartMonotonicNS: e.StartNs,
			SyncMonotonicNS: e.SyncNs, EndMonotonicNS: e.EndNs, GraphLaunches: e.Graphs, Launches: e.Launches})
		d.mu.Unlock()
	case bpf.EventExchange:
		var e bpf.ExchangeEvent
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &e); err != nil {
			return
		}
		x := exchangeOf(int(e.Tgid), e.Conn, e.Ex, false)
		d.mu.Lock()
		d.exchanges.add(x)
		d.mu.Unlock()
	}
}

// maxSteps bounds the steps listed (about 100 bytes each): at 100 steps a
// second per GPU, minutes of an 8-GPU host.
const maxSteps = 65536

// maxExchanges bounds the HTTP exchanges listed (about 250 bytes each):
// at 100 requests a second, ten minutes.
const maxExchanges = 65536

// kept holds the latest items of an unbounded stream, oldest first: when
// full it drops the oldest quarter (amortized: no copy per item). The
// caller holds d.mu.
type kept[T any] struct {
	items []T
	table KeptTable
}

func (k *kept[T]) add(v T) {
	if len(k.items) >= k.table.MaxKept {
		n := max(1, len(k.items)/4)
		k.items = append(k.items[:0], k.items[n:]...)
		k.table.Evicted += uint64(n)
	}
	k.items = append(k.items, v)
	k.table.Total++
}

// exchangeOf converts an exchange of the server's end of connection k
// (pid's) to its snapshot form.
func exchangeOf(pid int, k bpf.ConnKey, x bpf.Exchange, open bool) Exchange {
	return Exchange{PID: pid, Local: addrPort(k.Family, k.Laddr, k.Lport), Remote: addrPort(k.Family, k.Raddr, k.Rport),
		RequestStartMonotonicNS: x.RxStartNs, RequestEndMonotonicNS: x.RxEndNs, RequestBytes: x.RxBytes,
		RequestReceives: x.RxOps, FirstSendMonotonicNS: x.TxFirstNs, FirstSendBytes: x.TxFirstBytes,
		SecondSendMonotonicNS: x.TxSecondNs, SecondSendBytes: x.TxSecondBytes, LastSendMonotonicNS: x.TxLastNs,
		ResponseBytes: x.TxBytes, ResponseSends: x.TxOps, Open: open}
}

func cString(b [16]int8) string {
	out := make([]byte, 0, 16)
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func (d *Daemon) procEvent(e *bpf.ProcEvent) {
	pid := int(e.Tgid)
	switch e.Kind {
	case bpf.EventFork:
		t := &Target{PID: pid, PPID: int(e.Ppid), RootPID: int(e.Ppid), How: "fork", AddedMonotonicNS: e.TsNs, Comm: cString(e.Comm)}
		d.mu.Lock()
		if p := d.targets[t.PPID]; p != nil {
			t.RootPID = p.RootPID
		}
		d.insertLocked(t)
		d.mu.Unlock()
	case bpf.EventExec:
		if e.Target != 0 {
			cl := procCmdlineRedacted(pid)
			d.mu.Lock()
			if t := d.targets[pid]; t != nil {
				t.Comm = cString(e.Comm)
				t.Cmdline = cl
			}
			d.mu.Unlock()
			return
		}
		if d.cfg.Match != nil {
			if cl := procCmdline(pid); cl != "" && d.cfg.Match.MatchString(cl) {
				d.addTarget(pid, "cmdline", "")
			}
		}
	case bpf.EventExit:
		// The kernel took the process out of targets and cleared its bit
		// in the prefilter (hone.h: target_bits) as it exited: nothing to
		// undo here, and clearing it now could untarget a child that
		// reused the pid since.
		d.mu.Lock()
		d.logExited++
		if t := d.targets[pid]; t != nil {
			if t.ExitMonotonicNS == 0 {
				t.ExitMonotonicNS = e.TsNs
				d.exitedPending++
			}
			if t.How == "pid" {
				d.pidsDone[pid] = true
			}
		} else {
			d.orphanExits[pid] = orphanExit{ts: e.TsNs, comm: cString(e.Comm)}
		}
		if d.exitedPending > maxExitedDetail || len(d.orphanExits) > maxExitedDetail {
			d.askFold()
		}
		d.mu.Unlock()
	}
}

// Targets lists the traced processes: live ones and those that exited less
// than retireAfter ago (older ones are folded into Snapshot.Exited).
func (d *Daemon) Targets() []Target {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Target, 0, len(d.targets))
	for _, t := range d.targets {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}
