//go:build linux

package bpf_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/bpf/bpftest"
)

// archs are the targets bpf/gen.go builds for: bpf2go's file suffix and the
// GOARCH whose syscall table the objects classify.
var archs = []struct{ suffix, goarch string }{
	{"x86", "amd64"},
	{"arm64", "arm64"},
}

var objects = []string{"procs", "syscalls", "sched", "sockets", "cuda"}

// wantClass is every syscall syscalls.bpf.c classifies, by its name in
// golang.org/x/sys/unix; every other syscall is SysOther. A name missing from
// an architecture's table (poll, select, epoll_wait on arm64) is skipped.
var wantClass = map[string]int{
	"FUTEX": bpf.SysFutex, "FUTEX_WAITV": bpf.SysFutex, "FUTEX_WAKE": bpf.SysFutex,
	"FUTEX_WAIT": bpf.SysFutex, "FUTEX_REQUEUE": bpf.SysFutex,
	"POLL": bpf.SysPoll, "SELECT": bpf.SysPoll, "EPOLL_WAIT": bpf.SysPoll,
	"EPOLL_CTL": bpf.SysPoll, "PSELECT6": bpf.SysPoll, "PPOLL": bpf.SysPoll,
	"EPOLL_PWAIT": bpf.SysPoll, "EPOLL_PWAIT2": bpf.SysPoll,
	"IOCTL":  bpf.SysIoctl,
	"SENDTO": bpf.SysSocket, "RECVFROM": bpf.SysSocket, "SENDMSG": bpf.SysSocket,
	"RECVMSG": bpf.SysSocket, "RECVMMSG": bpf.SysSocket, "SENDMMSG": bpf.SysSocket,
	"READ": bpf.SysFile, "WRITE": bpf.SysFile, "PREAD64": bpf.SysFile,
	"PWRITE64": bpf.SysFile, "READV": bpf.SysFile, "WRITEV": bpf.SysFile,
	"PREADV": bpf.SysFile, "PWRITEV": bpf.SysFile, "PREADV2": bpf.SysFile,
	"PWRITEV2": bpf.SysFile,
}

// syscallTable reads golang.org/x/sys/unix's syscall numbers for linux/goarch
// from its source (the module hone builds with), so that the table of an
// architecture other than the host's is checked against an independent one.
func syscallTable(t *testing.T, goarch string) map[string]uint32 {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	if err != nil {
		t.Fatalf("locate golang.org/x/sys: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "unix", "zsysnum_linux_"+goarch+".go"))
	if err != nil {
		t.Fatal(err)
	}
	table := map[string]uint32{}
	for _, m := range regexp.MustCompile(`(?m)^\s*SYS_(\w+)\s*=\s*(\d+)\s*$`).FindAllStringSubmatch(string(src), -1) {
		n, err := strconv.ParseUint(m[2], 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		table[m[1]] = uint32(n)
	}
	if len(table) < 250 {
		t.Fatalf("zsysnum_linux_%s.go: only %d syscalls parsed", goarch, len(table))
	}
	return table
}

// TestObjectsEveryArch loads the objects built for every architecture, not
// only the host's: eBPF bytecode is the same on all of them, so each must
// pass this kernel's verifier with its CO-RE relocations resolved. Then it
// runs each syscalls object's sys_enter/sys_exit (BPF_PROG_TEST_RUN, in this
// thread's context) once for every syscall number of its architecture and
// checks the class it counted, so a wrong number in either table fails here
// even on a host of the other architecture.
func TestObjectsEveryArch(t *testing.T) {
	bpftest.Require(t)
	for _, a := range archs {
		t.Run(a.goarch, func(t *testing.T) {
			colls := map[string]*ebpf.Collection{}
			for _, name := range objects {
				spec, err := ebpf.LoadCollectionSpec(name + "_" + a.suffix + "_bpfel.o")
				if err != nil {
					t.Fatal(err)
				}
				coll, err := ebpf.NewCollection(spec)
				if err != nil {
					t.Fatalf("load %s for %s: %+v", name, a.goarch, err)
				}
				t.Cleanup(func() { coll.Close() })
				colls[name] = coll
			}
			checkSyscallClasses(t, colls["syscalls"], syscallTable(t, a.goarch))
		})
	}
}

func checkSyscallClasses(t *testing.T, coll *ebpf.Collection, table map[string]uint32) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tgid, tid := uint32(os.Getpid()), uint32(unix.Gettid())
	if err := coll.Maps["targets"].Update(tgid, uint32(bpf.TargetSelected), ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	// What Objects.AddTarget does besides: the target check's bit.
	if err := coll.Maps["target_bits"].Update(tgid/64, uint64(1)<<(tgid%64), ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	enter, exit, stats := coll.Programs["sys_enter"], coll.Programs["sys_exit"], coll.Maps["sys_stats"]
	counts := map[bpf.SysKey]uint64{}
	seen := map[string]bool{}
	for name, nr := range table {
		want, ok := wantClass[name]
		if !ok {
			want = bpf.SysOther
		}
		seen[name] = true
		// raw_syscalls' arguments: the pt_regs pointer, then the id.
		if _, err := enter.Run(&ebpf.RunOptions{Context: []uint64{0, uint64(nr)}}); err != nil {
			t.Fatalf("run sys_enter: %v", err)
		}
		if _, err := exit.Run(&ebpf.RunOptions{Context: []uint64{0, 0}}); err != nil {
			t.Fatalf("run sys_exit: %v", err)
		}
		key := bpf.SysKey{Tgid: tgid, Tid: tid, Class: uint32(want)}
		counts[key]++
		all, err := bpf.ReadSyscallMaps(coll.Maps["thread_slots"], coll.Maps["slot_stats"], stats, nil)
		st := all[key]
		if err != nil || st.Count != counts[key] {
			t.Errorf("%s (%d): want class %s counted %d times, got %d (%v)",
				strings.ToLower(name), nr, bpf.SyscallClasses[want], counts[key], st.Count, err)
			counts[key] = st.Count
		}
	}
	for _, name := range []string{"FUTEX", "FUTEX_WAKE", "PPOLL", "IOCTL", "SENDMSG", "READ", "PWRITEV2"} {
		if !seen[name] {
			t.Errorf("syscall table has no %s", name)
		}
	}
}
