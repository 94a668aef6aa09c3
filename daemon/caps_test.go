//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"kernel.org/pub/linux/libs/security/libcap/cap"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/bpf/bpftest"
)

// needsSpec configures one run of the privilege experiment in a child.
type needsSpec struct {
	Keep     []string `json:"keep"` // capability names
	UID      int      `json:"uid"`
	Lib      string   `json:"lib"` // a libcuda copy to probe after the drop
	RootPID  int      `json:"root_pid"`
	OtherPID int      `json:"other_pid"`
}

const needsEnv = "HONE_TEST_PRIVILEGE_NEEDS"

// runNeedsProbe is the child of TestPrivilegeNeeds: it loads and attaches
// as the daemon does (once for uprobe_multi links, once for perf-event
// uprobes), drops to the given capabilities and user (no seccomp, no
// no_new_privs: capabilities alone are under test), then tries each thing
// the daemon does after attaching and prints what failed, as JSON.
func runNeedsProbe(spec string) int {
	var s needsSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	multi, err := bpf.Load(bpf.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	perf, err := bpf.Load(bpf.Options{PerfUprobes: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	links, err := multi.Attach(bpf.Probes{Syscalls: true, SyscallTimingWindows: true, Procs: true, Sched: true, Sockets: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rd, err := ringbuf.NewReader(multi.Events())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var keep []cap.Value
	for _, n := range s.Keep {
		v, err := cap.FromName(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		keep = append(keep, v)
	}
	if s.UID != 0 {
		if err := cap.SetGroups(s.UID); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := cap.SetUID(s.UID); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	c := cap.NewSet()
	c.SetFlag(cap.Permitted, true, keep...)
	c.SetFlag(cap.Effective, true, keep...)
	if err := c.SetProc(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := map[string]string{}
	try := func(name string, f func() error) {
		if err := f(); err != nil {
			out[name] = err.Error()
		} else {
			out[name] = "ok"
		}
	}
	try("map update+delete", func() error {
		if err := multi.AddTarget(1 << 30); err != nil {
			return err
		}
		return multi.RemoveTarget(1 << 30)
	})
	try("map iterate", func() error {
		var k bpf.SysKey
		var v bpf.SysStats
		it := multi.SysStats().Iterate()
		for it.Next(&k, &v) {
		}
		return it.Err()
	})
	try("syscall statistics (batch lookup)", func() error {
		_, err := multi.ReadSyscalls(nil)
		return err
	})
	try("percpu map lookup", func() error {
		var per []uint64
		return multi.Drops().Lookup(uint32(bpf.DropRingbuf), &per)
	})
	try("program statistics", func() error { _, err := multi.Programs()["sys_enter"].Stats(); return err })
	try("ring buffer read", func() error {
		rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := rd.Read(); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		return nil
	})
	try("late uprobe_multi attach", func() error {
		ls, _, err := multi.AttachCUDA(s.Lib, []int{bpf.CUDAGraph, bpf.CUDAStreamSync})
		ls.Close()
		return err
	})
	try("syscall timing window (sys_exit attach, detach)", func() error {
		if err := multi.TimeSyscalls(true); err != nil {
			return err
		}
		return multi.TimeSyscalls(false)
	})
	try("late perf-event uprobe attach", func() error {
		ls, _, err := perf.AttachCUDA(s.Lib, []int{bpf.CUDAGraph})
		ls.Close()
		return err
	})
	for name, pid := range map[string]int{"root's": s.RootPID, "another user's": s.OtherPID} {
		try("read maps of "+name+" process", func() error { _, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); return err })
		try("read cmdline of "+name+" process", func() error {
			_, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			return err
		})
	}
	try("close links", func() error { return links.Close() })
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	return 0
}

// TestPrivilegeNeeds establishes, by experiment, what the daemon needs
// after attaching, and so what KeptCapabilities keeps: each run attaches
// as root, drops to one capability set as uid 65534, then tries the
// daemon's later work. The findings are asserted, so a kernel that
// behaves differently fails here first.
func TestPrivilegeNeeds(t *testing.T) {
	bpftest.Require(t)
	_, lib := bpftest.Workload(t)
	// A libcuda the daemon has not seen, readable by uid 65534.
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	late := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(late, b, 0o755); err != nil {
		t.Fatal(err)
	}
	sleeper := func(cred *syscall.Credential) int {
		c := exec.Command("sleep", "60")
		if cred != nil {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c.Process.Pid
	}
	rootPID := sleeper(nil)
	otherPID := sleeper(&syscall.Credential{Uid: 1000, Gid: 1000})

	run := func(keep ...string) map[string]string {
		t.Helper()
		spec, _ := json.Marshal(needsSpec{Keep: keep, UID: 65534, Lib: late, RootPID: rootPID, OtherPID: otherPID})
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), needsEnv+"="+string(spec))
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("probe keeping %v: %v\n%s", keep, err, stderr.String())
		}
		var m map[string]string
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return m
	}
	fails := func(m map[string]string) []string {
		var out []string
		for k, v := range m {
			if v != "ok" {
				out = append(out, k)
			}
		}
		return sortStrings(out)
	}
	maps := []string{"read maps of another user's process", "read maps of root's process"}
	for _, tc := range []struct {
		keep []string
		want []string // what fails
	}{
		// No capability: everything on open descriptors works, and
		// uprobe_multi links attach; reading the maps of targets does not,
		// nor do perf-event uprobes.
		{nil, sortStrings(append([]string{"late perf-event uprobe attach"}, maps...))},
		// CAP_PERFMON reads the maps: with uprobe_multi, all the daemon needs.
		{[]string{"cap_perfmon"}, []string{"late perf-event uprobe attach"}},
		// CAP_BPF helps with neither.
		{[]string{"cap_bpf"}, sortStrings(append([]string{"late perf-event uprobe attach"}, maps...))},
		// CAP_SYS_ADMIN alone does both: the set for perf-event uprobes.
		{[]string{"cap_sys_admin"}, nil},
	} {
		m := run(tc.keep...)
		if got := fails(m); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("keeping %v as uid 65534, failed %v, want %v: %v", tc.keep, got, tc.want, m)
		} else {
			t.Logf("keeping %v: fails %v", tc.keep, got)
		}
	}
	if got, want := KeptCapabilities(true), []cap.Value{cap.PERFMON}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("KeptCapabilities(uprobe_multi) = %v, want %v", got, want)
	}
	if got, want := KeptCapabilities(false), []cap.Value{cap.SYS_ADMIN}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("KeptCapabilities(perf uprobes) = %v, want %v", got, want)
	}
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
