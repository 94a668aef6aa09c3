//go:build linux

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hone-llm/hone/internal/procstat"
)

// serveReport is `hone-soak serve`'s JSON report (results/soak/soak.json).
type serveReport struct {
	Kind     string      `json:"kind"` // "soak"
	Started  time.Time   `json:"started"`
	Config   serveConfig `json:"config"`
	Host     hostInfo    `json:"host"`
	Load     loadResult  `json:"load"`
	Outcomes agreement   `json:"outcomes"`
	FlatRule string      `json:"flat_rule"`
	// WarmUpS is where warm-up ended: a third of the run, or later when the
	// proxy's timeline ring (a buffer bounded by design) was still filling.
	WarmUpS    float64            `json:"warm_up_end_s"`
	RingFullS  float64            `json:"timeline_ring_full_s,omitempty"`
	RSS        []RSSSummary       `json:"rss"`
	CPUSeconds map[string]float64 `json:"cpu_seconds"`
	Daemon     *daemonFigures     `json:"daemon,omitempty"`
	Series     []Series           `json:"rss_series"`
	// HeapLive is FlatRule over each Go process's live heap: where RSS
	// grows but the live heap does not, the growth is the runtime's
	// high-water mark, not a leak.
	HeapLive   []RSSSummary `json:"heap_live"`
	HeapSeries []Series     `json:"heap_live_series"`
	// HeapGoalMax is each Go process's largest GC heap goal after warm-up
	// (gctrace): its RSS runs up to about this much.
	HeapGoalMax map[string]uint64 `json:"heap_goal_max_bytes"`
	// FDs are open descriptors per process (sockets included): a leak of
	// connections shows here first.
	FDs      []fdSummary `json:"fds"`
	Crashed  []string    `json:"crashed,omitempty"`
	Pass     bool        `json:"pass"`
	Failures []string    `json:"failures,omitempty"`
}

type serveConfig struct {
	Duration         string  `json:"duration"`
	Streams          int     `json:"streams"`
	Mode             string  `json:"mode"`
	Workers          int     `json:"workers"`
	Profile          string  `json:"profile"`
	TimeScale        float64 `json:"time_scale"`
	MaxTokens        int     `json:"max_tokens"`
	MaxNumSeqs       int     `json:"max_num_seqs"`
	TimelineCapacity int     `json:"timeline_capacity"`
	SampleEvery      string  `json:"sample_every"`
	PollEvery        string  `json:"timeline_poll_every"`
	Daemon           bool    `json:"daemon"`
}

type hostInfo struct {
	CPUs   int    `json:"cpus"`
	Kernel string `json:"kernel"`
	GoArch string `json:"goarch"`
}

type loadResult struct {
	Started      uint64            `json:"requests_started"`
	Completed    uint64            `json:"requests_completed"` // every request that ended, any outcome
	ByKind       map[string]uint64 `json:"client_outcomes"`
	Errors       uint64            `json:"errors"` // completed but not ok
	Tokens       uint64            `json:"token_chunks"`
	RatePerSec   float64           `json:"completed_per_second"`
	DurP50       float64           `json:"ok_duration_p50_s"`
	DurP99       float64           `json:"ok_duration_p99_s"`
	DurMax       float64           `json:"ok_duration_max_s"`
	InFlightMin  int64             `json:"in_flight_min"` // sampled in the steady window (after ramp, before stop)
	InFlightMean float64           `json:"in_flight_mean"`
	InFlightMax  int64             `json:"in_flight_max"`
	// ProxyInFlight* are the proxy's hone_proxy_requests_in_flight gauge,
	// sampled over the same window.
	ProxyInFlightMin  int64      `json:"proxy_in_flight_min"`
	ProxyInFlightMean float64    `json:"proxy_in_flight_mean"`
	ProxyInFlightMax  int64      `json:"proxy_in_flight_max"`
	SteadyWindowS     [2]float64 `json:"steady_window_s"`
	LoadSeconds       float64    `json:"load_seconds"`
	DrainSeconds      float64    `json:"drain_seconds"`
}

type agreement struct {
	ClientRequests  uint64            `json:"client_requests"`
	ProxyTimelines  uint64            `json:"proxy_timelines"`
	TimelinePages   uint64            `json:"timeline_pages"`
	TimelineDropped uint64            `json:"timeline_dropped"`
	ProxyByOutcome  map[string]uint64 `json:"proxy_timelines_by_outcome"`
	ProxyCounters   map[string]uint64 `json:"proxy_counters"` // hone_proxy_requests_total by outcome
	Matrix          map[string]uint64 `json:"client_vs_proxy"`
	Agree           uint64            `json:"agree"`
	Disagree        uint64            `json:"disagree"`
	ClientOnly      int               `json:"client_only"` // no timeline for the request id
	ProxyOnly       int               `json:"proxy_only"`  // a timeline the client never sent
	Duplicates      uint64            `json:"duplicate_timelines"`
	Examples        []string          `json:"disagreement_examples,omitempty"`
	CountersMatch   bool              `json:"counters_match"`
	OK              bool              `json:"ok"`
}

type daemonFigures struct {
	Drops              map[string]float64 `json:"drops"`
	SnapshotBytes      []Sample           `json:"snapshot_bytes_series"` // RSS field holds bytes
	SnapshotFirstBytes int                `json:"snapshot_first_bytes"`
	SnapshotLastBytes  int                `json:"snapshot_last_bytes"`
	SnapshotMaxBytes   int                `json:"snapshot_max_bytes"`
	TableEntries       int                `json:"target_table_entries"`
	TableMax           int                `json:"target_table_max_entries"`
	Connections        int                `json:"connections_listed"`
	ClosedFolded       uint64             `json:"closed_connections_folded"`
}

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	hone := fs.String("hone", "bin/hone", "the hone binary")
	duration := fs.Duration("duration", 10*time.Minute, "how long the load runs (requests in flight at the end are let finish)")
	streams := fs.Int("streams", 1000, "streaming requests kept in flight")
	mode := fs.String("mode", "colocated", "colocated | disaggregated")
	workers := fs.Int("workers", 2, "emulator workers (disaggregated: half prefill, half decode)")
	profile := fs.String("profile", "qwen2.5-coder-0.5b-h200", "emulator profile")
	timeScale := fs.Float64("time-scale", 15, "emulator --time-scale (wall s per model s): with the defaults a request lasts about 1 s at 1,000 in flight")
	maxTokens := fs.Int("max-tokens", 16, "output tokens per request (ignore_eos)")
	maxNumSeqs := fs.Int("max-num-seqs", 1024, "emulator --max-num-seqs")
	ringCap := fs.Int("timeline-capacity", 20_000, "proxy timeline ring capacity (0: the proxy's default, 200,000); it is full well within warm-up at the default")
	sampleEvery := fs.Duration("sample", 5*time.Second, "RSS sampling period")
	pollEvery := fs.Duration("poll", 2*time.Second, "timeline polling period (must outpace the ring)")
	ramp := fs.Duration("ramp", 5*time.Second, "spread the streams' starts over this long")
	drain := fs.Duration("drain", 90*time.Second, "after --duration, longest wait for requests in flight")
	reqTimeout := fs.Duration("request-timeout", 120*time.Second, "one request's client-side limit")
	withDaemon := fs.Bool("daemon", true, "attach hone daemon (--pid) to the proxy and workers (needs root)")
	out := fs.String("out", "results/soak", "report directory (soak.json, logs/)")
	fs.Parse(args)

	rep, err := serve(serveOpts{
		hone: *hone, duration: *duration, streams: *streams, mode: *mode, workers: *workers, profile: *profile,
		timeScale: *timeScale, maxTokens: *maxTokens, maxNumSeqs: *maxNumSeqs, ringCap: *ringCap,
		sampleEvery: *sampleEvery, pollEvery: *pollEvery, ramp: *ramp, drain: *drain, reqTimeout: *reqTimeout,
		daemon: *withDaemon, out: *out,
	})
	if rep == nil {
		return exitCode(err, false)
	}
	return exitCode(err, rep.Pass)
}

type serveOpts struct {
	hone                                    string
	duration, sampleEvery, pollEvery, ramp  time.Duration
	drain, reqTimeout                       time.Duration
	streams, workers, maxTokens, maxNumSeqs int
	ringCap                                 int
	mode, profile, out                      string
	timeScale                               float64
	daemon                                  bool
}

// soakPrompts are a few fixed prompts: the workers' prefix caches see a
// bounded set of blocks, so cache growth is not mistaken for a leak.
var soakPrompts = []string{
	"Write a function that reverses a linked list.",
	"Explain continuous batching in one paragraph.",
	"def fibonacci(n):",
	"List three uses of eBPF.",
	"SELECT name FROM users WHERE",
	"The quick brown fox jumps over the lazy dog.",
	"// parse a duration like 1h30m",
	"What is prefix caching?",
}

func serve(o serveOpts) (*serveReport, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	hone, err := honeBinary(o.hone)
	if err != nil {
		return nil, err
	}
	r := &serveRun{o: o, hone: hone, logDir: filepath.Join(o.out, "logs"), rep: newServeReport(o)}
	defer r.stopAll()
	if err := r.startProcesses(); err != nil {
		return nil, err
	}
	r.prepareLoad()
	loadEnd, drainEnd := r.runLoad()
	kinds, started := r.finalPolls()

	r.daemonFigures()
	r.processFigures()
	r.rep.Load = r.loadFigures(kinds, started, loadEnd, drainEnd)
	r.rep.Outcomes = r.agreement(started)
	r.memory(loadEnd)
	r.verdict(kinds, started)

	rep := r.rep
	printServeReport(rep)
	path := filepath.Join(o.out, "soak.json")
	if err := writeJSON(path, rep); err != nil {
		return rep, err
	}
	fmt.Printf("report: %s\n", path)
	return rep, nil
}

// check refuses flags that cannot make a run (exit 2).
func (o serveOpts) check() error {
	if o.mode != "colocated" && o.mode != "disaggregated" {
		return fail("--mode: want colocated or disaggregated, got %q", o.mode)
	}
	if o.workers < 1 || o.mode == "disaggregated" && o.workers < 2 {
		return fail("--workers: colocated wants >= 1, disaggregated >= 2")
	}
	if o.streams < 1 || o.duration <= 0 {
		return fail("--streams and --duration must be positive")
	}
	if o.daemon {
		return requireRoot()
	}
	return nil
}

// newServeReport is the report before the run: its configuration and host.
func newServeReport(o serveOpts) *serveReport {
	return &serveReport{
		Kind: "soak", Started: time.Now().UTC(), FlatRule: FlatRule, CPUSeconds: map[string]float64{}, HeapGoalMax: map[string]uint64{},
		Config: serveConfig{
			Duration: o.duration.String(), Streams: o.streams, Mode: o.mode, Workers: o.workers, Profile: o.profile,
			TimeScale: o.timeScale, MaxTokens: o.maxTokens, MaxNumSeqs: o.maxNumSeqs, TimelineCapacity: o.ringCap,
			SampleEvery: o.sampleEvery.String(), PollEvery: o.pollEvery.String(), Daemon: o.daemon,
		},
		Host: hostInfo{CPUs: runtime.NumCPU(), Kernel: kernelRelease(), GoArch: runtime.GOARCH},
	}
}

// serveRun is one `hone-soak serve` run: the processes it started, the load
// client and timeline poller, and what the background loops gather while
// the load runs.
type serveRun struct {
	o      serveOpts
	hone   string // absolute path of the hone binary
	logDir string
	rep    *serveReport

	procs      []*proc // every process started, stopped in reverse order
	workers    []soakWorker
	proxy      *proc
	base       string // the proxy's URL
	daemon     *proc  // nil without --daemon
	daemonBase string // the daemon's URL, "" without --daemon

	t0                      time.Time
	smp                     *sampler
	names                   []string // the sampled processes, for progress lines
	rec                     *reconciler
	lc                      *loadClient
	tp                      *timelinePoller
	ringCap                 int     // the proxy's timeline ring capacity in effect
	steadyFrom, steadyUntil float64 // the steady window, s since t0

	// Gathered by the background loops.
	mu            sync.Mutex
	inflight      []int64
	proxyInflight []int64
	snapSizes     []Sample
	ringFullS     float64
	pollErr       error
	clientHeap    Series
}

// soakWorker is one `hone sim serve` behind the proxy.
type soakWorker struct {
	name, role, url string
	p               *proc
}

func (r *serveRun) stopAll() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].stop(10 * time.Second)
	}
}

// startProcesses starts the workers, the proxy in front of them and, with
// --daemon, the daemon attached to all of them; each is healthy on return.
func (r *serveRun) startProcesses() error {
	if err := r.startWorkers(); err != nil {
		return err
	}
	if err := r.startProxy(); err != nil {
		return err
	}
	if !r.o.daemon {
		return nil
	}
	pids := []int{r.proxy.pid()}
	for _, w := range r.workers {
		pids = append(pids, w.p.pid())
	}
	d, base, err := startDaemon(r.hone, r.logDir, pids)
	if err != nil {
		return setupError{err}
	}
	r.daemon, r.daemonBase = d, base
	r.procs = append(r.procs, d)
	return nil
}

// workerRole is worker i's role: colocated, or in disaggregated mode the
// first half prefill and the rest decode.
func workerRole(mode string, i, workers int) string {
	switch {
	case mode != "disaggregated":
		return "colocated"
	case i >= workers/2:
		return "decode"
	default:
		return "prefill"
	}
}

// startWorkers starts --workers `hone sim serve` and waits for their health.
func (r *serveRun) startWorkers() error {
	o := r.o
	for i := range o.workers {
		role := workerRole(o.mode, i, o.workers)
		port, err := freePort()
		if err != nil {
			return err
		}
		name := fmt.Sprintf("w%d-%s", i, role)
		argv := []string{r.hone, "sim", "serve", "--role", role, "--profile", o.profile,
			"--time-scale", strconv.FormatFloat(o.timeScale, 'g', -1, 64), "--port", strconv.Itoa(port),
			"--max-num-seqs", strconv.Itoa(o.maxNumSeqs), "--engine-id", name, "--log-level", "warn"}
		if role == "prefill" {
			kv, err := freePort()
			if err != nil {
				return err
			}
			argv = append(argv, "--kv-port", strconv.Itoa(kv))
		}
		p, err := startEnv(name, r.logDir, gctraceEnv, argv...)
		if err != nil {
			return err
		}
		r.procs = append(r.procs, p)
		r.workers = append(r.workers, soakWorker{name: name, role: role, url: fmt.Sprintf("http://127.0.0.1:%d", port), p: p})
	}
	for _, w := range r.workers {
		if err := waitHTTP(w.url+"/health", w.p, 60*time.Second); err != nil {
			return setupError{err}
		}
	}
	return nil
}

// startProxy starts `hone proxy` from a config file (round-robin; the
// timeline ring sized) and waits for its health.
func (r *serveRun) startProxy() error {
	pport, err := freePort()
	if err != nil {
		return err
	}
	cfg := map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", pport), "mode": r.o.mode, "routing": "round_robin"}
	var cw []map[string]string
	for _, w := range r.workers {
		cw = append(cw, map[string]string{"name": w.name, "role": w.role, "url": w.url})
	}
	cfg["workers"] = cw
	if r.o.ringCap > 0 {
		cfg["timeline_capacity"] = r.o.ringCap
	}
	cfgPath := filepath.Join(r.logDir, "proxy-config.json")
	if err := writeJSON(cfgPath, cfg); err != nil {
		return err
	}
	p, err := startEnv("proxy", r.logDir, gctraceEnv, r.hone, "proxy", "--config", cfgPath)
	if err != nil {
		return err
	}
	r.procs = append(r.procs, p)
	r.proxy, r.base = p, fmt.Sprintf("http://127.0.0.1:%d", pport)
	if err := waitHTTP(r.base+"/health", p, 60*time.Second); err != nil {
		return setupError{err}
	}
	return nil
}

// prepareLoad sets up the sampler, the load client and the timeline poller,
// and says what is about to run.
func (r *serveRun) prepareLoad() {
	o := r.o
	r.t0 = time.Now()
	r.smp = newSampler(r.t0)
	r.smp.add("proxy", r.proxy.pid())
	for _, w := range r.workers {
		r.smp.add(w.name, w.p.pid())
	}
	if r.daemon != nil {
		r.smp.add("daemon", r.daemon.pid())
	}
	r.smp.add("client", os.Getpid())
	r.names = r.smp.names()

	r.rec = newReconciler()
	runID := fmt.Sprintf("soak-%d", r.t0.Unix())
	r.lc = newLoadClient(loadConfig{
		base: r.base, model: "Qwen/Qwen2.5-Coder-0.5B-Instruct", prompts: soakPrompts,
		maxTokens: o.maxTokens, streams: o.streams, runID: runID, timeout: o.reqTimeout,
	}, r.rec)
	r.tp = &timelinePoller{base: r.base, rec: r.rec}
	r.ringCap = o.ringCap
	if r.ringCap <= 0 {
		r.ringCap = 200_000 // proxy.DefaultTimelineCapacity
	}
	r.clientHeap = Series{Name: "client", PID: os.Getpid()}
	r.steadyFrom, r.steadyUntil = o.ramp.Seconds()+1, o.duration.Seconds()

	fmt.Printf("soak: %d streams for %s through hone proxy (%s, %d workers, profile %s, time scale %g, %d tokens), daemon %v; %d CPUs\n",
		o.streams, o.duration, o.mode, o.workers, o.profile, o.timeScale, o.maxTokens, o.daemon, runtime.NumCPU())
	fmt.Printf("soak: logs in %s; progress every 30s\n", r.logDir)
}

// runLoad runs the load for --duration with the sampling and polling loops
// beside it, lets the requests in flight finish (cancelling them after
// --drain), and returns when the load ended and when the drain did, in s
// since t0.
func (r *serveRun) runLoad() (loadEnd, drainEnd float64) {
	stop := make(chan struct{})
	hard, hardCancel := context.WithCancel(context.Background())
	defer hardCancel()
	bg, bgCancel := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() {
		defer bgWG.Done()
		r.sampleLoop(bg)
	}()
	go func() {
		defer bgWG.Done()
		r.pollLoop(bg)
	}()

	loadDone := make(chan struct{})
	go func() {
		r.lc.run(stop, hard, r.o.ramp)
		close(loadDone)
	}()
	select {
	case <-time.After(r.o.duration):
	case <-loadDone:
	}
	close(stop)
	loadEnd = time.Since(r.t0).Seconds()
	select {
	case <-loadDone:
	case <-time.After(r.o.drain):
		fmt.Printf("soak: requests still in flight %s after the end: cancelling them\n", r.o.drain)
		hardCancel()
		<-loadDone
	}
	drainEnd = time.Since(r.t0).Seconds()
	r.smp.sample()

	bgCancel()
	bgWG.Wait()
	return loadEnd, drainEnd
}

// progress is when the last progress line was printed and the requests
// done then.
type progress struct {
	at   time.Time
	done uint64
}

// sampleLoop samples RSS, the in-flight counts, the client's live heap and
// the daemon's snapshot size every --sample, and prints progress every 30 s.
func (r *serveRun) sampleLoop(ctx context.Context) {
	tick := time.NewTicker(r.o.sampleEvery)
	defer tick.Stop()
	last := progress{at: time.Now()}
	r.smp.sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.sampleOnce(ctx, &last)
	}
}

func (r *serveRun) sampleOnce(ctx context.Context, last *progress) {
	rss := r.smp.sample()
	kinds, _, fl := r.lc.snapshot()
	el := time.Since(r.t0).Seconds()
	pfl := r.proxyInFlight(ctx)
	r.mu.Lock()
	r.clientHeap.Samples = append(r.clientHeap.Samples, Sample{T: el, RSS: liveHeapNow()})
	if el >= r.steadyFrom && el <= r.steadyUntil {
		r.inflight = append(r.inflight, fl)
		if pfl >= 0 {
			r.proxyInflight = append(r.proxyInflight, pfl)
		}
	}
	r.mu.Unlock()
	if r.daemonBase != "" && (len(r.snapSizes) == 0 || time.Since(last.at) >= 25*time.Second) {
		if b, err := getBody(ctx, r.daemonBase+"/v1/snapshot"); err == nil {
			r.mu.Lock()
			r.snapSizes = append(r.snapSizes, Sample{T: el, RSS: uint64(len(b))})
			r.mu.Unlock()
		}
	}
	if time.Since(last.at) >= 30*time.Second {
		done := sumCounts(kinds)
		rate := float64(done-last.done) / time.Since(last.at).Seconds()
		co, po := r.rec.pending()
		fmt.Printf("[%5.0fs] in flight %d, done %d (%.0f/s), errors %d, unmatched client %d proxy %d; %s\n",
			el, fl, done, rate, done-kinds[kindOK], co, po, rssLine(r.names, rss))
		*last = progress{at: time.Now(), done: done}
	}
}

// proxyInFlight is the proxy's hone_proxy_requests_in_flight gauge, -1 when
// it could not be read.
func (r *serveRun) proxyInFlight(ctx context.Context) int64 {
	b, err := getBody(ctx, r.base+"/hone/metrics")
	if err != nil {
		return -1
	}
	if v, ok := promValues(b, "hone_proxy_requests_in_flight")["hone_proxy_requests_in_flight"]; ok {
		return int64(v)
	}
	return -1
}

// pollLoop reads the proxy's timelines every --poll and notes when its ring
// was first full.
func (r *serveRun) pollLoop(ctx context.Context) {
	tick := time.NewTicker(r.o.pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := r.tp.poll(ctx); err != nil && ctx.Err() == nil {
			r.mu.Lock()
			r.pollErr = err
			r.mu.Unlock()
		}
		r.mu.Lock()
		if r.ringFullS == 0 && r.tp.seen >= uint64(r.ringCap) {
			r.ringFullS = time.Since(r.t0).Seconds()
		}
		r.mu.Unlock()
	}
}

// finalPolls polls the timelines until every request is matched (or 60 s)
// and returns the client's outcomes and the requests it started.
func (r *serveRun) finalPolls() (kinds map[string]uint64, started uint64) {
	kinds, started, _ = r.lc.snapshot()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := r.tp.poll(context.Background()); err != nil {
			r.pollErr = err
		}
		co, po := r.rec.pending()
		if (co == 0 && po == 0 && sumCounts(r.tp.counts) == started) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if r.pollErr != nil {
		r.rep.Failures = append(r.rep.Failures, "timeline polling: "+r.pollErr.Error())
	}
	return kinds, started
}

// daemonFigures reads the daemon's drops and last snapshot, before anything
// stops.
func (r *serveRun) daemonFigures() {
	if r.daemonBase == "" {
		return
	}
	df := &daemonFigures{SnapshotBytes: r.snapSizes}
	if d, err := daemonDrops(r.daemonBase); err == nil {
		df.Drops = d
	} else {
		r.rep.Failures = append(r.rep.Failures, "daemon /metrics: "+err.Error())
	}
	if b, err := getBody(context.Background(), r.daemonBase+"/v1/snapshot"); err == nil {
		df.SnapshotBytes = append(df.SnapshotBytes, Sample{T: time.Since(r.t0).Seconds(), RSS: uint64(len(b))})
		df.readSnapshot(b)
	} else {
		r.rep.Failures = append(r.rep.Failures, "daemon /v1/snapshot: "+err.Error())
	}
	for i, x := range df.SnapshotBytes {
		n := int(x.RSS)
		if i == 0 {
			df.SnapshotFirstBytes = n
		}
		df.SnapshotLastBytes = n
		df.SnapshotMaxBytes = max(df.SnapshotMaxBytes, n)
	}
	r.rep.Daemon = df
}

// readSnapshot takes the target table and connection counts from the
// daemon's snapshot b (left zero if b does not decode).
func (df *daemonFigures) readSnapshot(b []byte) {
	var s struct {
		TargetTable struct {
			Entries int `json:"entries"`
			Max     int `json:"max_entries"`
		} `json:"target_table"`
		Connections []json.RawMessage `json:"connections"`
		Closed      struct {
			Connections uint64 `json:"connections"`
		} `json:"closed_connections_folded"`
	}
	if json.Unmarshal(b, &s) == nil {
		df.TableEntries, df.TableMax = s.TargetTable.Entries, s.TargetTable.Max
		df.Connections, df.ClosedFolded = len(s.Connections), s.Closed.Connections
	}
}

// processFigures notes the processes that exited during the run and every
// process's CPU seconds.
func (r *serveRun) processFigures() {
	for _, p := range r.procs {
		if p.exited() {
			r.rep.Crashed = append(r.rep.Crashed, fmt.Sprintf("%s exited during the run: %v", p.name, p.err))
		}
		r.rep.CPUSeconds[p.name] = cpuSeconds(p.pid())
	}
	r.rep.CPUSeconds["client"] = cpuSeconds(os.Getpid())
}

// loadFigures sums up the load: outcomes, rate, durations and the in-flight
// counts over the steady window.
func (r *serveRun) loadFigures(kinds map[string]uint64, started uint64, loadEnd, drainEnd float64) loadResult {
	lr := loadResult{ByKind: kinds, Started: started, LoadSeconds: loadEnd, DrainSeconds: drainEnd - loadEnd}
	for k, v := range kinds {
		lr.Completed += v
		if k != kindOK {
			lr.Errors += v
		}
	}
	r.lc.mu.Lock()
	lr.Tokens = r.lc.tokens
	durs := append([]time.Duration(nil), r.lc.durs...)
	r.lc.mu.Unlock()
	lr.RatePerSec = float64(lr.Completed) / drainEnd
	lr.DurP50 = durPercentile(durs, 0.50).Seconds()
	lr.DurP99 = durPercentile(durs, 0.99).Seconds()
	lr.DurMax = durPercentile(durs, 1).Seconds()
	lr.SteadyWindowS = [2]float64{r.steadyFrom, r.steadyUntil}
	lr.InFlightMin, lr.InFlightMean, lr.InFlightMax = minMeanMax(r.inflight)
	lr.ProxyInFlightMin, lr.ProxyInFlightMean, lr.ProxyInFlightMax = minMeanMax(r.proxyInflight)
	return lr
}

// agreement matches the client's outcomes with the proxy's timelines and
// counters.
func (r *serveRun) agreement(started uint64) agreement {
	rec, tp := r.rec, r.tp
	rec.mu.Lock()
	ag := agreement{
		ClientRequests: started, ProxyTimelines: tp.seen, TimelinePages: tp.pages, TimelineDropped: tp.dropped,
		ProxyByOutcome: copyCounts(rec.proxyByKind), ProxyCounters: copyCounts(tp.counts), Matrix: copyCounts(rec.matrix),
		Agree: rec.agree, Disagree: rec.disagree, ClientOnly: len(rec.client), ProxyOnly: len(rec.proxy),
		Duplicates: rec.duplicates, Examples: append([]string(nil), rec.disagreeEx...),
	}
	for id, c := range rec.client {
		if len(ag.Examples) >= 30 {
			break
		}
		ag.Examples = append(ag.Examples, fmt.Sprintf("%s: client %s (status %d), no proxy timeline", id, c.kind, c.status))
	}
	for id, p := range rec.proxy {
		if len(ag.Examples) >= 40 {
			break
		}
		ag.Examples = append(ag.Examples, fmt.Sprintf("%s: proxy %s (status %d), never sent by the client", id, p.outcome, p.status))
	}
	rec.mu.Unlock()
	ag.CountersMatch = sumCounts(ag.ProxyCounters) == started && sumCounts(ag.ProxyCounters) == ag.ProxyTimelines
	for _, oc := range []string{"success", "fallback", "failed", "timeout"} {
		if ag.ProxyCounters[oc] != ag.ProxyByOutcome[oc] {
			ag.CountersMatch = false
		}
	}
	ag.OK = ag.Disagree == 0 && ag.ClientOnly == 0 && ag.ProxyOnly == 0 && ag.Duplicates == 0 &&
		ag.TimelineDropped == 0 && ag.CountersMatch && ag.Agree == started
	return ag
}

// memory judges RSS and the live heaps after warm-up: a third of the run,
// or later when the proxy's timeline ring was still filling.
func (r *serveRun) memory(loadEnd float64) {
	rep := r.rep
	warm := r.o.duration.Seconds() / 3
	rep.RingFullS = r.ringFullS
	if r.ringFullS > warm {
		warm = r.ringFullS
	}
	rep.WarmUpS = warm
	rep.FDs = r.smp.fdSummaries(warm)
	rep.Series = r.smp.all()
	for _, s := range rep.Series {
		rep.RSS = append(rep.RSS, summarize(s, warm, loadEnd))
	}
	// Live heap, a diagnosis for RSS: Go returns freed memory to the OS
	// slowly, so RSS keeps a high-water mark that the live heap does not.
	for _, p := range r.procs {
		h, goal := liveHeapSeries(p.name, p.log, p.pid(), p.started, r.t0, warm)
		rep.HeapGoalMax[p.name] = goal
		rep.HeapSeries = append(rep.HeapSeries, h)
		rep.HeapLive = append(rep.HeapLive, summarize(h, warm, loadEnd))
	}
	r.mu.Lock()
	rep.HeapSeries = append(rep.HeapSeries, r.clientHeap)
	rep.HeapLive = append(rep.HeapLive, summarize(r.clientHeap, warm, loadEnd))
	r.mu.Unlock()
}

// verdict lists the run's failures and passes it when there are none.
func (r *serveRun) verdict(kinds map[string]uint64, started uint64) {
	rep, lr, ag := r.rep, r.rep.Load, r.rep.Outcomes
	if len(rep.Crashed) > 0 {
		rep.Failures = append(rep.Failures, rep.Crashed...)
	}
	if lr.Errors > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d of %d requests did not complete ok (%v)", lr.Errors, lr.Completed, kinds))
	}
	// Kept in flight: each loop starts its next request as soon as one
	// ends, so the client's count dips only while loops wait for a CPU;
	// the mean over the steady window must be within 1% of --streams.
	if lr.InFlightMean < float64(r.o.streams)*0.99 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("in flight averaged %.1f of %d in the steady window (min %d)", lr.InFlightMean, r.o.streams, lr.InFlightMin))
	}
	if !ag.OK {
		rep.Failures = append(rep.Failures, fmt.Sprintf("client and proxy disagree: %d agree of %d sent, %d disagree, %d client-only, %d proxy-only, %d duplicates, %d dropped, counters match %v",
			ag.Agree, started, ag.Disagree, ag.ClientOnly, ag.ProxyOnly, ag.Duplicates, ag.TimelineDropped, ag.CountersMatch))
	}
	for _, m := range rep.RSS {
		if !m.Flat {
			rep.Failures = append(rep.Failures, rep.memoryFailure(m))
		}
	}
	rep.Pass = len(rep.Failures) == 0
}

// memoryFailure says why m's memory is not flat, with its live heap and
// largest heap goal beside it.
func (rep *serveReport) memoryFailure(m RSSSummary) string {
	msg := fmt.Sprintf("memory of %s: %s", m.Name, m.Verdict)
	for _, h := range rep.HeapLive {
		if h.Name == m.Name && h.Samples > 0 {
			msg += fmt.Sprintf("; its live Go heap (gctrace): %s", h.Verdict)
			if g := rep.HeapGoalMax[m.Name]; g > 0 {
				msg += fmt.Sprintf(", largest heap goal after warm-up %.0f MiB (RSS max %.0f MiB)", mib(g), mib(m.MaxBytes))
			}
		}
	}
	return msg
}

func copyCounts(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func printServeReport(r *serveReport) {
	l, a := r.Load, r.Outcomes
	fmt.Printf("\n== soak report (%s, %d streams, %s, %d workers, %d CPUs)\n", r.Config.Duration, r.Config.Streams, r.Config.Mode, r.Config.Workers, r.Host.CPUs)
	fmt.Printf("load: %d requests completed in %.0f s load + %.1f s drain (%.0f/s); client outcomes %s; errors %d\n",
		l.Completed, l.LoadSeconds, l.DrainSeconds, l.RatePerSec, fmtCounts(l.ByKind), l.Errors)
	fmt.Printf("      in flight over the steady window [%.0f s, %.0f s], sampled: client min %d, mean %.1f, max %d; proxy gauge min %d, mean %.1f, max %d\n",
		l.SteadyWindowS[0], l.SteadyWindowS[1], l.InFlightMin, l.InFlightMean, l.InFlightMax, l.ProxyInFlightMin, l.ProxyInFlightMean, l.ProxyInFlightMax)
	fmt.Printf("      ok request duration p50 %.2f s, p99 %.2f s, max %.2f s\n", l.DurP50, l.DurP99, l.DurMax)
	fmt.Printf("outcomes: client sent %d; proxy timelines %d (%d pages of <= %d, %d dropped) by outcome %s; proxy counters %s\n",
		a.ClientRequests, a.ProxyTimelines, a.TimelinePages, maxTimelinePage, a.TimelineDropped, fmtCounts(a.ProxyByOutcome), fmtCounts(a.ProxyCounters))
	fmt.Printf("          by X-Request-Id: %d agree, %d disagree, %d client-only, %d proxy-only, %d duplicates; matrix %s; counters match: %v => %s\n",
		a.Agree, a.Disagree, a.ClientOnly, a.ProxyOnly, a.Duplicates, fmtCounts(a.Matrix), a.CountersMatch, okWord(a.OK))
	for _, e := range a.Examples {
		fmt.Printf("          %s\n", e)
	}
	fmt.Printf("memory (warm-up ends at %.0f s", r.WarmUpS)
	if r.RingFullS > 0 {
		fmt.Printf("; the proxy's timeline ring of %d was full at %.0f s", r.Config.TimelineCapacity, r.RingFullS)
	}
	fmt.Printf("); rule: %s\n", FlatRule)
	printRSSTable(r.RSS)
	fmt.Printf("live Go heap after each GC (GODEBUG=gctrace=1; the client's from runtime/metrics), same rule, a diagnosis for RSS:\n")
	printRSSTable(r.HeapLive)
	var goals []string
	for k, v := range r.HeapGoalMax {
		goals = append(goals, fmt.Sprintf("%s %.0f", k, mib(v)))
	}
	sort.Strings(goals)
	fmt.Printf("largest GC heap goal after warm-up, MiB (a Go process's RSS runs up to about its goal, 2x the live heap): %s\n", strings.Join(goals, ", "))
	var fds []string
	for _, f := range r.FDs {
		fds = append(fds, fmt.Sprintf("%s %d/%d/%d/%d", f.Name, f.First, f.WarmUp, f.Last, f.Max))
	}
	fmt.Printf("open fds first/warm-up/last/max: %s\n", strings.Join(fds, ", "))
	var cpu []string
	for k, v := range r.CPUSeconds {
		cpu = append(cpu, fmt.Sprintf("%s %.0f", k, v))
	}
	sort.Strings(cpu)
	fmt.Printf("cpu seconds: %s\n", strings.Join(cpu, ", "))
	if d := r.Daemon; d != nil {
		fmt.Printf("daemon: snapshot %d B first, %d B last, %d B max; target table %d/%d; connections listed %d, closed folded %d; drops %s\n",
			d.SnapshotFirstBytes, d.SnapshotLastBytes, d.SnapshotMaxBytes, d.TableEntries, d.TableMax, d.Connections, d.ClosedFolded, fmtFloats(d.Drops))
	}
	if r.Pass {
		fmt.Println("soak: PASS")
	} else {
		fmt.Println("soak: FAIL")
		for _, f := range r.Failures {
			fmt.Println("  -", f)
		}
	}
}

func okWord(ok bool) string {
	if ok {
		return "OK"
	}
	return "MISMATCH"
}

func fmtCounts(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func fmtFloats(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%g", k, m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// cpuSeconds reads utime+stime of a process (0 once it is gone).
func cpuSeconds(pid int) float64 {
	f := procstat.Fields(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// liveHeapNow is this process's live heap as of the last GC.
func liveHeapNow() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func minMeanMax(xs []int64) (lo int64, mean float64, hi int64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	lo, hi = xs[0], xs[0]
	var sum int64
	for _, v := range xs {
		lo, hi = min(lo, v), max(hi, v)
		sum += v
	}
	return lo, float64(sum) / float64(len(xs)), hi
}
