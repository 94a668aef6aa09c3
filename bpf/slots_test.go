//go:build linux

package bpf_test

import (
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/bpf/bpftest"
)

// TestThreadSlots drives the host architecture's sys_enter/sys_exit
// (BPF_PROG_TEST_RUN, in this thread's context) through each path a
// thread's statistics can take (hone.h, thread_slots): its own slot,
// claimed at its first call; the inflight/sys_stats hashes when another
// thread holds the slot, kept for the thread's life even once the slot is
// free; a slot whose thread exited, read together with the hash by
// ReadSyscalls; and a retired process's slot freed with its statistics.
func TestThreadSlots(t *testing.T) {
	bpftest.Require(t)
	suffix := map[string]string{"amd64": "x86", "arm64": "arm64"}[runtime.GOARCH]
	if suffix == "" {
		t.Skipf("no objects for %s", runtime.GOARCH)
	}
	// Each subtest runs in a goroutine of its own, locked to its thread:
	// the programs count the calling thread.
	tgid := uint32(os.Getpid())
	var tid, slot uint32
	var me uint64
	var futex bpf.SysKey
	thread := func(t *testing.T) {
		runtime.LockOSThread()
		t.Cleanup(runtime.UnlockOSThread)
		tid = uint32(unix.Gettid())
		slot = tid % 8192
		me = uint64(tgid)<<32 | uint64(tid)
		futex = bpf.SysKey{Tgid: tgid, Tid: tid, Class: bpf.SysFutex}
	}
	nr := map[string]uint64{"amd64": 202, "arm64": 98}[runtime.GOARCH] // futex

	load := func(t *testing.T) *ebpf.Collection {
		spec, err := ebpf.LoadCollectionSpec("syscalls_" + suffix + "_bpfel.o")
		if err != nil {
			t.Fatal(err)
		}
		coll, err := ebpf.NewCollection(spec)
		if err != nil {
			t.Fatalf("%+v", err)
		}
		t.Cleanup(func() { coll.Close() })
		if err := coll.Maps["target_bits"].Update(tgid/64, uint64(1)<<(tgid%64), ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		return coll
	}
	call := func(t *testing.T, coll *ebpf.Collection, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := coll.Programs["sys_enter"].Run(&ebpf.RunOptions{Context: []uint64{0, nr}}); err != nil {
				t.Fatal(err)
			}
			if _, err := coll.Programs["sys_exit"].Run(&ebpf.RunOptions{Context: []uint64{0, 0}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	owner := func(t *testing.T, coll *ebpf.Collection) uint64 {
		t.Helper()
		var s bpf.ThreadSlot
		if err := coll.Maps["thread_slots"].Lookup(slot, &s); err != nil {
			t.Fatal(err)
		}
		return s.Owner
	}
	setOwner := func(t *testing.T, coll *ebpf.Collection, o uint64) {
		t.Helper()
		if err := coll.Maps["thread_slots"].Update(slot, bpf.ThreadSlot{Owner: o}, ebpf.UpdateExist); err != nil {
			t.Fatal(err)
		}
	}
	read := func(t *testing.T, coll *ebpf.Collection, del func(uint32) bool) map[bpf.SysKey]bpf.SysStats {
		t.Helper()
		all, err := bpf.ReadSyscallMaps(coll.Maps["thread_slots"], coll.Maps["slot_stats"], coll.Maps["sys_stats"], del)
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	hashCount := func(t *testing.T, coll *ebpf.Collection) uint64 {
		t.Helper()
		var v bpf.SysStats
		if err := coll.Maps["sys_stats"].Lookup(futex, &v); err != nil {
			return 0
		}
		return v.Count
	}
	histSum := func(v bpf.SysStats) (n uint64) {
		for _, c := range v.Hist {
			n += uint64(c)
		}
		return n
	}

	t.Run("own slot", func(t *testing.T) {
		thread(t)
		coll := load(t)
		call(t, coll, 3)
		if o := owner(t, coll); o != me {
			t.Errorf("slot owner %#x, want %#x", o, me)
		}
		var v bpf.SysStats
		if err := coll.Maps["slot_stats"].Lookup(slot*6+bpf.SysFutex, &v); err != nil || v.Count != 3 {
			t.Errorf("slot_stats: %d calls (%v), want 3", v.Count, err)
		}
		if n := hashCount(t, coll); n != 0 {
			t.Errorf("sys_stats holds %d calls of a thread with a slot", n)
		}
		if got := read(t, coll, nil)[futex]; got.Count != 3 || histSum(got) != 3 || got.FirstNs == 0 || got.LastNs < got.FirstNs {
			t.Errorf("ReadSyscalls: %+v", got)
		}
		// Retiring a process whose thread is alive and unmarked keeps
		// the slot: a call recorded meanwhile must not pass to another.
		read(t, coll, func(p uint32) bool { return p == tgid })
		if o := owner(t, coll); o != me {
			t.Errorf("a live thread's slot was freed: owner %#x", o)
		}
	})

	t.Run("slot held by another thread", func(t *testing.T) {
		thread(t)
		coll := load(t)
		other := uint64(tgid+1)<<32 | uint64(tid+8192)
		setOwner(t, coll, other)
		call(t, coll, 2)
		if o := owner(t, coll); o != other {
			t.Errorf("slot owner %#x, want the other thread's %#x", o, other)
		}
		if n := hashCount(t, coll); n != 2 {
			t.Errorf("sys_stats: %d calls, want 2", n)
		}
		// The slot frees up: the thread stays on the hash.
		setOwner(t, coll, 0)
		call(t, coll, 1)
		if o := owner(t, coll); o != 0 {
			t.Errorf("a thread on the hash claimed a slot: owner %#x", o)
		}
		if got := read(t, coll, nil)[futex]; got.Count != 3 || histSum(got) != 3 {
			t.Errorf("ReadSyscalls: %d calls (hist %d), want 3", got.Count, histSum(got))
		}
	})

	t.Run("exited slot and hash summed", func(t *testing.T) {
		thread(t)
		coll := load(t)
		call(t, coll, 4) // into the slot
		setOwner(t, coll, me|bpf.SlotExited)
		call(t, coll, 2) // the same id again, as a new thread would: the hash
		if n := hashCount(t, coll); n != 2 {
			t.Errorf("sys_stats: %d calls, want 2", n)
		}
		all := read(t, coll, nil)
		if got := all[futex]; got.Count != 6 || histSum(got) != 6 {
			t.Errorf("ReadSyscalls: %d calls (hist %d), want 6 summed", got.Count, histSum(got))
		}
		if len(all) != 1 {
			t.Errorf("ReadSyscalls: %v, want one key", all)
		}
		// Retired: read once more, then freed.
		if got := read(t, coll, func(p uint32) bool { return p == tgid })[futex]; got.Count != 6 {
			t.Errorf("retiring read: %d calls, want 6", got.Count)
		}
		if o := owner(t, coll); o != 0 {
			t.Errorf("retired slot owner %#x, want free", o)
		}
		var v bpf.SysStats
		if err := coll.Maps["slot_stats"].Lookup(slot*6+bpf.SysFutex, &v); err != nil || v.Count != 0 {
			t.Errorf("retired slot's statistics: %d calls (%v), want zeroed", v.Count, err)
		}
		if all := read(t, coll, nil); len(all) != 0 {
			t.Errorf("after retiring: %v", all)
		}
	})
}
