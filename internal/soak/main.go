//go:build linux

// Command hone-soak runs hone's long checks, which are not part of `make
// test`:
//
//	hone-soak serve   (make soak)       N concurrent streaming requests kept in
//	                                    flight through `hone proxy` in front of
//	                                    `hone sim serve` workers, with `hone
//	                                    daemon` attached, for a duration; RSS of
//	                                    every process sampled, memory flatness
//	                                    judged, and every request's outcome
//	                                    checked against the proxy's timelines
//	                                    and counters.
//	hone-soak churn   (make soak-churn) `hone daemon` traces a parent that forks
//	                                    short-lived children in waves, each
//	                                    making a known number of syscalls; the
//	                                    daemon's table, memory, snapshot size,
//	                                    drops and syscall totals are checked.
//
// Both need root (the daemon loads eBPF programs) and a built bin/hone. They
// print a report and write it as JSON under --out; the exit status is 0 when
// every check passed, 1 when one failed, 2 when the run could not be made.
//
// It is kept out of the hone binary: it is a test rig, not a feature.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func usage() {
	fmt.Fprint(os.Stderr, `usage: hone-soak serve|churn [flags]   (hone-soak CMD -h for flags)

  serve  N streaming requests in flight through hone proxy + hone sim serve
         workers with hone daemon attached, for a duration (make soak)
  churn  hone daemon tracing a parent that forks many short-lived children in
         waves (make soak-churn)
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "serve":
		code = runServe(os.Args[2:])
	case "churn":
		code = runChurn(os.Args[2:])
	case churnParentCmd:
		code = runChurnParent(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
	default:
		usage()
		code = 2
	}
	os.Exit(code)
}

// setupError is a failure to make the run (exit 2), as opposed to a check
// that failed (exit 1).
type setupError struct{ error }

func fail(format string, a ...any) error { return setupError{fmt.Errorf(format, a...)} }

func exitCode(err error, pass bool) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, "hone-soak:", err)
		var se setupError
		if errors.As(err, &se) {
			return 2
		}
		return 1
	}
	if !pass {
		return 1
	}
	return 0
}

// proc is a process the rig started; it is killed with the rig (Pdeathsig).
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
	err     error
	started time.Time
}

// gctraceEnv makes a Go process log one line per GC (GODEBUG=gctrace=1):
// the rig reads its live heap over time from them (liveHeapSeries).
var gctraceEnv = []string{"GODEBUG=gctrace=1"}

// startEnv runs argv with its output in logDir/name.log and env added to
// its environment.
func startEnv(name, logDir string, env []string, argv ...string) (*proc, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	t := time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{}), started: t}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace, then SIGKILL.
func (p *proc) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last lines of the process's log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHTTP polls url until it answers 200, the process exits or timeout.
func waitHTTP(url string, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not answer 200 within %s (last error %v)", p.name, url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// getBody fetches url and returns its body.
func getBody(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// rssBytes reads VmRSS from /proc/PID/status (0 once the process is gone).
func rssBytes(pid int) uint64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "VmRSS:") {
			continue
		}
		fields := strings.Fields(line[len("VmRSS:"):])
		if len(fields) == 0 {
			return 0
		}
		kb, _ := strconv.ParseUint(fields[0], 10, 64)
		return kb * 1024
	}
	return 0
}

// fdCount counts /proc/PID/fd entries (-1 when unreadable).
func fdCount(pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// threadCount counts /proc/PID/task entries.
func threadCount(pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return 0
	}
	return len(ents)
}

// promValues sums the samples of each named metric family in Prometheus
// text (labels ignored).
func promValues(text []byte, names ...string) map[string]float64 {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(text), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !want[name] {
			continue
		}
		rest := line[len(name):]
		if i := strings.LastIndex(rest, "}"); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest) // value [timestamp]
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// metricNames lists the metric families in Prometheus text whose name
// contains sub.
func metricNames(text []byte, sub string) []string {
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(text), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if strings.Contains(name, sub) && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// writeJSON writes v indented to path.
func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// requireRoot fails unless the rig can start `hone daemon` (root).
func requireRoot() error {
	if os.Geteuid() != 0 {
		return fail("hone daemon loads eBPF programs: run as root (sudo make ...)")
	}
	return nil
}

// honeBinary resolves --hone.
func honeBinary(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		return "", fail("--hone %s: not a file (make build first)", path)
	}
	return abs, nil
}

// startDaemon starts `hone daemon` on the given PIDs and waits until its
// snapshot lists them all.
func startDaemon(hone, logDir string, pids []int, extra ...string) (*proc, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	argv := []string{hone, "daemon", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--nvml-period", "0"}
	for _, pid := range pids {
		argv = append(argv, "--pid", strconv.Itoa(pid))
	}
	argv = append(argv, extra...)
	d, err := startEnv("daemon", logDir, gctraceEnv, argv...)
	if err != nil {
		return nil, "", err
	}
	if err := waitHTTP(base+"/v1/snapshot", d, 60*time.Second); err != nil {
		d.stop(5 * time.Second)
		return nil, "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var s struct {
			Targets []struct {
				PID int `json:"pid"`
			} `json:"targets"`
		}
		b, err := getBody(context.Background(), base+"/v1/snapshot")
		if err == nil && json.Unmarshal(b, &s) == nil {
			seen := map[int]bool{}
			for _, t := range s.Targets {
				seen[t.PID] = true
			}
			all := true
			for _, p := range pids {
				all = all && seen[p]
			}
			if all {
				return d, base, nil
			}
		}
		if time.Now().After(deadline) || d.exited() {
			d.stop(5 * time.Second)
			return nil, "", fmt.Errorf("daemon: its snapshot did not list every --pid within 30s\n%s", d.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// daemonDrops reads the daemon's loss counters from /metrics: every
// hone_* family whose name contains "drop" or "overflow", and full-map
// updates.
func daemonDrops(base string) (map[string]float64, error) {
	b, err := getBody(context.Background(), base+"/metrics")
	if err != nil {
		return nil, err
	}
	names := metricNames(b, "drop")
	names = append(names, metricNames(b, "overflow")...)
	names = append(names, metricNames(b, "map_full")...)
	vals := promValues(b, names...)
	for _, n := range names {
		if _, ok := vals[n]; !ok {
			vals[n] = 0
		}
	}
	return vals, nil
}
