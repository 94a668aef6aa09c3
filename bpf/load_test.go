//go:build linux

package bpf_test

import (
	"errors"
	"io"
	"os/exec"
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
	objs, err := bpf.Load(bpf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	links, err := objs.Attach(bpf.Probes{Syscalls: true, Procs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer links.Close()

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
	var k bpf.SysKey
	var v bpf.SysStats
	it := objs.SysStats().Iterate()
	for it.Next(&k, &v) {
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
		if h != v.Count {
			t.Errorf("class %s: histogram holds %d calls, count %d", bpf.SyscallClasses[k.Class], h, v.Count)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"futex": n, "poll": n, "ioctl": n, "socket": 2 * n, "file": 2 * n, "other": n}
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
	// The exit took the process out of the targets map.
	var val uint32
	if err := objs.Targets().Lookup(uint32(target.Process.Pid), &val); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("exited target still in targets map (err %v)", err)
	}
}
