//go:build linux

package runbook

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/honetest"
)

// runbookPorts are the loopback ports docs/device.md's deployments and
// daemon listen on (the example specs' proxy, workers and NIXL side
// channel; the daemon's API).
var runbookPorts = []int{18400, 18410, 18411, 18420, 18421, 9464}

// runbookLimit bounds the whole run; the smoke sizes take well under a
// minute on an idle host.
const runbookLimit = 4 * time.Minute

// netnsExecEnv, when set, makes the test binary (TestMain) bring up the
// loopback interface of the network namespace it was started in and exec
// its arguments (bash and the runbook's script) instead of testing.
const netnsExecEnv = "HONE_RUNBOOK_NETNS_EXEC"

func TestMain(m *testing.M) {
	if os.Getenv(netnsExecEnv) == "1" && len(os.Args) > 1 {
		os.Unsetenv(netnsExecEnv)
		if err := loopbackUp(); err != nil {
			fmt.Fprintln(os.Stderr, "runbook: bring up lo in the test's network namespace:", err)
			os.Exit(125)
		}
		args := os.Args[1:]
		err := syscall.Exec(args[0], args, os.Environ())
		fmt.Fprintln(os.Stderr, "runbook: exec", args[0], err)
		os.Exit(126)
	}
	code := m.Run()
	honetest.Cleanup()
	os.Exit(code)
}

// loopbackUp sets lo up, as a fresh network namespace has it down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// TestDeviceRunbook runs docs/device.md's shell blocks, in order and
// verbatim, in one bash shell, in a scratch copy of the checkout (bin/hone
// and examples/), on this host without a GPU: fakes for python3 (the
// virtual environment and pip), vllm (scripts/fake-vllm: hone's emulator
// behind vLLM's argument checks, per the engine's version table (engine/vllm_versions.go)), hf and sudo
// (scripts/fake-gpu-host) come first on PATH, and HONE_SMOKE=1 chooses the
// document's small sizes. Every block not marked runbook=skip must run and
// exit 0 (runbook=no-gpu-exit-1: 0 or 1; runbook=measures: 0, or what this
// host decided, see hostDecided; runbook=root: only with root and kernel
// BTF, where HONE_REQUIRE_BPF=1 makes their absence a failure).
// Then the test checks what the document says each step must show, as far
// as a host without a GPU can show it.
//
// As root the shell runs in a network namespace of its own, so the
// document's fixed ports cannot collide with other tests'; otherwise
// those ports must be free, or the test skips.
func TestDeviceRunbook(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the runbook takes most of a minute")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for _, tool := range []string{"curl", "sed", "seq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s, which the runbook uses", tool)
		}
	}
	src, err := os.ReadFile("../../docs/device.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := parseBlocks(string(src))
	if err != nil {
		t.Fatalf("docs/device.md: %v", err)
	}
	if len(blocks) < 10 {
		t.Fatalf("docs/device.md has %d shell blocks; the runbook has more", len(blocks))
	}
	root, rootWhy := rootWithBTF()
	if !root && os.Getenv("HONE_REQUIRE_BPF") == "1" {
		t.Fatalf("HONE_REQUIRE_BPF=1: the runbook's root blocks need %s", rootWhy)
	}
	tmp := t.TempDir()
	if *keep {
		if tmp, err = os.MkdirTemp("", "hone-runbook"); err != nil {
			t.Fatal(err)
		}
		t.Logf("-keep: the run stays in %s", tmp)
	}
	w := newWorld(t, tmp)
	t.Cleanup(func() { w.cleanup(t) })
	logPath, runErr := w.run(t, bash, script(blocks, root, rootWhy))
	if _, err := os.Stat(w.status); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("the runbook's shell did not start: %v (%v):\n%s", runErr, err, tail(string(log), 40))
	}
	status := readStatus(t, w.status)
	judge(t, blocks, status, logPath, root)
	if t.Failed() {
		if runErr != nil {
			t.Logf("bash: %v", runErr)
		}
		return
	}
	w.checkShown(t, blocks, status, logPath, root)
}

var keep = flag.Bool("keep", false, "TestDeviceRunbook: keep the runbook's scratch directory (log, records, state) and say where")

// run runs the script with bash in the world's environment, within
// runbookLimit, and returns the path of its log (stdout and stderr). As
// root it runs in a network namespace of its own (through TestMain, which
// brings up its loopback); where that is refused, or not root, the
// runbook's ports must be free on this host's loopback, or the test skips.
func (w *world) run(t *testing.T, bash, script string) (logPath string, err error) {
	driver := filepath.Join(w.dir, "runbook.sh")
	if err := os.WriteFile(driver, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(w.dir, "runbook.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), runbookLimit)
	defer cancel()
	command := func(netns bool) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bash, driver)
		cmd.Env = w.env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if netns {
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd = exec.CommandContext(ctx, self, bash, driver)
			cmd.Env = append(w.env, netnsExecEnv+"=1")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWNET}
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 10 * time.Second
		return cmd
	}
	netns := os.Geteuid() == 0
	cmd := command(netns)
	start := time.Now()
	if netns {
		if err := cmd.Start(); err != nil {
			if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EINVAL) {
				t.Fatal(err)
			}
			t.Logf("no network namespace for the runbook (%v): it shares this host's loopback", err)
			netns, cmd = false, command(false)
		}
	}
	if !netns {
		if busy := busyPorts(); len(busy) > 0 {
			t.Skipf("ports %v are in use, and the runbook, which needs them, cannot have a network namespace (root only)", busy)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	err = cmd.Wait()
	t.Logf("runbook: ran in %s (log %s)", time.Since(start).Round(time.Millisecond), logPath)
	if ctx.Err() != nil {
		t.Errorf("the runbook did not finish within %s", runbookLimit)
	}
	return logPath, err
}

// judge checks each block's fate against its mode.
func judge(t *testing.T, blocks []block, status map[int]blockStatus, logPath string, root bool) {
	for _, b := range blocks {
		st, ok := status[b.N]
		if st.ended {
			t.Logf("block %2d (docs/device.md:%d) %6.1f s", b.N, b.Line, st.to-st.from)
		}
		switch {
		case b.Mode == modeSkip || (b.Mode == modeRoot && !root):
			if !ok || !st.skipped {
				t.Errorf("block %d (docs/device.md:%d) should have been skipped: %+v", b.N, b.Line, st)
			}
		case !ok || !st.started:
			t.Errorf("block %d (docs/device.md:%d) never ran: an earlier one failed", b.N, b.Line)
		case !st.ended:
			t.Errorf("block %d (docs/device.md:%d) failed:\n%s\n--- its output:\n%s", b.N, b.Line, indent(b.Body), tail(blockOutput(logPath, b.N), 60))
		case b.Mode == modeNoGPUExit && st.rc != 0 && st.rc != 1:
			t.Errorf("block %d (docs/device.md:%d) exited %d, want 0 or 1 (a failed check), never bad input:\n%s\n--- its output:\n%s",
				b.N, b.Line, st.rc, indent(b.Body), tail(blockOutput(logPath, b.N), 60))
		case b.Mode == modeMeasures && st.rc != 0:
			out := blockOutput(logPath, b.N)
			if why, ok := hostDecided(st.rc, out); ok {
				t.Logf("block %d (docs/device.md:%d) exited %d: %s", b.N, b.Line, st.rc, why)
			} else {
				t.Errorf("block %d (docs/device.md:%d) exited %d, and not for a level this host invalidated:\n%s\n--- its output:\n%s",
					b.N, b.Line, st.rc, indent(b.Body), tail(out, 60))
			}
		}
	}
}

// hostDecided says whether a measurement that exited rc failed only
// because this host, not the command, decided: replay and optimize exit 1
// when a level is invalid, and the reasons a shared CPU host gives are
// client_bound (the load generator sent late) and emulator_bound (the
// emulated KV link lagged); the gate exits 2 when no level of such a
// record is valid (a baseline needs one; a check is then unusable).
func hostDecided(rc int, out string) (string, bool) {
	var reasons []string
	for _, r := range []string{"client_bound", "emulator_bound"} {
		if strings.Contains(out, "invalid ("+r) || strings.Contains(out, "invalid: "+r) {
			reasons = append(reasons, r)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		// Any other reason for an invalid level is the runbook's.
		if i := strings.Index(line, "invalid ("); i >= 0 {
			rest := line[i+len("invalid ("):]
			if !strings.HasPrefix(rest, "client_bound") && !strings.HasPrefix(rest, "emulator_bound") {
				return "", false
			}
		}
	}
	switch {
	case rc == 1 && len(reasons) > 0:
		return "this host invalidated a level (" + strings.Join(reasons, ", ") + ")", true
	case rc == 2 && (strings.Contains(out, "unusable") || strings.Contains(out, "no level is valid in any run")):
		return "the gate had no valid level to store or compare (the record's levels were this host's to invalidate)", true
	}
	return "", false
}

// rootWithBTF says whether this test can run the runbook's root blocks,
// and if not, what they need.
func rootWithBTF() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "root"
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return false, "kernel BTF (/sys/kernel/btf/vmlinux)"
	}
	return true, ""
}

func busyPorts() []int {
	var busy []int
	for _, p := range runbookPorts {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			busy = append(busy, p)
			continue
		}
		ln.Close()
	}
	return busy
}

// script is the bash program that runs the blocks in one shell. Each
// block's start and end (with its exit status) go to fd 9, the status
// file, and a marker line to the log; set -e ends the run at the first
// failing command of a block that must succeed.
func script(blocks []block, root bool, rootWhy string) string {
	var b strings.Builder
	b.WriteString("# Generated by TestDeviceRunbook from docs/device.md; run by bash.\n")
	b.WriteString("set -e\nexec 9>>\"$RUNBOOK_STATUS\"\ncd \"$HONE\"\n")
	for _, bl := range blocks {
		fmt.Fprintf(&b, "\n# block %d, docs/device.md:%d %s\n", bl.N, bl.Line, bl.Mode)
		if bl.Mode == modeSkip || (bl.Mode == modeRoot && !root) {
			why := "runbook=skip"
			if bl.Mode == modeRoot {
				why = "needs " + rootWhy
			}
			fmt.Fprintf(&b, "echo 'skip %d %s' >&9\n", bl.N, why)
			continue
		}
		fmt.Fprintf(&b, "echo \"start %d $EPOCHREALTIME\" >&9\necho '::runbook block %d::'\n", bl.N, bl.N)
		if bl.Mode == modeNoGPUExit || bl.Mode == modeMeasures {
			fmt.Fprintf(&b, "set +e\n%s__runbook_rc=$?\nset -e\necho \"end %d $__runbook_rc $EPOCHREALTIME\" >&9\n", bl.Body, bl.N)
			continue
		}
		fmt.Fprintf(&b, "%secho \"end %d 0 $EPOCHREALTIME\" >&9\n", bl.Body, bl.N)
	}
	return b.String()
}

type blockStatus struct {
	started, ended, skipped bool
	rc                      int
	from, to                float64 // $EPOCHREALTIME at start and end
}

func readStatus(t *testing.T, path string) map[int]blockStatus {
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	defer f.Close()
	out := map[int]blockStatus{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		n, _ := strconv.Atoi(fields[1])
		st := out[n]
		switch fields[0] {
		case "start":
			st.started = true
			if len(fields) > 2 {
				st.from, _ = strconv.ParseFloat(fields[2], 64)
			}
		case "end":
			st.ended = true
			if len(fields) > 3 {
				st.rc, _ = strconv.Atoi(fields[2])
				st.to, _ = strconv.ParseFloat(fields[3], 64)
			}
		case "skip":
			st.skipped = true
		}
		out[n] = st
	}
	return out
}

// blockOutput is what block n printed, from its marker to the next.
func blockOutput(logPath string, n int) string {
	b, _ := os.ReadFile(logPath)
	s := string(b)
	marker := fmt.Sprintf("::runbook block %d::\n", n)
	i := strings.Index(s, marker)
	if i < 0 {
		return ""
	}
	s = s[i+len(marker):]
	if j := strings.Index(s, "::runbook block "); j >= 0 {
		s = s[:j]
	}
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// world is the scratch checkout, the fakes and the environment the
// runbook runs in.
type world struct {
	dir, checkout, stateDir, status, vllmLog string
	env                                      []string
}

// fakeVLLMVersion is the vLLM the fake says it is: the newest release the
// version table names, so every flag hone renders is checked.
const fakeVLLMVersion = "0.26.0"

// fakeTimeScale is the fake engine's: wall seconds per model second. A
// level's eight warm-ups span 16 model seconds, so the smoke sizes' six
// levels take about half a minute at 0.25, and the host's milliseconds
// stay small beside the test profile's model times.
const fakeTimeScale = "0.25"

// fakeRevision is the one model commit the fake hub has.
const fakeRevision = "5e3c1a7f0b2d4c6e8a9b1c3d5e7f9a0b2c4d6e8f"

func newWorld(t *testing.T, tmp string) *world {
	w := &world{dir: tmp, checkout: filepath.Join(tmp, "hone"), stateDir: filepath.Join(tmp, "state"),
		status: filepath.Join(tmp, "status"), vllmLog: filepath.Join(tmp, "fake-vllm.jsonl")}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fakeBin, fakePkgs, home := filepath.Join(tmp, "fakebin"), filepath.Join(tmp, "fakepkgs"), filepath.Join(tmp, "home")
	for _, d := range []string{filepath.Join(w.checkout, "bin"), filepath.Join(w.checkout, "examples"), fakeBin, fakePkgs, home, w.stateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hone := honetest.Binary(t)
	if err := os.Symlink(hone, filepath.Join(w.checkout, "bin", "hone")); err != nil {
		t.Fatal(err)
	}
	goBuild(t, repo, filepath.Join(fakePkgs, "vllm"), "./scripts/fake-vllm")
	copyFile(t, filepath.Join(repo, "scripts/fake-gpu-host/hf"), filepath.Join(fakePkgs, "hf"), 0o755)
	for _, f := range []string{"python3", "sudo"} {
		copyFile(t, filepath.Join(repo, "scripts/fake-gpu-host", f), filepath.Join(fakeBin, f), 0o755)
	}
	examples, _ := filepath.Glob(filepath.Join(repo, "examples", "*.yaml"))
	for _, f := range examples {
		copyFile(t, f, filepath.Join(w.checkout, "examples", filepath.Base(f)), 0o644)
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "HOME", "VIRTUAL_ENV", "PYTHONHOME", "HONE_STATE_DIR", "HONE_SMOKE", "XDG_STATE_HOME", "CI":
			continue
		}
		if strings.HasPrefix(k, "FAKE_") || strings.HasPrefix(k, "QPS") {
			continue
		}
		w.env = append(w.env, kv)
	}
	w.env = append(w.env,
		"PATH="+fakeBin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home,
		"HONE="+w.checkout,
		"HONE_STATE_DIR="+w.stateDir,
		"HONE_SMOKE=1",
		"RUNBOOK_STATUS="+w.status,
		"FAKE_PKGS="+fakePkgs,
		"FAKE_VLLM_VERSION="+fakeVLLMVersion,
		"FAKE_VLLM_REVISION="+fakeRevision,
		"FAKE_VLLM_HONE="+hone,
		"FAKE_VLLM_LOG="+w.vllmLog,
		"FAKE_VLLM_TIME_SCALE="+fakeTimeScale,
		"FAKE_VLLM_PROFILE="+filepath.Join(repo, "internal/runbook/testdata/cpu-host-profile.yaml"),
	)
	return w
}

func goBuild(t *testing.T, repo, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// cleanup stops whatever the runbook left running: the daemon, and every
// deployment under the state directories deploy up and optimize used.
func (w *world) cleanup(t *testing.T) {
	if b, err := os.ReadFile(filepath.Join(w.checkout, "daemon.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, dir := range []string{w.stateDir, filepath.Join(w.checkout, "results", "device", "state")} {
		states, _ := deploy.List(dir)
		for _, s := range states {
			if err := deploy.Down(s, 2*time.Second); err != nil && !errors.Is(err, deploy.ErrNotUp) {
				t.Errorf("left running by the runbook, and not stopped: %s: %v", s, err)
			} else if err == nil {
				t.Errorf("the runbook left a deployment running: %s (stopped now)", s)
			}
		}
	}
}

// checkShown checks what the document says the steps must show, as far
// as a host without a GPU can show it.
func (w *world) checkShown(t *testing.T, blocks []block, status map[int]blockStatus, logPath string, root bool) {
	// deploy render: no warning, and vLLM's development mode on every
	// worker (the specs ask for cold_start: reset_prefix_cache).
	renders := 0
	for _, b := range blocks {
		if !strings.Contains(b.Body, "deploy render") {
			continue
		}
		out := blockOutput(logPath, b.N)
		renders++
		if strings.Contains(out, "# warning:") {
			t.Errorf("block %d: deploy render printed a warning:\n%s", b.N, out)
		}
		if n := strings.Count(out, "vllm serve "); n == 0 || n != strings.Count(out, deploy.EnvServerDevMode+"=1") {
			t.Errorf("block %d: %d vllm commands, %d with %s=1:\n%s", b.N, n, strings.Count(out, deploy.EnvServerDevMode+"=1"), deploy.EnvServerDevMode, out)
		}
	}
	if renders != 2 {
		t.Errorf("%d blocks render a deployment, want 2 (colocated and disaggregated)", renders)
	}
	// Every worker the fake vLLM was asked to start passed the version
	// check and ran in development mode.
	b, err := os.ReadFile(w.vllmLog)
	if err != nil {
		t.Fatalf("the fake vllm never served: %v", err)
	}
	serves := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("fake vllm log: %v: %q", err, line)
		}
		serves++
		if rec["refused"] != nil || rec[deploy.EnvServerDevMode] != "1" || rec["version"] != fakeVLLMVersion {
			t.Errorf("fake vllm: %v", rec)
		}
	}
	if serves < 3 { // colocated 1 worker, disaggregated 2, then the trials
		t.Errorf("the fake vllm served %d workers", serves)
	}
	// preflight: the serving checks pass (a vLLM found and identified, the
	// lock file written); only the GPU's (and without root the eBPF)
	// checks may fail on this host.
	var pf struct {
		Checks  []struct{ Section, Name, Status string }
		Serving struct {
			VLLM   string            `json:"vllm_version"`
			Freeze string            `json:"freeze_file"`
			Files  map[string]string `json:"model_files_sha256"`
		}
	}
	readJSON(t, filepath.Join(w.checkout, "preflight.json"), &pf)
	for _, c := range pf.Checks {
		if c.Status == "fail" && c.Section != "gpu" && !(c.Section == "ebpf" && !root) {
			t.Errorf("preflight.json: %s/%s failed", c.Section, c.Name)
		}
	}
	if pf.Serving.VLLM != fakeVLLMVersion || pf.Serving.Freeze != "requirements.lock.txt" {
		t.Errorf("preflight.json serving: %+v", pf.Serving)
	}
	if lock, err := os.ReadFile(filepath.Join(w.checkout, "requirements.lock.txt")); err != nil || !strings.Contains(string(lock), "vllm=="+fakeVLLMVersion) {
		t.Errorf("requirements.lock.txt: %q, %v", lock, err)
	}
	readJSON(t, filepath.Join(w.checkout, "model.json"), &pf)
	if len(pf.Serving.Files) < 3 {
		t.Errorf("model.json hashes %d files", len(pf.Serving.Files))
	}
	// The specs name the downloaded commit.
	for _, s := range []string{"colocated-tp2", "disagg-nixl-1p1d"} {
		spec, err := deploy.LoadSpec(filepath.Join(w.checkout, "specs", s+".yaml"))
		if err != nil || spec.Model.Revision != fakeRevision {
			t.Errorf("specs/%s.yaml: %v (revision %q)", s, err, spec.Model.Revision)
		}
	}
	// The records: emulated (the fake is hone's emulator, never a
	// device), reset before every level.
	for _, rec := range []string{"colocated.json", "disagg.json"} {
		var r struct {
			Kind  string `json:"kind"`
			Cache struct{ Procedure string }
		}
		readJSON(t, filepath.Join(w.checkout, rec), &r)
		if r.Kind != "emulated" || r.Cache.Procedure != deploy.ColdStartReset {
			t.Errorf("%s: kind %q, cache %q", rec, r.Kind, r.Cache.Procedure)
		}
	}
	// optimize: every trial deployed the fake vLLM and measured it (a
	// trial's error would be the runbook's: a flag, a path, the spec).
	var lg struct {
		Trials []struct {
			N     int    `json:"n"`
			Key   string `json:"key"`
			Kind  string `json:"kind"`
			Error string `json:"error"`
		} `json:"trials"`
	}
	readJSON(t, filepath.Join(w.checkout, "results/device/log.json"), &lg)
	if len(lg.Trials) == 0 {
		t.Error("results/device/log.json: no trials")
	}
	for _, tr := range lg.Trials {
		if tr.Error != "" || tr.Kind != "emulated" {
			t.Errorf("optimize trial %d (%s): kind %q, error %q", tr.N, tr.Key, tr.Kind, tr.Error)
		}
	}
	if _, err := os.Stat(filepath.Join(w.checkout, "results/device/report.md")); err != nil {
		t.Error(err)
	}
	// The baseline, unless this host invalidated every level of the record.
	for _, b := range blocks {
		if strings.Contains(b.Body, "gate baseline create") && status[b.N].rc == 0 {
			if _, err := os.Stat(filepath.Join(w.checkout, "baselines/colocated.json")); err != nil {
				t.Error(err)
			}
		}
	}
	if root {
		if _, err := os.Stat(filepath.Join(w.checkout, "daemon.json")); err != nil {
			t.Errorf("the daemon wrote no snapshot: %v", err)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}
