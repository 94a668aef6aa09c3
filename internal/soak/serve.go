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
	if o.mode != "colocated" && o.mode != "disaggregated" {
		return nil, fail("--mode: want colocated or disaggregated, got %q", o.mode)
	}
	if o.workers < 1 || o.mode == "disaggregated" && o.workers < 2 {
		return nil, fail("--workers: colocated wants >= 1, disaggregated >= 2")
	}
	if o.streams < 1 || o.duration <= 0 {
		return nil, fail("--streams and --duration must be positive")
	}
	if o.daemon {
		if err := requireRoot(); err != nil {
			return nil, err
		}
	}
	hone, err := honeBinary(o.hone)
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(o.out, "logs")
	rep := &serveReport{
		Kind: "soak", Started: time.Now().UTC(), FlatRule: FlatRule, CPUSeconds: map[string]float64{}, HeapGoalMax: map[string]uint64{},
		Config: serveConfig{
			Duration: o.duration.String(), Streams: o.streams, Mode: o.mode, Workers: o.workers, Profile: o.profile,
			TimeScale: o.timeScale, MaxTokens: o.maxTokens, MaxNumSeqs: o.maxNumSeqs, TimelineCapacity: o.ringCap,
			SampleEvery: o.sampleEvery.String(), PollEvery: o.pollEvery.String(), Daemon: o.daemon,
		},
		Host: hostInfo{CPUs: runtime.NumCPU(), Kernel: kernelRelease(), GoArch: runtime.GOARCH},
	}

	// Workers.
	var procs []*proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop(10 * time.Second)
		}
	}()
	type worker struct {
		name, role, url string
		p               *proc
	}
	var ws []worker
	for i := range o.workers {
		role := "colocated"
		if o.mode == "disaggregated" {
			role = "prefill"
			if i >= o.workers/2 {
				role = "decode"
			}
		}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("w%d-%s", i, role)
		argv := []string{hone, "sim", "serve", "--role", role, "--profile", o.profile,
			"--time-scale", strconv.FormatFloat(o.timeScale, 'g', -1, 64), "--port", strconv.Itoa(port),
			"--max-num-seqs", strconv.Itoa(o.maxNumSeqs), "--engine-id", name, "--log-level", "warn"}
		if role == "prefill" {
			kv, err := freePort()
			if err != nil {
				return nil, err
			}
			argv = append(argv, "--kv-port", strconv.Itoa(kv))
		}
		p, err := startEnv(name, logDir, gctraceEnv, argv...)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		ws = append(ws, worker{name: name, role: role, url: fmt.Sprintf("http://127.0.0.1:%d", port), p: p})
	}
	for _, w := range ws {
		if err := waitHTTP(w.url+"/health", w.p, 60*time.Second); err != nil {
			return nil, setupError{err}
		}
	}

	// Proxy, from a config file (round-robin; the timeline ring sized).
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", pport), "mode": o.mode, "routing": "round_robin"}
	var cw []map[string]string
	for _, w := range ws {
		cw = append(cw, map[string]string{"name": w.name, "role": w.role, "url": w.url})
	}
	cfg["workers"] = cw
	if o.ringCap > 0 {
		cfg["timeline_capacity"] = o.ringCap
	}
	cfgPath := filepath.Join(logDir, "proxy-config.json")
	if err := writeJSON(cfgPath, cfg); err != nil {
		return nil, err
	}
	proxyP, err := startEnv("proxy", logDir, gctraceEnv, hone, "proxy", "--config", cfgPath)
	if err != nil {
		return nil, err
	}
	procs = append(procs, proxyP)
	base := fmt.Sprintf("http://127.0.0.1:%d", pport)
	if err := waitHTTP(base+"/health", proxyP, 60*time.Second); err != nil {
		return nil, setupError{err}
	}

	// Daemon on the proxy and the workers.
	var daemonP *proc
	var daemonBase string
	if o.daemon {
		pids := []int{proxyP.pid()}
		for _, w := range ws {
			pids = append(pids, w.p.pid())
		}
		daemonP, daemonBase, err = startDaemon(hone, logDir, pids)
		if err != nil {
			return nil, setupError{err}
		}
		procs = append(procs, daemonP)
	}

	t0 := time.Now()
	smp := newSampler(t0)
	smp.add("proxy", proxyP.pid())
	for _, w := range ws {
		smp.add(w.name, w.p.pid())
	}
	if daemonP != nil {
		smp.add("daemon", daemonP.pid())
	}
	smp.add("client", os.Getpid())
	names := smp.names()

	rec := newReconciler()
	runID := fmt.Sprintf("soak-%d", t0.Unix())
	lc := newLoadClient(loadConfig{
		base: base, model: "Qwen/Qwen2.5-Coder-0.5B-Instruct", prompts: soakPrompts,
		maxTokens: o.maxTokens, streams: o.streams, runID: runID, timeout: o.reqTimeout,
	}, rec)
	tp := &timelinePoller{base: base, rec: rec}
	ringCap := o.ringCap
	if ringCap <= 0 {
		ringCap = 200_000 // proxy.DefaultTimelineCapacity
	}

	fmt.Printf("soak: %d streams for %s through hone proxy (%s, %d workers, profile %s, time scale %g, %d tokens), daemon %v; %d CPUs\n",
		o.streams, o.duration, o.mode, o.workers, o.profile, o.timeScale, o.maxTokens, o.daemon, runtime.NumCPU())
	fmt.Printf("soak: logs in %s; progress every 30s\n", logDir)

	stop := make(chan struct{})
	hard, hardCancel := context.WithCancel(context.Background())
	defer hardCancel()
	bg, bgCancel := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup

	// Sampling, progress, daemon snapshot sizes.
	var (
		mu            sync.Mutex
		inflight      []int64
		proxyInflight []int64
		snapSizes     []Sample
		ringFullS     float64
		pollErr       error
		clientHeap    = Series{Name: "client", PID: os.Getpid()}
		steadyFrom    = o.ramp.Seconds() + 1
		steadyUntil   = o.duration.Seconds()
	)
	bgWG.Add(1)
	go func() {
		defer bgWG.Done()
		tick := time.NewTicker(o.sampleEvery)
		defer tick.Stop()
		lastPrint, lastDone := time.Now(), uint64(0)
		smp.sample()
		for {
			select {
			case <-bg.Done():
				return
			case <-tick.C:
			}
			rss := smp.sample()
			kinds, _, fl := lc.snapshot()
			el := time.Since(t0).Seconds()
			pfl := int64(-1)
			if b, err := getBody(bg, base+"/hone/metrics"); err == nil {
				if v, ok := promValues(b, "hone_proxy_requests_in_flight")["hone_proxy_requests_in_flight"]; ok {
					pfl = int64(v)
				}
			}
			mu.Lock()
			clientHeap.Samples = append(clientHeap.Samples, Sample{T: el, RSS: liveHeapNow()})
			if el >= steadyFrom && el <= steadyUntil {
				inflight = append(inflight, fl)
				if pfl >= 0 {
					proxyInflight = append(proxyInflight, pfl)
				}
			}
			mu.Unlock()
			if daemonBase != "" && (len(snapSizes) == 0 || time.Since(lastPrint) >= 25*time.Second) {
				if b, err := getBody(bg, daemonBase+"/v1/snapshot"); err == nil {
					mu.Lock()
					snapSizes = append(snapSizes, Sample{T: el, RSS: uint64(len(b))})
					mu.Unlock()
				}
			}
			if time.Since(lastPrint) >= 30*time.Second {
				done := sumCounts(kinds)
				rate := float64(done-lastDone) / time.Since(lastPrint).Seconds()
				co, po := rec.pending()
				fmt.Printf("[%5.0fs] in flight %d, done %d (%.0f/s), errors %d, unmatched client %d proxy %d; %s\n",
					el, fl, done, rate, done-kinds[kindOK], co, po, rssLine(names, rss))
				lastPrint, lastDone = time.Now(), done
			}
		}
	}()
	// Timeline polling.
	bgWG.Add(1)
	go func() {
		defer bgWG.Done()
		tick := time.NewTicker(o.pollEvery)
		defer tick.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-tick.C:
			}
			if err := tp.poll(bg); err != nil && bg.Err() == nil {
				mu.Lock()
				pollErr = err
				mu.Unlock()
			}
			mu.Lock()
			if ringFullS == 0 && tp.seen >= uint64(ringCap) {
				ringFullS = time.Since(t0).Seconds()
			}
			mu.Unlock()
		}
	}()

	// The load.
	loadDone := make(chan struct{})
	go func() {
		lc.run(stop, hard, o.ramp)
		close(loadDone)
	}()
	select {
	case <-time.After(o.duration):
	case <-loadDone:
	}
	close(stop)
	loadEnd := time.Since(t0).Seconds()
	select {
	case <-loadDone:
	case <-time.After(o.drain):
		fmt.Printf("soak: requests still in flight %s after the end: cancelling them\n", o.drain)
		hardCancel()
		<-loadDone
	}
	drainEnd := time.Since(t0).Seconds()
	smp.sample()

	// Final polls until every request is matched (or 60 s).
	bgCancel()
	bgWG.Wait()
	kinds, started, _ := lc.snapshot()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := tp.poll(context.Background()); err != nil {
			pollErr = err
		}
		co, po := rec.pending()
		if (co == 0 && po == 0 && sumCounts(tp.counts) == started) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if pollErr != nil {
		rep.Failures = append(rep.Failures, "timeline polling: "+pollErr.Error())
	}

	// Daemon figures, before anything stops.
	if daemonBase != "" {
		df := &daemonFigures{SnapshotBytes: snapSizes}
		if d, err := daemonDrops(daemonBase); err == nil {
			df.Drops = d
		} else {
			rep.Failures = append(rep.Failures, "daemon /metrics: "+err.Error())
		}
		if b, err := getBody(context.Background(), daemonBase+"/v1/snapshot"); err == nil {
			df.SnapshotBytes = append(df.SnapshotBytes, Sample{T: time.Since(t0).Seconds(), RSS: uint64(len(b))})
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
		} else {
			rep.Failures = append(rep.Failures, "daemon /v1/snapshot: "+err.Error())
		}
		for i, x := range df.SnapshotBytes {
			n := int(x.RSS)
			if i == 0 {
				df.SnapshotFirstBytes = n
			}
			df.SnapshotLastBytes = n
			df.SnapshotMaxBytes = max(df.SnapshotMaxBytes, n)
		}
		rep.Daemon = df
	}
	for _, p := range procs {
		if p.exited() {
			rep.Crashed = append(rep.Crashed, fmt.Sprintf("%s exited during the run: %v", p.name, p.err))
		}
		rep.CPUSeconds[p.name] = cpuSeconds(p.pid())
	}
	rep.CPUSeconds["client"] = cpuSeconds(os.Getpid())

	// Load figures.
	lr := loadResult{ByKind: kinds, Started: started, LoadSeconds: loadEnd, DrainSeconds: drainEnd - loadEnd}
	for k, v := range kinds {
		lr.Completed += v
		if k != kindOK {
			lr.Errors += v
		}
	}
	lc.mu.Lock()
	lr.Tokens = lc.tokens
	durs := append([]time.Duration(nil), lc.durs...)
	lc.mu.Unlock()
	lr.RatePerSec = float64(lr.Completed) / drainEnd
	lr.DurP50 = durPercentile(durs, 0.50).Seconds()
	lr.DurP99 = durPercentile(durs, 0.99).Seconds()
	lr.DurMax = durPercentile(durs, 1).Seconds()
	lr.SteadyWindowS = [2]float64{steadyFrom, steadyUntil}
	lr.InFlightMin, lr.InFlightMean, lr.InFlightMax = minMeanMax(inflight)
	lr.ProxyInFlightMin, lr.ProxyInFlightMean, lr.ProxyInFlightMax = minMeanMax(proxyInflight)
	rep.Load = lr

	// Outcome agreement.
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
	rep.Outcomes = ag

	// Memory.
	warm := o.duration.Seconds() / 3
	rep.RingFullS = ringFullS
	if ringFullS > warm {
		warm = ringFullS
	}
	rep.WarmUpS = warm
	rep.FDs = smp.fdSummaries(warm)
	rep.Series = smp.all()
	for _, s := range rep.Series {
		rep.RSS = append(rep.RSS, summarize(s, warm, loadEnd))
	}
	// Live heap, a diagnosis for RSS: Go returns freed memory to the OS
	// slowly, so RSS keeps a high-water mark that the live heap does not.
	for _, p := range procs {
		h, goal := liveHeapSeries(p.name, p.log, p.pid(), p.started, t0, warm)
		rep.HeapGoalMax[p.name] = goal
		rep.HeapSeries = append(rep.HeapSeries, h)
		rep.HeapLive = append(rep.HeapLive, summarize(h, warm, loadEnd))
	}
	mu.Lock()
	rep.HeapSeries = append(rep.HeapSeries, clientHeap)
	rep.HeapLive = append(rep.HeapLive, summarize(clientHeap, warm, loadEnd))
	mu.Unlock()

	// Verdict.
	if len(rep.Crashed) > 0 {
		rep.Failures = append(rep.Failures, rep.Crashed...)
	}
	if lr.Errors > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d of %d requests did not complete ok (%v)", lr.Errors, lr.Completed, kinds))
	}
	// Kept in flight: each loop starts its next request as soon as one
	// ends, so the client's count dips only while loops wait for a CPU;
	// the mean over the steady window must be within 1% of --streams.
	if lr.InFlightMean < float64(o.streams)*0.99 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("in flight averaged %.1f of %d in the steady window (min %d)", lr.InFlightMean, o.streams, lr.InFlightMin))
	}
	if !ag.OK {
		rep.Failures = append(rep.Failures, fmt.Sprintf("client and proxy disagree: %d agree of %d sent, %d disagree, %d client-only, %d proxy-only, %d duplicates, %d dropped, counters match %v",
			ag.Agree, started, ag.Disagree, ag.ClientOnly, ag.ProxyOnly, ag.Duplicates, ag.TimelineDropped, ag.CountersMatch))
	}
	for _, r := range rep.RSS {
		if !r.Flat {
			msg := fmt.Sprintf("memory of %s: %s", r.Name, r.Verdict)
			for _, h := range rep.HeapLive {
				if h.Name == r.Name && h.Samples > 0 {
					msg += fmt.Sprintf("; its live Go heap (gctrace): %s", h.Verdict)
					if g := rep.HeapGoalMax[r.Name]; g > 0 {
						msg += fmt.Sprintf(", largest heap goal after warm-up %.0f MiB (RSS max %.0f MiB)", mib(g), mib(r.MaxBytes))
					}
				}
			}
			rep.Failures = append(rep.Failures, msg)
		}
	}
	rep.Pass = len(rep.Failures) == 0

	printServeReport(rep)
	path := filepath.Join(o.out, "soak.json")
	if err := writeJSON(path, rep); err != nil {
		return rep, err
	}
	fmt.Printf("report: %s\n", path)
	return rep, nil
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
