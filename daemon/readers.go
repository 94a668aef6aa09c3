//go:build linux

package daemon

import (
	"sort"
	"syscall"
	"time"

	"github.com/hone-llm/hone/bpf"
)

// retireAfter is how long after a process exits its measurements move from
// the kernel maps into the daemon's memory (freeing map space).
const retireAfter = 2 * time.Second

// maxRetired bounds the measurements kept for exited threads and closed
// connections; the oldest go first.
const maxRetired = 8192

type threadID struct{ pid, tid int }

// readThreads reads every thread's measurements from the maps. With del
// set, it deletes the entries of the processes in del after reading them.
func (d *Daemon) readThreads(del map[int]bool) map[threadID]*Thread {
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
	{
		var k bpf.SysKey
		var v bpf.SysStats
		var gone []bpf.SysKey
		it := d.objs.SysStats().Iterate()
		for it.Next(&k, &v) {
			if int(k.Class) >= len(bpf.SyscallClasses) {
				continue
			}
			t := get(int(k.Tgid), int(k.Tid))
			if t.Syscalls == nil {
				t.Syscalls = map[string]*SyscallStats{}
			}
			t.Syscalls[bpf.SyscallClasses[k.Class]] = &SyscallStats{Count: v.Count, TotalNS: v.TotalNs,
				MaxNS: v.MaxNs, FirstMonotonicNS: v.FirstNs, LastMonotonicNS: v.LastNs, HistLog2NS: trimHist(v.Hist[:])}
			if del[int(k.Tgid)] {
				gone = append(gone, k)
			}
		}
		for _, k := range gone {
			_ = d.objs.SysStats().Delete(k)
		}
	}
	{
		var k uint32
		var v bpf.SchedStats
		var gone []uint32
		it := d.objs.SchedStats().Iterate()
		for it.Next(&k, &v) {
			t := get(int(v.Tgid), int(k))
			t.Sched = &SchedStats{OnCPUNS: v.OnCpuNs, OffCPUNS: v.OffCpuNs, RunQueueNS: v.RunQueueNs,
				Switches: v.Switches, Preemptions: v.Preemptions}
			if del[int(v.Tgid)] {
				gone = append(gone, k)
			}
		}
		for _, k := range gone {
			_ = d.objs.SchedStats().Delete(k)
		}
	}
	{
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
			if del[int(k.Tgid)] {
				gone = append(gone, k)
			}
		}
		for _, k := range gone {
			_ = d.objs.CUDAStats().Delete(k)
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

// retire moves the measurements of processes that exited a while ago, and
// of connections closed a while ago, out of the kernel maps.
func (d *Daemon) retire() {
	now := monotonicNow()
	cut := now - uint64(retireAfter.Nanoseconds())
	del := map[int]bool{}
	d.mu.Lock()
	for pid, t := range d.targets {
		if t.ExitMonotonicNS != 0 && t.ExitMonotonicNS < cut && !t.retired {
			t.retired = true
			del[pid] = true
		}
	}
	d.mu.Unlock()
	var thr map[threadID]*Thread
	if len(del) > 0 {
		thr = d.readThreads(del)
	}
	_, conns := d.readConns(cut)
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, t := range thr {
		if del[id.pid] {
			d.retiredThr = append(d.retiredThr, *t)
			delete(d.comms, id.tid)
		}
	}
	if n := len(d.retiredThr); n > maxRetired {
		d.retiredThr = d.retiredThr[n-maxRetired:]
	}
	d.retiredConns = append(d.retiredConns, conns...)
	if n := len(d.retiredConns); n > maxRetired {
		d.retiredConns = d.retiredConns[n-maxRetired:]
	}
}

// Snapshot reads everything measured so far.
func (d *Daemon) Snapshot() *Snapshot {
	s := &Snapshot{SchemaVersion: SchemaVersion, Clock: "CLOCK_MONOTONIC",
		TakenMonotonicNS: monotonicNow(), TakenWall: time.Now().UTC(), StartedMonotonicNS: d.startNS,
		Threads: []Thread{}, Connections: []Connection{}, CUDA: CUDAReport{Libraries: []CUDALibrary{}}}
	s.Targets = d.Targets()
	thr := d.readThreads(nil)
	live, _ := d.readConns(0)
	d.mu.Lock()
	s.Threads = append(s.Threads, d.retiredThr...)
	s.Connections = append(append(s.Connections, d.retiredConns...), live...)
	for _, l := range d.cuda {
		s.CUDA.Libraries = append(s.CUDA.Libraries, l.info)
	}
	s.CUDA.LaunchProbesUntil = d.launchUntil
	s.BPF.EventsRead = d.eventsRead
	caps := d.caps
	d.mu.Unlock()
	for _, t := range thr {
		s.Threads = append(s.Threads, *t)
	}
	sort.Slice(s.Threads, func(i, j int) bool {
		a, b := s.Threads[i], s.Threads[j]
		return a.PID < b.PID || a.PID == b.PID && a.TID < b.TID
	})
	sort.SliceStable(s.Connections, func(i, j int) bool { return s.Connections[i].FirstMonotonicNS < s.Connections[j].FirstMonotonicNS })
	sort.Slice(s.CUDA.Libraries, func(i, j int) bool { return s.CUDA.Libraries[i].Path < s.CUDA.Libraries[j].Path })
	s.NVML = d.nvml.Report()
	s.BPF.StatsEnabled = d.cfg.BPFStats
	s.BPF.Programs = d.programRuns()
	s.BPF.RingbufDrops, s.BPF.MapFullDrops = d.drops()
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
	return SelfUsage{PID: syscall.Getpid(), CPUSeconds: cpu.Seconds(), MaxRSSBytes: uint64(ru.Maxrss) * 1024,
		UptimeSeconds: time.Since(started).Seconds()}
}
