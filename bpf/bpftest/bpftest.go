// Package bpftest is the one gate for hone's privileged tests, and builds the
// small C workloads they drive.
//
// Require skips a test with the reason when the kernel or privilege is
// missing, and fails it instead when HONE_REQUIRE_BPF=1 (CI runs as root on
// a BTF kernel, so there the tests must run).
package bpftest

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
)

// Require gates a privileged test.
func Require(tb testing.TB) {
	tb.Helper()
	reason := missing()
	if reason == "" {
		return
	}
	if os.Getenv("HONE_REQUIRE_BPF") == "1" {
		tb.Fatalf("HONE_REQUIRE_BPF=1 but this test cannot run: %s", reason)
	}
	tb.Skipf("privileged eBPF test skipped: %s (HONE_REQUIRE_BPF=1 makes this a failure)", reason)
}

var (
	missingOnce   sync.Once
	missingReason string
)

func missing() string {
	missingOnce.Do(func() {
		switch {
		case runtime.GOOS != "linux":
			missingReason = "not Linux"
		case os.Geteuid() != 0:
			missingReason = "not running as root"
		default:
			if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
				missingReason = "no kernel BTF at /sys/kernel/btf/vmlinux"
				return
			}
			for _, pt := range []ebpf.ProgramType{ebpf.RawTracepoint, ebpf.Kprobe} {
				if err := features.HaveProgramType(pt); err != nil {
					missingReason = fmt.Sprintf("program type %s: %v", pt, err)
					return
				}
			}
			if err := features.HaveMapType(ebpf.RingBuf); err != nil {
				missingReason = fmt.Sprintf("ring buffer maps: %v", err)
			}
		}
	})
	return missingReason
}

// MissingHooks is a bpf.Options.EditSpec for a kernel that lacks the
// named tracepoints: it renames the family's programs that attach to them
// (tp_btf) to a tracepoint no kernel has, so the kernel's BTF has no type
// for it and loading them fails as it would there (before Linux 5.19, for
// sockets' sock_send_length and sock_recv_length).
func MissingHooks(family string, hooks ...string) func(string, *ebpf.CollectionSpec) {
	return func(f string, spec *ebpf.CollectionSpec) {
		if f != family {
			return
		}
		for _, p := range spec.Programs {
			for _, h := range hooks {
				if p.AttachTo == h {
					p.AttachTo = h + "_nonexistent"
				}
			}
		}
	}
}

//go:embed testdata/workload.c
var workloadC string

//go:embed testdata/fakecuda.c
var fakeCUDAC string

// Workload builds the C workload program (see testdata/workload.c for its
// modes) into a temporary directory, linked against a fake libcuda.so.1
// (testdata/fakecuda.c) that exports stubs of the entry points the daemon
// probes (cuLaunchKernel, cuGraphLaunch, cuStreamSynchronize,
// cuCtxSynchronize, cuEventSynchronize, cuMemcpyHtoD_v2, cuMemcpyDtoH_v2,
// cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2) and of those the GPU proof's
// workload calls around them (cuInit, cuModuleLoadDataEx, cuGetProcAddress,
// graph capture, ...). It returns the program's path and the library's.
func Workload(tb testing.TB) (prog, libcuda string) {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		if os.Getenv("HONE_REQUIRE_BPF") == "1" {
			tb.Fatalf("gcc is needed to build the test workload: %v", err)
		}
		tb.Skipf("gcc not found: %v", err)
	}
	dir := tb.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	run := func(args ...string) {
		out, err := exec.Command("gcc", args...).CombinedOutput()
		if err != nil {
			tb.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	libdir := filepath.Join(dir, "lib")
	if err := os.Mkdir(libdir, 0o755); err != nil {
		tb.Fatal(err)
	}
	libcuda = filepath.Join(libdir, "libcuda.so.1")
	run("-O1", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", libcuda, write("fakecuda.c", fakeCUDAC))
	if err := os.Symlink("libcuda.so.1", filepath.Join(libdir, "libcuda.so")); err != nil {
		tb.Fatal(err)
	}
	prog = filepath.Join(dir, "workload")
	run("-O1", "-o", prog, write("workload.c", workloadC), "-L"+libdir, "-lcuda", "-Wl,-rpath,"+libdir)
	return prog, libcuda
}

// WaitBlockedInRead waits until pid is blocked in read(0, ...), so that
// making it a target from now on counts none of its earlier syscalls: the
// pending read entered before it was a target and is not counted.
func WaitBlockedInRead(pid int) error {
	for range 2000 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if err != nil {
			return err
		}
		f := strings.Fields(string(b))
		if len(f) > 2 && f[0] == "0" && f[1] == "0x0" {
			return nil
		}
		runtimeSleep()
	}
	return errors.New("process never blocked in read(0)")
}

// SpinBatch is the calls per batch of Spin's loop: ~1-3 ms each.
const SpinBatch = 10_000

// Spin runs the workload's tight getppid loop (mode "spin") n times, in
// batches of SpinBatch calls (n a multiple of it), and returns the loop's
// own nanoseconds per call (CLOCK_MONOTONIC around the loop, read by the
// workload) over the whole loop and in its fastest batch. The whole
// loop's mean is what the process paid; the fastest batch is the least a
// call costs, which a host's interference (another task, an interrupt, a
// VM's stolen time) only ever adds to. ready is as for Run.
func Spin(tb testing.TB, prog string, n int, ready func(pid int)) (mean, fastest float64) {
	tb.Helper()
	if n%SpinBatch != 0 || n == 0 {
		tb.Fatalf("Spin: %d calls is not a positive multiple of %d", n, SpinBatch)
	}
	out := Run(tb, prog, []string{"spin", fmt.Sprint(n), fmt.Sprint(n / SpinBatch)}, ready)
	var all, fast float64
	if _, err := fmt.Sscan(out, &all, &fast); err != nil {
		tb.Fatalf("spin printed %q: %v", out, err)
	}
	return all / float64(n), fast / SpinBatch
}

// Run runs the workload program with args (a mode that waits for "go" on
// its standard input before its work) and returns what it printed. ready,
// when not nil, is called with the process id once the process is blocked
// waiting to start, before any of its work: to make it a target, or to
// load a program for it.
func Run(tb testing.TB, prog string, args []string, ready func(pid int)) string {
	tb.Helper()
	c := exec.Command(prog, args...)
	in, err := c.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var out strings.Builder
	c.Stdout = &out
	if err := c.Start(); err != nil {
		tb.Fatal(err)
	}
	if err := WaitBlockedInRead(c.Process.Pid); err != nil {
		c.Process.Kill()
		c.Wait()
		tb.Fatal(err)
	}
	if ready != nil {
		ready(c.Process.Pid)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		tb.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		tb.Fatalf("%s %s: %v", prog, strings.Join(args, " "), err)
	}
	return out.String()
}
