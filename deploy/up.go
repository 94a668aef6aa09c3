package deploy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/atomicfile"
)

// ProxyConfig is the proxy configuration that fronts a plan's workers.
func ProxyConfig(p *Plan) proxy.Config {
	s := p.Spec
	c := proxy.Config{
		Listen:            p.ProxyAddr,
		Engine:            proxy.EngineField(s.Engine),
		Mode:              s.Topology.Kind,
		Routing:           s.Routing.Policy,
		SessionHeader:     s.Routing.SessionHeader,
		AffinityTokens:    s.Routing.AffinityTokens,
		PrefillTimeout:    time.Duration(s.Routing.PrefillTimeout),
		DecodeTimeout:     time.Duration(s.Routing.DecodeTimeout),
		StreamIdleTimeout: time.Duration(s.Routing.StreamIdleTimeout),
		HealthInterval:    time.Duration(s.Routing.HealthInterval),
	}
	if s.Topology.Kind == Disaggregated {
		c.Connector = s.KV.Name
	}
	for _, w := range p.Workers {
		c.Workers = append(c.Workers, proxy.Worker{Name: w.Name, Role: w.Role, URL: w.URL(), KVAddr: w.KVAddr})
	}
	return c
}

// UpOptions says where and how to start a deployment.
type UpOptions struct {
	// StateDir holds <name>/state.json, the proxy config and the logs;
	// DefaultStateDir() when empty.
	StateDir string
	// Hone is the hone binary that runs emulator workers and the proxy;
	// os.Executable() when empty.
	Hone string
	// VLLM is the vllm binary; "vllm" on PATH when empty.
	VLLM string
	// HealthTimeout bounds the wait for every /health; 20 minutes for vllm
	// (weights load, CUDA graphs compile), 60 s for the emulator, when zero.
	HealthTimeout time.Duration
	// Grace is how long processes get between SIGTERM and SIGKILL when Up
	// fails part-way; 10 s when zero.
	Grace time.Duration
	// Owned ties the deployment to this process: when it dies — exits,
	// crashes, or is SIGKILLed — every process of the deployment dies too,
	// workers with everything they started, and the proxy. For
	// deployments a running program measures and tears down (hone
	// optimize's trials, tests). Leave it false for one that must outlive
	// the command that started it (hone deploy up).
	//
	// On Linux each started process gets a parent-death signal (SIGKILL),
	// and a watchdog process kills the deployment's process groups when
	// this one is gone (watchdog.go). Elsewhere only the watchdog acts: if
	// it is killed along with this process, the deployment stays up until
	// hone deploy down (or the next hone optimize on the same --out) stops
	// it.
	Owned bool
	// Progress, when set, is called as workers come up.
	Progress func(Progress)
	Log      *slog.Logger
}

// Progress is a step of Up.
type Progress struct {
	Healthy, Total int
	Waiting        []string // processes not yet healthy
	Elapsed        time.Duration
	Done           bool
}

// Deployment is a running deployment started by Up in this process.
type Deployment struct {
	State     State
	StatePath string
	exited    map[int]chan struct{} // pid → closed when reaped
	guard     *watchdog             // an owned deployment's watchdog; nil otherwise
}

// ProxyURL is the front door every request goes through.
func (d *Deployment) ProxyURL() string { return d.State.ProxyURL }

// Down stops the deployment: see Down. An owned deployment's watchdog is
// released once nothing is left (or someone else already stopped it); while
// a process survives, the watchdog stays, and kills it again when this
// process exits.
func (d *Deployment) Down(grace time.Duration) error {
	err := Down(d.StatePath, grace)
	if err == nil || errors.Is(err, ErrNotUp) {
		d.guard.release()
	}
	return err
}

// Up starts a spec's workers and proxy, each the leader of its own process
// group, records them in a state file (rewritten atomically after each
// start, so a crash part-way still leaves every started process findable),
// and waits until every /health answers. On failure everything started is
// stopped. The processes outlive this one, and Down stops them — unless
// o.Owned: then they also die with this process.
//
// The steps run in this order: fill options, render, make directories,
// refuse (already up, missing binary, busy address) before anything starts,
// hash the model, write the proxy config and a first state file, start the
// watchdog (owned deployments), start the workers then the proxy, wait for
// health. A failure before the first state write has started nothing and
// writes no state; one from the first start on stops whatever started and
// removes the state file, kept only when a process group survives SIGKILL
// (rollback).
func Up(ctx context.Context, s *Spec, o UpOptions) (*Deployment, error) {
	o, err := o.withDefaults(s)
	if err != nil {
		return nil, err
	}
	// The installed vLLM's version adapts the flags that changed across
	// versions (engine.Adapter); unknown ("" when vllm --version fails):
	// rendered as for current vLLM, with a warning.
	var vv string
	if s.facts().Versioned {
		vv, _ = engine.InstalledVersion(ctx, s.Engine, o.VLLM)
	}
	plan, err := Render(s, RenderOptions{VLLM: o.VLLM, Hone: o.Hone, VLLMVersion: vv})
	if err != nil {
		return nil, err
	}
	for _, w := range plan.Warnings {
		o.Log.Warn("deploy "+s.Name+": "+w, "vllm_version", vv)
	}
	dir := filepath.Join(o.StateDir, s.Name)
	if err := makeUpDirs(s, dir); err != nil {
		return nil, err
	}
	statePath := StatePath(o.StateDir, s.Name)
	if err := refuseBeforeStart(s, plan, statePath); err != nil {
		return nil, err
	}
	var files map[string]string
	if s.Model.Path != "" {
		if files, err = HashModelDir(s.Model.Path); err != nil {
			return nil, err
		}
	}
	proxyConfig, err := writeProxyConfig(plan, dir)
	if err != nil {
		return nil, err
	}
	d := &Deployment{
		StatePath: statePath,
		exited:    map[int]chan struct{}{},
		State: State{
			SchemaVersion: StateSchemaVersion, Name: s.Name, Dir: dir,
			ProxyURL: "http://" + plan.ProxyAddr, StartedAt: time.Now().UTC(), Spec: s, ModelFiles: files,
		},
	}
	if err := d.State.write(statePath); err != nil {
		return nil, err
	}
	if o.Owned {
		if d.guard, err = startWatchdog(dir, statePath, d.State.StartedAt); err != nil {
			os.Remove(statePath)
			return nil, err
		}
	}
	if err := d.startAll(plan, proxyConfig, o); err != nil {
		return nil, d.rollback(err, o.Grace)
	}
	if err := d.waitHealthy(ctx, o); err != nil {
		return nil, d.rollback(err, o.Grace)
	}
	return d, nil
}

// withDefaults fills the options Up leaves to it.
func (o UpOptions) withDefaults(s *Spec) (UpOptions, error) {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir()
	}
	if o.Hone == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("find the hone binary: %w", err)
		}
		o.Hone = exe
	}
	// A relative --vllm (.venv/bin/vllm) names the same file whatever
	// directory a worker or the watchdog later runs in.
	if strings.ContainsRune(o.VLLM, filepath.Separator) && !filepath.IsAbs(o.VLLM) {
		abs, err := filepath.Abs(o.VLLM)
		if err != nil {
			return o, fmt.Errorf("--vllm %s: %w", o.VLLM, err)
		}
		o.VLLM = abs
	}
	if o.Grace == 0 {
		o.Grace = 10 * time.Second
	}
	if o.HealthTimeout == 0 {
		o.HealthTimeout = cmp.Or(s.facts().StartTimeout, 60*time.Second)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// makeUpDirs makes the deployment's state directory and, for the emulator,
// its trace directory.
func makeUpDirs(s *Spec, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	// The emulator writes its trace into emulator.trace_dir and exits at
	// once when it cannot open the file there: make the directory first.
	if d := s.Emulator.TraceDir; d != "" && s.facts().Emulated {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("emulator.trace_dir: %w", err)
		}
	}
	return nil
}

// refuseBeforeStart refuses everything that can be refused before anything
// starts: a deployment of that name already up, a worker binary that is
// not there, an address that is not free.
func refuseBeforeStart(s *Spec, plan *Plan, statePath string) error {
	if old, err := ReadState(statePath); err == nil {
		for _, p := range old.Processes {
			if p.ours() && groupAlive(p.PGID) {
				return fmt.Errorf("%w: deployment %s is already up (%s, pid %d); run hone deploy down %s first", ErrAlreadyUp, s.Name, p.Name, p.PID, s.Name)
			}
		}
	}
	for _, w := range plan.Workers {
		if _, err := exec.LookPath(w.Argv[0]); err != nil {
			return fmt.Errorf("worker %s: %w", w.Name, err)
		}
	}
	for a, who := range planAddrs(plan) {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("%s's address %s is not free: %w", who, a, err)
		}
		ln.Close()
	}
	return nil
}

// planAddrs maps every address the plan's processes listen on to who
// listens there.
func planAddrs(plan *Plan) map[string]string {
	addrs := map[string]string{plan.ProxyAddr: "the proxy"}
	for _, w := range plan.Workers {
		addrs[hostPort(w.Host, w.Port)] = "worker " + w.Name
		// One KV port (NIXL side channel, P2P kv_port) per TP rank.
		for _, p := range w.KVPorts {
			addrs[hostPort(w.Host, p)] = "worker " + w.Name + " (KV port)"
		}
		if w.KVAddr != "" {
			addrs[w.KVAddr] = "worker " + w.Name + " (KV port)"
		}
	}
	return addrs
}

// writeProxyConfig writes the plan's proxy config into dir and returns its
// path.
func writeProxyConfig(plan *Plan, dir string) (string, error) {
	pb, _ := json.MarshalIndent(ProxyConfig(plan), "", "  ")
	path := filepath.Join(dir, "proxy.json")
	if err := atomicfile.Write(path, pb); err != nil {
		return "", fmt.Errorf("write proxy config: %w", err)
	}
	return path, nil
}

// startAll starts the plan's workers, in order, then the proxy.
func (d *Deployment) startAll(plan *Plan, proxyConfig string, o UpOptions) error {
	for _, w := range plan.Workers {
		if err := d.start(w.Name, w.Role, w.URL(), w.Argv, w.Env, o.Log); err != nil {
			return err
		}
	}
	// The proxy writes its timelines when stopped, so down loses none.
	d.State.Timelines = filepath.Join(d.State.Dir, "timelines.jsonl")
	proxyArgv := []string{o.Hone, "proxy", "--config", proxyConfig, "--timeline-out", d.State.Timelines}
	return d.start("proxy", "proxy", d.State.ProxyURL, proxyArgv, nil, o.Log)
}

// start starts one process as the leader of its own process group, its
// output in <name>.log, and records it in the state file before returning.
func (d *Deployment) start(name, role, url string, argv, env []string, log *slog.Logger) error {
	logPath := filepath.Join(d.State.Dir, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("%s log: %w", name, err)
	}
	defer lf.Close() // the child keeps its own descriptor
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// exec, never a shell: argv goes to the kernel as is.
	cmd := &exec.Cmd{
		Path: path, Args: argv, Env: append(os.Environ(), env...),
		Stdout: lf, Stderr: lf,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	start := cmd.Start
	if d.guard != nil {
		start = func() error { return startOwned(cmd) }
	}
	if err := start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	d.exited[pid] = done
	go func() { cmd.Wait(); close(done) }() // reap, so no zombie lingers
	p := Process{
		Name: name, Role: role, PID: pid, PGID: pid, StartTicks: startTicks(pid),
		URL: url, Argv: argv, Env: env, Log: logPath,
	}
	d.State.Processes = append(d.State.Processes, p)
	if d.guard != nil {
		if err := d.guard.add(p); err != nil {
			return err
		}
	}
	log.Info("started", "process", name, "pid", pid, "log", logPath)
	return d.State.write(d.StatePath)
}

// rollback stops every process Up started and removes the state file,
// unless a process group survived SIGKILL: then the state file stays, so
// Down can still find it, and the error says so.
func (d *Deployment) rollback(err error, grace time.Duration) error {
	if left := stopGroups(d.State.Processes, grace); len(left) > 0 {
		return fmt.Errorf("%w (and %d process groups survived SIGKILL)", err, len(left))
	}
	os.Remove(d.StatePath)
	d.guard.release()
	return err
}

// waitHealthy polls every process's /health until all answer 200, a process
// exits, ctx ends or the timeout passes, reporting progress at most once a
// second and once more when all are healthy.
func (d *Deployment) waitHealthy(ctx context.Context, o UpOptions) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	t0 := time.Now()
	deadline := t0.Add(o.HealthTimeout)
	healthy := map[string]bool{}
	lastReport := time.Time{}
	for {
		waiting, err := d.pollHealth(ctx, client, healthy)
		if err != nil {
			return err
		}
		done := len(waiting) == 0
		if o.Progress != nil && (done || time.Since(lastReport) >= time.Second) {
			lastReport = time.Now()
			o.Progress(Progress{Healthy: len(healthy), Total: len(d.State.Processes), Waiting: waiting, Elapsed: time.Since(t0), Done: done})
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %s: %s (logs in %s)", o.HealthTimeout, strings.Join(waiting, ", "), d.State.Dir)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for /health: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pollHealth asks /health of every process not yet in healthy, adds those
// that answer 200, and returns the names of the rest; an error when a
// process has exited.
func (d *Deployment) pollHealth(ctx context.Context, client *http.Client, healthy map[string]bool) ([]string, error) {
	var waiting []string
	for _, p := range d.State.Processes {
		select {
		case <-d.exited[p.PID]:
			return nil, fmt.Errorf("%s exited before it was healthy; its log %s ends:\n%s", p.Name, p.Log, logTail(p.Log, 20))
		default:
		}
		if healthy[p.Name] {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/health", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				healthy[p.Name] = true
				continue
			}
		}
		waiting = append(waiting, p.Name)
	}
	return waiting, nil
}

func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b = bytes.TrimRight(b, "\n")
	l := bytes.Split(b, []byte("\n"))
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return "  " + string(bytes.Join(l, []byte("\n  ")))
}

// ErrAlreadyUp is returned by Up when the spec's deployment is running.
var ErrAlreadyUp = errors.New("already up")

// ErrNotUp is returned by Down when there is no state file.
var ErrNotUp = errors.New("no deployment state")

// Down stops every process group a state file records — the proxy first,
// then the workers — with SIGTERM, then SIGKILL after grace, and removes the
// state file once no process is left. It works whether or not the process
// that ran Up is alive, and on groups whose leader already died.
func Down(statePath string, grace time.Duration) error {
	s, err := ReadState(statePath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w at %s", ErrNotUp, statePath)
		}
		return err
	}
	procs := make([]Process, 0, len(s.Processes))
	for i := len(s.Processes) - 1; i >= 0; i-- {
		procs = append(procs, s.Processes[i])
	}
	if left := stopGroups(procs, grace); len(left) > 0 {
		var names []string
		for _, p := range left {
			names = append(names, fmt.Sprintf("%s (pgid %d)", p.Name, p.PGID))
		}
		return fmt.Errorf("still running after SIGKILL: %s", strings.Join(names, ", "))
	}
	if err := os.Remove(statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove deployment state: %w", err)
	}
	return nil
}

// List returns the state files under dir.
func List(dir string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "*", "state.json"))
	return m, err
}
