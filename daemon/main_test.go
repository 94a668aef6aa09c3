//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// subprocessSpec configures a daemon run in a child copy of the test binary,
// so that dropping capabilities (process-wide) does not touch the tests.
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
	ScanPeriod   time.Duration `json:"scan_period"` // default 100ms
}

const subprocessEnv = "HONE_TEST_DAEMON_SPEC"

func TestMain(m *testing.M) {
	if spec := os.Getenv(subprocessEnv); spec != "" {
		os.Exit(runSubprocess(spec))
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
		ScanPeriod: s.ScanPeriod, NVMLPeriod: time.Second}
	if cfg.ScanPeriod == 0 {
		cfg.ScanPeriod = 100 * time.Millisecond
	}
	if s.Match != "" {
		cfg.Match = regexp.MustCompile(s.Match)
	}
	err := Run(context.Background(), cfg, RunOptions{Listen: s.Listen, Once: true, Duration: s.Duration,
		Output: s.Output, Profile: s.Profile, DropCaps: s.DropCaps, Ready: func(*Daemon) { fmt.Fprintln(os.Stderr, "thread-caps:", threadCaps()) }}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hone daemon:", err)
		return 1
	}
	return 0
}

// threadCaps lists the distinct effective capability masks of this
// process's threads.
func threadCaps() string {
	tasks, _ := os.ReadDir("/proc/self/task")
	seen := map[string]bool{}
	var out []string
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "CapEff:"); ok && !seen[strings.TrimSpace(v)] {
				seen[strings.TrimSpace(v)] = true
				out = append(out, strings.TrimSpace(v))
			}
		}
	}
	return strings.Join(out, ",")
}
