//go:build linux

package proof

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hone-llm/hone/daemon"
)

// Prove runs the GPU proof: it starts the workload (a child process that
// loads libcuda and sets up device 0), attaches an in-process daemon to
// it, runs the workload's counted phases one at a time, reads the daemon's
// counts after each, samples NVML over the busy phase, and compares. It
// never returns an error: what went wrong is in the result's status.
func Prove(ctx context.Context, o Options) (r *Result) {
	start := time.Now()
	o, override := o.withDefaults()
	r = &Result{SchemaVersion: SchemaVersion, Status: "ok", LibCUDA: LibCUDA{Requested: o.LibCUDA, Override: override}}
	defer func() { r.ElapsedS = seconds(time.Since(start)) }()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	stop := func(status string, err error) *Result {
		r.Verdict, r.Status, r.Reason = Fail, status, err.Error()
		return r
	}

	cfg := o.config()
	w, err := startWorkload(ctx, o)
	if err != nil {
		return stop("workload did not start", err)
	}
	defer w.close()
	ready, status, err := w.ready(ctx, cfg, o, override, r)
	if err != nil {
		return stop(status, err)
	}
	if status != "" { // no driver: skipped
		return r
	}
	r.Device, r.ProcAddress = ready.Device, ready.ProcAddress
	r.Config = &Counted{Launches: cfg.Launches, Graphs: cfg.Graphs, Copies: cfg.Copies, Syncs: cfg.Syncs, BusySeconds: cfg.BusySeconds}

	// The workload is set up and waits for its first phase: everything it
	// called so far (cuInit, JIT, graph capture, warm-up) is not counted.
	pid := w.cmd.Process.Pid
	d, err := daemon.New(daemon.Config{PIDs: []int{pid}, CUDALaunches: time.Hour, ScanPeriod: time.Second}, o.Log)
	if err != nil {
		return stop("daemon failed", err)
	}
	if err := d.Start(ctx); err != nil {
		return stop("daemon failed", fmt.Errorf("start the daemon: %w (it needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN, "+
			"and a kernel with BTF; run `sudo hone preflight --target daemon` for details)", err))
	}
	defer d.Close()
	snap := d.Snapshot()
	if err := r.probedLibraries(snap, pid, ready.Library); err != nil {
		return stop("daemon probed no libcuda", err)
	}

	nv := daemon.OpenNVML(o.NVML)
	defer nv.Close()
	busy := r.runPhases(ctx, w, d, nv, snap, pid, cfg)
	if r.Status == "ok" {
		if err := w.send("done"); err == nil {
			if _, err := w.next(ctx, "done"); err != nil {
				r.Notes = append(r.Notes, "the workload did not clean up: "+err.Error())
			}
		}
	}
	if busy != nil {
		r.NVML = busy.result(nv, r.Device, !override)
	}
	r.evaluate()
	return r
}

// ready sends the workload its configuration and waits until it has set
// up device 0, noting in r the libcuda it loaded. It returns a failure's
// status and error, or with no error StatusNoDriver when there is no
// driver or GPU (r then says so, skipped).
func (w *workload) ready(ctx context.Context, cfg workloadConfig, o Options, override bool, r *Result) (workloadEvent, string, error) {
	if err := w.send(cfg); err != nil {
		return workloadEvent{}, "workload failed", err
	}
	ready, err := w.next(ctx, "ready")
	if err != nil {
		return ready, "workload failed", err
	}
	r.LibCUDA.Loaded, r.LibCUDA.DriverVersion = ready.Library, ready.DriverVersion
	switch ready.Status {
	case "ok":
	case "no_library", "no_device":
		// An override that cannot be loaded is a mistake, not a host
		// without a driver; one that loads and finds no GPU is the latter.
		if ready.Status == "no_library" && override {
			return ready, "libcuda override unusable", fmt.Errorf("%s (%s=%s)", ready.Reason, LibCUDAEnv, o.LibCUDA)
		}
		r.Verdict, r.Status, r.Reason = Skipped, StatusNoDriver, ready.Reason
		return ready, StatusNoDriver, nil
	case "unsupported":
		return ready, "unsupported build", errors.New(ready.Reason)
	default:
		return ready, "libcuda unusable", errors.New(ready.Reason)
	}
	return ready, "", nil
}

// probedLibraries notes the libcuda files the daemon probed, and fails
// when it probed none the workload (pid, which loaded loaded) maps.
func (r *Result) probedLibraries(snap *daemon.Snapshot, pid int, loaded string) error {
	r.Daemon = &Daemon{PID: pid}
	probed := false
	for _, l := range snap.CUDA.Libraries {
		r.Daemon.Libraries = append(r.Daemon.Libraries, DaemonLibs{Path: l.Path, Symbols: l.Symbols, LaunchSymbols: l.Launch, Error: l.Error})
		probed = probed || (l.Error == "" && len(l.Symbols)+len(l.Launch) > 0)
	}
	if !probed {
		return fmt.Errorf("the daemon found no probeable libcuda.so* mapped by the workload (pid %d, loaded %s): %+v",
			pid, loaded, snap.CUDA.Libraries)
	}
	return nil
}

// runPhases runs the workload's counted phases one at a time, noting each
// phase's calls and the daemon's counts in r (and the calls counted
// before, outside the phases); it samples NVML over the busy phase and
// returns its window (nil if the phase was not reached). A failure ends
// the phases, in r.Status.
func (r *Result) runPhases(ctx context.Context, w *workload, d *daemon.Daemon, nv *daemon.NVMLSampler, snap *daemon.Snapshot,
	pid int, cfg workloadConfig) *nvmlWindow {
	var busy *nvmlWindow
	prev := countsOf(snap, pid)
	for c, n := range prev {
		if n.calls > 0 {
			if r.OutsidePhases == nil {
				r.OutsidePhases = map[string]uint64{}
			}
			r.OutsidePhases[c] = n.calls
		}
	}
	for _, ph := range Phases {
		if ph == PhaseBusy {
			busy = startNVMLWindow(nv)
		}
		if err := w.send("go"); err != nil {
			r.Status, r.Reason = "workload failed", err.Error()
			break
		}
		ev, err := w.next(ctx, "phase")
		if busy != nil {
			busy.stop()
		}
		if err != nil {
			r.Status, r.Reason = "workload failed", err.Error()
			break
		}
		if ev.Phase != ph {
			r.Status, r.Reason = "workload failed", fmt.Sprintf("phase %q reported, %q expected", ev.Phase, ph)
			break
		}
		cur := countsOf(d.Snapshot(), pid)
		delta := map[string]classCount{}
		for c, n := range cur {
			delta[c] = classCount{calls: n.calls - prev[c].calls, waits: n.waits - prev[c].waits}
		}
		prev = cur
		r.Phases = append(r.Phases, Phase{Name: ph, Calls: phaseCalls(ph, cfg), Detail: ev.Detail, ElapsedS: ev.ElapsedS,
			Error: ev.Error, Probes: phaseProbes(ev.Calls, delta)})
		if ev.Error != "" {
			r.Status, r.Reason = "workload failed", "phase "+ph+": "+oneLine(ev.Error)
			break
		}
	}
	return busy
}

// countsOf sums the daemon's CUDA counts of a process, over its threads
// (and any of its exited descendants).
func countsOf(s *daemon.Snapshot, pid int) map[string]classCount {
	out := map[string]classCount{}
	add := func(m map[string]*daemon.CUDAStats) {
		for c, st := range m {
			x := out[c]
			x.calls += st.Count
			x.waits += st.WaitCount
			out[c] = x
		}
	}
	for _, th := range s.Threads {
		if th.PID == pid {
			add(th.CUDA)
		}
	}
	for _, g := range s.Exited {
		if g.RootPID == pid {
			add(g.CUDA)
		}
	}
	return out
}

// workload is the running workload process.
type workload struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *tailBuffer
	done   chan struct{} // closed when its output ends
}

func startWorkload(ctx context.Context, o Options) (*workload, error) {
	c := exec.CommandContext(ctx, o.Workload[0], o.Workload[1:]...)
	c.Env = append(os.Environ(), o.WorkloadEnv...)
	// The workload dies with the prover.
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	w := &workload{cmd: c, lines: make(chan string, 16), stderr: &tailBuffer{max: 16 << 10}, done: make(chan struct{})}
	c.Stderr = w.stderr
	var err error
	if w.in, err = c.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(o.Workload, " "), err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	return w, nil
}

// send writes one line: a string as it is, anything else as JSON.
func (w *workload) send(v any) error {
	s, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		s = string(b)
	}
	if _, err := io.WriteString(w.in, s+"\n"); err != nil {
		return fmt.Errorf("write to the workload: %w%s", err, w.stderrNote())
	}
	return nil
}

// next reads the workload's next event, which must be of the given kind.
func (w *workload) next(ctx context.Context, kind string) (workloadEvent, error) {
	parse := func(line string) (workloadEvent, error) {
		var ev workloadEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return ev, fmt.Errorf("workload output %q: %v%s", line, err, w.stderrNote())
		}
		if ev.Event != kind {
			return ev, fmt.Errorf("workload sent %q, %q expected", ev.Event, kind)
		}
		return ev, nil
	}
	select {
	case line := <-w.lines:
		return parse(line)
	case <-w.done:
		// Every line was queued before done closed.
		select {
		case line := <-w.lines:
			return parse(line)
		default:
		}
		err := w.cmd.Wait()
		return workloadEvent{}, fmt.Errorf("the workload ended before its %s event (%v)%s", kind, err, w.stderrNote())
	case <-ctx.Done():
		return workloadEvent{}, fmt.Errorf("no %s event from the workload: %w%s", kind, ctx.Err(), w.stderrNote())
	}
}

func (w *workload) stderrNote() string {
	if s := strings.TrimSpace(w.stderr.String()); s != "" {
		return "; its stderr: " + oneLine(s)
	}
	return ""
}

// close ends the workload: end of input, then a kill if it lingers.
func (w *workload) close() {
	w.in.Close()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		w.cmd.Process.Kill()
	}
	exited := make(chan struct{})
	go func() { w.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		w.cmd.Process.Kill()
		<-exited
	}
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// nvmlWindow samples NVML every 100 ms over the busy phase, with one
// reading just before it and one just after.
type nvmlWindow struct {
	before, after []daemon.GPUSample
	mu            sync.Mutex
	during        []daemon.GPUSample
	quit          chan struct{}
	wg            sync.WaitGroup
	stopped       bool
}

func startNVMLWindow(nv *daemon.NVMLSampler) *nvmlWindow {
	w := &nvmlWindow{quit: make(chan struct{})}
	if !nv.Available() {
		return w
	}
	w.before = nv.Sample()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				w.after = nv.Sample()
				return
			case <-t.C:
				s := nv.Sample()
				w.mu.Lock()
				w.during = append(w.during, s...)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *nvmlWindow) stop() {
	if w.stopped {
		return
	}
	w.stopped = true
	close(w.quit)
	w.wg.Wait()
}

// result judges the window: the energy counter of the workload's GPU
// (matched by UUID) must have risen; where the GPU has no energy counter
// (before Volta), some utilization must have been seen instead.
func (w *nvmlWindow) result(nv *daemon.NVMLSampler, dev *Device, required bool) *NVML {
	w.stop()
	n := &NVML{Status: nv.Status(), Required: required}
	if !nv.Available() {
		n.Verdict = NVMLUnavailable
		return n
	}
	w.mu.Lock()
	all := append(append(append([]daemon.GPUSample(nil), w.before...), w.during...), w.after...)
	w.mu.Unlock()
	rep := nv.Report()
	uuid := ""
	if dev != nil {
		uuid = dev.UUID
	}
	found := false
	for _, g := range rep.Devices {
		if uuid != "" && g.UUID == uuid {
			n.GPU, n.GPUName, found = g.UUID, g.Name, true
		}
	}
	if !found && len(rep.Devices) > 0 {
		n.GPU, n.GPUName = rep.Devices[0].UUID, rep.Devices[0].Name
		n.Note = fmt.Sprintf("no NVML GPU has CUDA device 0's UUID %q: NVML GPU %d read instead", uuid, rep.Devices[0].Index)
	}
	pick := func(ss []daemon.GPUSample) *daemon.GPUSample {
		for i := range ss {
			if ss[i].UUID == n.GPU {
				return &ss[i]
			}
		}
		return nil
	}
	mj := func(s *daemon.GPUSample) *uint64 {
		if s == nil || s.EnergyJoules == nil {
			return nil
		}
		v := uint64(math.Round(*s.EnergyJoules * 1000))
		return &v
	}
	n.EnergyBeforeMJ, n.EnergyAfterMJ = mj(pick(w.before)), mj(pick(w.after))
	for _, s := range all {
		if s.UUID != n.GPU {
			continue
		}
		n.Samples++
		maxF(&n.MaxPowerW, s.PowerWatts, 1)
		maxF(&n.MaxUtil, s.UtilizationRatio, 1)
		maxF(&n.MaxSMClockMHz, s.SMClockHertz, 1e-6)
		if s.MemoryUsedBytes != nil && (n.MaxMemoryUsed == nil || *s.MemoryUsedBytes > *n.MaxMemoryUsed) {
			v := *s.MemoryUsedBytes
			n.MaxMemoryUsed = &v
		}
	}
	note := func(s string) {
		if n.Note != "" {
			n.Note += "; "
		}
		n.Note += s
	}
	switch {
	case n.EnergyBeforeMJ != nil && n.EnergyAfterMJ != nil:
		inc := *n.EnergyAfterMJ > *n.EnergyBeforeMJ
		n.EnergyIncreased = &inc
		n.Verdict = NVMLPass
		if !inc {
			n.Verdict = NVMLFail
			note("the GPU's energy counter did not rise over the busy phase: the kernels did not run on the GPU NVML reads")
		}
	case n.MaxUtil != nil:
		n.Verdict = NVMLPass
		if *n.MaxUtil == 0 {
			n.Verdict = NVMLFail
		}
		note("no energy counter on this GPU (before Volta): judged by utilization instead")
	default:
		n.Verdict = NVMLFail
		note("NVML read neither energy nor utilization of the GPU")
	}
	return n
}

func maxF(dst **float64, v *float64, scale float64) {
	if v == nil {
		return
	}
	x := *v * scale
	if *dst == nil || x > **dst {
		*dst = &x
	}
}
