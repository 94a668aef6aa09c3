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
	// maps into the table's exited groups (retire), and for reading while
	// a snapshot reads both, so that a snapshot counts each measurement
	// exactly once.
	foldMu sync.RWMutex
	// scanMu keeps a scan (which may attach probes) and the privilege
	// drop apart: an attach must not see the capability sets change.
	scanMu sync.Mutex
	// foldNow asks the loop to fold exited processes before their time:
	// the table holds too many of them.
	foldNow chan struct{}

	// The daemon's state, in parts that each own their lock and are
	// reached only through their methods. No part's lock is taken while
	// another's is held; scanMu, then foldMu, come before any of them.
	// foldMu (above) keeps a snapshot from reading the parts halfway
	// through a retire.
	table  *targetTable  // the traced processes, their exits and folded groups
	events *eventBuffers // what the ring buffer's reader appends
	cuda   *cudaProber   // the libcuda files probed and the launch window
	lost   lostExits     // retire's check for exits never reported (under foldMu)
	probes []ProbeStatus // per family (package probes), set by Start
	caps   capsText      // the capabilities kept, set once privileges are dropped
}

// capsText is the daemon's capability text, set by Run and read by
// snapshots.
type capsText struct {
	mu sync.Mutex
	s  string
}

func (c *capsText) set(s string) {
	c.mu.Lock()
	c.s = s
	c.mu.Unlock()
}

func (c *capsText) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

// defaultMaxTargets bounds the target table: the kernel's targets map
// (8192 live processes) and room for exited ones awaiting their fold.
const defaultMaxTargets = 8192 + maxExitedDetail

// maxExitedDetail is how many exited processes the table keeps, one by
// one, before folding them early, ahead of retireAfter.
const maxExitedDetail = 1024

// logNewMax is how many new targets a log line names.
const logNewMax = 8

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
	d := &Daemon{cfg: cfg, log: log, self: os.Getpid(), foldNow: make(chan struct{}, 1), events: newEventBuffers(),
		cuda: newCUDAProber(log)}
	d.table = newTargetTable(d.askFold)
	return d, nil
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
	d.cuda.objs = d.objs
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
		d.cuda.setLaunchWindow(d.startNS + uint64(d.cfg.CUDALaunches.Nanoseconds()))
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
	errs = append(errs, d.cuda.close())
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
	for _, p := range d.selectTargets(first) {
		d.addTarget(p.pid, p.how, p.pod)
	}
	d.scanCUDA()
	d.retire(false)
	d.logTargets()
}

// found is a process a scan selected, and how.
type found struct {
	pid      int
	how, pod string
}

// selectTargets lists the processes the configuration selects now: the
// --pid targets not exited (their descendants on the first scan), the
// processes of --cgroup and of the pods, and those whose command line
// matches.
func (d *Daemon) selectTargets(first bool) []found {
	var pids []found
	add := func(p int, how string) { pids = append(pids, found{pid: p, how: how}) }
	for _, p := range d.table.notDone(d.cfg.PIDs) {
		add(p, "pid")
	}
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
			if d.matchProcess(p) {
				add(p, "cmdline")
			}
		}
	}
	return pids
}

// addTarget makes a process the daemon selected a target (a child found
// as a descendant joins its parent's root).
func (d *Daemon) addTarget(pid int, how, pod string) {
	if pid == d.self || d.table.tracing(pid) {
		return
	}
	if !procAlive(pid) {
		return // gone already, or a zombie: its exit has passed
	}
	ppid := procPPID(pid)
	t := Target{PID: pid, PPID: ppid, RootPID: pid, How: how, Pod: pod, AddedMonotonicNS: monotonicNow(),
		Comm: procComm(pid, pid), Cmdline: procCmdlineRedacted(pid)}
	if how == "pid" {
		t.PPID = 0
	}
	e := d.table.insert(t, how == "descendant")
	if err := d.objs.AddTarget(uint32(pid)); err != nil {
		d.table.addFailed()
		return
	}
	// A process that exited while it was being added left no exit event
	// to clear it from the kernel's map: its pid, once reused, would make
	// an unrelated process a target. Take it out again.
	if !procAlive(pid) {
		_ = d.objs.RemoveTarget(uint32(pid))
		d.table.exitedUnseen(pid, e)
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
	if msg, attrs := d.table.takeLog(); msg != "" {
		d.log.Info(msg, attrs...)
	}
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
	d.events.read()
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
		d.events.addBurst(e.Conn, Burst{Direction: dirName(e.Dir), StartMonotonicNS: e.StartNs,
			EndMonotonicNS: e.EndNs, Bytes: e.Bytes, Ops: e.Ops})
	case bpf.EventStep:
		var e bpf.StepEvent
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &e); err != nil {
			return
		}
		call := ""
		if int(e.Call) < len(bpf.CUDACalls) {
			call = bpf.CUDACalls[e.Call]
		}
		d.events.addStep(Step{PID: int(e.Tgid), TID: int(e.Tid), Call: call, StartMonotonicNS: e.StartNs,
			SyncMonotonicNS: e.SyncNs, EndMonotonicNS: e.EndNs, GraphLaunches: e.Graphs, Launches: e.Launches})
	case bpf.EventExchange:
		var e bpf.ExchangeEvent
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &e); err != nil {
			return
		}
		d.events.addExchange(exchangeOf(int(e.Tgid), e.Conn, e.Ex, false))
	}
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
		d.table.insert(Target{PID: pid, PPID: int(e.Ppid), RootPID: int(e.Ppid), How: "fork", AddedMonotonicNS: e.TsNs,
			Comm: cString(e.Comm)}, true)
	case bpf.EventExec:
		if e.Target != 0 {
			d.table.execed(pid, cString(e.Comm), procCmdlineRedacted(pid))
			return
		}
		if d.matchProcess(pid) {
			d.addTarget(pid, "cmdline", "")
		}
	case bpf.EventExit:
		// The kernel took the process out of targets and cleared its bit
		// in the prefilter (hone.h: target_bits) as it exited: nothing to
		// undo here, and clearing it now could untarget a child that
		// reused the pid since.
		d.table.exit(pid, e.TsNs, cString(e.Comm))
	}
}

// Targets lists the traced processes: live ones and those that exited less
// than retireAfter ago (older ones are folded into Snapshot.Exited).
func (d *Daemon) Targets() []Target { return d.table.list() }
