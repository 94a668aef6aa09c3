//go:build linux

package bpf_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/bpf/bpftest"
)

// TestSyscallCountsExact loads the programs, makes one of two identical
// children a target while it waits, and checks the kernel counted exactly
// the syscalls the child made, by class, and nothing for the other child.
func TestSyscallCountsExact(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	objs := loadSyscallProbes(t, bpf.Options{})

	const n = 200
	start := func() (*exec.Cmd, io.WriteCloser) {
		c := exec.Command(prog, "syscalls", "200")
		in, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if err := bpftest.WaitBlockedInRead(c.Process.Pid); err != nil {
			t.Fatal(err)
		}
		return c, in
	}
	target, tin := start()
	other, oin := start()
	if err := objs.AddTarget(uint32(target.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	for _, w := range []io.WriteCloser{tin, oin} {
		if _, err := w.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*exec.Cmd{target, other} {
		if err := c.Wait(); err != nil {
			t.Fatalf("workload: %v", err)
		}
	}

	got := map[uint32]map[string]uint64{}
	all, err := objs.ReadSyscalls(nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range all {
		if got[k.Tgid] == nil {
			got[k.Tgid] = map[string]uint64{}
		}
		got[k.Tgid][bpf.SyscallClasses[k.Class]] += v.Count
		if k.Tid != k.Tgid {
			t.Errorf("single-threaded workload: tid %d != pid %d", k.Tid, k.Tgid)
		}
		var h uint64
		for _, c := range v.Hist {
			h += uint64(c)
		}
		// exit_group is entered, so counted, and never returns, so not
		// timed.
		untimed := uint64(0)
		if k.Class == bpf.SysOther {
			untimed = 1
		}
		if h != v.Timed || v.Timed+untimed != v.Count {
			t.Errorf("class %s: histogram holds %d calls, %d timed, count %d: every call that returned is timed by default", bpf.SyscallClasses[k.Class], h, v.Timed, v.Count)
		}
	}
	// other: n getppid and the exit_group.
	want := map[string]uint64{"futex": n, "poll": n, "ioctl": n, "socket": 2 * n, "file": 2 * n, "other": n + 1}
	tg := got[uint32(target.Process.Pid)]
	for class, w := range want {
		if tg[class] != w {
			t.Errorf("target %s syscalls = %d, want exactly %d (all: %v)", class, tg[class], w, tg)
		}
	}
	if len(tg) != len(want) {
		t.Errorf("target classes = %v, want %v", tg, want)
	}
	if o := got[uint32(other.Process.Pid)]; len(o) != 0 {
		t.Errorf("non-target child was counted: %v", o)
	}
	// The target's only thread held its slot (the workload is one
	// thread, and no other target shares the slot), and its exit marked
	// the slot; retiring the process frees the slot and its statistics.
	pid := uint32(target.Process.Pid)
	var ts bpf.ThreadSlot
	if err := objs.ThreadSlotsMap().Lookup(pid%8192, &ts); err != nil {
		t.Fatal(err)
	}
	if want := uint64(pid)<<32 | uint64(pid) | bpf.SlotExited; ts.Owner != want || ts.StartNs != 0 {
		t.Errorf("target's slot after its exit: owner %#x start %d, want owner %#x start 0", ts.Owner, ts.StartNs, want)
	}
	if _, err := objs.ReadSyscalls(func(tgid uint32) bool { return tgid == pid }); err != nil {
		t.Fatal(err)
	}
	if err := objs.ThreadSlotsMap().Lookup(pid%8192, &ts); err != nil || ts.Owner != 0 {
		t.Errorf("retired target's slot not freed: owner %#x (%v)", ts.Owner, err)
	}
	if again, err := objs.ReadSyscalls(nil); err != nil {
		t.Fatal(err)
	} else {
		for k, v := range again {
			if k.Tgid == pid {
				t.Errorf("retired target's statistics still read: %+v %d calls", k, v.Count)
			}
		}
	}
	// The exit took the process out of the targets map.
	var val uint32
	if err := objs.Targets().Lookup(uint32(target.Process.Pid), &val); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("exited target still in targets map (err %v)", err)
	}
}

// TestSyscallSampling: with Options.SyscallSample, a target thread's calls
// are all counted and exactly those its slot's xorshift32 sequence picks
// are timed: the claiming call, then each call whose next sequence value
// has no bit of the mask set (syscalls.bpf.c, sample_untimed). The
// workload's syscalls after the test's go are known one by one, so the
// timed count per class is exact.
func TestSyscallSampling(t *testing.T) {
	bpftest.Require(t)
	if _, err := bpf.Load(bpf.Options{SyscallSample: 3}); err == nil || !strings.Contains(err.Error(), "power of two") {
		t.Errorf("SyscallSample 3: err %v, want a power-of-two error", err)
	}
	prog, _ := bpftest.Workload(t)
	const sample = 8
	objs := loadSyscallProbes(t, bpf.Options{SyscallSample: sample})
	const n = 200
	var pid uint32
	bpftest.Run(t, prog, []string{"syscalls", fmt.Sprint(n)}, func(p int) {
		pid = uint32(p)
		if err := objs.AddTarget(pid); err != nil {
			t.Fatal(err)
		}
	})

	// The workload's calls in order (workload.c, "syscalls"); its last,
	// exit_group, is counted when entered and never returns, so it is not
	// timed.
	var calls []string
	for _, run := range []struct {
		classes []string
		times   int
	}{{[]string{"futex"}, n}, {[]string{"poll"}, n}, {[]string{"ioctl"}, n}, {[]string{"socket", "socket"}, n},
		{[]string{"file", "file"}, n}, {[]string{"other"}, n}} {
		for range run.times {
			calls = append(calls, run.classes...)
		}
	}
	calls = append(calls, "other") // exit_group
	wantCount, wantTimed := map[string]uint64{}, map[string]uint64{}
	x := pid | 1
	for i, class := range calls {
		wantCount[class]++
		if i > 0 {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
		}
		if i < len(calls)-1 && (i == 0 || x&(sample-1) == 0) {
			wantTimed[class]++
		}
	}
	all, err := objs.ReadSyscalls(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bpf.SysStats{}
	for k, v := range all {
		if k.Tgid == pid {
			got[bpf.SyscallClasses[k.Class]] = v
		}
	}
	var timed, count uint64
	for class, w := range wantCount {
		v := got[class]
		var h uint64
		for _, c := range v.Hist {
			h += uint64(c)
		}
		if v.Count != w || v.Timed != wantTimed[class] || h != v.Timed {
			t.Errorf("%s: count %d timed %d (histogram %d), want count %d timed %d", class, v.Count, v.Timed, h, w, wantTimed[class])
		}
		if v.Timed > 0 && (v.FirstNs == 0 || v.LastNs < v.FirstNs || v.TotalNs == 0) {
			t.Errorf("%s: timed calls without times: %+v", class, v)
		}
		timed += wantTimed[class]
		count += w
	}
	if len(got) != len(wantCount) {
		t.Errorf("classes %v, want %v", got, wantCount)
	}
	// About one call in sample is timed: the sequence is not degenerate.
	if timed < count/sample/2 || timed > count/sample*2 {
		t.Errorf("%d of %d calls timed, want about 1 in %d", timed, count, sample)
	}
	t.Logf("%d of %d calls timed (1 in %d sampled): %v", timed, count, sample, wantTimed)
}

// TestSyscallTimingWindows: with Probes.SyscallTimingWindows, sys_enter
// counts every call of a target and sys_exit runs only inside the windows
// TimeSyscalls opens. Three identical workloads, one before, one inside
// and one after a window: each is counted exactly; only the one inside is
// timed (every call that returned: all but exit_group); and sys_exit ran
// not once outside the window (bpf_stats run counts), which is what spares
// every other process on the host its cost.
func TestSyscallTimingWindows(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	objs, err := bpf.Load(bpf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	links, err := objs.Attach(bpf.Probes{Syscalls: true, Procs: true, SyscallTimingWindows: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { links.Close() })
	defer statsOn(t)()
	exit := objs.Programs()["sys_exit"]
	const n = 100
	var pids [3]uint32
	var exitRuns [3]uint64
	for i := range pids {
		if i == 1 {
			for range 2 { // opening an open window does nothing
				if err := objs.TimeSyscalls(true); err != nil {
					t.Fatal(err)
				}
			}
		}
		r0, _ := runStats(t, exit)
		bpftest.Run(t, prog, []string{"syscalls", fmt.Sprint(n)}, func(p int) {
			pids[i] = uint32(p)
			if err := objs.AddTarget(pids[i]); err != nil {
				t.Fatal(err)
			}
		})
		r1, _ := runStats(t, exit)
		exitRuns[i] = r1 - r0
		if i == 1 {
			for range 2 {
				if err := objs.TimeSyscalls(false); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if exitRuns[0] != 0 || exitRuns[2] != 0 || exitRuns[1] < 8*n {
		t.Errorf("sys_exit runs before, inside and after the window: %v, want 0, at least %d (the target's calls), 0", exitRuns, 8*n)
	}
	all, err := objs.ReadSyscalls(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"futex": n, "poll": n, "ioctl": n, "socket": 2 * n, "file": 2 * n, "other": n + 1}
	for i, pid := range pids {
		count, timed := map[string]uint64{}, map[string]uint64{}
		for k, v := range all {
			if k.Tgid == pid {
				class := bpf.SyscallClasses[k.Class]
				count[class] += v.Count
				timed[class] += v.Timed
			}
		}
		for class, w := range want {
			wt := uint64(0)
			if i == 1 {
				wt = w
				if class == "other" {
					wt-- // exit_group never returns
				}
			}
			if count[class] != w || timed[class] != wt {
				t.Errorf("workload %d (window %v): %s count %d timed %d, want count %d timed %d", i, i == 1, class, count[class], timed[class], w, wt)
			}
		}
	}
}

// loadSyscallProbes loads hone's programs with opts and attaches the
// syscall and process probes, until the test ends.
func loadSyscallProbes(t *testing.T, opts bpf.Options) *bpf.Objects {
	t.Helper()
	objs, err := bpf.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	links, err := objs.Attach(bpf.Probes{Syscalls: true, Procs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { links.Close() })
	return objs
}

// TestTargetBits: the one-read prefilter (hone.h, target_bits) holds
// exactly the targets. AddTarget sets a process's bit and RemoveTarget
// clears it (the daemon's atomic or/and on the shared mapping); a target's
// fork sets the child's bit before the child runs (its N getppid calls
// are all counted), and each exit clears its own bit in the kernel, the
// selected parent's included, with no call from the daemon.
func TestTargetBits(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	objs := loadSyscallProbes(t, bpf.Options{})
	bit := func(pid uint32) bool {
		t.Helper()
		var w uint64
		if err := objs.TargetBitsMap().Lookup(pid/64, &w); err != nil {
			t.Fatal(err)
		}
		return w&(1<<(pid%64)) != 0
	}
	var parent uint32
	const n = 37
	out := bpftest.Run(t, prog, []string{"fork", fmt.Sprint(n)}, func(pid int) {
		parent = uint32(pid)
		if bit(parent) {
			t.Errorf("pid %d's bit set before AddTarget", parent)
		}
		if err := objs.AddTarget(parent); err != nil {
			t.Fatal(err)
		}
		if !bit(parent) {
			t.Errorf("AddTarget(%d) left its bit clear", parent)
		}
	})
	var child uint32
	if _, err := fmt.Sscan(out, &child); err != nil {
		t.Fatalf("fork printed %q: %v", out, err)
	}
	if bit(parent) || bit(child) {
		t.Errorf("after both exited: parent's bit %v, child's bit %v, want both clear", bit(parent), bit(child))
	}
	all, err := objs.ReadSyscalls(nil)
	if err != nil {
		t.Fatal(err)
	}
	var other uint64
	for k, v := range all {
		if k.Tgid == child && k.Class == bpf.SysOther {
			other += v.Count
		}
	}
	// getppid × n and the child's exit_group (counted when entered).
	if other != n+1 {
		t.Errorf("followed child's other syscalls = %d, want exactly %d", other, n+1)
	}
	// The daemon's side on a live word: set and clear one pid, twice.
	self := uint32(os.Getpid())
	for range 2 {
		if err := objs.AddTarget(self); err != nil || !bit(self) {
			t.Fatalf("AddTarget(self): bit %v (%v)", bit(self), err)
		}
		if err := objs.RemoveTarget(self); err != nil || bit(self) {
			t.Fatalf("RemoveTarget(self): bit %v (%v)", bit(self), err)
		}
	}
}
