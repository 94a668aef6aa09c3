package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/procstat"
	"github.com/hone-llm/hone/optimizer"
)

var modelOptimize = []string{"optimize", "--spec", "../../examples/emulator-l4-colocated.yaml", "--backend", "model", "--qps", "2,8,32", "--budget", "4"}

func optimizeIn(t *testing.T, out string, more ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLI(t, "", append(append(append([]string{}, modelOptimize...), "--out", out), more...)...)
}

// An --out that holds an earlier run's log is refused (exit 2, naming
// --out and the log) and left as it was; --force starts over there, keeping
// the earlier log as log.json.<time>.bak.
func TestOptimizeRefusesAnEarlierRun(t *testing.T) {
	out := t.TempDir()
	logPath := filepath.Join(out, "log.json")
	if _, errs, code := optimizeIn(t, out); code != exitOK || !fileExists(logPath) {
		t.Fatalf("first run: exit %d\n%s", code, errs)
	}
	first, _ := os.ReadFile(logPath)
	_, errs, code := optimizeIn(t, out)
	if code != exitBadInput || !strings.Contains(errs, "--out "+out) || !strings.Contains(errs, logPath) || !strings.Contains(errs, "--force") {
		t.Errorf("second run: exit %d, stderr %q; want exit 2 naming --out, the log and --force", code, errs)
	}
	if now, _ := os.ReadFile(logPath); string(now) != string(first) {
		t.Error("a refused run changed the earlier log")
	}
	_, errs, code = optimizeIn(t, out, "--force")
	if code != exitOK {
		t.Fatalf("--force: exit %d\n%s", code, errs)
	}
	baks, _ := filepath.Glob(filepath.Join(out, "log.json.*.bak"))
	if len(baks) != 1 {
		t.Fatalf("--force kept %v; want one log.json.<time>.bak", baks)
	}
	if b, _ := os.ReadFile(baks[0]); string(b) != string(first) {
		t.Errorf("%s is not the earlier log", baks[0])
	}
	if !strings.Contains(errs, "kept its log.json as "+filepath.Base(baks[0])) {
		t.Errorf("--force did not say where the earlier log went: %s", errs)
	}
	if lg, err := optimizer.ReadLog(logPath); err != nil || !lg.Done {
		t.Errorf("the new log: %v", err)
	}
}

// A deployment an earlier, killed run left running under DIR/state is
// stopped — reported on stderr — before the first trial.
func TestOptimizeStopsAnEarlierRunsDeployment(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	out := t.TempDir()
	// A process group of two sleepers stands for a worker and its child.
	sleeper := exec.Command("sh", "-c", "sleep 300 & exec sleep 300")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := sleeper.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL); sleeper.Wait() })
	st := deploy.State{SchemaVersion: deploy.StateSchemaVersion, Name: "hone-01-colocated", StartedAt: time.Now().UTC(),
		Processes: []deploy.Process{{Name: "replica-0", Role: "colocated", PID: pgid, PGID: pgid}}}
	b, _ := json.Marshal(st)
	statePath := deploy.StatePath(filepath.Join(out, "state"), st.Name)
	os.MkdirAll(filepath.Dir(statePath), 0o755)
	if err := os.WriteFile(statePath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(deploy.GroupPIDs(st.Processes)) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the shell starts its child
	}
	pids := deploy.GroupPIDs(st.Processes)
	if len(pids) != 2 {
		t.Fatalf("sleeper group %v", pids)
	}

	// While the --out has a log, the refusal names the running deployment
	// and stops nothing.
	os.WriteFile(filepath.Join(out, "log.json"), []byte("{}"), 0o644)
	_, errs, code := optimizeIn(t, out)
	if code != exitBadInput || !strings.Contains(errs, "hone-01-colocated (pids ") {
		t.Errorf("refusal: exit %d, %q", code, errs)
	}
	if len(deploy.GroupPIDs(st.Processes)) != 2 {
		t.Fatal("a refused run stopped the deployment")
	}

	_, errs, code = optimizeIn(t, out, "--force")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			t.Errorf("pid %d of the earlier run's deployment is still running", pid)
		}
	}
	stopped := strings.Index(errs, "optimize: stopped deployment hone-01-colocated")
	trial := strings.Index(errs, "trial 1/")
	if stopped < 0 || trial < stopped || !strings.Contains(errs, "left running by an earlier run (replica-0: pids "+strconv.Itoa(pids[0])) {
		t.Errorf("stderr does not report the stop before the first trial:\n%s", errs)
	}
	if baks, _ := filepath.Glob(filepath.Join(out, "state.*.bak")); len(baks) != 1 {
		t.Errorf("the earlier run's state directory was not kept: %v", baks)
	}
}

// One hone optimize at a time uses an --out.
func TestOptimizeOutInUse(t *testing.T) {
	out := t.TempDir()
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Skip("no file locks here:", err)
	}
	_, errs, code := optimizeIn(t, out)
	if code != exitBadInput || !strings.Contains(errs, "in use by another hone optimize") {
		t.Errorf("exit %d, %q", code, errs)
	}
}

func fileExists(path string) bool { _, err := os.Stat(path); return err == nil }

func zombie(pid int) bool { return !procstat.Alive(pid) }

// Temporary files a killed run left mid-write are removed at the start, and
// said so; nothing else is touched.
func TestOptimizeRemovesStaleTempFiles(t *testing.T) {
	out := t.TempDir()
	os.MkdirAll(filepath.Join(out, "records"), 0o755)
	stale := []string{filepath.Join(out, ".log.json.tmp-42"), filepath.Join(out, "records", ".hone-01-colocated.json.tmp-7")}
	for _, p := range stale {
		if err := os.WriteFile(p, []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, errs, code := optimizeIn(t, out)
	if code != exitOK || !strings.Contains(errs, "removed 1 temporary file(s) a killed run left in "+out+": .log.json.tmp-42") ||
		!strings.Contains(errs, ".hone-01-colocated.json.tmp-7") {
		t.Errorf("exit %d\n%s", code, errs)
	}
	for _, p := range stale {
		if fileExists(p) {
			t.Errorf("%s left", p)
		}
	}
}

// Each kind of error maps to its exit code; an interruption keeps its own
// code (130) however it is wrapped, apart from 1, which make demo accepts
// as "nothing eligible or verified".
func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, exitOK},
		{"check failed", checkFailed{Msg: "no eligible config survived verification"}, exitFailed},
		{"bad input", badInput("--runs: 0"), exitBadInput},
		{"other error", errors.New("disk full"), exitFailed},
		{"interrupted", interrupted{Err: context.Canceled}, exitInterrupted},
		{"interrupted, wrapped", fmt.Errorf("optimize: %w", interrupted{Err: context.Canceled}), exitInterrupted},
		{"a cancelled context alone is not marked", fmt.Errorf("optimize: %w", context.Canceled), exitFailed},
	} {
		if got := exitCodeQuiet(c.err); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
	if exitInterrupted != 130 {
		t.Errorf("exitInterrupted = %d, want 130 (128+SIGINT, the shell's convention)", exitInterrupted)
	}
}

// hone optimize whose context is cancelled — what SIGINT or SIGTERM does
// through signal.NotifyContext — exits 130, not 1, and says so and where
// the log is; the log holds the trial that ran, marked unfinished, and
// hone report says so on its first line.
func TestOptimizeInterruptedExits130(t *testing.T) {
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	root := newRootCmd()
	var stdout, stderr strings.Builder
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(append(append([]string{}, modelOptimize...), "--out", out))
	err := root.ExecuteContext(ctx)
	logPath := filepath.Join(out, "log.json")
	if code := exitCodeQuiet(err); code != exitInterrupted {
		t.Fatalf("exit %d (%v), want %d\n%s", code, err, exitInterrupted, stderr.String())
	}
	if msg := errorLine(err); !strings.HasPrefix(msg, "hone: interrupted: ") || !strings.Contains(msg, logPath) {
		t.Errorf("error line %q: want it to say interrupted and name %s", msg, logPath)
	}
	lg, err := optimizer.ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if lg.Done || len(lg.Trials) != 1 || lg.Budget != 4 {
		t.Errorf("log: done %t, %d trials, budget %d; want unfinished after the baseline (1 trial) of budget 4", lg.Done, len(lg.Trials), lg.Budget)
	}
	md := filepath.Join(out, "report.md")
	if _, errs, code := runCLI(t, "", "report", "--log", logPath, "--out", md); code != exitOK {
		t.Fatalf("report: exit %d\n%s", code, errs)
	}
	b, _ := os.ReadFile(md)
	first, _, _ := strings.Cut(string(b), "\n")
	want := "> **This log is unfinished: the loop stopped after trial 1 of budget 4 (cancelled or still running); nothing below is a final selection.**"
	if first != want {
		t.Errorf("report's first line %q, want %q", first, want)
	}
	if strings.Contains(string(b), "the baseline stays") {
		t.Error("the report of an unfinished log reads as a final selection")
	}
}

// --time-budget bounds the whole run: a negative one is bad input naming
// the flag; a generous one changes nothing the exact model decides, and
// the log states it.
func TestOptimizeTimeBudget(t *testing.T) {
	if _, errs, code := optimizeIn(t, t.TempDir(), "--time-budget", "-1m"); code != exitBadInput || !strings.Contains(errs, "--time-budget") {
		t.Errorf("--time-budget -1m: exit %d, stderr %q; want 2 naming --time-budget", code, errs)
	}
	out := t.TempDir()
	stdout, errs, code := optimizeIn(t, out, "--time-budget", "1h")
	if code != exitOK || strings.Contains(stdout, "not measured") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, errs)
	}
	lg, err := optimizer.ReadLog(filepath.Join(out, "log.json"))
	if err != nil {
		t.Fatal(err)
	}
	if lg.TimeBudgetSeconds != 3600 || len(lg.NotMeasured) != 0 {
		t.Errorf("log: time budget %g s, not measured %q", lg.TimeBudgetSeconds, lg.NotMeasured)
	}
}
