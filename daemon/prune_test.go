//go:build linux

package daemon

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/bpf/bpftest"
)

//go:embed testdata/forkmany.c
var forkManyC string

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func buildForkMany(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatalf("gcc is needed to build the test workload: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "forkmany.c")
	if err := os.WriteFile(src, []byte(forkManyC), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "forkmany")
	if out, err := exec.Command("gcc", "-O1", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return prog
}

// TestDaemonPrunesExitedChildren: a target forks 2,000 short-lived
// children. Their syscalls are counted exactly, and stay exact once the
// children are folded out of the table into their root's exited group;
// the table comes back to the live processes; the snapshot stays small;
// the log has a line per scan, not per child. With a table of 64 entries,
// the children that do not fit are counted as overflow and still counted
// exactly in the totals.
func TestDaemonPrunesExitedChildren(t *testing.T) {
	bpftest.Require(t)
	prog := buildForkMany(t)
	for _, tc := range []struct {
		name      string
		maxTarget int
	}{{"default table", 0}, {"table of 64", 64}} {
		t.Run(tc.name, func(t *testing.T) {
			const n, k, p = 2000, 3, 50
			parent := startChild(t, prog, nil, strconv.Itoa(n), strconv.Itoa(k), strconv.Itoa(p))
			parent.waitReady(t)
			var logs syncBuffer
			d, err := New(Config{PIDs: []int{parent.pid()}, ScanPeriod: 100 * time.Millisecond}, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.maxTarget > 0 {
				d.table.maxTargets = tc.maxTarget
			}
			if err := d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			var maxEntries int
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the table's size while the children come and go
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					d.table.mu.Lock()
					maxEntries = max(maxEntries, len(d.table.targets))
					d.table.mu.Unlock()
				}
			}()
			parent.goAhead(t)
			if got := parent.line(t); got != "done" {
				t.Fatalf("workload said %q", got)
			}
			// The parent: n clone, n wait4, one write and the read it
			// now blocks in; each child k getppid calls and its
			// exit_group (syscalls are counted when entered).
			want := map[string]uint64{"other": n*k + 2*n + n, "file": 2}
			total := func(s *Snapshot) map[string]uint64 {
				got := map[string]uint64{}
				for _, th := range s.Threads {
					for c, st := range th.Syscalls {
						got[c] += st.Count
					}
				}
				for _, g := range s.Exited {
					for c, st := range g.Syscalls {
						got[c] += st.Count
					}
				}
				return got
			}
			var s *Snapshot
			eventually(t, 15*time.Second, func() string {
				s = d.Snapshot()
				if got := total(s); fmt.Sprint(got) != fmt.Sprint(want) {
					return fmt.Sprintf("syscalls of the target and its children: %v, want exactly %v", got, want)
				}
				if len(s.Targets) != 1 || s.Targets[0].PID != parent.pid() || s.TargetTable.Entries != 1 {
					return fmt.Sprintf("table of %d entries (%d targets listed), want the 1 live process", s.TargetTable.Entries, len(s.Targets))
				}
				if s.TargetTable.ExitedProcesses != n {
					return fmt.Sprintf("%d processes folded, want %d", s.TargetTable.ExitedProcesses, n)
				}
				return ""
			})
			close(stop)
			wg.Wait()
			if tc.maxTarget == 0 {
				// Every child is attributed to its root, in one group.
				if len(s.Exited) != 1 || s.Exited[0].RootPID != parent.pid() || s.Exited[0].Processes != n || s.Exited[0].Threads != n {
					t.Errorf("exited groups %+v, want one of %d processes under root %d", s.Exited, n, parent.pid())
				}
				if got, _ := rootTotals(s, parent.pid()); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("root %d totals %v, want %v", parent.pid(), got, want)
				}
				if s.TargetTable.Overflow != 0 {
					t.Errorf("overflow %d with the default table", s.TargetTable.Overflow)
				}
			} else {
				if s.TargetTable.Overflow == 0 {
					t.Errorf("no overflow counted with a table of %d for %d children", tc.maxTarget, n)
				}
				if maxEntries > tc.maxTarget {
					t.Errorf("table grew to %d entries, over its %d", maxEntries, tc.maxTarget)
				}
				if !strings.Contains(metricsText(t, d), fmt.Sprintf("hone_target_table_overflows_total %d", s.TargetTable.Overflow)) {
					t.Errorf("overflow not exported as a metric:\n%s", metricsText(t, d))
				}
			}
			b, _ := json.Marshal(s)
			if len(b) > 32<<10 {
				t.Errorf("snapshot of %d bytes after %d children exited, want it bounded (< 32 KiB)", len(b), n)
			}
			lines := strings.Count(logs.String(), "\n")
			if lines > 100 {
				t.Errorf("%d log lines for %d children, want a line per scan at most", lines, n)
			}
			if !regexp.MustCompile(`msg="traced \d+ new processes \(\d+ exited\)"`).MatchString(logs.String()) {
				t.Errorf("no aggregate target line in the log:\n%s", logs.String())
			}
			t.Logf("%d children: table peaked at %d entries, snapshot %d bytes, %d log lines, overflow %d",
				n, maxEntries, len(b), lines, s.TargetTable.Overflow)
			parent.goAhead(t)
			parent.wait(t)
		})
	}
}

// metricsText renders the daemon's metrics.
func metricsText(t *testing.T, d *Daemon) string {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler(d.Snapshot).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestTableOverflowWithoutKernel feeds fork and exit events to a daemon
// whose table holds 10: the rest are counted, not stored, and one log line
// sums them all.
func TestTableOverflowWithoutKernel(t *testing.T) {
	var logs syncBuffer
	d, err := New(Config{Match: regexp.MustCompile("^never$")}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d.table.maxTargets = 10
	d.table.targets[100] = &tracked{Target: Target{PID: 100, RootPID: 100, How: "pid"}}
	for i := 1; i <= 15; i++ {
		d.procEvent(&bpf.ProcEvent{Kind: bpf.EventFork, Tgid: uint32(100 + i), Ppid: 100, TsNs: 1})
	}
	if len(d.table.targets) != 10 || d.table.counts.Overflow != 6 {
		t.Errorf("table %d entries, overflow %d; want 10 and 6", len(d.table.targets), d.table.counts.Overflow)
	}
	for pid, tg := range d.table.targets {
		if tg.RootPID != 100 {
			t.Errorf("child %d root %d, want 100", pid, tg.RootPID)
		}
	}
	for i := 1; i <= 15; i++ {
		d.procEvent(&bpf.ProcEvent{Kind: bpf.EventExit, Tgid: uint32(100 + i), TsNs: 2})
	}
	if d.table.exitedPending != 9 || len(d.table.orphanExits) != 6 {
		t.Errorf("exited %d in the table and %d outside, want 9 and 6", d.table.exitedPending, len(d.table.orphanExits))
	}
	select {
	case <-d.foldNow:
	default:
		t.Error("a full table did not ask for an early fold")
	}
	d.logTargets()
	d.logTargets() // nothing new: no line
	if got := logs.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `msg="traced 9 new processes (15 exited)"`) ||
		!strings.Contains(got, "and 1 more") || !strings.Contains(got, "table_overflow_total=6") {
		t.Errorf("log:\n%s", got)
	}
}
