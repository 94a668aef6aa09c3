//go:build linux && (386 || amd64 || arm64)

package bpf

import "github.com/cilium/ebpf"

// ReadSyscallMaps is ReadSyscalls over a collection's maps, for the tests
// that load the objects themselves.
var ReadSyscallMaps = readSyscalls

// ThreadSlotsMap is the shared thread_slots map, for tests that check a
// slot's owner.
func (o *Objects) ThreadSlotsMap() *ebpf.Map { return o.procs.ThreadSlots }

// SlotExited is hone.h's SLOT_EXITED.
const SlotExited = slotExited

// TargetBitsMap is the shared target_bits map, for tests of the prefilter.
func (o *Objects) TargetBitsMap() *ebpf.Map { return o.procs.TargetBits }
