//go:build linux

package daemon

import (
	"errors"
	"io/fs"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/daemon/probes"
	"github.com/hone-llm/hone/schema"
)

// retireAfter is how long after a process exits its measurements stay, one
// thread at a time, in the kernel maps and its record in the target table;
// then they are folded into Snapshot.Exited (freeing map space).
const retireAfter = 2 * time.Second

// maxRetired bounds the closed connections listed one by one; older ones
// are summed into Snapshot.ClosedConnections.
const maxRetired = 8192

type threadID struct{ pid, tid int }

// readThreads reads every thread's measurements from the maps. With del
// set, it deletes the entries of the processes del selects after reading
// them.
func (d *Daemon) readThreads(del func(pid int) bool) map[threadID]*Thread {
	if del == nil {
		del = func(int) bool { return false }
	}
	out := map[threadID]*Thread{}
	get := func(pid, tid int) *Thread {
		id := threadID{pid, tid}
		t := out[id]
		if t == nil {
			t = &Thread{PID: pid, TID: tid}
			out[id] = t
		}
		return t
	}
	var sys map[bpf.SysKey]bpf.SysStats
	if d.loaded(probes.Syscalls) {
		var err error
		if sys, err = d.objs.ReadSyscalls(func(tgid uint32) bool { return del(int(tgid)) }); err != nil {
			d.log.Warn("syscall statistics", "err", err)
		}
	}
	for k, v := range sys {
		t := get(int(k.Tgid), int(k.Tid))
		if t.Syscalls == nil {
			t.Syscalls = map[string]*SyscallStats{}
		}
		t.Syscalls[bpf.SyscallClasses[k.Class]] = &SyscallStats{Count: v.Count, Timed: v.Timed, TotalNS: v.TotalNs,
			MaxNS: v.MaxNs, FirstMonotonicNS: v.FirstNs, LastMonotonicNS: v.LastNs, HistLog2NS: trimHist(v.Hist[:])}
	}
	if d.loaded(probes.Sched) {
		var k uint32
		var v bpf.SchedStats
		var gone []uint32
		it := d.objs.SchedStats().Iterate()
		for it.Next(&k, &v) {
			t := get(int(v.Tgid), int(k))
			t.Sched = &SchedStats{OnCPUNS: v.OnCpuNs, OffCPUNS: v.OffCpuNs, RunQueueNS: v.RunQueueNs,
				Switches: v.Switches, Preemptions: v.Preemptions}
			if del(int(v.Tgid)) {
				gone = append(gone, k)
			}
		}
		for _, k := range gone {
			_ = d.objs.SchedStats().Delete(k)
		}
	}
	if d.loaded(probes.CUDA) {
		var k bpf.CUDAKey
		var v bpf.CUDAStats
		var gone []bpf.CUDAKey
		it := d.objs.CUDAStats().Iterate()
		for it.Next(&k, &v) {
			if int(k.Call) >= len(bpf.CUDACalls) {
				continue
			}
			t := get(int(k.Tgid), int(k.Tid))
			if t.CUDA == nil {
				t.CUDA = map[string]*CUDAStats{}
			}
			t.CUDA[bpf.CUDACalls[k.Call]] = &CUDAStats{Count: v.Count, FirstMonotonicNS: v.FirstNs, LastMonotonicNS: v.LastNs,
				GapCount: v.GapCount, GapSumNS: v.GapSumNs, GapMinNS: v.GapMinNs, GapMaxNS: v.GapMaxNs,
				GapHistLog2NS: trimHist(v.GapHist[:]), WaitCount: v.WaitCount, WaitSumNS: v.WaitSumNs,
				WaitMinNS: v.WaitMinNs, WaitMaxNS: v.WaitMaxNs, WaitHistLog2NS: trimHist(v.WaitHist[:])}
			if del(int(k.Tgid)) {
				gone = append(gone, k)
			}
		}
		for _, k := range gone {
			_ = d.objs.CUDAStats().Delete(k)
		}
		// The step a retired process left open.
		var pid uint32
		var open struct {
			StartNs          uint64
			Graphs, Launches uint32
		}
		var stale []uint32
		for it := d.objs.CUDAStep().Iterate(); it.Next(&pid, &open); {
			if del(int(pid)) {
				stale = append(stale, pid)
			}
		}
		for _, p := range stale {
			_ = d.objs.CUDAStep().Delete(p)
		}
	}
	d.table.nameThreads(out)
	return out
}

// readConns reads the connections that target processes used, and the
// HTTP exchanges open on them. With closedBefore > 0, connections closed
// before it are deleted after reading and returned in retired.
func (d *Daemon) readConns(closedBefore uint64) (live []Connection, open []Exchange, retired []Connection) {
	if !d.loaded(probes.Sockets) {
		return nil, nil, nil
	}
	var gone []bpf.ConnKey
	d.events.burstsWhile(func(bursts func(bpf.ConnKey) []Burst, drop func(bpf.ConnKey)) {
		var k bpf.ConnKey
		var v bpf.ConnStats
		for it := d.objs.Conns().Iterate(); it.Next(&k, &v); {
			if v.Tgid == 0 {
				continue // established on a KV port, never used by a target
			}
			c := connectionOf(k, &v, bursts(k))
			if closedBefore > 0 && v.ClosedNs != 0 && v.ClosedNs < closedBefore {
				gone = append(gone, k)
				retired = append(retired, c)
				drop(k)
				continue
			}
			live = append(live, c)
			if v.Http != 0 && v.Ex.RxOps > 0 {
				open = append(open, exchangeOf(c.PID, k, v.Ex, true))
			}
		}
		for _, k := range gone {
			_ = d.objs.Conns().Delete(k)
		}
	})
	return live, open, retired
}

// connectionOf is connection k's snapshot form: its statistics v, its
// closed bursts and the open ones, by start.
func connectionOf(k bpf.ConnKey, v *bpf.ConnStats, closed []Burst) Connection {
	c := Connection{PID: int(v.Tgid), Local: addrPort(k.Family, k.Laddr, k.Lport),
		Remote: addrPort(k.Family, k.Raddr, k.Rport), KVTransfer: v.Kv != 0,
		TXBytes: v.TxBytes, RXBytes: v.RxBytes, TXOps: v.TxOps, RXOps: v.RxOps,
		FirstMonotonicNS: v.FirstNs, LastMonotonicNS: v.LastNs,
		EstablishedMonotonic: v.EstablishedNs, ClosedMonotonicNS: v.ClosedNs}
	c.Bursts = append(c.Bursts, closed...)
	for dir, b := range []bpf.Burst{v.Tx, v.Rx} {
		if b.Ops > 0 {
			c.Bursts = append(c.Bursts, Burst{Direction: dirName(uint32(dir)), StartMonotonicNS: b.StartNs,
				EndMonotonicNS: b.LastNs, Bytes: b.Bytes, Ops: b.Ops, Open: true})
		}
	}
	sort.SliceStable(c.Bursts, func(i, j int) bool { return c.Bursts[i].StartMonotonicNS < c.Bursts[j].StartMonotonicNS })
	return c
}

// lostExitCheckEvery is how often (in scans) retire also looks for
// processes in the maps that are gone without an exit event (lost in a
// full ring buffer): it means reading every map.
const lostExitCheckEvery = 10

// retire folds the measurements of processes that exited more than
// retireAfter ago (with force, all that exited) out of the kernel maps and
// the target table into Exited, and moves connections closed a while ago
// out of the kernel map.
func (d *Daemon) retire(force bool) {
	d.foldMu.Lock()
	defer d.foldMu.Unlock()
	now := monotonicNow()
	cut := now - uint64(retireAfter.Nanoseconds())
	procCut := cut
	if force {
		procCut = now + 1
	}
	checkLost := !force && d.lost.due()
	var suspects map[int]*tracked
	if checkLost {
		suspects = d.lost.checkTargets(d.table, now)
	}
	x := d.table.takeExited(procCut)
	sel := &foldSelect{exitedSet: x, checkLost: checkLost, self: d.self, checks: &d.lost, gone: map[int]bool{}, lost: map[int]bool{}}
	var thr map[threadID]*Thread
	if len(x.fold) > 0 || checkLost {
		thr = d.readThreads(sel.del)
	}
	if checkLost {
		d.lost.suspects, d.lost.lostSuspects = suspects, sel.lost
	}
	_, _, conns := d.readConns(cut)
	d.table.fold(thr, sel.del, x, func(pid int) { _ = d.objs.RemoveTarget(uint32(pid)) })
	d.events.retire(conns)
}

// lostExits is retire's state for finding exits never reported (they
// raced the process's addition, or the event was lost in a full ring
// buffer). retire, under foldMu, is its only user.
type lostExits struct {
	retires      int
	suspects     map[int]*tracked // live entries found gone at the last check
	lostSuspects map[int]bool     // unknown pids in the maps found gone at the last check
}

// due counts a retire and says whether this one checks for lost exits.
func (l *lostExits) due() bool {
	l.retires++
	return l.retires%lostExitCheckEvery == 0
}

// checkTargets marks exited the live targets gone from /proc in two
// checks in a row (an exit event still on its way has arrived by the
// second), and returns those gone for the first time: the next check's
// suspects.
func (l *lostExits) checkTargets(tt *targetTable, now uint64) map[int]*tracked {
	suspects := map[int]*tracked{}
	for pid, t := range tt.live() {
		if _, err := os.Stat("/proc/" + itoa(pid)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if l.suspects[pid] != t {
			suspects[pid] = t
			continue
		}
		tt.lostExit(pid, t, now)
	}
	return suspects
}

// foldSelect says which processes' measurements a retire takes out of the
// kernel maps: those it folds, and with checkLost, processes in the maps
// that the table does not know and that are gone, in two checks in a row
// (their exit event was lost).
type foldSelect struct {
	exitedSet
	checkLost bool
	self      int
	checks    *lostExits   // its lostSuspects: unknown pids found gone at the last check (this one's, once retire sets them)
	gone      map[int]bool // the answer for each unknown pid, once asked
	lost      map[int]bool // unknown pids found gone now for the first time
}

func (s *foldSelect) del(pid int) bool {
	if _, ok := s.fold[pid]; ok {
		return true
	}
	if !s.checkLost || s.known[pid] || pid == s.self {
		return false
	}
	g, ok := s.gone[pid]
	if !ok {
		_, err := os.Stat("/proc/" + itoa(pid))
		g = errors.Is(err, fs.ErrNotExist)
		if g && !s.checks.lostSuspects[pid] {
			s.lost[pid] = true // folded if still gone at the next check
			g = false
		}
		s.gone[pid] = g
	}
	return g
}

// Snapshot reads everything measured so far.
func (d *Daemon) Snapshot() *Snapshot {
	s := &Snapshot{SchemaVersion: SchemaVersion, Clock: schema.SnapshotClock,
		TakenMonotonicNS: monotonicNow(), TakenWall: time.Now().UTC(), StartedMonotonicNS: d.startNS,
		Threads: []Thread{}, Exited: []ExitedGroup{}, Connections: []Connection{}, CUDA: CUDAReport{Libraries: []CUDALibrary{}}}
	d.foldMu.RLock()
	s.Targets = d.Targets()
	thr := d.readThreads(nil)
	live, open, _ := d.readConns(0)
	d.table.snapshot(s)
	d.events.snapshot(s, live, open)
	d.cuda.snapshot(s)
	caps := d.caps.get()
	d.foldMu.RUnlock()
	for _, t := range thr {
		s.Threads = append(s.Threads, *t)
	}
	sort.Slice(s.Threads, func(i, j int) bool {
		a, b := s.Threads[i], s.Threads[j]
		return a.PID < b.PID || a.PID == b.PID && a.TID < b.TID
	})
	sort.Slice(s.Exited, func(i, j int) bool {
		a, b := s.Exited[i], s.Exited[j]
		return a.RootPID < b.RootPID || a.RootPID == b.RootPID && a.Comm < b.Comm
	})
	sort.SliceStable(s.Connections, func(i, j int) bool { return s.Connections[i].FirstMonotonicNS < s.Connections[j].FirstMonotonicNS })
	s.NVML = d.nvml.Report()
	s.BPF.StatsEnabled = d.cfg.BPFStats
	s.BPF.SyscallSample = d.cfg.SyscallSample
	if d.cfg.SyscallTimingPeriod > 0 {
		s.BPF.SyscallTimingWindowMS = d.cfg.SyscallTimingWindow.Milliseconds()
		s.BPF.SyscallTimingPeriodMS = d.cfg.SyscallTimingPeriod.Milliseconds()
	}
	s.BPF.Programs = d.programRuns()
	s.BPF.RingbufDrops, s.BPF.MapFullDrops = d.drops()
	s.Probes = append([]ProbeStatus{}, d.probes...)
	s.Daemon = selfUsage(d.started)
	s.Daemon.Capabilities = caps
	return s
}

func (d *Daemon) programRuns() []ProgramRun {
	var out []ProgramRun
	for name, p := range d.objs.Programs() {
		r := ProgramRun{Name: name}
		if st, err := p.Stats(); err == nil {
			r.Runs = st.RunCount
			r.RunTimeNS = uint64(st.Runtime.Nanoseconds())
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (d *Daemon) drops() (ringbuf, mapFull uint64) {
	sum := func(key uint32) uint64 {
		var per []uint64
		if err := d.objs.Drops().Lookup(key, &per); err != nil {
			return 0
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		return n
	}
	return sum(bpf.DropRingbuf), sum(bpf.DropMapFull)
}

func selfUsage(started time.Time) SelfUsage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	u := SelfUsage{PID: syscall.Getpid(), CPUSeconds: cpu.Seconds(), MaxRSSBytes: uint64(ru.Maxrss) * 1024,
		UptimeSeconds: time.Since(started).Seconds(), UID: syscall.Getuid()}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			switch v = strings.TrimSpace(v); k {
			case "NoNewPrivs":
				u.NoNewPrivs = v == "1"
			case "Seccomp":
				u.Seccomp = v == "2"
			}
		}
	}
	return u
}
