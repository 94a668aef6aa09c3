//go:build linux && (386 || amd64 || arm64)

package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cilium/ebpf"
)

// ThreadSlot is a target thread's syscall slot (hone.h, thread_slots).
type ThreadSlot = procsHoneThreadSlot

// slotExited marks a slot whose thread has exited (hone.h, SLOT_EXITED).
const slotExited = 1 << 63

// ReadSyscalls returns every target thread's statistics per syscall class.
// A thread's statistics are in its slot's entries of slot_stats or, for a
// thread without a slot of its own, in the sys_stats hash; a thread id
// reused within a process can have both, and they are summed, as the hash
// alone would have summed them. With del set, the statistics of the
// processes it selects are removed after reading and the slots of their
// threads that are gone freed. On an error it returns what it read.
func (o *Objects) ReadSyscalls(del func(tgid uint32) bool) (map[SysKey]SysStats, error) {
	if err := o.missing[FamilySyscalls]; err != nil {
		return nil, err
	}
	return readSyscalls(o.procs.ThreadSlots, o.syscalls.SlotStats, o.syscalls.SysStats, del)
}

func readSyscalls(slots, slotStats, hash *ebpf.Map, del func(tgid uint32) bool) (map[SysKey]SysStats, error) {
	if del == nil {
		del = func(uint32) bool { return false }
	}
	out := map[SysKey]SysStats{}
	classes := uint32(len(SyscallClasses))
	if slotStats.MaxEntries() != slots.MaxEntries()*classes {
		return out, fmt.Errorf("slot_stats has %d entries, want %d (thread_slots × %d classes)", slotStats.MaxEntries(), slots.MaxEntries()*classes, classes)
	}
	add := func(k SysKey, v SysStats) {
		if v.Count == 0 || int(k.Class) >= len(SyscallClasses) {
			return
		}
		s := out[k]
		MergeSysStats(&s, v)
		out[k] = s
	}

	// Everything is read before anything is removed, so that an error
	// part way loses nothing that was not reported.
	var k SysKey
	var v SysStats
	var gone []SysKey
	it := hash.Iterate()
	for it.Next(&k, &v) {
		add(k, v)
		if del(k.Tgid) {
			gone = append(gone, k)
		}
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("read sys_stats: %w", err)
	}
	owned, err := ownedSlots(slots)
	if err != nil {
		return out, err
	}
	var free []uint32
	for slot, owner := range owned {
		tgid, tid := uint32(owner>>32)&^(slotExited>>32), uint32(owner)
		for c := uint32(0); c < classes; c++ {
			idx := slot*classes + c
			if err := slotStats.Lookup(idx, &v); err != nil {
				return out, fmt.Errorf("read slot_stats[%d]: %w", idx, err)
			}
			add(SysKey{Tgid: tgid, Tid: tid, Class: c}, v)
		}
		// Only a thread known to be gone gives up its slot: a record
		// landing between the clearing and the freeing would otherwise
		// pass to the slot's next thread.
		if del(tgid) && (owner&slotExited != 0 || threadGone(tgid, tid)) {
			free = append(free, slot)
		}
	}

	for _, k := range gone {
		_ = hash.Delete(k)
	}
	var zero SysStats
	for _, slot := range free {
		for c := uint32(0); c < classes; c++ {
			if err := slotStats.Update(slot*classes+c, &zero, ebpf.UpdateExist); err != nil {
				return out, fmt.Errorf("clear slot_stats[%d]: %w", slot*classes+c, err)
			}
		}
		// Its statistics are zero before the slot is free to claim.
		if err := slots.Update(slot, &ThreadSlot{}, ebpf.UpdateExist); err != nil {
			return out, fmt.Errorf("free thread slot %d: %w", slot, err)
		}
	}
	return out, nil
}

// threadGone says whether thread tid of process tgid no longer exists (its
// exit was not seen: the slot was never marked).
func threadGone(tgid, tid uint32) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", tgid, tid))
	return errors.Is(err, fs.ErrNotExist)
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
// the slowest call the slower, the first timed entry the earlier and the
// last timed return the later.
func MergeSysStats(a *SysStats, b SysStats) {
	if b.Count == 0 {
		return
	}
	if a.Count == 0 {
		*a = b
		return
	}
	a.Count += b.Count
	if b.Timed > 0 {
		if a.Timed == 0 { // a's window is unset: b's is the merged one
			a.FirstNs, a.LastNs = b.FirstNs, b.LastNs
		} else {
			a.FirstNs = min(a.FirstNs, b.FirstNs)
			a.LastNs = max(a.LastNs, b.LastNs)
		}
	}
	a.Timed += b.Timed
	a.TotalNs += b.TotalNs
	a.MaxNs = max(a.MaxNs, b.MaxNs)
	for i := range a.Hist {
		a.Hist[i] += b.Hist[i]
	}
}
