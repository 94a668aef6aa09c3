//go:build linux

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
)

// child is a workload process waiting in read(0) for the test's go-ahead.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startChild(t *testing.T, prog string, env []string, args ...string) *child {
	t.Helper()
	return startCmd(t, prog, env, nil, args...)
}

// startChildAs starts the workload as another user.
func startChildAs(t *testing.T, cred *syscall.Credential, prog string, args ...string) *child {
	t.Helper()
	return startCmd(t, prog, nil, cred, args...)
}

func startCmd(t *testing.T, prog string, env []string, cred *syscall.Credential, args ...string) *child {
	t.Helper()
	c := exec.Command(prog, args...)
	c.Env = env
	if cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return &child{cmd: c, in: in, out: bufio.NewReader(out)}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) waitReady(t *testing.T) {
	t.Helper()
	if err := bpftest.WaitBlockedInRead(c.pid()); err != nil {
		t.Fatalf("pid %d: %v", c.pid(), err)
	}
}

func (c *child) goAhead(t *testing.T) {
	t.Helper()
	if _, err := c.in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
}

func (c *child) line(t *testing.T) string {
	t.Helper()
	s, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatalf("pid %d output: %v", c.pid(), err)
	}
	return strings.TrimSpace(s)
}

func (c *child) wait(t *testing.T) {
	t.Helper()
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("workload %v: %v", c.cmd.Args, err)
	}
}

func startDaemon(t *testing.T, cfg Config) *Daemon {
	t.Helper()
	if cfg.ScanPeriod == 0 {
		cfg.ScanPeriod = 100 * time.Millisecond
	}
	d, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

func threadsOf(s *Snapshot, pid int) []Thread {
	var out []Thread
	for _, th := range s.Threads {
		if th.PID == pid {
			out = append(out, th)
		}
	}
	return out
}

// workloadSyscalls is what "workload syscalls N" makes, per class: other
// holds its N getppid calls and its exit_group (counted when entered).
func workloadSyscalls(n uint64) map[string]uint64 {
	return map[string]uint64{"futex": n, "poll": n, "ioctl": n, "socket": 2 * n, "file": 2 * n, "other": n + 1}
}

func syscallCounts(s *Snapshot, pid int) map[string]uint64 {
	got := map[string]uint64{}
	for _, th := range threadsOf(s, pid) {
		for c, st := range th.Syscalls {
			got[c] += st.Count
		}
	}
	return got
}

// eventually polls f until it returns "" or the time is up.
func eventually(t *testing.T, d time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDaemonSyscallsExactPerClass: exact counts per class, timing every
// call, with --syscall-sample 8 (counts still exact; bpf's
// TestSyscallSampling checks which calls are timed) and with syscall
// timing windows: one that lasts the whole test (every call that returns
// is timed) and one that closes 1 ms after start, before the workload
// (counts still exact; bpf's TestSyscallTimingWindows checks that calls
// outside a window are not timed).
func TestDaemonSyscallsExactPerClass(t *testing.T) {
	bpftest.Require(t)
	for _, c := range []struct {
		name           string
		sample         uint32
		window, period time.Duration
	}{
		{"sample-1", 1, 0, 0},
		{"sample-8", 8, 0, 0},
		{"window-open", 1, 59 * time.Minute, time.Hour},
		{"window-closed", 1, time.Millisecond, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			testDaemonSyscallsExact(t, Config{SyscallSample: c.sample, SyscallTimingWindow: c.window, SyscallTimingPeriod: c.period})
		})
	}
}

func testDaemonSyscallsExact(t *testing.T, cfg Config) {
	sample := cfg.SyscallSample
	closed := cfg.SyscallTimingPeriod > 0 && cfg.SyscallTimingWindow < time.Second
	prog, _ := bpftest.Workload(t)
	const n = 300
	target := startChild(t, prog, nil, "syscalls", strconv.Itoa(n))
	other := startChild(t, prog, nil, "syscalls", strconv.Itoa(n))
	target.waitReady(t)
	other.waitReady(t)
	cfg.PIDs, cfg.Sched = []int{target.pid()}, true
	d := startDaemon(t, cfg)
	target.goAhead(t)
	other.goAhead(t)
	target.wait(t)
	other.wait(t)
	want := workloadSyscalls(n)
	eventually(t, 5*time.Second, func() string {
		s := d.Snapshot()
		got := syscallCounts(s, target.pid())
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("target syscalls by class = %v, want exactly %v", got, want)
		}
		if o := threadsOf(s, other.pid()); len(o) != 0 {
			return fmt.Sprintf("non-target process traced: %+v", o)
		}
		var exited bool
		for _, tg := range s.Targets {
			if tg.PID == target.pid() && tg.How == "pid" && tg.ExitMonotonicNS > tg.AddedMonotonicNS {
				exited = true
			}
		}
		if !exited {
			return fmt.Sprintf("target exit not recorded: %+v", s.Targets)
		}
		if s.BPF.SyscallSample != sample {
			return fmt.Sprintf("snapshot's syscall_sample %d, want %d", s.BPF.SyscallSample, sample)
		}
		if w, p := s.BPF.SyscallTimingWindowMS, s.BPF.SyscallTimingPeriodMS; w != cfg.SyscallTimingWindow.Milliseconds() || p != cfg.SyscallTimingPeriod.Milliseconds() {
			return fmt.Sprintf("snapshot's syscall timing window %d ms of %d ms, want %v of %v", w, p, cfg.SyscallTimingWindow, cfg.SyscallTimingPeriod)
		}
		var timed, count uint64
		for _, th := range threadsOf(s, target.pid()) {
			for c, st := range th.Syscalls {
				timed += st.Timed
				count += st.Count
				returned := st.Count
				if c == "other" {
					returned-- // exit_group never returns
				}
				if sample == 1 && !closed && st.Timed != returned || st.Timed > returned {
					return fmt.Sprintf("%s: %d of %d calls timed (%d returned), sampling 1 in %d", c, st.Timed, st.Count, returned, sample)
				}
				if st.Timed == 0 {
					continue
				}
				if st.FirstMonotonicNS < s.StartedMonotonicNS || st.LastMonotonicNS > s.TakenMonotonicNS || st.FirstMonotonicNS > st.LastMonotonicNS {
					return fmt.Sprintf("%s: timestamps %d..%d outside the daemon's run %d..%d", c, st.FirstMonotonicNS, st.LastMonotonicNS, s.StartedMonotonicNS, s.TakenMonotonicNS)
				}
			}
		}
		if sample > 1 && (timed < count/uint64(sample)/2 || timed > 2*count/uint64(sample)) {
			return fmt.Sprintf("%d of %d calls timed, want about 1 in %d", timed, count, sample)
		}
		return ""
	})
}

func TestDaemonFollowsForks(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	const n = 250
	parent := startChild(t, prog, nil, "fork", strconv.Itoa(n))
	parent.waitReady(t)
	d := startDaemon(t, Config{PIDs: []int{parent.pid()}})
	parent.goAhead(t)
	kid, err := strconv.Atoi(parent.line(t))
	if err != nil {
		t.Fatal(err)
	}
	parent.wait(t)
	eventually(t, 5*time.Second, func() string {
		s := d.Snapshot()
		// The child made exactly n getppid calls after the fork, then
		// exit_group (counted when entered).
		got := syscallCounts(s, kid)
		if fmt.Sprint(got) != fmt.Sprint(map[string]uint64{"other": n + 1}) {
			return fmt.Sprintf("forked child %d syscalls = %v, want exactly other:%d", kid, got, n+1)
		}
		for _, tg := range s.Targets {
			if tg.PID == kid {
				if tg.How != "fork" || tg.PPID != parent.pid() {
					return fmt.Sprintf("child target = %+v, want how=fork ppid=%d", tg, parent.pid())
				}
				return ""
			}
		}
		return fmt.Sprintf("child %d not among targets %+v", kid, s.Targets)
	})
}

// TestDaemonFollowsExec: a target's child that execs another program (as
// vLLM's spawned workers do) stays traced under its new name.
func TestDaemonFollowsExec(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to exec")
	}
	parent := startChild(t, prog, nil, "forkexec", truePath)
	parent.waitReady(t)
	d := startDaemon(t, Config{PIDs: []int{parent.pid()}})
	parent.goAhead(t)
	kid, err := strconv.Atoi(parent.line(t))
	if err != nil {
		t.Fatal(err)
	}
	parent.wait(t)
	eventually(t, 5*time.Second, func() string {
		s := d.Snapshot()
		var tg *Target
		for i := range s.Targets {
			if s.Targets[i].PID == kid {
				tg = &s.Targets[i]
			}
		}
		if tg == nil || tg.How != "fork" || tg.Comm != "true" || tg.ExitMonotonicNS == 0 {
			return fmt.Sprintf("exec'd child %d: target %+v, want how=fork comm=true and an exit", kid, tg)
		}
		// The new image's loader reads its libraries: file syscalls after
		// the exec are traced too.
		if got := syscallCounts(s, kid); got["file"] == 0 || got["other"] == 0 {
			return fmt.Sprintf("exec'd child's syscalls = %v, want file reads and others after the exec", got)
		}
		return ""
	})
}

func TestDaemonKVTransferBytesAndBursts(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	const b = 4 << 20
	// The pause is well above the burst gap, and the gap well above a
	// receiver's descheduling on a busy 2-core runner, so each half is
	// exactly one burst at each end.
	const pause = 600 * time.Millisecond
	server := startChild(t, prog, nil, "tcp-server")
	port, err := strconv.Atoi(server.line(t))
	if err != nil {
		t.Fatal(err)
	}
	client := startChild(t, prog, nil, "tcp-client", strconv.Itoa(port), strconv.Itoa(b), strconv.Itoa(int(pause/time.Millisecond)))
	client.waitReady(t)
	d := startDaemon(t, Config{PIDs: []int{server.pid(), client.pid()}, KVPorts: []uint16{uint16(port)}, BurstGap: 250 * time.Millisecond})
	client.goAhead(t)
	var ts [4]uint64
	if _, err := fmt.Sscan(client.line(t), &ts[0], &ts[1], &ts[2], &ts[3]); err != nil {
		t.Fatal(err)
	}
	client.wait(t)
	if got := server.line(t); got != strconv.Itoa(b) {
		t.Fatalf("server received %s bytes, want %d", got, b)
	}
	server.wait(t)
	const tol = uint64(250 * time.Millisecond) // scheduling tolerance (busy shared runners)
	eventually(t, 5*time.Second, func() string {
		s := d.Snapshot()
		var cl, sv *Connection
		for i, c := range s.Connections {
			switch {
			case c.PID == client.pid() && strings.HasSuffix(c.Remote, ":"+strconv.Itoa(port)):
				cl = &s.Connections[i]
			case c.PID == server.pid() && strings.HasSuffix(c.Local, ":"+strconv.Itoa(port)):
				sv = &s.Connections[i]
			}
		}
		if cl == nil || sv == nil {
			return fmt.Sprintf("connections: client %v server %v in %+v", cl, sv, s.Connections)
		}
		if cl.TXBytes != b || sv.RXBytes != b || cl.RXBytes != 0 || sv.TXBytes != 0 {
			return fmt.Sprintf("bytes: client tx %d rx %d, server rx %d tx %d; want exactly %d one way", cl.TXBytes, cl.RXBytes, sv.RXBytes, sv.TXBytes, b)
		}
		if !cl.KVTransfer || !sv.KVTransfer {
			return "connections not marked as KV transfers"
		}
		if cl.Local != sv.Remote || cl.Remote != sv.Local {
			return fmt.Sprintf("the two ends do not mirror: %s->%s vs %s->%s", cl.Local, cl.Remote, sv.Local, sv.Remote)
		}
		if len(cl.Bursts) != 2 || len(sv.Bursts) != 2 {
			return fmt.Sprintf("bursts: client %+v server %+v, want 2 each", cl.Bursts, sv.Bursts)
		}
		for i, bu := range cl.Bursts {
			lo, hi := ts[2*i], ts[2*i+1]
			if bu.Direction != "tx" || bu.Bytes != b/2 || bu.StartMonotonicNS < lo || bu.EndMonotonicNS > hi || bu.Open {
				return fmt.Sprintf("client burst %d = %+v, want tx of %d bytes closed within the sender's clock readings [%d, %d]; client %+v server %+v", i, bu, b/2, lo, hi, *cl, *sv)
			}
		}
		for i, bu := range sv.Bursts {
			lo, hi := ts[2*i], ts[2*i+1]+tol
			if bu.Direction != "rx" || bu.Bytes != b/2 || bu.StartMonotonicNS < lo || bu.EndMonotonicNS > hi || bu.Open {
				return fmt.Sprintf("server burst %d = %+v, want rx of %d bytes within [%d, %d]", i, bu, b/2, lo, hi)
			}
		}
		if gap := cl.Bursts[1].StartMonotonicNS - cl.Bursts[0].EndMonotonicNS; gap < uint64(pause) || gap > uint64(pause)+tol {
			return fmt.Sprintf("gap between client bursts %v, want the %v pause within %v", time.Duration(gap), pause, time.Duration(tol))
		}
		if cl.ClosedMonotonicNS == 0 || cl.EstablishedMonotonic == 0 || cl.EstablishedMonotonic > cl.FirstMonotonicNS {
			return fmt.Sprintf("client lifetime: established %d first %d closed %d", cl.EstablishedMonotonic, cl.FirstMonotonicNS, cl.ClosedMonotonicNS)
		}
		return ""
	})
}

func TestDaemonCUDAUprobes(t *testing.T) {
	bpftest.Require(t)
	prog, lib := bpftest.Workload(t)
	const launches, graphs, syncs = 40, 25, 10
	const gap = 20 * time.Millisecond
	const syncSleep = 15 * time.Millisecond
	env := []string{fmt.Sprintf("FAKECUDA_SYNC_US=%d", syncSleep/time.Microsecond)}
	w := startChild(t, prog, env, "cuda", strconv.Itoa(launches), strconv.Itoa(graphs), strconv.Itoa(syncs), strconv.Itoa(int(gap/time.Microsecond)))
	w.waitReady(t)
	d := startDaemon(t, Config{PIDs: []int{w.pid()}, CUDALaunches: time.Minute, Sched: true})
	s := d.Snapshot()
	if len(s.CUDA.Libraries) != 1 || s.CUDA.Libraries[0].Error != "" {
		t.Fatalf("libcuda not probed: %+v", s.CUDA)
	}
	l := s.CUDA.Libraries[0]
	if !strings.HasSuffix(l.Path, "/libcuda.so.1") || !strings.HasPrefix(l.Path, lib[:len(lib)-len("/libcuda.so.1")]) {
		t.Errorf("probed %s, want %s", l.Path, lib)
	}
	if fmt.Sprint(l.Symbols) != "[cuGraphLaunch cuStreamSynchronize cuCtxSynchronize cuMemcpyDtoHAsync_v2 cuMemcpyHtoDAsync_v2 "+
		"cuEventSynchronize cuMemcpyDtoH_v2 cuMemcpyHtoD_v2]" || fmt.Sprint(l.Launch) != "[cuLaunchKernel]" {
		t.Errorf("symbols = %v, launch symbols = %v", l.Symbols, l.Launch)
	}
	w.goAhead(t)
	w.wait(t)
	// Sleeps overshoot by scheduling delay, never undershoot: the minimum
	// gap is at least the sleep, the mean within tol of it (usleep overshoot
	// on a busy 2-core runner), and a single gap within 250ms.
	const tol = 25 * time.Millisecond
	s = d.Snapshot()
	ths := threadsOf(s, w.pid())
	if len(ths) != 1 {
		t.Fatalf("threads of the CUDA workload: %+v", ths)
	}
	want := map[string]uint64{"launch": launches, "graph_launch": graphs, "stream_synchronize": syncs}
	got := map[string]uint64{}
	for call, st := range ths[0].CUDA {
		got[call] = st.Count
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("CUDA calls = %v, want exactly %v", got, want)
	}
	for call, st := range ths[0].CUDA {
		minGap := gap
		if call == "stream_synchronize" {
			minGap = gap + syncSleep // the previous call's own wait is between entries
		}
		mean := time.Duration(st.GapSumNS / st.GapCount)
		if st.GapCount != st.Count-1 || time.Duration(st.GapMinNS) < minGap || time.Duration(st.GapMaxNS) > minGap+250*time.Millisecond || mean > minGap+tol {
			t.Errorf("%s gaps: n=%d min %v mean %v max %v, want %d gaps of %v (+%v)", call, st.GapCount,
				time.Duration(st.GapMinNS), mean, time.Duration(st.GapMaxNS), st.Count-1, minGap, tol)
		}
		var h uint64
		for _, c := range st.GapHistLog2NS {
			h += uint64(c)
		}
		if h != st.GapCount {
			t.Errorf("%s gap histogram holds %d, want %d", call, h, st.GapCount)
		}
	}
	// The thread slept (launches-1 + graphs-1 + syncs-1) gaps and syncs
	// synchronize waits: all of it off CPU, each sleep a switch. The
	// off-CPU sum has come out 5 ms short of the 1.59 s of sleeps once in a
	// full CI run (cause not found yet), so it must cover the sleeps within
	// tol, not to the nanosecond.
	slept := time.Duration(launches-1+graphs-1+syncs-1)*gap + syncs*syncSleep
	if sc := ths[0].Sched; sc == nil || time.Duration(sc.OffCPUNS) < slept-tol || sc.OnCPUNS == 0 ||
		sc.Switches < launches+graphs+syncs-3+syncs || time.Duration(sc.OffCPUNS) > time.Duration(s.TakenMonotonicNS-s.StartedMonotonicNS) {
		t.Errorf("sched = %+v, want off-CPU ≥ %v (the sleeps, less %v), some on-CPU time, ≥ %d switches", sc, slept, tol, launches+graphs+syncs-3+syncs)
	}
	sy := ths[0].CUDA["stream_synchronize"]
	if sy.WaitCount != syncs || time.Duration(sy.WaitMinNS) < syncSleep || time.Duration(sy.WaitSumNS/sy.WaitCount) > syncSleep+tol {
		t.Errorf("synchronize waits: n=%d min %v mean %v, want %d of %v", sy.WaitCount, time.Duration(sy.WaitMinNS),
			time.Duration(sy.WaitSumNS/max(sy.WaitCount, 1)), syncs, syncSleep)
	}
}

// TestDaemonCUDAHostWaits counts, exactly, the calls the host waits in
// besides stream synchronizes (event and context synchronizes, synchronous
// copies both ways) and async copies, each with a wait per call from the
// uretprobe that covers the fake driver's sleep; and nothing else.
func TestDaemonCUDAHostWaits(t *testing.T) {
	bpftest.Require(t)
	for _, perf := range []bool{false, true} {
		t.Run(map[bool]string{false: "uprobe_multi", true: "perf_uprobes"}[perf], func(t *testing.T) { testCUDAHostWaits(t, perf) })
	}
}

func testCUDAHostWaits(t *testing.T, perf bool) {
	prog, _ := bpftest.Workload(t)
	const events, ctxs, htod, dtoh, async = 7, 5, 11, 13, 17
	const gap = 2 * time.Millisecond
	const syncSleep = 3 * time.Millisecond
	env := []string{fmt.Sprintf("FAKECUDA_SYNC_US=%d", syncSleep/time.Microsecond)}
	w := startChild(t, prog, env, "cudawait", strconv.Itoa(events), strconv.Itoa(ctxs), strconv.Itoa(htod),
		strconv.Itoa(dtoh), strconv.Itoa(async), strconv.Itoa(int(gap/time.Microsecond)))
	w.waitReady(t)
	d := startDaemon(t, Config{PIDs: []int{w.pid()}, perfUprobes: perf})
	s := d.Snapshot()
	if len(s.CUDA.Libraries) != 1 || s.CUDA.Libraries[0].Error != "" || len(s.CUDA.Libraries[0].Launch) != 0 {
		t.Fatalf("libcuda not probed (or launches probed without --cuda-launches): %+v", s.CUDA)
	}
	w.goAhead(t)
	w.wait(t)
	s = d.Snapshot()
	ths := threadsOf(s, w.pid())
	if len(ths) != 1 {
		t.Fatalf("threads of the CUDA workload: %+v", ths)
	}
	want := map[string]uint64{"event_synchronize": events, "ctx_synchronize": ctxs, "memcpy_sync": htod + dtoh, "memcpy_async": async}
	got := map[string]uint64{}
	for call, st := range ths[0].CUDA {
		got[call] = st.Count
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("CUDA calls = %v, want exactly %v", got, want)
	}
	const tol = 25 * time.Millisecond
	for call, n := range want {
		st := ths[0].CUDA[call]
		if call == "memcpy_async" {
			if st.WaitCount != 0 {
				t.Errorf("memcpy_async has %d waits: the host does not wait in async copies, no uretprobe", st.WaitCount)
			}
			continue
		}
		if st.WaitCount != n || time.Duration(st.WaitMinNS) < syncSleep || time.Duration(st.WaitSumNS/st.WaitCount) > syncSleep+tol {
			t.Errorf("%s waits: n=%d min %v mean %v, want %d of %v", call, st.WaitCount, time.Duration(st.WaitMinNS),
				time.Duration(st.WaitSumNS/max(st.WaitCount, 1)), n, syncSleep)
		}
		var h uint64
		for _, c := range st.WaitHistLog2NS {
			h += uint64(c)
		}
		if h != n {
			t.Errorf("%s wait histogram holds %d, want %d", call, h, n)
		}
	}
}

// cgroup2Root is where the cgroup v2 hierarchy is mounted, or "".
func cgroup2Root() string {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st syscall.Statfs_t
		if syscall.Statfs(d, &st) == nil && st.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC
			return d
		}
	}
	return ""
}

func TestDaemonCgroupTarget(t *testing.T) {
	bpftest.Require(t)
	root := cgroup2Root()
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	prog, _ := bpftest.Workload(t)
	const n = 50
	w := startChild(t, prog, nil, "syscalls", strconv.Itoa(n))
	w.waitReady(t)
	dir := filepath.Join(root, fmt.Sprintf("hone-test-%d", w.pid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(w.pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, Config{Cgroups: []string{dir}})
	w.goAhead(t)
	w.wait(t)
	want := workloadSyscalls(n)
	eventually(t, 5*time.Second, func() string {
		s := d.Snapshot()
		if got := syscallCounts(s, w.pid()); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("cgroup member's syscalls = %v, want %v", got, want)
		}
		for _, tg := range s.Targets {
			if tg.PID == w.pid() && tg.How == "cgroup" {
				return ""
			}
		}
		return fmt.Sprintf("targets %+v lack pid %d by cgroup", s.Targets, w.pid())
	})
}

// staticPods is a fixed PodSet.
type staticPods map[string]string

func (p staticPods) Pods() map[string]string { return p }

func TestPodOfCgroup(t *testing.T) {
	const uid = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
	pods := map[string]string{uid: "serving/vllm-decode-0"}
	under := strings.ReplaceAll(uid, "-", "_")
	for _, c := range []struct {
		name, text, want string
	}{
		{"systemd v2", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + under + ".slice/cri-containerd-abc.scope\n", uid},
		{"cgroupfs v2", "0::/kubepods/besteffort/pod" + uid + "/0123abcd\n", uid},
		{"guaranteed systemd", "0::/kubepods.slice/kubepods-pod" + under + ".slice/cri-containerd-abc.scope\n", uid},
		{"v1 hybrid", "12:pids:/kubepods/pod" + uid + "/ctr\n11:cpu,cpuacct:/kubepods/pod" + uid + "/ctr\n0::/\n", uid},
		{"pod cgroup itself (pause)", "0::/kubepods.slice/kubepods-pod" + under + ".slice\n", uid},
		{"another pod", "0::/kubepods.slice/kubepods-pod" + strings.Replace(under, "0f", "1f", 1) + ".slice/x.scope\n", ""},
		{"a service", "0::/system.slice/containerd.service\n", ""},
		{"uid elsewhere than a pod component", "0::/user.slice/" + uid + "/x\n", ""},
		{"empty", "", ""},
	} {
		if got := podOfCgroup(c.text, pods); got != c.want {
			t.Errorf("%s: podOfCgroup = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestDaemonPodTarget puts a workload in a container cgroup laid out as
// the kubelet's systemd driver does and gives the daemon the pod's UID:
// the process becomes a target by pod, with exact syscall counts; a
// --cgroup naming the pod's cgroup (the container's parent) finds it too.
func TestDaemonPodTarget(t *testing.T) {
	bpftest.Require(t)
	root := cgroup2Root()
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	for _, by := range []string{"pod", "cgroup"} {
		t.Run(by, func(t *testing.T) {
			prog, _ := bpftest.Workload(t)
			const n = 40
			w := startChild(t, prog, nil, "syscalls", strconv.Itoa(n))
			w.waitReady(t)
			uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", w.pid())
			top := filepath.Join(root, fmt.Sprintf("hone-test-kubepods-%d.slice", w.pid()))
			podDir := filepath.Join(top, "kubepods-besteffort-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
			ctr := filepath.Join(podDir, "cri-containerd-0123abcd.scope")
			if err := os.MkdirAll(ctr, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for _, d := range []string{ctr, podDir, top} {
					os.Remove(d)
				}
			})
			if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(strconv.Itoa(w.pid())), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := Config{Pods: staticPods{uid: "serving/vllm-0"}}
			if by == "cgroup" {
				cfg = Config{Cgroups: []string{podDir}}
			}
			d := startDaemon(t, cfg)
			w.goAhead(t)
			w.wait(t)
			want := workloadSyscalls(n)
			eventually(t, 5*time.Second, func() string {
				s := d.Snapshot()
				if got := syscallCounts(s, w.pid()); fmt.Sprint(got) != fmt.Sprint(want) {
					return fmt.Sprintf("pod member's syscalls = %v, want %v", got, want)
				}
				var others []string
				for _, tg := range s.Targets {
					if tg.PID == w.pid() && tg.How == by && (by != "pod" || tg.Pod == "serving/vllm-0") {
						return ""
					}
					others = append(others, fmt.Sprintf("%d:%s:%s", tg.PID, tg.How, tg.Pod))
				}
				return fmt.Sprintf("targets %v lack pid %d by %s", others, w.pid(), by)
			})
			if by == "pod" {
				for _, tg := range d.Snapshot().Targets {
					if tg.How != "pod" {
						t.Errorf("target %d (%s) selected by %s: a pod set alone selects pods only", tg.PID, tg.Comm, tg.How)
					}
				}
			}
		})
	}
}

// TestDaemonCUDASteps: the workload runs engine-shaped steps (a graph or
// kernel launches, a wait, a synchronize) with stray synchronizes between
// them; the daemon lists exactly one step per step, each opened at its
// first launch and closed by its synchronize, within the workload's own
// clock readings, with its launches counted. Without the launch window,
// only the graph steps are seen.
func TestDaemonCUDASteps(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	const n = 12
	const gap = 2 * time.Millisecond
	for _, window := range []bool{true, false} {
		t.Run(fmt.Sprintf("launch-window=%v", window), func(t *testing.T) {
			w := startChild(t, prog, nil, "steps", strconv.Itoa(n), strconv.Itoa(int(gap/time.Microsecond)))
			w.waitReady(t)
			cfg := Config{PIDs: []int{w.pid()}}
			if window {
				cfg.CUDALaunches = time.Minute
			}
			d := startDaemon(t, cfg)
			if s := d.Snapshot(); len(s.CUDA.Libraries) != 1 {
				t.Fatalf("libcuda not probed: %+v", s.CUDA)
			}
			w.goAhead(t)
			var ts [n][3]uint64
			for i := range n {
				if _, err := fmt.Sscan(w.line(t), &ts[i][0], &ts[i][1], &ts[i][2]); err != nil {
					t.Fatal(err)
				}
			}
			w.wait(t)
			var want []int // the steps the daemon can see
			for i := range n {
				if window || i%2 == 0 {
					want = append(want, i)
				}
			}
			eventually(t, 5*time.Second, func() string {
				s := d.Snapshot()
				var got []Step
				for _, st := range s.Steps {
					if st.PID == w.pid() {
						got = append(got, st)
					}
				}
				if len(got) != len(want) || s.StepTable.Total != uint64(len(want)) {
					return fmt.Sprintf("%d steps (table %+v), want %d: %+v", len(got), s.StepTable, len(want), got)
				}
				for j, i := range want {
					st := got[j]
					graphs, launches := uint32(0), uint32(0)
					if i%2 == 0 {
						graphs = 1
					} else {
						launches = uint32(i%3 + 1)
					}
					if st.GraphLaunches != graphs || st.Launches != launches || st.Call != "stream_synchronize" {
						return fmt.Sprintf("step %d = %+v, want %d graph launches, %d launches, closed by stream_synchronize", i, st, graphs, launches)
					}
					// Opened at the first launch, closed by the synchronize:
					// inside the workload's readings around them.
					lo := ts[i][0]
					if st.StartMonotonicNS < lo || st.StartMonotonicNS > ts[i][1] || st.SyncMonotonicNS < ts[i][1] ||
						st.EndMonotonicNS < st.SyncMonotonicNS || st.EndMonotonicNS > ts[i][2] {
						return fmt.Sprintf("step %d = %+v, want start in [%d, %d], synchronize in [%d, %d]", i, st, lo, ts[i][1], ts[i][1], ts[i][2])
					}
				}
				return ""
			})
			// The API filters by process and end time.
			srv := httptest.NewServer(Handler(d.Snapshot))
			defer srv.Close()
			var steps []Step
			mid := ts[n/2][2]
			code, body := get(t, srv, fmt.Sprintf("/v1/steps?pid=%d&since_ns=%d", w.pid(), mid))
			if err := json.Unmarshal(body, &steps); code != http.StatusOK || err != nil {
				t.Fatalf("/v1/steps: %d %v: %s", code, err, body)
			}
			for _, st := range steps {
				if st.EndMonotonicNS <= mid || st.PID != w.pid() {
					t.Errorf("/v1/steps since %d returned %+v", mid, st)
				}
			}
			if len(steps) == 0 || len(steps) >= len(want) {
				t.Errorf("/v1/steps since the middle: %d of %d steps", len(steps), len(want))
			}
		})
	}
}

// TestDaemonHTTPExchanges: on the server's end of a keep-alive connection
// to an HTTP port, each request/response exchange is one Exchange with the
// exact bytes and sends the workload made, its receive and send times
// within the workload's clock readings; the last stays open until the
// connection closes; the client's end (its local port not an HTTP port)
// records none.
func TestDaemonHTTPExchanges(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	const n, k = 4, 3
	const gap = 20 * time.Millisecond
	w := startChild(t, prog, nil, "http", strconv.Itoa(n), strconv.Itoa(k), strconv.Itoa(int(gap/time.Microsecond)))
	port, err := strconv.Atoi(w.line(t))
	if err != nil {
		t.Fatal(err)
	}
	w.waitReady(t)
	d := startDaemon(t, Config{PIDs: []int{w.pid()}, HTTPPorts: []uint16{uint16(port)}})
	w.goAhead(t)
	var ts [n][6]uint64
	for i := range n {
		if _, err := fmt.Sscan(w.line(t), &ts[i][0], &ts[i][1], &ts[i][2], &ts[i][3], &ts[i][4], &ts[i][5]); err != nil {
			t.Fatal(err)
		}
	}
	local := "127.0.0.1:" + strconv.Itoa(port)
	check := func(s *Snapshot, closed bool) string {
		var got []Exchange
		for _, x := range s.Exchanges {
			if x.PID == w.pid() {
				got = append(got, x)
			}
		}
		wantClosed := n - 1
		if closed {
			wantClosed = n
		}
		if len(got) != n || s.ExchangeTable.Total != uint64(wantClosed) {
			return fmt.Sprintf("%d exchanges (table %+v), want %d of which %d closed: %+v", len(got), s.ExchangeTable, n, wantClosed, got)
		}
		for i, x := range got {
			t := ts[i]
			if x.Local != local || x.Open != (i >= wantClosed) {
				return fmt.Sprintf("exchange %d = %+v, want local %s, open %v", i, x, local, i >= wantClosed)
			}
			if x.RequestBytes != 200 || x.ResponseBytes != 100+50*k || x.ResponseSends != 1+k ||
				x.FirstSendBytes != 100 || x.SecondSendBytes != 50 {
				return fmt.Sprintf("exchange %d = %+v, want a 200-byte request, a 100-byte head then %d 50-byte chunks", i, x, k)
			}
			if x.RequestStartMonotonicNS < t[0] || x.RequestEndMonotonicNS < x.RequestStartMonotonicNS || x.RequestEndMonotonicNS > t[1] ||
				x.FirstSendMonotonicNS < t[2] || x.FirstSendMonotonicNS > t[3] ||
				x.SecondSendMonotonicNS < t[4] || x.LastSendMonotonicNS < x.SecondSendMonotonicNS || x.LastSendMonotonicNS > t[5] {
				return fmt.Sprintf("exchange %d = %+v, outside the workload's readings %v", i, x, t)
			}
		}
		return ""
	}
	eventually(t, 5*time.Second, func() string { return check(d.Snapshot(), false) })
	w.goAhead(t)
	w.wait(t)
	eventually(t, 5*time.Second, func() string { return check(d.Snapshot(), true) })

	srv := httptest.NewServer(Handler(d.Snapshot))
	defer srv.Close()
	var xs []Exchange
	mid := ts[n/2][1]
	code, body := get(t, srv, fmt.Sprintf("/v1/exchanges?pid=%d&since_ns=%d", w.pid(), mid))
	if err := json.Unmarshal(body, &xs); code != http.StatusOK || err != nil {
		t.Fatalf("/v1/exchanges: %d %v: %s", code, err, body)
	}
	if len(xs) != n-n/2 {
		t.Errorf("/v1/exchanges since exchange %d's receipt: %d exchanges, want %d", n/2, len(xs), n-n/2)
	}
	if code, body := get(t, srv, "/v1/exchanges?since_ns=x"); code != http.StatusBadRequest || !strings.Contains(string(body), "since_ns") {
		t.Errorf("/v1/exchanges?since_ns=x: %d %s, want 400 naming since_ns", code, body)
	}
}
