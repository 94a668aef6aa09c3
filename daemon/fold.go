package daemon

// Folding exited processes' measurements into ExitedGroups, and closed
// connections into ConnectionTotals, keeps every total exact while the
// daemon's memory stays bounded.

// exitedKey identifies an ExitedGroup.
type exitedKey struct {
	root int
	comm string
}

// maxExitedGroups bounds the number of ExitedGroups; processes of further
// (root, name) pairs fold into the group {0, "other"}.
const maxExitedGroups = 1024

// addThread adds one exited thread's measurements to g.
func addThread(g *ExitedGroup, th *Thread) {
	g.Threads++
	for class, st := range th.Syscalls {
		if g.Syscalls == nil {
			g.Syscalls = map[string]*SyscallStats{}
		}
		d := g.Syscalls[class]
		if d == nil {
			d = &SyscallStats{}
			g.Syscalls[class] = d
		}
		d.Count += st.Count
		d.Timed += st.Timed
		d.TotalNS += st.TotalNS
		d.MaxNS = max(d.MaxNS, st.MaxNS)
		d.FirstMonotonicNS = minNonZero(d.FirstMonotonicNS, st.FirstMonotonicNS)
		d.LastMonotonicNS = max(d.LastMonotonicNS, st.LastMonotonicNS)
		d.HistLog2NS = addHist(d.HistLog2NS, st.HistLog2NS)
	}
	if sc := th.Sched; sc != nil {
		if g.Sched == nil {
			g.Sched = &SchedStats{}
		}
		g.Sched.OnCPUNS += sc.OnCPUNS
		g.Sched.OffCPUNS += sc.OffCPUNS
		g.Sched.RunQueueNS += sc.RunQueueNS
		g.Sched.Switches += sc.Switches
		g.Sched.Preemptions += sc.Preemptions
	}
	for call, st := range th.CUDA {
		if g.CUDA == nil {
			g.CUDA = map[string]*CUDAStats{}
		}
		d := g.CUDA[call]
		if d == nil {
			d = &CUDAStats{}
			g.CUDA[call] = d
		}
		d.Count += st.Count
		d.FirstMonotonicNS = minNonZero(d.FirstMonotonicNS, st.FirstMonotonicNS)
		d.LastMonotonicNS = max(d.LastMonotonicNS, st.LastMonotonicNS)
		d.GapCount += st.GapCount
		d.GapSumNS += st.GapSumNS
		d.GapMinNS = minNonZero(d.GapMinNS, st.GapMinNS)
		d.GapMaxNS = max(d.GapMaxNS, st.GapMaxNS)
		d.GapHistLog2NS = addHist(d.GapHistLog2NS, st.GapHistLog2NS)
		d.WaitCount += st.WaitCount
		d.WaitSumNS += st.WaitSumNS
		d.WaitMinNS = minNonZero(d.WaitMinNS, st.WaitMinNS)
		d.WaitMaxNS = max(d.WaitMaxNS, st.WaitMaxNS)
		d.WaitHistLog2NS = addHist(d.WaitHistLog2NS, st.WaitHistLog2NS)
	}
}

// cloneGroup deep-copies g, so a snapshot does not share maps with later
// folds.
func cloneGroup(g *ExitedGroup) ExitedGroup {
	c := ExitedGroup{RootPID: g.RootPID, Comm: g.Comm, Processes: g.Processes, Threads: g.Threads}
	if g.Syscalls != nil {
		c.Syscalls = make(map[string]*SyscallStats, len(g.Syscalls))
		for k, v := range g.Syscalls {
			x := *v
			x.HistLog2NS = append([]uint32{}, v.HistLog2NS...)
			c.Syscalls[k] = &x
		}
	}
	if g.Sched != nil {
		x := *g.Sched
		c.Sched = &x
	}
	if g.CUDA != nil {
		c.CUDA = make(map[string]*CUDAStats, len(g.CUDA))
		for k, v := range g.CUDA {
			x := *v
			x.GapHistLog2NS = append([]uint32{}, v.GapHistLog2NS...)
			x.WaitHistLog2NS = append([]uint32{}, v.WaitHistLog2NS...)
			c.CUDA[k] = &x
		}
	}
	return c
}

// groupThread presents g as a Thread (TID 0) for code that walks threads.
func groupThread(g *ExitedGroup) Thread {
	return Thread{PID: g.RootPID, Comm: g.Comm, Syscalls: g.Syscalls, Sched: g.Sched, CUDA: g.CUDA}
}

// addConnection sums one connection into t.
func addConnection(t *ConnectionTotals, c Connection) {
	kv := 0
	if c.KVTransfer {
		kv = 1
	}
	t.Connections++
	t.TXBytes[kv] += c.TXBytes
	t.RXBytes[kv] += c.RXBytes
	t.TXOps[kv] += c.TXOps
	t.RXOps[kv] += c.RXOps
	for _, b := range c.Bursts {
		d := 0
		if b.Direction == "rx" {
			d = 1
		}
		t.Bursts[d]++
		t.BurstNS[d] += b.EndMonotonicNS - b.StartMonotonicNS
	}
}

func minNonZero(a, b uint64) uint64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

func addHist(dst, src []uint32) []uint32 {
	if dst == nil {
		dst = []uint32{}
	}
	for len(dst) < len(src) {
		dst = append(dst, 0)
	}
	for i, v := range src {
		dst[i] += v
	}
	return dst
}
