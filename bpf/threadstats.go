//go:build linux && (386 || amd64 || arm64)

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// ThreadSlot is a target thread's slot (hone.h, thread_slots).
type ThreadSlot = procsHoneThreadSlot

// slotExited marks a slot whose thread has exited (hone.h, SLOT_EXITED).
const slotExited = 1 << 63

// ThreadKey names a thread: its process (tgid) and its own id.
type ThreadKey struct{ Tgid, Tid uint32 }

// ThreadStats are the target threads' statistics the syscall and scheduler
// programs keep.
type ThreadStats struct {
	Syscalls map[SysKey]SysStats
	Sched    map[ThreadKey]SchedStats
}

// threadMaps are the maps a thread's statistics live in: its slot's
// entries (thread_slots; slot_stats and slot_sched by slot) or, for a
// thread without a slot of its own, the hashes (sys_stats, sched_stats).
type threadMaps struct {
	slots, slotStats, sysStats, slotSched, schedStats *ebpf.Map
}

// ReadThreadStats returns every target thread's syscall statistics per
// class and its scheduling times. A thread's are in its slot or, for a
// thread without a slot of its own, in the hashes; a thread id reused
// within a process can have both, and they are summed, as the hashes alone
// would have summed them. With del set, the statistics of the processes
// it selects are removed after reading and their slots freed.
func (o *Objects) ReadThreadStats(del func(tgid uint32) bool) (ThreadStats, error) {
	return threadMaps{o.procs.ThreadSlots, o.syscalls.SlotStats, o.syscalls.SysStats, o.sched.SlotSched, o.procs.SchedStats}.read(del)
}

// read reads the maps; without slotSched and schedStats (a test's
// syscalls object alone), only the syscall statistics.
func (m threadMaps) read(del func(tgid uint32) bool) (ThreadStats, error) {
	if del == nil {
		del = func(uint32) bool { return false }
	}
	out := ThreadStats{Syscalls: map[SysKey]SysStats{}, Sched: map[ThreadKey]SchedStats{}}
	classes := uint32(len(SyscallClasses))
	if m.slotStats.MaxEntries() != m.slots.MaxEntries()*classes {
		return out, fmt.Errorf("slot_stats has %d entries, want %d (thread_slots × %d classes)", m.slotStats.MaxEntries(), m.slots.MaxEntries()*classes, classes)
	}
	sched := m.slotSched != nil && m.schedStats != nil
	if sched && m.slotSched.MaxEntries() != m.slots.MaxEntries() {
		return out, fmt.Errorf("slot_sched has %d entries, want %d (thread_slots)", m.slotSched.MaxEntries(), m.slots.MaxEntries())
	}
	addSys := func(k SysKey, v SysStats) {
		if v.Count == 0 || int(k.Class) >= len(SyscallClasses) {
			return
		}
		s := out.Syscalls[k]
		MergeSysStats(&s, v)
		out.Syscalls[k] = s
	}
	addSched := func(k ThreadKey, v SchedStats) {
		if v.Switches == 0 && v.OnCpuNs == 0 && v.OffCpuNs == 0 && v.RunQueueNs == 0 {
			return
		}
		s := out.Sched[k]
		mergeSchedStats(&s, v)
		out.Sched[k] = s
	}

	{
		var k SysKey
		var v SysStats
		var gone []SysKey
		it := m.sysStats.Iterate()
		for it.Next(&k, &v) {
			addSys(k, v)
			if del(k.Tgid) {
				gone = append(gone, k)
			}
		}
		if err := it.Err(); err != nil {
			return out, fmt.Errorf("read sys_stats: %w", err)
		}
		for _, k := range gone {
			_ = m.sysStats.Delete(k)
		}
	}
	if sched {
		var tid uint32
		var v SchedStats
		var gone []uint32
		it := m.schedStats.Iterate()
		for it.Next(&tid, &v) {
			addSched(ThreadKey{v.Tgid, tid}, v)
			if del(v.Tgid) {
				gone = append(gone, tid)
			}
		}
		if err := it.Err(); err != nil {
			return out, fmt.Errorf("read sched_stats: %w", err)
		}
		for _, k := range gone {
			_ = m.schedStats.Delete(k)
		}
	}

	owned, err := ownedSlots(m.slots)
	if err != nil {
		return out, err
	}
	var sv SysStats
	for slot, owner := range owned {
		tgid, tid := uint32(owner>>32)&^(slotExited>>32), uint32(owner)
		free := del(tgid)
		for c := uint32(0); c < classes; c++ {
			idx := slot*classes + c
			if err := m.slotStats.Lookup(idx, &sv); err != nil {
				return out, fmt.Errorf("read slot_stats[%d]: %w", idx, err)
			}
			addSys(SysKey{Tgid: tgid, Tid: tid, Class: c}, sv)
			if free && sv.Count != 0 {
				if err := m.slotStats.Update(idx, &SysStats{}, ebpf.UpdateExist); err != nil {
					return out, fmt.Errorf("clear slot_stats[%d]: %w", idx, err)
				}
			}
		}
		if sched {
			var v SchedStats
			if err := m.slotSched.Lookup(slot, &v); err != nil {
				return out, fmt.Errorf("read slot_sched[%d]: %w", slot, err)
			}
			addSched(ThreadKey{tgid, tid}, v)
			if free {
				if err := m.slotSched.Update(slot, &SchedStats{}, ebpf.UpdateExist); err != nil {
					return out, fmt.Errorf("clear slot_sched[%d]: %w", slot, err)
				}
			}
		}
		if free {
			// Its statistics are zero before the slot is free to claim.
			if err := m.slots.Update(slot, &ThreadSlot{}, ebpf.UpdateExist); err != nil {
				return out, fmt.Errorf("free thread slot %d: %w", slot, err)
			}
		}
	}
	return out, nil
}

// ownedSlots reads thread_slots in batches and returns the owner of each
// slot a thread holds (or held: its statistics are there until freed).
func ownedSlots(slots *ebpf.Map) (map[uint32]uint64, error) {
	owned := map[uint32]uint64{}
	keys := make([]uint32, 1024)
	vals := make([]ThreadSlot, 1024)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := slots.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			if vals[i].Owner != 0 {
				owned[keys[i]] = vals[i].Owner
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return owned, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			break // before Linux 5.6: one lookup per slot
		}
		if err != nil {
			return nil, fmt.Errorf("read thread_slots: %w", err)
		}
	}
	var s ThreadSlot
	for i := uint32(0); i < slots.MaxEntries(); i++ {
		if err := slots.Lookup(i, &s); err != nil {
			return nil, fmt.Errorf("read thread_slots[%d]: %w", i, err)
		}
		if s.Owner != 0 {
			owned[i] = s.Owner
		}
	}
	return owned, nil
}

// MergeSysStats adds b's calls to a: counts, totals and histograms summed,
// the slowest call the slower, the first entry the earlier and the last
// return the later.
func MergeSysStats(a *SysStats, b SysStats) {
	if b.Count == 0 {
		return
	}
	if a.Count == 0 {
		*a = b
		return
	}
	a.Count += b.Count
	a.TotalNs += b.TotalNs
	a.MaxNs = max(a.MaxNs, b.MaxNs)
	a.FirstNs = min(a.FirstNs, b.FirstNs)
	a.LastNs = max(a.LastNs, b.LastNs)
	for i := range a.Hist {
		a.Hist[i] += b.Hist[i]
	}
}

// mergeSchedStats adds b's times and counts to a (the in-progress
// instants are a's, or b's where a has none).
func mergeSchedStats(a *SchedStats, b SchedStats) {
	tgid := a.Tgid
	if tgid == 0 {
		tgid = b.Tgid
	}
	a.OnCpuNs += b.OnCpuNs
	a.OffCpuNs += b.OffCpuNs
	a.RunQueueNs += b.RunQueueNs
	a.Switches += b.Switches
	a.Preemptions += b.Preemptions
	if a.OnSinceNs == 0 {
		a.OnSinceNs = b.OnSinceNs
	}
	if a.OffSinceNs == 0 {
		a.OffSinceNs = b.OffSinceNs
	}
	if a.RqSinceNs == 0 {
		a.RqSinceNs = b.RqSinceNs
	}
	a.Tgid = tgid
}
