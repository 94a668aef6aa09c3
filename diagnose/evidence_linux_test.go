//go:build linux

package diagnose

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf/bpftest"
	"github.com/hone-llm/hone/daemon"
	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// TestKernelEvidenceColocatedQueueing: an emulated engine with a batch of
// two and twelve requests at once (queueing planted), its steps calling a
// fake libcuda (--cuda-lib), traced by the daemon with no engine metrics
// read. Each request's queue (with the API server's front end), prefill
// and decode, split from the kernel's evidence alone (the exchange on the
// API socket and the CUDA step boundaries), is within max(5%, 1 ms model
// time) of the emulator's ground truth for at least 90% of requests, and
// the planted queueing is the largest part.
//
// The ground truth is the emulator's model time; on a busy host its steps
// can run late (the trace's step lines record each step's launch and
// synchronize readings beside its modelled start and end), and then the
// kernel sees the late instants, rightly. Requests with a step more than
// half the tolerance late are counted as host-distorted and left out of
// the accuracy fractions; at most half may be (a loose, one-sided bound).
func TestKernelEvidenceColocatedQueueing(t *testing.T) {
	t.Run("one process", func(t *testing.T) { judgeBurst(t, false) })
	// As on vLLM: the exchanges are the API server's, the steps a child
	// process's (hone sim serve --cuda-worker); StepOwners finds it in the
	// snapshot's process tree.
	t.Run("steps in a worker process", func(t *testing.T) { judgeBurst(t, true) })
}

// judgeBurst runs colocatedBurst until a burst the host did not distort
// too much to judge, three at most: a busy moment (a 2-core CI runner, 9
// of 12 requests late) says nothing of the split.
func judgeBurst(t *testing.T, worker bool) {
	const attempts = 3
	for i := 1; i <= attempts; i++ {
		if colocatedBurst(t, worker) {
			return
		}
		t.Logf("burst %d of %d: the host was too busy to judge; trying again", i, attempts)
	}
	t.Fatalf("the host was too busy to judge in %d bursts", attempts)
}

// colocatedBurst runs one burst and judges it; false when more than half
// its requests were host-distorted (nothing judged).
func colocatedBurst(t *testing.T, worker bool) bool {
	const scale = 4.0 // model ms = wall ms / 4: host jitter counts a quarter
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var extra []string
	if worker {
		extra = []string{"--cuda-worker"}
	}
	url, cmd, d, trace := startTracedEngine(t, ctx, scale, extra...)

	// Twelve streamed requests at once, each on its own connection; the
	// client's address joins the exchange to the response's id.
	const n = 12
	ids := map[string]string{} // client address → request id
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, addr, err := streamOne(ctx, url, fmt.Sprintf("request %d: %s", i, strings.Repeat("word ", 150)), 24)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			ids[addr] = id
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var truth map[string]emulator.TraceRecord
	var lateMs map[string]float64
	k := kernelEvidence(t, d, func(xs []KernelExchange) bool {
		truth, lateMs = readTruth(t, trace, scale)
		closed := 0
		for _, x := range xs {
			if _, ok := ids[x.Remote]; ok && !x.Open {
				closed++
			}
		}
		return closed == n && len(truth) == n
	})
	xs := k.Exchanges
	owners, err := StepOwners(xs, k.Steps, k.Processes, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	o, ok := owners[pid]
	switch {
	case !ok:
		t.Fatalf("no stepping process found for the engine's pid %d (steps of %v, processes %+v)", pid, slices.Collect(maps.Keys(k.Steps)), k.Processes)
	case !worker && o.StepPID != pid, worker && (o.StepPID == pid || o.How != "descendant"):
		t.Fatalf("steps of the engine (pid %d, worker %t) taken from %s", pid, worker, o)
	}
	t.Logf("steps: %s, %d of them", o, len(k.Steps[o.StepPID]))
	steps := k.Steps[o.StepPID]
	within := func(got, want float64) bool { return math.Abs(got-want) <= max(0.05*want, 1) }
	var okQ, okP, okD, joined, distorted int
	var sumQ, sumP, sumD float64
	for _, x := range xs {
		id, ok := ids[x.Remote]
		if !ok || x.Open {
			continue
		}
		tr, ok := truth[id]
		if !ok {
			t.Errorf("%s: no trace line", id)
			continue
		}
		joined++
		if late := lateMs[id]; late > 0.5 {
			distorted++
			t.Logf("%s: host-distorted (a step %.2f ms late), not counted", id, late)
			continue
		}
		ks, err := SplitExchange(x, steps, HeadWithFirstToken, 1, scale)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		// The kernel sees the request before the API server's front end;
		// its queue is the front end's and the scheduler's together.
		wantQ := tr.TTFTMs - tr.PrefillMs - tr.TransferMs
		q, p, dd := within(ks.QueueMs, wantQ), within(ks.PrefillMs, tr.PrefillMs), within(ks.DecodeMs, tr.DecodeMs)
		okQ, okP, okD = okQ+b2i(q), okP+b2i(p), okD+b2i(dd)
		sumQ, sumP, sumD = sumQ+ks.QueueMs, sumP+ks.PrefillMs, sumD+ks.DecodeMs
		t.Logf("%s: queue %.2f/%.2f prefill %.2f/%.2f decode %.2f/%.2f ms (kernel/truth), slack %.2f, %d steps",
			id, ks.QueueMs, wantQ, ks.PrefillMs, tr.PrefillMs, ks.DecodeMs, tr.DecodeMs, ks.QueueSlackMs, ks.Steps)
	}
	if joined != n {
		t.Fatalf("%d of %d requests joined to a closed exchange (%d exchanges seen)", joined, n, len(xs))
	}
	m := n - distorted
	t.Logf("within max(5%%, 1 ms): queue %d/%d, prefill %d/%d, decode %d/%d (%d host-distorted)", okQ, m, okP, m, okD, m, distorted)
	if distorted > n/2 {
		t.Logf("%d of %d requests host-distorted: the host is too busy to judge", distorted, n)
		return false
	}
	need := (9*m + 9) / 10
	if okQ < need || okP < need || okD < need {
		t.Errorf("within tolerance: queue %d, prefill %d, decode %d of %d; want at least %d each", okQ, okP, okD, m, need)
	}
	if sumQ <= sumP || sumQ <= sumD {
		t.Errorf("the planted queueing is not the largest part: queue %.1f, prefill %.1f, decode %.1f ms in all", sumQ, sumP, sumD)
	}
	return true
}

// kernelEvidence polls the daemon's snapshot (the last reads of a burst
// can take a moment to reach the maps on a loaded runner) until done says
// its exchanges are all there, or ten seconds pass, and returns its
// exchanges, steps and processes.
func kernelEvidence(t *testing.T, d *daemon.Daemon, done func([]KernelExchange) bool) KernelEvidence {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		snap, err := json.Marshal(d.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		k, err := ParseKernelEvidence(snap)
		if err != nil {
			t.Fatal(err)
		}
		if done(k.Exchanges) || time.Now().After(deadline) {
			return k
		}
	}
}

// readTruth reads the emulator's trace: its request lines by id and, per
// request, how late (model ms) the instants a split reads ran: the launch
// and synchronize of the first step it was in (its queue's end; on a
// decode worker its first step after the KV), the synchronize of its
// last prefill step (its prefill's end) and of its last step (its
// decode's end). (Steps between are never read.)
func readTruth(t *testing.T, trace string, scale float64) (map[string]emulator.TraceRecord, map[string]float64) {
	t.Helper()
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	truth := map[string]emulator.TraceRecord{}
	first, token, last := map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var tr emulator.TraceRecord
		if json.Unmarshal(line, &tr) == nil && tr.Event == "request" {
			truth[tr.RequestID] = tr
		}
		var st emulator.StepTraceRecord
		if json.Unmarshal(line, &st) == nil && st.Event == "step" {
			late := float64(st.SyncMono-st.EndMono) / 1e6 / scale
			for _, r := range st.Requests {
				if _, ok := first[r.RequestID]; !ok {
					first[r.RequestID] = max(late, float64(st.LaunchMono-st.StartMono)/1e6/scale)
				}
				if !r.Decode {
					token[r.RequestID] = late // its last prefill step's: the token step
				}
				last[r.RequestID] = late
			}
		}
	}
	for id, l := range last {
		first[id] = max(first[id], token[id], l)
	}
	return truth, first
}

// kvAckLate is, per request, how late (model ms) the prefill worker's
// trace saw its KV pull acknowledged (kv_send's end, the emulator's own
// reading) after the decode worker's modelled end of the transfer: the
// decode worker acknowledges when its goroutine wakes at that end, and a
// late wake-up moves the last operation on the KV connection, which the
// kernel sees, while the model keeps the modelled instant.
func kvAckLate(t *testing.T, prefillTrace string, decode map[string]emulator.TraceRecord, scale float64) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(prefillTrace)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var ks emulator.KVSendRecord
		if json.Unmarshal(line, &ks) != nil || ks.Event != "kv_send" {
			continue
		}
		if tr, ok := decode[ks.RequestID]; ok && tr.TransferTo > 0 {
			out[ks.RequestID] = float64(ks.EndMono-tr.TransferTo) / 1e6 / scale
		}
	}
	return out
}

// startTracedEngine starts hone sim serve with a batch of two, its steps
// calling the test workload's fake libcuda, and the daemon tracing it (its
// API port in the HTTP set, kernel launches probed).
func startTracedEngine(t *testing.T, ctx context.Context, scale float64, extra ...string) (url string, cmd *exec.Cmd, d *daemon.Daemon, trace string) {
	t.Helper()
	url, port, cmd, trace := startEngine(t, ctx, scale, append([]string{"--max-num-seqs", "2"}, extra...)...)
	d = traceEngines(t, ctx, []int{cmd.Process.Pid}, []uint16{uint16(port)}, nil)
	return url, cmd, d, trace
}

// startEngine starts hone sim serve (profile testProfile) with its steps
// calling the test workload's fake libcuda and a trace file, and waits
// until it is healthy.
func startEngine(t *testing.T, ctx context.Context, scale float64, extra ...string) (url string, port int, cmd *exec.Cmd, trace string) {
	t.Helper()
	bpftest.Require(t)
	if testing.Short() {
		t.Skip("starts an engine and the daemon")
	}
	_, libcuda := bpftest.Workload(t)
	port = freePort(t)
	trace = filepath.Join(t.TempDir(), "trace.jsonl")
	cmd = exec.CommandContext(ctx, honetest.Binary(t), append([]string{"sim", "serve", "--port", strconv.Itoa(port), "--profile", testProfile,
		"--time-scale", strconv.FormatFloat(scale, 'g', -1, 64), "--cuda-lib", libcuda,
		"--trace-file", trace, "--log-level", "warn"}, extra...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url = "http://127.0.0.1:" + strconv.Itoa(port)
	honetest.WaitHealthy(t, url)
	return url, port, cmd, trace
}

// freePort is a loopback TCP port free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// traceEngines starts the daemon on the engines pids: their API ports in
// the HTTP set, kvPorts the KV-transfer set (nil: the default), and their
// libcuda probed.
func traceEngines(t *testing.T, ctx context.Context, pids []int, httpPorts, kvPorts []uint16) *daemon.Daemon {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.New(daemon.Config{PIDs: pids, HTTPPorts: httpPorts, KVPorts: kvPorts,
		CUDALaunches: time.Hour, ScanPeriod: 100 * time.Millisecond}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	libs := d.Snapshot().CUDA.Libraries // one fake libcuda file per engine, or one for all
	if len(libs) == 0 || len(libs) > len(pids) {
		t.Fatalf("the engines' libcuda is not probed: %+v", libs)
	}
	for _, l := range libs {
		if l.Error != "" {
			t.Fatalf("libcuda %s: %s", l.Path, l.Error)
		}
	}
	return d
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// streamOne sends one streamed completion on a new connection and reads it
// to the end; it returns the response's id and the client's address.
func streamOne(ctx context.Context, url, prompt string, maxTokens int) (id, addr string, err error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens, "ignore_eos": true, "stream": true})
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		addr = i.Conn.LocalAddr().String()
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" || id != "" {
			continue
		}
		var ch struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			return "", "", fmt.Errorf("chunk %q: %w", line, err)
		}
		id = ch.ID
	}
	if id == "" {
		return "", "", fmt.Errorf("no chunk named the request")
	}
	return id, addr, sc.Err()
}

// evidenceScenario is one planted bottleneck for the kernel-evidence
// tests: one colocated engine (engine's flags) or a 1P1D pair behind
// hone's proxy (prefill's and decode's), a replay of requests (0: 40; the
// first 8 warm up) at qps with output tokens each, the part planted and
// the floor its level mean must reach (model ms). budget, when set, is
// the engines' token budget, told to diagnose as a user would
// (--max-num-batched-tokens). Fast levels take more requests: a busy host
// distorts more of them, and those are not judged.
type evidenceScenario struct {
	name                    string
	disagg                  bool
	engine, prefill, decode []string
	qps                     float64
	output                  int
	budget, requests        int
	scale                   float64 // the emulators' time scale (0: 2)
	planted                 string
	plantedFloorMs          float64
	// worker: the engines' CUDA calls come from a child process (hone sim
	// serve --cuda-worker), as vLLM's engine core's or workers' do.
	worker bool
}

// TestKernelEvidenceScenarios: the engines' steps call a fake libcuda and
// the daemon traces them. Each scenario plants one bottleneck; measured
// requests are split from kernel evidence alone (the engines'
// per-request metrics stripped from the record: the HTTP exchanges on the
// engines' API sockets, their steps, and when disaggregated the decode
// worker's KV connection) and each part is within max(5%, 1 ms model time)
// of the emulator's ground truth for at least 90% of the requests the host
// did not distort (one left unsplit is a miss on every part); the planted part is named the bottleneck when the level
// is valid. With the metrics left in, the engine split and the kernel
// split agree on every part (disaggregated: transfer + decode queue as one
// span, as vLLM's decode worker counts its queue after the KV in
// queue_time_ms). TestKernelEvidenceColocatedQueueing covers a burst on
// one engine. It runs only with HONE_TEST_ALONE=1: make
// test-kernel-scenarios (CI, after make test) runs it with the host to
// itself.
func TestKernelEvidenceScenarios(t *testing.T) {
	if os.Getenv("HONE_TEST_ALONE") != "1" {
		t.Skip("runs with the host to itself: make test-kernel-scenarios (CI) sets HONE_TEST_ALONE=1 " +
			"(beside other packages' tests a two-core host runs too many requests late to judge)")
	}
	for _, sc := range []evidenceScenario{
		// Two sequences at a time, 160 req/s of 16-token answers (a slot
		// serves ~50 a second): requests wait for a slot.
		{name: "colocated queueing", engine: []string{"--max-num-seqs", "2"}, qps: 160, output: 16, requests: 72,
			planted: Queueing, plantedFloorMs: 10},
		// A token budget of 48 against 128 uncached tokens a request and
		// 64-token answers at 80 req/s: every prefill takes three steps, or
		// four when more than five decodes share its steps. Its ~900 steps
		// keep a two-core host busy: time scale 4.
		{name: "chunked prefill", engine: []string{"--max-num-batched-tokens", "48", "--max-num-seqs", "32"}, budget: 48,
			qps: 80, output: 64, requests: 72, scale: 4, planted: Prefill, plantedFloorMs: 3},
		// 1P1D: the prefill worker serves every pull 40 times slower than
		// its link: ~20 ms of transfer against a few ms of prefill.
		{name: "slowed transfer", disagg: true, prefill: []string{"--fault", "slow-transfer=40"},
			qps: 8, output: 16, planted: Transfer, plantedFloorMs: 15},
		// 1P1D: two decode slots and 48-token answers at 40 req/s: requests
		// whose KV has arrived wait for a slot. Both engines step in a
		// child process, as vLLM's engine cores do; those two processes
		// more on two cores ran half the requests late at scale 2.
		{name: "queued decode worker", disagg: true, decode: []string{"--max-num-seqs", "2"},
			qps: 40, output: 48, requests: 72, planted: DecodeQ, plantedFloorMs: 20, worker: true, scale: 3},
	} {
		// One at a time: two engines, the daemon and a replay each already
		// fill two cores, and a late host only shrinks what can be judged.
		t.Run(sc.name, func(t *testing.T) { kernelEvidenceScenario(t, sc) })
	}
}

func kernelEvidenceScenario(t *testing.T, sc evidenceScenario) {
	scale := cmp.Or(sc.scale, 2) // host jitter counts 1/scale
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	metrics := []string{"--enable-per-request-metrics", "--enable-prompt-tokens-details"}
	if sc.worker {
		metrics = append(metrics, "--cuda-worker")
	}
	w := replay.DefaultWorkload()
	w.Requests, w.InputTokens, w.OutputTokens = cmp.Or(sc.requests, 40), 1024, sc.output
	// The SLO makes the planted part material: a bottleneck is named only
	// for a part above 5% of the TTFT SLO (MaterialFraction), so the SLO is
	// 20 times the planted floor (the brief's 2000 ms would call a 20 ms
	// transfer immaterial, as it is to a user with that SLO).
	opts := replay.Options{Model: "Qwen/Qwen2.5-Coder-0.5B-Instruct", Kind: schema.KindEmulated, Backend: "emulator",
		Workload: w, QPS: []float64{sc.qps}, TimeScale: scale, GPUs: 1,
		SLO: slo.SLO{TTFTMillis: 20 * sc.plantedFloorMs, TPOTMillis: slo.Default.TPOTMillis}}
	var pids []int
	var traces []string
	var d *daemon.Daemon
	var p *proxy.Proxy
	if !sc.disagg {
		u, port, cmd, trace := startEngine(t, ctx, scale, append(metrics, sc.engine...)...)
		pids, traces = []int{cmd.Process.Pid}, []string{trace}
		d = traceEngines(t, ctx, pids, []uint16{uint16(port)}, nil)
		opts.Endpoint = u
	} else {
		kvPort := freePort(t)
		pu, pport, pcmd, ptrace := startEngine(t, ctx, scale, append(append([]string{"--role", "prefill", "--kv-port", strconv.Itoa(kvPort)}, metrics...), sc.prefill...)...)
		du, dport, dcmd, dtrace := startEngine(t, ctx, scale, append(append([]string{"--role", "decode"}, metrics...), sc.decode...)...)
		pids, traces = []int{pcmd.Process.Pid, dcmd.Process.Pid}, []string{ptrace, dtrace}
		d = traceEngines(t, ctx, pids, []uint16{uint16(pport), uint16(dport)}, []uint16{uint16(kvPort)})
		p, opts.Endpoint = serveProxy(t, ctx, proxy.Config{Listen: "127.0.0.1:0", Mode: proxy.ModeDisaggregated, Connector: proxy.NixlConnector,
			Workers: []proxy.Worker{{Name: "p0", Role: proxy.RolePrefill, URL: pu}, {Name: "d0", Role: proxy.RoleDecode, URL: du}}})
		opts.TokenizeEndpoint, opts.GPUs = du, 2
	}
	rec, err := replay.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	measured := measuredOK(rec)
	if measured != w.Requests-replay.Sessions {
		t.Fatalf("%d of %d measured requests completed: %v", measured, w.Requests-replay.Sessions, rec.Outcomes)
	}
	var tls []proxy.Timeline
	if p != nil {
		tls, _ = p.Timelines(0, 0)
	}
	ev := Evidence{TokenBudget: sc.budget}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		snap, err := json.Marshal(d.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		k, err := ParseKernelEvidence(snap)
		if err != nil {
			t.Fatal(err)
		}
		ev.Exchanges, ev.Steps, ev.Processes = k.Exchanges, k.Steps, k.Processes
		if ev.KV, err = ParseKVConns(snap); err != nil {
			t.Fatal(err)
		}
		closed := 0
		for _, x := range ev.Exchanges {
			if !x.Open && x.Sends > 0 {
				closed++
			}
		}
		// Every request of the record (the warm-ups too) crossed each
		// engine once and, disaggregated, pulled its KV once.
		if closed >= len(pids)*w.Requests && (!sc.disagg || len(ev.KV) >= w.Requests) || time.Now().After(deadline) {
			break
		}
	}
	ev.Timelines, ev.Head = tls, HeadWithFirstToken
	owners, err := StepOwners(ev.Exchanges, ev.Steps, ev.Processes, nil)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, pid := range pids {
		o, ok := owners[pid]
		if !ok || sc.worker != (o.StepPID != pid) {
			t.Fatalf("engine pid %d (worker %t): steps from %+v (found %t)", pid, sc.worker, o, ok)
		}
		steps = append(steps, fmt.Sprintf("%d (%s)", len(ev.Steps[o.StepPID]), o))
	}
	t.Logf("evidence: %d exchanges, %d KV connections, steps %s (per engine)", len(ev.Exchanges), len(ev.KV), strings.Join(steps, "/"))

	// Engine metrics stripped (the record's and the proxy's copy of the
	// prefill worker's): auto must fall back to the kernel split.
	bare := stripEngineMetrics(t, rec)
	bareEv := ev
	bareEv.Timelines = nil
	for _, tl := range tls {
		tl.Prefill = append([]proxy.Leg(nil), tl.Prefill...) // (tls keeps the metrics)
		for i := range tl.Prefill {
			tl.Prefill[i].EngineMetrics = nil
		}
		bareEv.Timelines = append(bareEv.Timelines, tl)
	}
	atts, err := Attribute(bare, bareEv)
	if err != nil {
		t.Fatal(err)
	}

	// The ground truth: the engines' traces.
	var all bytes.Buffer
	// late is how late the host ran each request's instants (model ms),
	// lateWhat which instant was latest.
	late, lateWhat := map[string]float64{}, map[string]string{}
	note := func(id string, ms float64, what string) {
		if ms > late[id] {
			late[id], lateWhat[id] = ms, what
		}
	}
	for _, f := range traces {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		_, l := readTruth(t, f, scale)
		for id, v := range l {
			note(id, v, "a step")
		}
	}
	truth, err := ReadTrace(&all)
	if err != nil {
		t.Fatal(err)
	}
	// The host may also write tokens late (the handler's write, the
	// client's read): the client's first and last chunk against the
	// answering engine's modelled first token and finish, beyond the
	// shortest such lag (through the proxy when disaggregated).
	trs, _ := readTruth(t, traces[len(traces)-1], scale)
	// And deliver a request late to the engine: its sender's send (the
	// replay's, or the proxy's leg) to the engine's arrival reading (after
	// it parsed the request; the kernel's receipt comes first), beyond the
	// shortest such lag on that engine.
	lags := map[string]map[string]int64{} // engine → request → lag
	firstLag, lastLag := map[string]int64{}, map[string]int64{}
	arrived := func(tr emulator.TraceRecord, sentNs int64) {
		if tr.ArrivalMono > 0 && sentNs > 0 {
			if lags[tr.EngineID] == nil {
				lags[tr.EngineID] = map[string]int64{}
			}
			lags[tr.EngineID][tr.RequestID] = tr.ArrivalMono - sentNs
		}
	}
	if sc.disagg {
		for id, l := range kvAckLate(t, traces[0], trs, scale) {
			note(id, l, "the KV ack")
		}
		pre, _ := readTruth(t, traces[0], scale)
		for i := range tls {
			if leg := answeredPrefill(&tls[i]); leg != nil && tls[i].Decode != nil {
				arrived(pre["cmpl-"+tls[i].RequestID], leg.Sent.MonoNs)
				arrived(trs["cmpl-"+tls[i].RequestID], tls[i].Decode.Sent.MonoNs)
			}
		}
	}
	for _, run := range rec.Runs {
		for _, l := range run.Levels {
			for _, rq := range l.Requests {
				tr, ok := trs["cmpl-"+rq.RequestID]
				if ok && !sc.disagg {
					arrived(tr, rq.Sent.MonoNs)
				}
				if mono := rq.Chunks.Columns().MonoNs; ok && len(mono) > 0 {
					firstLag[tr.RequestID] = mono[0] - tr.FirstTokenMono
					lastLag[tr.RequestID] = mono[len(mono)-1] - tr.FinishMono
				}
			}
		}
	}
	// A delivery's lag beyond the shortest (through the proxy, its hop).
	for _, byID := range []map[string]int64{firstLag, lastLag} {
		if len(byID) == 0 {
			continue
		}
		least := slices.Min(slices.Collect(maps.Values(byID)))
		for id, lag := range byID {
			note(id, float64(lag-least)/1e6/scale, "a delivery")
		}
	}
	for _, byID := range lags {
		least := slices.Min(slices.Collect(maps.Values(byID)))
		for id, lag := range byID {
			note(id, float64(lag-least)/1e6/scale, "an arrival")
		}
	}
	within := func(got, want float64) bool { return math.Abs(got-want) <= max(0.05*want, 1) }
	parts := []string{Queueing, Prefill, Decode}
	if sc.disagg {
		parts = []string{Queueing, Prefill, Transfer, DecodeQ, Decode}
	}
	ok := map[string]int{}
	var split, distorted int
	for _, a := range atts {
		if a.SplitBy != "kernel" || a.Kernel == nil {
			// Not joined to its evidence: a miss on every part (counted
			// below), not a reason to stop judging the others.
			t.Logf("%s: split by %q without engine metrics, want the kernel split", a.RequestID, a.SplitBy)
			continue
		}
		split++
		tr, found := truth[a.RequestID]
		if !found {
			t.Errorf("%s: no ground truth", a.RequestID)
			continue
		}
		if l := late["cmpl-"+a.RequestID]; l > 0.5 {
			distorted++
			t.Logf("%s: host-distorted (%s %.2f ms late), not counted", a.RequestID, lateWhat["cmpl-"+a.RequestID], l)
			continue
		}
		var line []string
		for _, k := range parts {
			ok[k] += b2i(within(a.Parts[k], tr[k]))
			line = append(line, fmt.Sprintf("%s %.2f/%.2f", k, a.Parts[k], tr[k]))
		}
		t.Logf("%s: %s ms (kernel/truth), %d prefill steps", a.RequestID, strings.Join(line, ", "), a.Kernel.Steps)
	}
	if split < (9*measured+9)/10 {
		t.Fatalf("%d of %d measured requests split from kernel evidence; want at least 90%%", split, measured)
	}
	m := measured - distorted // the unsplit ones are misses
	var got []string
	for _, k := range parts {
		got = append(got, fmt.Sprintf("%s %d/%d", k, ok[k], m))
	}
	t.Logf("kernel split within max(5%%, 1 ms) of the truth: %s (%d host-distorted)", strings.Join(got, ", "), distorted)
	if m < 5 {
		t.Fatalf("%d of %d requests host-distorted: the host is too busy to judge", distorted, split)
	}
	need := (9*m + 9) / 10
	for _, k := range parts {
		if ok[k] < need {
			t.Errorf("%s within tolerance for %d of %d requests; want at least %d", k, ok[k], m, need)
		}
	}
	dg := Summarize(bare.Kind, atts, bare.SLO, nil)
	l := dg.Levels[0]
	if l.Mean[sc.planted] < sc.plantedFloorMs {
		t.Errorf("the planted %s is %.2f ms on average, want at least %g: the scenario did not plant it", sc.planted, l.Mean[sc.planted], sc.plantedFloorMs)
	}
	if l.Valid {
		if dg.Bottleneck != sc.planted {
			t.Errorf("bottleneck %q (uncertain %q), want the planted %s; level means %v", dg.Bottleneck, dg.Uncertain, sc.planted, l.Mean)
		}
	} else {
		t.Logf("the level is invalid (%v): the bottleneck (%s) is not judged", l.Invalid, dg.Bottleneck)
	}

	// With the engines' metrics: both splits, compared.
	withMetrics, err := Attribute(rec, ev)
	if err != nil {
		t.Fatal(err)
	}
	agree := append([]string(nil), parts...)
	if sc.disagg {
		agree = []string{Queueing, Prefill, Handoff, Decode}
	}
	okE := map[string]int{}
	compared := 0
	for _, a := range withMetrics {
		if a.SplitBy != "engine" {
			t.Errorf("%s: split by %q with engine metrics, want the engine's", a.RequestID, a.SplitBy)
			continue
		}
		if late["cmpl-"+a.RequestID] > 0.5 {
			continue
		}
		compared++
		if a.Kernel == nil {
			t.Logf("%s: no kernel split beside the engine's: a disagreement on every part", a.RequestID)
			continue
		}
		k := a.Kernel.parts()
		k[Handoff], a.Parts[Handoff] = k[Transfer]+k[DecodeQ], a.Parts[Transfer]+a.Parts[DecodeQ]
		for _, part := range agree {
			okE[part] += b2i(within(k[part], a.Parts[part]))
		}
	}
	got = got[:0]
	for _, part := range agree {
		got = append(got, fmt.Sprintf("%s %d/%d", part, okE[part], compared))
	}
	t.Logf("kernel and engine splits within max(5%%, 1 ms): %s", strings.Join(got, ", "))
	for _, part := range agree {
		if okE[part] < (9*compared+9)/10 {
			t.Errorf("%s: the splits agree for %d of %d requests", part, okE[part], compared)
		}
	}
	ds := Summarize(rec.Kind, withMetrics, rec.SLO, nil)
	if ds.Levels[0].KernelCompared != split {
		t.Errorf("summary: %d requests compared, want the %d with a kernel split", ds.Levels[0].KernelCompared, split)
	}
}

// stripEngineMetrics is a copy of rec without the engines' per-request
// metrics, as a vLLM without --enable-per-request-metrics leaves it.
func stripEngineMetrics(t *testing.T, rec *schema.Record) *schema.Record {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var out schema.Record
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	for r := range out.Runs {
		for l := range out.Runs[r].Levels {
			for q := range out.Runs[r].Levels[l].Requests {
				out.Runs[r].Levels[l].Requests[q].EngineMetrics = nil
			}
		}
	}
	return &out
}
