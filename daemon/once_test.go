//go:build linux

package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"kernel.org/pub/linux/libs/security/libcap/cap"

	"github.com/hone-llm/hone/bpf/bpftest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// rootTotals sums the syscall and CUDA call counts of every process with
// the given root target: live and recently exited threads, and the exited
// groups they were folded into.
func rootTotals(s *Snapshot, root int) (sys, cuda map[string]uint64) {
	sys, cuda = map[string]uint64{}, map[string]uint64{}
	roots := map[int]int{}
	for _, tg := range s.Targets {
		roots[tg.PID] = tg.RootPID
	}
	add := func(th Thread) {
		for c, st := range th.Syscalls {
			sys[c] += st.Count
		}
		for c, st := range th.CUDA {
			cuda[c] += st.Count
		}
	}
	for _, th := range s.Threads {
		if r, ok := roots[th.PID]; ok && r == root {
			add(th)
		}
	}
	for _, g := range s.Exited {
		if g.RootPID == root {
			add(groupThread(&g))
		}
	}
	return sys, cuda
}

// TestOnceDroppedPrivileges runs the daemon as `--once` would, in a child
// process that drops privileges after attaching, once with uprobe_multi
// links and once with perf-event uprobes. It checks, on every thread of
// the daemon, the exact capability sets (effective, permitted, bounding;
// nothing inheritable or ambient), the user (nobody), no_new_privs and the
// seccomp filter (syscalls it refuses answer EPERM there, and otherwise
// here); then that the daemon still works: a child forked by a target
// after the drop has its syscalls counted exactly, and those counts
// survive the fold of exited processes exactly; a CUDA workload started
// after the drop, as another user, is found by its command line, its
// libcuda probed late and its calls counted exactly; the snapshot and
// profile land in a directory only root may write to.
func TestOnceDroppedPrivileges(t *testing.T) {
	bpftest.Require(t)
	for _, mode := range []struct {
		name string
		perf bool
		keep []cap.Value
	}{{"uprobe_multi", false, []cap.Value{cap.PERFMON}}, {"perf_uprobes", true, []cap.Value{cap.SYS_ADMIN}}} {
		t.Run(mode.name, func(t *testing.T) { testOnceDropped(t, mode.perf, mode.keep) })
	}
}

func testOnceDropped(t *testing.T, perf bool, keep []cap.Value) {
	prog, _ := bpftest.Workload(t)
	// The workload runs as nobody, and the daemon ends as nobody: both
	// must reach the program and its libcuda.
	for dir := filepath.Dir(prog); dir != filepath.Dir(dir) && strings.HasPrefix(dir, os.TempDir()+"/"); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(filepath.Dir(prog), "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	const kidCalls = 300
	parent := startChild(t, prog, nil, "fork", strconv.Itoa(kidCalls))
	parent.waitReady(t)

	addr := freeAddr(t)
	outDir := t.TempDir() // mode 0700, root's: nobody could not create files here
	out := filepath.Join(outDir, "snapshot.json")
	prof := filepath.Join(outDir, "syscalls.pb.gz")
	spec, _ := json.Marshal(subprocessSpec{PIDs: []int{parent.pid()}, Match: "^" + regexp.QuoteMeta(prog) + " cuda", Listen: addr,
		Output: out, Profile: prof, Duration: 6 * time.Second, CUDALaunches: time.Minute, DropCaps: true, PerfUprobes: perf})
	d := exec.Command(os.Args[0], "-test.run=^$")
	d.Env = append(os.Environ(), subprocessEnv+"="+string(spec))
	var stderr syncBuffer // written by exec's copier while the test reads it
	d.Stderr = &stderr
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })

	snapshot := func() *Snapshot {
		resp, err := http.Get("http://" + addr + "/v1/snapshot")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var s Snapshot
		if json.NewDecoder(resp.Body).Decode(&s) != nil {
			return nil
		}
		return &s
	}
	eventually(t, 10*time.Second, func() string {
		if s := snapshot(); s == nil || s.Daemon.Capabilities == "" {
			return "daemon API never came up: " + stderr.String()
		}
		return ""
	})

	// Every thread holds exactly the kept capabilities, as nobody, with
	// no_new_privs and one seccomp filter.
	var mask uint64
	for _, c := range keep {
		mask |= 1 << uint(c)
	}
	capHex := fmt.Sprintf("%016x", mask)
	// The lines were written before the API came up, but exec's copier
	// may not have caught up with them yet.
	line := func(prefix string, v any) {
		t.Helper()
		eventually(t, 10*time.Second, func() string {
			m := regexp.MustCompile(prefix + ` (\{.*\})\n`).FindStringSubmatch(stderr.String())
			if m == nil || json.Unmarshal([]byte(m[1]), v) != nil {
				return fmt.Sprintf("no %s line from the daemon:\n%s", prefix, stderr.String())
			}
			return ""
		})
	}
	var status map[string]map[string]string
	line("thread-status:", &status)
	want := map[string]string{"Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534", "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": capHex, "CapEff": capHex, "CapBnd": capHex, "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2", "Seccomp_filters": "1"}
	if len(status) < 2 {
		t.Errorf("thread status of %d threads, want all of them: %v", len(status), status)
	}
	for tid, st := range status {
		for k, v := range want {
			if st[k] != v {
				t.Errorf("thread %s: %s %q, want %q", tid, k, st[k], v)
			}
		}
	}
	// The filter: each probe answers EPERM (clone3 ENOSYS) in the daemon,
	// and something else in this unfiltered test process.
	var filtered map[string]string
	line("seccomp-probes:", &filtered)
	base := seccompProbes()
	for k, got := range filtered {
		w := "EPERM"
		switch {
		case k == "getpid()":
			w = "ok"
		case k == "clone3(NULL, 0)":
			w = "ENOSYS"
		case k == "perf_event_open(NULL)" && perf: // needed for perf-event uprobes
			w = base[k]
		}
		if got != w {
			t.Errorf("seccomp: %s = %s in the daemon, want %s", k, got, w)
		}
		if w != "ok" && w != base[k] && base[k] == got {
			t.Errorf("seccomp: %s = %s unfiltered too: the probe proves nothing", k, got)
		}
	}

	// A CUDA workload started now, as nobody.
	const calls = 5
	w := startChildAs(t, &syscall.Credential{Uid: 65534, Gid: 65534}, prog, "cuda", strconv.Itoa(calls), strconv.Itoa(calls), strconv.Itoa(calls), "1000")
	eventually(t, 5*time.Second, func() string {
		s := snapshot()
		if s == nil || len(s.CUDA.Libraries) != 1 || len(s.CUDA.Libraries[0].Launch) != 1 {
			return "libcuda not probed after the privilege drop: " + stderr.String()
		}
		return ""
	})
	w.goAhead(t)
	// A child the target forks now.
	parent.goAhead(t)
	kid, err := strconv.Atoi(parent.line(t))
	if err != nil {
		t.Fatal(err)
	}
	parent.wait(t)
	w.wait(t)
	var before map[string]uint64
	eventually(t, 5*time.Second, func() string {
		s := snapshot()
		if s == nil {
			return "no snapshot"
		}
		// kidCalls getppid and the exit_group.
		if got := syscallCounts(s, kid); fmt.Sprint(got) != fmt.Sprint(map[string]uint64{"other": kidCalls + 1}) {
			return fmt.Sprintf("child %d forked after the drop: syscalls %v, want exactly other:%d", kid, got, kidCalls+1)
		}
		exited := 0
		for _, tg := range s.Targets {
			if (tg.PID == kid || tg.PID == parent.pid()) && tg.ExitMonotonicNS != 0 {
				exited++
			}
		}
		if exited != 2 {
			return fmt.Sprintf("exits of %d and %d not both recorded: %+v", parent.pid(), kid, s.Targets)
		}
		before, _ = rootTotals(s, parent.pid())
		return ""
	})
	if err := d.Wait(); err != nil {
		t.Fatalf("daemon --once: %v\n%s", err, stderr.String())
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatalf("snapshot not written into root's directory: %v\n%s", err, stderr.String())
	}
	if st.Mode().Perm() != outputPerm {
		t.Errorf("snapshot mode %v, want %v", st.Mode(), os.FileMode(outputPerm))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Daemon.Capabilities != strings.ToLower(capabilityNames(keep))+"=ep" || s.Daemon.UID != 65534 || !s.Daemon.NoNewPrivs || !s.Daemon.Seccomp {
		t.Errorf("snapshot's daemon section %+v, want %s=ep as uid 65534 with no_new_privs and seccomp",
			s.Daemon, strings.ToLower(capabilityNames(keep)))
	}
	// Both processes were folded by the end (unless they exited less than
	// retireAfter, and a scan, before it): their totals are unchanged.
	for _, tg := range s.Targets {
		if (tg.PID == kid || tg.PID == parent.pid()) &&
			(tg.ExitMonotonicNS == 0 || s.TakenMonotonicNS-tg.ExitMonotonicNS > uint64(retireAfter+time.Second)) {
			t.Errorf("exited process %d still in the table at the end: %+v", tg.PID, tg)
		}
	}
	if after, _ := rootTotals(&s, parent.pid()); fmt.Sprint(after) != fmt.Sprint(before) || after["other"] < kidCalls {
		t.Errorf("after the fold, the target's tree made %v syscalls, before it %v", after, before)
	}
	if _, err := os.Stat("/dev/nvidiactl"); err != nil && !strings.HasPrefix(s.NVML.Status, "unavailable (") {
		t.Errorf("no GPU here, but NVML status %q", s.NVML.Status)
	}
	_, got := rootTotals(&s, w.pid())
	if got["launch"] != calls || got["graph_launch"] != calls || got["stream_synchronize"] != calls {
		t.Errorf("CUDA calls after a late attach = %v, want %d each", got, calls)
	}
	// The pprof file of traced syscall time has the workload's sleeps
	// (clock_nanosleep, class other) under its process frame.
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var sleptNS int64
	for _, smp := range p.Sample {
		if smp.Location[0].Line[0].Function.Name == "syscall other" &&
			strings.HasSuffix(smp.Location[2].Line[0].Function.Name, "("+strconv.Itoa(w.pid())+")") {
			sleptNS += smp.Value[1]
		}
	}
	if min := int64(3*(calls-1)) * int64(time.Millisecond); sleptNS < min {
		t.Errorf("profile: %v of other-syscall time for the workload, want at least its %v of sleeps", time.Duration(sleptNS), time.Duration(min))
	}
	ru := d.ProcessState.SysUsage().(*syscall.Rusage)
	t.Logf("daemon child: cpu %v, max RSS %d MiB", time.Duration(ru.Utime.Nano()+ru.Stime.Nano()), ru.Maxrss/1024)
}
