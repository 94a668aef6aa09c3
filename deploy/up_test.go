package deploy

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
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/internal/procstat"
)

// The test binary doubles as the processes Up starts, chosen by
// HONE_DEPLOY_FAKE: a fake vLLM worker (which also starts a grandchild in
// its process group, to prove Down leaves no orphan), the real proxy, a
// sleeper, or a whole `deploy up` (or owner of a deployment) that a test
// kills to play a crash. It is also an owned deployment's watchdog: deploy's
// init runs that before TestMain.
func TestMain(m *testing.M) {
	switch os.Getenv("HONE_DEPLOY_FAKE") {
	case "":
		code := m.Run()
		honetest.Cleanup()
		os.Exit(code)
	case "sleeper":
		if os.Getenv("HONE_FAKE_IGNORE_TERM") == "1" {
			signal.Ignore(syscall.SIGTERM)
		}
		time.Sleep(5 * time.Minute)
		os.Exit(0)
	case "up":
		fakeUp()
	default:
		if len(os.Args) > 1 && os.Args[1] == "proxy" {
			fakeProxy()
		}
		fakeWorker()
	}
}

func argValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func fakeWorker() {
	if len(os.Args) == 2 && os.Args[1] == "--version" { // Up asks the installed vLLM's version
		fmt.Println(fakeVLLMVersion)
		os.Exit(0)
	}
	if os.Getenv("HONE_FAKE_EXIT") == "1" {
		fmt.Println("fake worker: exiting on purpose")
		os.Exit(3)
	}
	if os.Getenv("HONE_FAKE_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), "HONE_DEPLOY_FAKE=sleeper")
	if err := child.Start(); err != nil {
		panic(err)
	}
	fmt.Printf("grandchild %d\n", child.Process.Pid)
	addr := net.JoinHostPort(argValue(os.Args, "--host"), argValue(os.Args, "--port"))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":false`) { // a prefill leg
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"index":0,"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"127.0.0.1","remote_port":5600}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"%s\"}]}\n\ndata: [DONE]\n\n", os.Getenv("CUDA_VISIBLE_DEVICES"))
	})
	if err := http.ListenAndServe(addr, mux); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}

func fakeProxy() {
	cfg, err := proxy.LoadConfig(argValue(os.Args, "--config"))
	if err != nil {
		panic(err)
	}
	p, err := proxy.New(cfg, nil)
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := p.ListenAndServe(ctx, nil, time.Second); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if out := argValue(os.Args, "--timeline-out"); out != "" {
		if _, err := p.WriteTimelines(out); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	os.Exit(0)
}

// fakeUp plays a program that runs Up and is then killed: `deploy up`
// (HONE_FAKE_OWNED unset), or an owner such as hone optimize
// (HONE_FAKE_OWNED=1). It prints the deployment's live pids ("PIDS ..."),
// its watchdog's ("WATCHDOG n", owned only), then "UP"; then it exits when
// a line "exit" arrives on stdin, and sleeps otherwise.
func fakeUp() {
	os.Setenv("HONE_DEPLOY_FAKE", "worker") // for the processes Up starts
	s, err := LoadSpec(os.Getenv("HONE_FAKE_SPEC"))
	if err != nil {
		panic(err)
	}
	owned := os.Getenv("HONE_FAKE_OWNED") == "1"
	o := UpOptions{StateDir: os.Getenv("HONE_FAKE_STATE"), VLLM: os.Args[0], Hone: os.Args[0], HealthTimeout: 20 * time.Second, Owned: owned}
	var d *Deployment
	done := make(chan struct{})
	// Up runs on a goroutine locked to its thread and never unlocked, so
	// the thread ends with the goroutine: were the processes forked from
	// it, their parent-death signal would kill them right then. (The main
	// goroutine holds the main thread, which Go never ends.)
	runtime.LockOSThread()
	go func() {
		runtime.LockOSThread()
		d, err = Up(context.Background(), s, o)
		close(done)
	}()
	<-done
	if err != nil {
		fmt.Println("up failed:", err)
		os.Exit(1)
	}
	// More threads come and go while the deployment runs.
	go func() {
		for {
			ch := make(chan struct{})
			go func() { runtime.LockOSThread(); close(ch) }()
			<-ch
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond) // the retired threads' signals, had they any, are delivered by now
	var pids []string
	for _, pid := range GroupPIDs(d.State.Processes) {
		pids = append(pids, strconv.Itoa(pid))
	}
	fmt.Println("PIDS", strings.Join(pids, " "))
	if d.guard != nil {
		fmt.Println("WATCHDOG", d.guard.pid)
	}
	fmt.Println("UP")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "exit" {
			os.Exit(0) // no Down: an owned deployment goes with its owner
		}
	}
	time.Sleep(5 * time.Minute)
	os.Exit(0)
}

// fakeUpProcess is a started fakeUp and what it printed.
type fakeUpProcess struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	statePath string
	pids      []int // every live process of the deployment after Up
	watchdog  int   // 0 when not owned
}

// startFakeUp runs fakeUp for s under dir and waits for "UP".
func startFakeUp(t *testing.T, s *Spec, dir string, env ...string) *fakeUpProcess {
	t.Helper()
	specPath := filepath.Join(dir, "spec.yaml")
	b, _ := json.Marshal(s) // JSON is YAML
	os.WriteFile(specPath, b, 0o644)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "HONE_DEPLOY_FAKE=up", "HONE_FAKE_SPEC="+specPath, "HONE_FAKE_STATE="+dir), env...)
	out, _ := cmd.StdoutPipe()
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &fakeUpProcess{cmd: cmd, stdin: stdin, statePath: StatePath(dir, s.Name)}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		Down(f.statePath, 100*time.Millisecond)
		for _, pid := range append(f.pids, f.watchdog) {
			if pid > 0 && alive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	line := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); l == "UP" || strings.HasPrefix(l, "up failed") || strings.HasPrefix(l, "PIDS") || strings.HasPrefix(l, "WATCHDOG") {
				line <- l
			}
		}
		close(line)
	}()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-line:
			switch {
			case !ok:
				t.Fatal("deploy up exited without UP")
			case l == "UP":
				return f
			case strings.HasPrefix(l, "PIDS"):
				for _, p := range strings.Fields(l)[1:] {
					pid, _ := strconv.Atoi(p)
					f.pids = append(f.pids, pid)
				}
			case strings.HasPrefix(l, "WATCHDOG"):
				f.watchdog, _ = strconv.Atoi(strings.Fields(l)[1])
			default:
				t.Fatal(l)
			}
		case <-timeout:
			t.Fatal("deploy up did not finish")
		}
	}
}

// kill SIGKILLs the fake up and reaps it.
func (f *fakeUpProcess) kill() {
	f.cmd.Process.Kill()
	f.cmd.Wait()
}

// freePorts is the first of n consecutive free ports, below the
// ephemeral range.
func freePorts(t testing.TB, n int) int { return honetest.FreePorts(t, n) }

func testSpec(t testing.TB, topology string) *Spec {
	t.Helper()
	base := freePorts(t, 6)
	kv := ""
	if strings.Contains(topology, "disaggregated") { // its side channel, off the fixed default 5600
		kv = fmt.Sprintf("kv_connector: {side_channel_port: %d}", base+4)
	}
	y := fmt.Sprintf(`
name: up-test
engine: vllm
model: {id: org/m, revision: 0123456789abcdef0123456789abcdef01234567}
gpus: {budget: 2, ids: [4, 5]}
%s
%s
routing: {health_interval: 100ms}
network: {proxy_port: %d, worker_port: %d}
`, topology, kv, base, base+1)
	s, err := ParseSpec([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const (
	twoReplicas = "topology: {kind: colocated, replicas: 2, tp: 1}"
	onePoneD    = "topology: {kind: disaggregated, prefill: {replicas: 1, tp: 1}, decode: {replicas: 1, tp: 1}}"
)

// members lists every live process of the deployment's groups.
func members(t *testing.T, st *State) []int {
	t.Helper()
	var pids []int
	for _, p := range st.Processes {
		m, ok := groupMembers(p.PGID)
		if !ok {
			t.Skip("no /proc: cannot check for orphans")
		}
		pids = append(pids, m...)
	}
	return pids
}

func alive(pid int) bool { return procstat.Alive(pid) }

func assertAllGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d survived down", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func up(t *testing.T, s *Spec, dir string) *Deployment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var steps []Progress
	d, err := Up(ctx, s, UpOptions{StateDir: dir, VLLM: os.Args[0], Hone: os.Args[0], Grace: 2 * time.Second, Owned: true,
		HealthTimeout: 20 * time.Second, Progress: func(p Progress) { steps = append(steps, p) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Down(time.Second) })
	if len(steps) == 0 || !steps[len(steps)-1].Done || steps[len(steps)-1].Healthy != len(d.State.Processes) {
		t.Errorf("progress: %+v", steps)
	}
	return d
}

func TestUpServeDown(t *testing.T) {
	t.Setenv("HONE_DEPLOY_FAKE", "worker")
	for _, topo := range []string{twoReplicas, onePoneD} {
		t.Run(strings.Fields(topo)[2], func(t *testing.T) {
			dir := t.TempDir()
			d := up(t, testSpec(t, topo), dir)
			st, err := ReadState(d.StatePath)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Processes) != 3 || st.Processes[2].Name != "proxy" {
				t.Fatalf("state: %+v", st.Processes)
			}
			pids := members(t, st)
			if len(pids) != 5 { // two workers with a grandchild each, and the proxy
				t.Errorf("live processes %v, want 5", pids)
			}
			resp, err := http.Post(d.ProxyURL()+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":[1,2],"stream":true,"max_tokens":1}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") {
				t.Errorf("through the proxy: %d %s", resp.StatusCode, body)
			}
			page, err := proxy.FetchTimelines(context.Background(), d.ProxyURL(), 0)
			if err != nil || len(page.Timelines) != 1 {
				t.Fatalf("timelines: %v %+v", err, page)
			}
			_, err = Up(context.Background(), testSpec(t, topo), UpOptions{StateDir: dir, VLLM: os.Args[0], Hone: os.Args[0]})
			if !errors.Is(err, ErrAlreadyUp) {
				t.Errorf("second up: %v", err)
			}
			if err := d.Down(2 * time.Second); err != nil {
				t.Fatal(err)
			}
			assertAllGone(t, pids)
			select {
			case <-d.guard.exited: // released by Down, it exits without acting
			case <-time.After(5 * time.Second):
				t.Errorf("the watchdog (pid %d) outlived down", d.guard.pid)
			}
			if b, err := os.ReadFile(st.Timelines); err != nil || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `"outcome":"success"`) {
				t.Errorf("timelines written at down: %v %q", err, b)
			}
			if _, err := os.Stat(d.StatePath); !os.IsNotExist(err) {
				t.Errorf("state file left: %v", err)
			}
			if err := Down(d.StatePath, time.Second); err == nil || !strings.Contains(err.Error(), "no deployment state") {
				t.Errorf("second down: %v", err)
			}
		})
	}
}

// TestDownAfterCrash: the process that ran Up is SIGKILLed, a worker's
// leader is SIGKILLed (its grandchild lives on in the group), and the
// workers ignore SIGTERM. Down from the state file still leaves nothing.
func TestDownAfterCrash(t *testing.T) {
	dir := t.TempDir()
	s := testSpec(t, onePoneD)
	f := startFakeUp(t, s, dir, "HONE_FAKE_IGNORE_TERM=1")
	f.kill() // the crash
	st, err := ReadState(f.statePath)
	if err != nil {
		t.Fatal(err)
	}
	pids := members(t, st)
	if len(pids) != 5 {
		t.Fatalf("live processes %v, want 5", pids)
	}
	syscall.Kill(st.Processes[0].PID, syscall.SIGKILL) // a worker crashes; its grandchild stays
	start := time.Now()
	if err := Down(f.statePath, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 6*time.Second {
		t.Errorf("down took %v", el)
	}
	assertAllGone(t, pids)
}

// waitGone polls until none of pids is alive, up to 10 s (the host may be
// busy), and returns those still alive.
func waitGone(pids []int) []int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []int
		for _, pid := range pids {
			if pid > 0 && alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOwnedDeploymentDiesWithItsOwner: a program runs Up with Owned and is
// SIGKILLed; every process of the deployment — the workers, their
// grandchildren, the proxy — and the watchdog are gone soon after, and the
// state file with them. Ten times over, while the owner's threads come
// and go (fakeUp), since the parent-death signal is tied to a thread.
func TestOwnedDeploymentDiesWithItsOwner(t *testing.T) {
	if _, ok := groupMembers(1); !ok {
		t.Skip("no /proc: cannot list a deployment's processes")
	}
	for i := range 10 {
		topo := []string{onePoneD, twoReplicas}[i%2]
		dir := t.TempDir()
		f := startFakeUp(t, testSpec(t, topo), dir, "HONE_FAKE_OWNED=1")
		if len(f.pids) != 5 || f.watchdog == 0 {
			t.Fatalf("run %d: live processes %v, watchdog %d; want 5 and a watchdog", i, f.pids, f.watchdog)
		}
		for _, pid := range f.pids {
			if !alive(pid) {
				t.Fatalf("run %d: pid %d died before its owner (its forking thread ended?)", i, pid)
			}
		}
		f.kill()
		if left := waitGone(append(f.pids, f.watchdog)); len(left) > 0 {
			t.Fatalf("run %d: %v of %v (watchdog %d) outlived their owner by 10 s", i, left, f.pids, f.watchdog)
		}
		if _, err := os.Stat(f.statePath); !os.IsNotExist(err) {
			t.Errorf("run %d: the watchdog left the state file: %v", i, err)
		}
	}
}

// TestOwnedDeploymentEndsWithItsOwner: an owner that exits without Down
// takes its deployment with it too.
func TestOwnedDeploymentEndsWithItsOwner(t *testing.T) {
	if _, ok := groupMembers(1); !ok {
		t.Skip("no /proc: cannot list a deployment's processes")
	}
	f := startFakeUp(t, testSpec(t, onePoneD), t.TempDir(), "HONE_FAKE_OWNED=1")
	io.WriteString(f.stdin, "exit\n")
	f.cmd.Wait()
	if left := waitGone(append(f.pids, f.watchdog)); len(left) > 0 {
		t.Fatalf("%v of %v (watchdog %d) outlived their owner's exit by 10 s", left, f.pids, f.watchdog)
	}
}

// TestOwnedDeploymentWithoutItsWatchdog: with the watchdog SIGKILLed
// first, the parent-death signal (Linux) still kills every process Up
// started when the owner is SIGKILLed. Their own children are the
// watchdog's to kill, so they stay: the test stops them with Down.
func TestOwnedDeploymentWithoutItsWatchdog(t *testing.T) {
	if !pdeathsigSupported {
		t.Skip("no parent-death signal on " + runtime.GOOS)
	}
	for i := range 3 {
		dir := t.TempDir()
		f := startFakeUp(t, testSpec(t, twoReplicas), dir, "HONE_FAKE_OWNED=1")
		st, err := ReadState(f.statePath)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Kill(f.watchdog, syscall.SIGKILL)
		if left := waitGone([]int{f.watchdog}); len(left) > 0 {
			t.Fatal("the watchdog survived SIGKILL")
		}
		f.kill()
		var leaders []int
		for _, p := range st.Processes {
			leaders = append(leaders, p.PID)
		}
		if left := waitGone(leaders); len(left) > 0 {
			t.Fatalf("run %d: %v of the processes Up started outlived their owner by 10 s", i, left)
		}
		if err := Down(f.statePath, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		assertAllGone(t, f.pids)
	}
}

// TestUnownedDeploymentOutlivesItsStarter: without Owned (hone deploy up),
// the deployment stays up when the program that started it is SIGKILLed.
func TestUnownedDeploymentOutlivesItsStarter(t *testing.T) {
	if _, ok := groupMembers(1); !ok {
		t.Skip("no /proc: cannot list a deployment's processes")
	}
	f := startFakeUp(t, testSpec(t, onePoneD), t.TempDir())
	if len(f.pids) != 5 || f.watchdog != 0 {
		t.Fatalf("live processes %v, watchdog %d; want 5 and none", f.pids, f.watchdog)
	}
	f.kill()
	time.Sleep(time.Second)
	for _, pid := range f.pids {
		if !alive(pid) {
			t.Errorf("pid %d died with the program that ran deploy up", pid)
		}
	}
	if err := Down(f.statePath, time.Second); err != nil {
		t.Fatal(err)
	}
	assertAllGone(t, f.pids)
}

func TestUpRefusesBeforeStarting(t *testing.T) {
	t.Setenv("HONE_DEPLOY_FAKE", "worker")
	dir := t.TempDir()
	s := testSpec(t, twoReplicas)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", s.Network.WorkerPort+1))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Up(context.Background(), s, UpOptions{StateDir: dir, VLLM: os.Args[0], Hone: os.Args[0]})
	if err == nil || !strings.Contains(err.Error(), "worker replica-1's address") {
		t.Errorf("busy port: %v", err)
	}
	if _, err := os.Stat(StatePath(dir, s.Name)); !os.IsNotExist(err) {
		t.Errorf("a refused spec left state: %v", err)
	}
	ln.Close()
	_, err = Up(context.Background(), s, UpOptions{StateDir: dir, VLLM: "/nonexistent/vllm", Hone: os.Args[0]})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/vllm") {
		t.Errorf("missing binary: %v", err)
	}
}

func TestUpWorkerDies(t *testing.T) {
	t.Setenv("HONE_DEPLOY_FAKE", "worker")
	t.Setenv("HONE_FAKE_EXIT", "1")
	dir := t.TempDir()
	s := testSpec(t, twoReplicas)
	start := time.Now()
	_, err := Up(context.Background(), s, UpOptions{StateDir: dir, VLLM: os.Args[0], Hone: os.Args[0], Grace: time.Second, HealthTimeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited before it was healthy") || !strings.Contains(err.Error(), "exiting on purpose") {
		t.Fatalf("err = %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("failing up took %v", el)
	}
	if _, err := os.Stat(StatePath(dir, s.Name)); !os.IsNotExist(err) {
		t.Errorf("failed up left state: %v", err)
	}
}

func TestHashModelDir(t *testing.T) {
	h, err := HashModelDir("testdata/tiny-model")
	if err != nil {
		t.Fatal(err)
	}
	// sha256sum testdata/tiny-model/model.safetensors
	if got := h["model.safetensors"]; got != "2e33f43c9045c19783946d2622c8deacc86f30f3f9b4568dad6ffa2e03ab95b2" {
		t.Errorf("model.safetensors hash %s", got)
	}
	if len(h) != 2 || len(h["config.json"]) != 64 {
		t.Errorf("hashes %v", h)
	}
	if _, err := HashModelDir(t.TempDir()); err == nil {
		t.Errorf("empty dir: want an error")
	}
}

// fakeVLLMVersion is what the fake vllm says to --version.
const fakeVLLMVersion = "0.26.0"

// Up reads the installed vLLM's version and adapts to it; every TP rank's
// KV port is checked free before anything starts.
func TestUpReadsVersionAndChecksEveryKVPort(t *testing.T) {
	t.Setenv("HONE_DEPLOY_FAKE", "worker")
	base := freePorts(t, 8)
	y := fmt.Sprintf(`
name: up-kv
engine: vllm
model: {id: org/m, revision: 0123456789abcdef0123456789abcdef01234567}
gpus: {budget: 4, ids: [0, 1, 2, 3]}
topology: {kind: disaggregated, prefill: {replicas: 1, tp: 2}, decode: {replicas: 1, tp: 2}}
kv_connector: {name: NixlConnector, side_channel_port: %d}
routing: {health_interval: 100ms}
network: {proxy_port: %d, worker_port: %d}
`, base+4, base, base+1)
	s, err := ParseSpec([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Render(s, RenderOptions{VLLM: os.Args[0], Hone: os.Args[0], VLLMVersion: fakeVLLMVersion})
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.Workers[1].KVPorts; len(got) != 2 || got[0] != base+6 || got[1] != base+7 {
		t.Fatalf("decode-0 KV ports %v, want [%d %d] (after prefill-0's two)", got, base+6, base+7)
	}
	// The decode worker's second rank's port is taken: refused before start.
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(base+7)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Up(context.Background(), s, UpOptions{StateDir: t.TempDir(), VLLM: os.Args[0], Hone: os.Args[0], Owned: true, HealthTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "decode-0 (KV port)") {
		t.Fatalf("up with a TP rank's KV port taken: %v", err)
	}
	ln.Close()
	d := up(t, s, t.TempDir())
	if v, err := engine.InstalledVersion(context.Background(), EngineVLLM, os.Args[0]); err != nil || v != fakeVLLMVersion {
		t.Errorf("InstalledVersion of the fake: %q %v", v, err)
	}
	_ = d
}

// TestUpOptionsVLLMPath: a relative --vllm (.venv/bin/vllm, as the GPU
// runbook passes it) becomes absolute, so that workers started with it
// find the same file; a bare name stays a PATH look-up.
func TestUpOptionsVLLMPath(t *testing.T) {
	s := &Spec{Engine: EngineVLLM}
	wd, _ := os.Getwd()
	for in, want := range map[string]string{
		".venv/bin/vllm": filepath.Join(wd, ".venv/bin/vllm"),
		"/opt/vllm":      "/opt/vllm",
		"vllm":           "vllm",
		"":               "",
	} {
		o, err := UpOptions{VLLM: in, Hone: "hone"}.withDefaults(s)
		if err != nil || o.VLLM != want {
			t.Errorf("--vllm %q: %q, %v; want %q", in, o.VLLM, err, want)
		}
	}
}
