package deploy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// An owned deployment (UpOptions.Owned) has a watchdog: a small process —
// the running binary itself, re-executed — that outlives its owner by
// design. It reads a pipe whose only writer is the owner: a line for every
// process group Up starts, and "down" once the deployment is stopped. When
// the pipe ends without "down", the owner is gone (it exited, crashed or
// was SIGKILLed: the kernel closes the pipe in every case), and the
// watchdog kills every group it was told about — the workers with all they
// started (vLLM's engine and worker processes, the test worker's
// grandchild), and the proxy — then removes the state file if nothing
// survived, and exits.
//
// The parent-death signal (spawn_linux.go) kills the direct children on
// Linux even if the watchdog is gone too; the watchdog is what reaches
// their descendants, and what stops anything on other systems. What it
// cannot reach: a descendant that left its process group (setsid or
// setpgid), and anything if the watchdog itself is SIGKILLed before its
// owner dies (then hone deploy down, or the next hone optimize on the same
// --out, stops the deployment from its state file).

const (
	watchdogArg = "__hone_deploy_watchdog"
	watchdogEnv = "HONE_DEPLOY_WATCHDOG"
)

// init turns the process into a watchdog when it was started as one; any
// binary that links deploy (hone, and every test binary that calls Up) can
// be one.
func init() {
	if len(os.Args) == 4 && os.Args[1] == watchdogArg && os.Getenv(watchdogEnv) == "1" {
		os.Exit(runWatchdog(os.Stdin, os.Stdout, os.Getppid(), os.Args[2], os.Args[3]))
	}
}

// runWatchdog is the watchdog's whole life; see above. owner is the pid of
// the process that started it, for the log.
func runWatchdog(in io.Reader, log io.Writer, owner int, statePath, started string) int {
	// The owner's terminal going away is the owner's death, not ours.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	var procs []Process
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 1 && f[0] == "down":
			return 0
		case len(f) == 5 && f[0] == "proc":
			pid, _ := strconv.Atoi(f[2])
			pgid, _ := strconv.Atoi(f[3])
			ticks, _ := strconv.ParseUint(f[4], 10, 64)
			procs = append(procs, Process{Name: f[1], PID: pid, PGID: pgid, StartTicks: ticks})
		}
	}
	now := func() string { return time.Now().UTC().Format(time.RFC3339Nano) }
	fmt.Fprintf(log, "%s hone deploy watchdog: owner pid %d is gone; killing %d process groups of %s\n", now(), owner, len(procs), statePath)
	rev := make([]Process, 0, len(procs)) // proxy first, as Down does
	for i := len(procs) - 1; i >= 0; i-- {
		rev = append(rev, procs[i])
	}
	if left := stopGroups(rev, 0); len(left) > 0 {
		for _, p := range left {
			fmt.Fprintf(log, "%s hone deploy watchdog: %s (pgid %d) survived SIGKILL; the state file stays\n", now(), p.Name, p.PGID)
		}
		return 1
	}
	// The state file is ours to remove only if it still describes this
	// deployment: another Up of the same name may have replaced it.
	if st, err := ReadState(statePath); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, started); err == nil && st.StartedAt.Equal(t) {
			os.Remove(statePath)
		}
	}
	fmt.Fprintf(log, "%s hone deploy watchdog: stopped\n", now())
	return 0
}

// watchdog is the owner's end of a deployment's watchdog.
type watchdog struct {
	mu     sync.Mutex
	w      *os.File // nil once released
	pid    int
	exited chan struct{}
}

// armed keeps every unreleased watchdog's pipe reachable: were a Deployment
// dropped without Down, the pipe's finalizer would close it and the
// watchdog would kill a deployment this process still runs.
var armed = struct {
	sync.Mutex
	m map[*watchdog]bool
}{m: map[*watchdog]bool{}}

// startWatchdog starts the watchdog of the deployment whose state file is
// statePath (started at started); it logs to dir/watchdog.log.
func startWatchdog(dir, statePath string, started time.Time) (*watchdog, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to run the watchdog: %w", err)
	}
	path := exe
	if runtime.GOOS == "linux" {
		path = "/proc/self/exe" // this very binary, even if its file was replaced since
	}
	lf, err := os.OpenFile(filepath.Join(dir, "watchdog.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("watchdog log: %w", err)
	}
	defer lf.Close()
	r, w, err := os.Pipe() // close-on-exec: no other child holds the write end
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path: path, Args: []string{exe, watchdogArg, statePath, started.Format(time.RFC3339Nano)},
		Env:   append(os.Environ(), watchdogEnv+"=1"),
		Stdin: r, Stdout: lf, Stderr: lf,
		// Its own process group: a Ctrl-C at the owner's terminal, or a kill
		// of the owner's group, does not reach it.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the watchdog: %w", err)
	}
	g := &watchdog{w: w, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(g.exited) }()
	armed.Lock()
	armed.m[g] = true
	armed.Unlock()
	return g, nil
}

// add tells the watchdog about a started process group.
func (g *watchdog) add(p Process) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil {
		return errors.New("the deployment's watchdog was released")
	}
	if _, err := fmt.Fprintf(g.w, "proc %s %d %d %d\n", p.Name, p.PID, p.PGID, p.StartTicks); err != nil {
		return fmt.Errorf("the deployment's watchdog (pid %d) is gone: %w", g.pid, err)
	}
	return nil
}

// release tells the watchdog the deployment is down, so it exits without
// acting, and waits a moment for it to go. Safe on nil and twice.
func (g *watchdog) release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.w != nil {
		io.WriteString(g.w, "down\n")
		g.w.Close()
		g.w = nil
	}
	g.mu.Unlock()
	armed.Lock()
	delete(armed.m, g)
	armed.Unlock()
	select {
	case <-g.exited:
	case <-time.After(2 * time.Second):
	}
}
