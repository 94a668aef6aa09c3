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
	d.mu.Lock()
	for id, t := range out {
		c, ok := d.comms[id.tid]
		if !ok {
			c = procComm(id.pid, id.tid)
			if c != "" {
				d.comms[id.tid] = c
			}
		}
		t.Comm = c
	}
	d.mu.Unlock()
	return out
}

// readConns reads the connections that target processes used. With
// closedBefore > 0, connections closed before it are deleted after reading
// and returned in retired.
func (d *Daemon) readConns(closedBefore uint64) (live, retired []Connection) {
	if !d.loaded(probes.Sockets) {
		return nil, nil
	}
	var k bpf.ConnKey
	var v bpf.ConnStats
	var gone []bpf.ConnKey
	it := d.objs.Conns().Iterate()
	d.mu.Lock()
	defer d.mu.Unlock()
	for it.Next(&k, &v) {
		if v.Tgid == 0 {
			continue // established on a KV port, never used by a target
		}
		c := Connection{PID: int(v.Tgid), Local: addrPort(k.Family, k.Laddr, k.Lport),
			Remote: addrPort(k.Family, k.Raddr, k.Rport), KVTransfer: v.Kv != 0,
			TXBytes: v.TxBytes, RXBytes: v.RxBytes, TXOps: v.TxOps, RXOps: v.RxOps,
			FirstMonotonicNS: v.FirstNs, LastMonotonicNS: v.LastNs,
			EstablishedMonotonic: v.EstablishedNs, ClosedMonotonicNS: v.ClosedNs}
		c.Bursts = append(c.Bursts, d.bursts[k]...)
		for dir, b := range []bpf.Burst{v.Tx, v.Rx} {
			if b.Ops > 0 {
				c.Bursts = append(c.Bursts, Burst{Direction: dirName(uint32(dir)), StartMonotonicNS: b.StartNs,
					EndMonotonicNS: b.LastNs, Bytes: b.Bytes, Ops: b.Ops, Open: true})
			}
		}
		sort.SliceStable(c.Bursts, func(i, j int) bool { return c.Bursts[i].StartMonotonicNS < c.Bursts[j].StartMonotonicNS })
		if v.Http != 0 && v.Ex.RxOps > 0 {
			x := exchangeOf(c.PID, k, v.Ex, true)
			c.openExchange = &x
		}
		if closedBefore > 0 && v.ClosedNs != 0 && v.ClosedNs < closedBefore {
			gone = append(gone, k)
			retired = append(retired, c)
			delete(d.bursts, k)
			continue
		}
		live = append(live, c)
	}
	for _, k := range gone {
		_ = d.objs.Conns().Delete(k)
	}
	return live, retired
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
	type origin struct {
		root int
		comm string
	}
	d.mu.Lock()
	checkLost := false
	if !force {
		d.retires++
		checkLost = d.retires%lostExitCheckEvery == 0
	}
	live := map[int]*Target{}
	if checkLost {
		for pid, t := range d.targets {
			if t.ExitMonotonicNS == 0 {
				live[pid] = t
			}
		}
	}
	d.mu.Unlock()
	// Targets whose exit was not seen (it raced their addition, or the
	// event was lost): gone from /proc in two checks in a row (an exit
	// event still on its way has arrived by the second), so exited.
	suspects, lost := map[int]*Target{}, map[int]bool{}
	for pid, t := range live {
		if _, err := os.Stat("/proc/" + itoa(pid)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if d.suspects[pid] != t {
			suspects[pid] = t
			continue
		}
		d.mu.Lock()
		if d.targets[pid] == t && t.ExitMonotonicNS == 0 {
			t.ExitMonotonicNS = now
			t.exitUnreported = true
			d.exitedPending++
			d.logExited++
			if t.How == "pid" {
				d.pidsDone[pid] = true
			}
		}
		d.mu.Unlock()
	}
	fold := map[int]origin{}
	known := map[int]bool{}
	var unreported []int
	d.mu.Lock()
	for pid, t := range d.targets {
		if t.ExitMonotonicNS != 0 && t.ExitMonotonicNS < procCut {
			fold[pid] = origin{t.RootPID, t.Comm}
			if t.exitUnreported {
				unreported = append(unreported, pid)
			}
			delete(d.targets, pid)
			d.exitedPending--
		} else {
			known[pid] = true
		}
	}
	for pid, o := range d.orphanExits {
		if o.ts < procCut {
			fold[pid] = origin{0, o.comm}
			delete(d.orphanExits, pid)
		} else {
			known[pid] = true
		}
	}
	d.mu.Unlock()

	// Processes in the maps that the table does not know and that are
	// gone, in two checks in a row: their exit event was lost.
	gone := map[int]bool{}
	del := func(pid int) bool {
		if _, ok := fold[pid]; ok {
			return true
		}
		if !checkLost || known[pid] || pid == d.self {
			return false
		}
		g, ok := gone[pid]
		if !ok {
			_, err := os.Stat("/proc/" + itoa(pid))
			g = errors.Is(err, fs.ErrNotExist)
			if g && !d.lostSuspects[pid] {
				lost[pid] = true // folded if still gone at the next check
				g = false
			}
			gone[pid] = g
		}
		return g
	}
	var thr map[threadID]*Thread
	if len(fold) > 0 || checkLost {
		thr = d.readThreads(del)
	}
	if checkLost {
		d.suspects, d.lostSuspects = suspects, lost
	}
	_, conns := d.readConns(cut)

	d.mu.Lock()
	defer d.mu.Unlock()
	group := func(o origin, comm string) *ExitedGroup { return d.groupLocked(o.root, o.comm, comm) }
	counted := map[int]bool{}
	ids := make([]threadID, 0, len(thr))
	for id := range thr {
		if del(id.pid) {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		return ids[i].pid < ids[j].pid || ids[i].pid == ids[j].pid && ids[i].tid < ids[j].tid
	})
	for _, id := range ids {
		t := thr[id]
		g := group(fold[id.pid], t.Comm)
		g.addThread(t)
		if !counted[id.pid] {
			counted[id.pid] = true
			g.Processes++
		}
		delete(d.comms, id.tid)
	}
	for pid, o := range fold {
		if !counted[pid] { // exited without a measured thread
			counted[pid] = true
			group(o, "").Processes++
		}
	}
	// An exit the kernel never reported (the process ended while the
	// daemon added it) may have left its pid in the kernel's targets map.
	for _, pid := range unreported {
		if t := d.targets[pid]; t == nil || t.ExitMonotonicNS != 0 {
			_ = d.objs.RemoveTarget(uint32(pid))
		}
	}
	d.table.ExitedProcesses += uint64(len(counted))
	d.retiredConns = append(d.retiredConns, conns...)
	if n := len(d.retiredConns); n > maxRetired {
		for _, c := range d.retiredConns[:n-maxRetired] {
			d.closedFolded.add(c)
		}
		d.retiredConns = append([]Connection(nil), d.retiredConns[n-maxRetired:]...)
	}
}

// groupLocked returns the exited group of root and name (the target's
// name, else the thread's, else "unknown"), created if need be. The caller
// holds d.mu.
func (d *Daemon) groupLocked(root int, name, threadName string) *ExitedGroup {
	if name == "" {
		name = threadName
	}
	if name == "" {
		name = "unknown"
	}
	k := exitedKey{root, name}
	if g := d.exited[k]; g != nil {
		return g
	}
	if len(d.exited) >= maxExitedGroups {
		k = exitedKey{0, "other"}
		if g := d.exited[k]; g != nil {
			return g
		}
	}
	g := &ExitedGroup{RootPID: k.root, Comm: k.comm}
	d.exited[k] = g
	return g
}

// Snapshot reads everything measured so far.
func (d *Daemon) Snapshot() *Snapshot {
	s := &Snapshot{SchemaVersion: SchemaVersion, Clock: "CLOCK_MONOTONIC",
		TakenMonotonicNS: monotonicNow(), TakenWall: time.Now().UTC(), StartedMonotonicNS: d.startNS,
		Threads: []Thread{}, Exited: []ExitedGroup{}, Connections: []Connection{}, CUDA: CUDAReport{Libraries: []CUDALibrary{}}}
	d.foldMu.RLock()
	s.Targets = d.Targets()
	thr := d.readThreads(nil)
	live, _ := d.readConns(0)
	d.mu.Lock()
	for _, g := range d.exited {
		s.Exited = append(s.Exited, g.clone())
	}
	s.TargetTable = d.table
	s.TargetTable.Entries = len(d.targets)
	s.TargetTable.MaxEntries = d.maxTargets
	s.ClosedConnections = d.closedFolded
	s.Connections = append(append(s.Connections, d.retiredConns...), live...)
	for _, l := range d.cuda {
		s.CUDA.Libraries = append(s.CUDA.Libraries, l.info)
	}
	s.Steps = append([]Step{}, d.steps.items...)
	s.StepTable = d.steps.table
	s.Exchanges = append([]Exchange{}, d.exchanges.items...)
	for _, c := range live {
		if c.openExchange != nil {
			s.Exchanges = append(s.Exchanges, *c.openExchange)
		}
	}
	s.ExchangeTable = d.exchanges.table
	s.CUDA.LaunchProbesUntil = d.launchUntil
	s.CUDA.Skipped = len(d.cudaSkipped)
	s.BPF.EventsRead = d.eventsRead
	caps := d.caps
	d.mu.Unlock()
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
	sort.Slice(s.CUDA.Libraries, func(i, j int) bool { return s.CUDA.Libraries[i].Path < s.CUDA.Libraries[j].Path })
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
