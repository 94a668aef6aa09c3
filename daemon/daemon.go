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
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/bpf"
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

	mu           sync.Mutex
	targets      map[int]*Target
	comms        map[int]string // tid -> comm, remembered for threads that exit
	bursts       map[bpf.ConnKey][]Burst
	cuda         map[[2]uint64]*cudaLib
	launchUntil  uint64
	eventsRead   uint64
	retiredThr   []Thread
	retiredConns []Connection
	caps         string
}

type cudaLib struct {
	info        CUDALibrary
	path        string
	links       bpf.Links
	launchLinks bpf.Links
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
	return &Daemon{
		cfg:     cfg,
		log:     log,
		self:    os.Getpid(),
		targets: map[int]*Target{},
		comms:   map[int]string{},
		bursts:  map[bpf.ConnKey][]Burst{},
		cuda:    map[[2]uint64]*cudaLib{},
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
	if d.objs, err = bpf.Load(bpf.Options{BurstGap: d.cfg.BurstGap}); err != nil {
		return err
	}
	for _, p := range d.cfg.KVPorts {
		if err := d.objs.SetKVPort(p, true); err != nil {
			return fmt.Errorf("KV-transfer port %d: %w", p, err)
		}
	}
	if d.rd, err = ringbuf.NewReader(d.objs.Events()); err != nil {
		return fmt.Errorf("ring buffer reader: %w", err)
	}
	if d.links, err = d.objs.Attach(bpf.Probes{Syscalls: true, Procs: true, Sched: d.cfg.Sched, Sockets: true}); err != nil {
		return err
	}
	if d.cfg.CUDALaunches > 0 {
		d.launchUntil = d.startNS + uint64(d.cfg.CUDALaunches.Nanoseconds())
	}
	ctx, d.cancel = context.WithCancel(ctx)
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.readEvents() }()
	d.scan()
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-scan.C:
			d.scan()
		case <-sample:
			d.nvml.Sample()
		}
	}
}

// scan selects new targets, probes newly mapped libcuda files, ends the
// launch-probe window and retires the measurements of exited processes.
func (d *Daemon) scan() {
	var pids []struct {
		pid int
		how string
	}
	add := func(p int, how string) {
		pids = append(pids, struct {
			pid int
			how string
		}{p, how})
	}
	for _, p := range d.cfg.PIDs {
		add(p, "pid")
	}
	if len(d.cfg.PIDs) > 0 {
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
	if d.cfg.Match != nil {
		for _, p := range allPIDs() {
			if cl := procCmdline(p); cl != "" && d.cfg.Match.MatchString(cl) {
				add(p, "cmdline")
			}
		}
	}
	for _, p := range pids {
		d.addTarget(p.pid, 0, p.how)
	}
	d.scanCUDA()
	d.retire()
}

func (d *Daemon) addTarget(pid, ppid int, how string) {
	if pid == d.self {
		return
	}
	d.mu.Lock()
	t, ok := d.targets[pid]
	if ok && t.ExitMonotonicNS == 0 {
		d.mu.Unlock()
		return
	}
	d.targets[pid] = &Target{PID: pid, PPID: ppid, How: how, AddedMonotonicNS: monotonicNow(),
		Comm: procComm(pid, pid), Cmdline: procCmdline(pid)}
	d.mu.Unlock()
	if how != "fork" { // the kernel added forked children itself
		if err := d.objs.AddTarget(uint32(pid)); err != nil {
			d.log.Warn("add target", "pid", pid, "err", err)
		}
	}
	d.log.Info("target", "pid", pid, "how", how)
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
	}
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
		d.mu.Lock()
		d.targets[pid] = &Target{PID: pid, PPID: int(e.Ppid), How: "fork", AddedMonotonicNS: e.TsNs, Comm: cString(e.Comm)}
		d.mu.Unlock()
		d.log.Info("target", "pid", pid, "how", "fork", "parent", e.Ppid)
	case bpf.EventExec:
		if e.Target != 0 {
			d.mu.Lock()
			if t := d.targets[pid]; t != nil {
				t.Comm = cString(e.Comm)
				t.Cmdline = procCmdline(pid)
			}
			d.mu.Unlock()
			return
		}
		if d.cfg.Match != nil {
			if cl := procCmdline(pid); cl != "" && d.cfg.Match.MatchString(cl) {
				d.addTarget(pid, 0, "cmdline")
			}
		}
	case bpf.EventExit:
		d.mu.Lock()
		if t := d.targets[pid]; t != nil {
			t.ExitMonotonicNS = e.TsNs
		}
		d.mu.Unlock()
	}
}

// Targets lists the traced processes, live and exited.
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
