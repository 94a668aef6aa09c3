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

// TestOnceDroppedCapabilities runs the daemon as `--once` would, in a child
// process that drops to KeptCapabilities after attaching. A CUDA workload
// started only afterwards is found by its command line, its libcuda probed
// (late: with the reduced set), its calls counted exactly; the run exits 0,
// and without a GPU driver the snapshot says why NVML is unavailable.
func TestOnceDroppedCapabilities(t *testing.T) {
	bpftest.Require(t)
	prog, _ := bpftest.Workload(t)
	addr := freeAddr(t)
	out := filepath.Join(t.TempDir(), "snapshot.json")
	prof := filepath.Join(t.TempDir(), "syscalls.pb.gz")
	spec, _ := json.Marshal(subprocessSpec{Match: "^" + regexp.QuoteMeta(prog) + " cuda", Listen: addr, Output: out, Profile: prof,
		Duration: 4 * time.Second, CUDALaunches: time.Minute, DropCaps: true})
	d := exec.Command(os.Args[0], "-test.run=^$")
	d.Env = append(os.Environ(), subprocessEnv+"="+string(spec))
	var stderr strings.Builder
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
	const calls = 5
	// The workload runs as nobody: reading its maps needs CAP_SYS_PTRACE.
	for dir := filepath.Dir(filepath.Dir(prog)); dir != filepath.Dir(dir) && strings.HasPrefix(dir, os.TempDir()+"/"); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Dir(prog), 0o755); err != nil {
		t.Fatal(err)
	}
	w := startChildAs(t, &syscall.Credential{Uid: 65534, Gid: 65534}, prog, "cuda", strconv.Itoa(calls), strconv.Itoa(calls), strconv.Itoa(calls), "1000")
	eventually(t, 5*time.Second, func() string {
		s := snapshot()
		if s == nil || len(s.CUDA.Libraries) != 1 || len(s.CUDA.Libraries[0].Launch) != 1 {
			return "libcuda not probed after the capability drop: " + stderr.String()
		}
		return ""
	})
	w.goAhead(t)
	w.wait(t)
	if err := d.Wait(); err != nil {
		t.Fatalf("daemon --once: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	// Every thread, not just the one that dropped them, holds exactly the
	// kept capabilities.
	var mask uint64
	for _, c := range KeptCapabilities {
		mask |= 1 << uint(c)
	}
	m := regexp.MustCompile(`thread-caps: (\S+)`).FindStringSubmatch(stderr.String())
	if m == nil || m[1] != fmt.Sprintf("%016x", mask) {
		t.Errorf("threads' effective capabilities %v, want all %016x (%s)", m, mask, s.Daemon.Capabilities)
	}
	if _, err := os.Stat("/dev/nvidiactl"); err != nil && !strings.HasPrefix(s.NVML.Status, "unavailable (") {
		t.Errorf("no GPU here, but NVML status %q", s.NVML.Status)
	}
	got := map[string]uint64{}
	for _, th := range threadsOf(&s, w.pid()) {
		for c, st := range th.CUDA {
			got[c] += st.Count
		}
	}
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
