//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// subprocessSpec configures a daemon run in a child copy of the test binary,
// so that dropping privileges (process-wide) does not touch the tests.
type subprocessSpec struct {
	Match        string        `json:"match"`
	PIDs         []int         `json:"pids"`
	Listen       string        `json:"listen"`
	Output       string        `json:"output"`
	Profile      string        `json:"profile"`
	Duration     time.Duration `json:"duration"`
	CUDALaunches time.Duration `json:"cuda_launches"`
	BPFStats     bool          `json:"bpf_stats"`
	DropCaps     bool          `json:"drop_caps"`
	User         string        `json:"user"`
	PerfUprobes  bool          `json:"perf_uprobes"`
	ScanPeriod   time.Duration `json:"scan_period"` // default 100ms
}

const subprocessEnv = "HONE_TEST_DAEMON_SPEC"

func TestMain(m *testing.M) {
	if spec := os.Getenv(subprocessEnv); spec != "" {
		os.Exit(runSubprocess(spec))
	}
	if spec := os.Getenv(needsEnv); spec != "" {
		os.Exit(runNeedsProbe(spec))
	}
	os.Exit(m.Run())
}

func runSubprocess(spec string) int {
	var s subprocessSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := Config{PIDs: s.PIDs, CUDALaunches: s.CUDALaunches, BPFStats: s.BPFStats, Sched: true,
		ScanPeriod: s.ScanPeriod, NVMLPeriod: time.Second, perfUprobes: s.PerfUprobes}
	if cfg.ScanPeriod == 0 {
		cfg.ScanPeriod = 100 * time.Millisecond
	}
	if s.Match != "" {
		cfg.Match = regexp.MustCompile(s.Match)
	}
	ready := func(*Daemon) {
		b, _ := json.Marshal(threadStatus())
		fmt.Fprintln(os.Stderr, "thread-status:", string(b))
		b, _ = json.Marshal(seccompProbes())
		fmt.Fprintln(os.Stderr, "seccomp-probes:", string(b))
	}
	err := Run(context.Background(), cfg, RunOptions{Listen: s.Listen, Once: true, Duration: s.Duration,
		Output: s.Output, Profile: s.Profile, DropCaps: s.DropCaps, User: s.User, Ready: ready}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hone daemon:", err)
		return 1
	}
	return 0
}

// statusFields are the /proc/self/task/TID/status lines the privilege
// tests read.
var statusFields = []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters"}

// threadStatus reads statusFields of every thread of this process, by tid.
func threadStatus() map[string]map[string]string {
	tasks, _ := os.ReadDir("/proc/self/task")
	out := map[string]map[string]string{}
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		m := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			for _, f := range statusFields {
				if k == f {
					m[k] = strings.Join(strings.Fields(v), " ")
				}
			}
		}
		out[t.Name()] = m
	}
	return out
}

// seccompProbes makes syscalls the filter refuses, with arguments that
// would otherwise succeed or fail differently (and never fork), and
// returns each result as "ok" or the errno's name.
func seccompProbes() map[string]string {
	res := func(_ uintptr, e unix.Errno) string {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	call := func(nr uintptr, a ...uintptr) string {
		a = append(a, 0, 0, 0, 0, 0, 0)
		r, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		return res(r, e)
	}
	out := map[string]string{
		"unshare(0)":                  call(unix.SYS_UNSHARE, 0),
		"process_vm_writev(self, 0)":  call(unix.SYS_PROCESS_VM_WRITEV, uintptr(os.Getpid())),
		"ptrace(bad request)":         call(unix.SYS_PTRACE, 0x7fff),
		"clone3(NULL, 0)":             call(unix.SYS_CLONE3),
		"clone(NEWUSER|FS)":           call(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS),
		"perf_event_open(NULL)":       call(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0),
		"setresuid(0, 0, 0)":          call(unix.SYS_SETRESUID, 0, 0, 0),
		"keyctl(GET_KEYRING_ID, -1)":  call(unix.SYS_KEYCTL, 0, ^uintptr(0), 0),
		"getpid()":                    call(unix.SYS_GETPID),
		"open_by_handle_at(-1, NULL)": call(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0)),
	}
	if runtime.GOARCH == "amd64" {
		out["x32 getpid()"] = call(0x40000000 | 39)
	}
	return out
}
