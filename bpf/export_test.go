//go:build linux && (386 || amd64 || arm64)

package bpf

import "github.com/cilium/ebpf"

// ReadSyscallMaps is ReadThreadStats's syscall statistics over a
// syscalls collection's maps, for the tests that load the objects
// themselves.
func ReadSyscallMaps(slots, slotStats, sysStats *ebpf.Map, del func(uint32) bool) (map[SysKey]SysStats, error) {
	st, err := threadMaps{slots: slots, slotStats: slotStats, sysStats: sysStats}.read(del)
	return st.Syscalls, err
}

// SchedStatsMap is the shared sched_stats hash.
func (o *Objects) SchedStatsMap() *ebpf.Map { return o.procs.SchedStats }

// ThreadSlotsMap is the shared thread_slots map, for tests that check a
// slot's owner.
func (o *Objects) ThreadSlotsMap() *ebpf.Map { return o.procs.ThreadSlots }

// SlotExited is hone.h's SLOT_EXITED.
const SlotExited = slotExited
