package emulator

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hone-llm/hone/internal/finesleep"
)

// request is one sequence inside the engine. Fields below "engine state"
// belong to the engine goroutine.
type request struct {
	id        string
	prompt    []int
	maxTokens int
	minTokens int
	ignoreEOS bool
	// remoteDecode: a prefill worker keeps the KV for a decode worker.
	remoteDecode bool
	// remote: a decode worker pulls the prompt's KV from here.
	remote *KVTransferParams

	arrivalMs  float64 // model time the server received it
	arrival    time.Time
	promptHash uint64
	seq        int64 // arrival order, 1-based
	out        *stream

	// engine state
	tokens      []int // prompt then output
	output      int
	hashes      []uint64
	blocks      []int32
	computed    int
	committed   int // blocks committed to the prefix cache
	hitDone     bool
	cached      int // prompt tokens served from the local prefix cache
	readyMs     float64
	scheduled   bool
	scheduledMs float64
	firstMs     float64
	lastMs      float64
	finished    bool
	aborted     bool
	preemptions int
	stallMs     float64
	// finalTok is the last output token, held back so finish publishes it
	// together with the result (hasFinal says it is set).
	finalTok int
	hasFinal bool
	// P/D
	pulledTokens   int
	kvBytesIn      int64
	transferFromMs float64
	transferToMs   float64
	transferModel  float64
	transferLateMs float64 // of transferToMs − transferFromMs, how much the host added past transferModel
}

// stream carries a request's tokens from the engine to its HTTP handler
// without ever blocking the engine.
type stream struct {
	mu     sync.Mutex
	tokens []int
	result *Result
	notify chan struct{}
}

func newStream() *stream { return &stream{notify: make(chan struct{}, 1)} }

func (s *stream) push(tok int, res *Result) {
	if s == nil { // virtual time: nobody streams
		return
	}
	s.mu.Lock()
	if tok >= 0 {
		s.tokens = append(s.tokens, tok)
	}
	if res != nil {
		s.result = res
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns the tokens after the first `from` and the result if final.
func (s *stream) take(from int) ([]int, *Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens[from:len(s.tokens):len(s.tokens)], s.result
}

// Result is what the engine reports when a request ends. Times are model
// milliseconds since the engine started unless named otherwise.
type Result struct {
	RequestID        string
	PromptTokens     int
	CachedTokens     int
	OutputTokens     int
	FinishReason     string // "length", "stop", "abort", "error"
	Err              error
	KVTransferParams *KVTransferParams
	Timing           Timing
}

// Timing is a request's true intervals in model milliseconds, with the
// CLOCK_MONOTONIC nanoseconds of each instant (0 when it did not happen).
type Timing struct {
	ArrivalMs        float64
	QueuedMs         float64 // the engine core took it in: arrival + the profile's FrontendMs
	ScheduledMs      float64 // the first scheduling, model ms since engine start (when ScheduledMono != 0); later ones (after a preemption) do not move it
	QueueMs          float64 // arrival (or KV ready) -> first scheduled
	PrefillMs        float64 // first scheduled -> first token
	TransferMs       float64 // KV pull, decode worker only
	TransferLateMs   float64 // of TransferMs, the part after the modelled end: the pulled bytes crossed this host's side channel late
	DecodeMs         float64 // first token -> last token
	TTFTMs           float64 // arrival -> first token
	E2EMs            float64 // arrival -> last token
	StallMs          float64 // injected stall inside this request's steps
	ArrivalMono      int64
	ScheduledMono    int64
	FirstTokenMono   int64
	FinishMono       int64
	TransferFromMono int64
	TransferToMono   int64
	ArrivalUnixNano  int64
	Preemptions      int
	KVPulledTokens   int
	KVBytesReceived  int64
}

// hold is a finished prefill whose blocks wait for a decode worker's pull.
type hold struct {
	blocks    []int32
	promptLen int
	timer     *time.Timer
	// readyMs is when the prefill ended (its last step's modelled end):
	// the KV has been complete since then.
	readyMs float64
}

type msgKind int

const (
	msgAdd msgKind = iota
	msgAbort
	msgLoaded
	msgRelease
	msgReset
)

type msg struct {
	kind  msgKind
	req   *request
	id    string
	endMs float64
	// fromMs, for msgLoaded, is the modelled start of the transfer.
	fromMs float64
	bytes  int64
	model  float64
	err    error
	done   chan struct{}
}

// engine is the scheduler loop: one goroutine owns the KV cache and the
// queues; everything else talks to it through inbox.
type engine struct {
	cfg     *Config
	prof    *Profile
	scale   float64
	log     *slog.Logger
	kv      *kvCache
	inbox   chan msg
	clock   *clock
	metrics *metrics
	trace   *traceWriter
	puller  func(r *request, fromTokens int)
	done    <-chan struct{}
	// virt, when set, is the virtual-time worker this engine is (see
	// virtual.go): the same scheduler, KV cache and transfer rules, driven
	// by a discrete-event loop instead of run; nothing waits on the wall
	// clock or starts a goroutine.
	virt *vworker
	// ftimer serves the last finesleep.Margin of each step's wait, in
	// fineLoop: waitUntil arms it on fineArm, fineLoop answers on
	// fineFired (both buffered 1).
	ftimer    *finesleep.Timer
	fineArm   chan time.Time
	fineFired chan time.Time
	// probe, when set (Config.CUDALib), is called at each live step's start
	// and modelled end (cudaprobe.go); nil costs nothing.
	probe cudaProbe

	waiting []*request
	running []*request
	pending []*request // decode side: remote requests waiting for blocks
	clockMs float64
	planBuf plan        // reused step to step
	entBuf  []StepEntry // reused step to step

	holdsMu sync.Mutex
	holds   map[string]*hold

	arrivals atomic.Int64

	lateMu sync.Mutex
	late   []time.Duration // step lateness, for the benchmark
	steps  atomic.Int64
}

// clock maps model milliseconds to wall time and CLOCK_MONOTONIC.
type clock struct {
	epoch time.Time
	mono0 int64
	scale float64
}

func newClock(scale float64) *clock {
	return &clock{epoch: time.Now(), mono0: monotonicNow(), scale: scale}
}

func (c *clock) modelMs(t time.Time) float64 { return float64(t.Sub(c.epoch)) / 1e6 / c.scale }
func (c *clock) real(ms float64) time.Time {
	return c.epoch.Add(time.Duration(ms * c.scale * 1e6))
}

// mono is the CLOCK_MONOTONIC reading, in ns, of model instant ms. Go's
// monotonic clock on Linux is CLOCK_MONOTONIC, so the mapping is exact up
// to the rounding of one reading.
func (c *clock) mono(ms float64) int64 { return c.mono0 + int64(ms*c.scale*1e6) }

// fromMono is the model instant of a CLOCK_MONOTONIC reading.
func (c *clock) fromMono(ns int64) float64 { return float64(ns-c.mono0) / 1e6 / c.scale }

// nowMs is the model time now: the wall clock's reading, or the virtual
// clock's.
func (e *engine) nowMs() float64 {
	if e.virt != nil {
		return e.virt.c.now
	}
	return e.clock.modelMs(time.Now())
}

func (e *engine) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e.drain()
		if ctx.Err() != nil {
			e.shutdown()
			return
		}
		step, start := e.schedule()
		if len(step.plan) == 0 {
			e.updateGauges()
			select {
			case m := <-e.inbox:
				e.handle(m)
			case <-ctx.Done():
				e.shutdown()
				return
			}
			continue
		}
		e.entBuf = step.entries(e.entBuf)
		dur := e.prof.StepMs(e.entBuf, e.cfg.EnforceEager) + step.stallMs
		end := start + dur
		e.updateGauges()
		var pc probeCall
		if e.probe != nil {
			var ok bool
			if pc, ok = e.probeLaunch(ctx, start, timer); !ok {
				e.shutdown()
				return
			}
		}
		deadline := e.clock.real(end)
		if !e.waitUntil(ctx, deadline, timer) {
			if e.probe != nil {
				e.probe.sync() // launches and syncs stay paired
			}
			e.shutdown()
			return
		}
		if e.probe != nil {
			pc.syncMono = monoAtLeast(e.clock.mono(end))
			if l, s := e.probe.sync(); s != 0 { // the worker's readings
				pc.launchMono, pc.syncMono = cmp.Or(l, pc.launchMono), s
			}
		}
		e.recordLateness(time.Since(deadline))
		if e.probe != nil {
			e.trace.step(e, step, pc, start, end)
		}
		e.complete(step, end)
		e.clockMs = end
		e.retryPending()
	}
}

// probeCall is one step's calls into the probe, for its trace line.
type probeCall struct {
	graph                bool
	launchMono, syncMono int64
}

// probeLaunch starts a step on the probe, cuGraphLaunch for a decode-only
// step with CUDA graphs, else cuLaunchKernel, never before the step's
// modelled start (a start still ahead, which the front end's wait before
// a request reaches the engine normally rules out, is waited for). It
// reports false on stop.
func (e *engine) probeLaunch(ctx context.Context, start float64, timer *time.Timer) (probeCall, bool) {
	if dl := e.clock.real(start); time.Until(dl) > 0 && !e.waitUntil(ctx, dl, timer) {
		return probeCall{}, false
	}
	pc := probeCall{graph: graphStep(e.entBuf, e.cfg.EnforceEager), launchMono: monoAtLeast(e.clock.mono(start))}
	e.probe.launch(pc.graph)
	return pc, true
}

// monoAtLeast reads CLOCK_MONOTONIC, first waiting out the few
// microseconds by which the model clock's mapping (clock.mono, from a
// reading taken just after its wall epoch) can lead the wall instant the
// engine waited for, so a step's probe readings never precede its
// modelled instants.
func monoAtLeast(ns int64) int64 {
	for {
		now := monotonicNow()
		switch d := time.Duration(ns - now); {
		case d <= 0 || now == 0:
			return now
		case d < 100*time.Microsecond:
			runtime.Gosched() // a Go timer could oversleep by a millisecond
		default:
			time.Sleep(d)
		}
	}
}

// waitUntil waits for deadline, taking in messages meanwhile (they can only
// join the next step; a decode worker's pulls start at once). It reports
// false on stop. A Go timer alone fires up to a millisecond late on an idle
// runtime (see internal/finesleep), two exercise decode steps; a timerfd
// served by the network poller is precise when the runtime is idle, but the
// goroutine it readies queues behind every runnable one when the runtime is
// busy (hundreds of streams writing), where a Go timer is precise and runs
// its goroutine next. So the last finesleep.Margin is waited on both: a Go
// timer for the deadline and fineLoop's timerfd, whichever fires first.
// The model clock does not drift either way (the next step starts at this
// one's modelled end); the lateness left is exported as
// hone_emulator_step_lateness_seconds.
func (e *engine) waitUntil(ctx context.Context, deadline time.Time, timer *time.Timer) bool {
	armed := false
	for {
		d := time.Until(deadline)
		if d <= 0 {
			return true
		}
		if d <= finesleep.Margin && !armed {
			// Only this goroutine sends: after the drain the send cannot block.
			select {
			case <-e.fineArm:
			default:
			}
			e.fineArm <- deadline
			armed = true
		}
		if !armed {
			d -= finesleep.Margin
		}
		timer.Reset(d)
		select {
		case m := <-e.inbox:
			timer.Stop()
			e.handle(m)
		case <-timer.C:
		case <-e.fineFired: // possibly an earlier deadline's: the loop rechecks
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			return false
		}
	}
}

// fineLoop waits on the engine's timerfd for each deadline waitUntil arms
// and reports it on fineFired (the latest report replaces an unread one).
func (e *engine) fineLoop(ctx context.Context) {
	for {
		select {
		case dl := <-e.fineArm:
			for ctx.Err() == nil && time.Until(dl) > 0 {
				e.ftimer.Wait(dl)
			}
			select {
			case <-e.fineFired:
			default:
			}
			e.fineFired <- dl
		case <-ctx.Done():
			return
		}
	}
}

func (e *engine) recordLateness(d time.Duration) {
	e.steps.Add(1)
	e.metrics.stepLateness.Observe(d.Seconds())
	e.lateMu.Lock()
	if len(e.late) < 1<<20 {
		e.late = append(e.late, d)
	}
	e.lateMu.Unlock()
}

func (e *engine) drain() {
	for {
		select {
		case m := <-e.inbox:
			e.handle(m)
		default:
			return
		}
	}
}

func (e *engine) handle(m msg) {
	switch m.kind {
	case msgAdd:
		r := m.req
		if r.tokens == nil {
			r.tokens = append(make([]int, 0, len(r.prompt)+max(r.maxTokens, 0)), r.prompt...)
		}
		r.readyMs = r.arrivalMs + e.prof.FrontendMs
		if r.remote != nil {
			if !e.allocRemote(r) {
				e.pending = append(e.pending, r)
			}
			return
		}
		e.enqueue(r)
	case msgAbort:
		m.req.aborted = true
		e.sweep()
		e.retryPending() // freed blocks may admit a waiting pull
	case msgLoaded:
		e.loaded(m)
	case msgRelease:
		e.release(m.id)
		e.retryPending()
	case msgReset:
		e.kv.reset()
		close(m.done)
	}
}

// enqueue inserts r into the waiting queue in order of readiness (FCFS).
func (e *engine) enqueue(r *request) {
	i := len(e.waiting)
	for i > 0 && e.waiting[i-1].readyMs > r.readyMs {
		i--
	}
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[i+1:], e.waiting[i:])
	e.waiting[i] = r
}

type planEntry struct {
	r       *request
	n       int
	decode  bool
	samples bool
	context int
}

type plan []planEntry

func (p plan) entries(buf []StepEntry) []StepEntry {
	out := buf[:0]
	for _, pe := range p {
		out = append(out, StepEntry{Tokens: pe.n, Context: pe.context, Decode: pe.decode, Samples: pe.samples,
			RemoteDecode: pe.r.remoteDecode})
	}
	return out
}

// stepPlan is one step: its entries and any injected stall.
type stepPlan struct {
	plan
	stallMs float64
}

func (e *engine) blocksFor(tokens int) int { return (tokens + e.kv.blockSize - 1) / e.kv.blockSize }

// extendHashes names every full block of r's known tokens.
func (e *engine) extendHashes(r *request) {
	bs := e.kv.blockSize
	for j := len(r.hashes); j < len(r.tokens)/bs; j++ {
		var parent uint64
		if j > 0 {
			parent = r.hashes[j-1]
		}
		r.hashes = append(r.hashes, hashTokens(parent, r.tokens[j*bs:(j+1)*bs]))
	}
}

// grow allocates blocks so r can hold computed+n tokens.
func (e *engine) grow(r *request, n int) bool {
	need := e.blocksFor(r.computed+n) - len(r.blocks)
	if need <= 0 {
		return true
	}
	if !e.kv.canAllocate(nil, need) {
		return false
	}
	r.blocks = append(r.blocks, e.kv.allocate(need)...)
	return true
}

// schedule builds one step at model time start, vLLM-style: running
// sequences first (decodes and unfinished prefill chunks) under the token
// budget, preempting the newest running sequence by recompute when blocks
// run out; then waiting requests in FCFS order while the budget, the
// sequence limit and the blocks allow, chunking the last prefill to fit.
func (e *engine) schedule() (stepPlan, float64) {
	start := e.clockMs
	if len(e.running) == 0 {
		if len(e.waiting) == 0 {
			return stepPlan{}, 0
		}
		start = math.Max(start, e.waiting[0].readyMs)
	}
	budget := e.cfg.MaxNumBatchedTokens
	p := stepPlan{plan: e.planBuf[:0]}
	defer func() { e.planBuf = p.plan[:0] }()
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(len(r.tokens)-r.computed, budget)
		if n <= 0 {
			continue
		}
		ok := true
		for !e.grow(r, n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == r {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		p.plan = append(p.plan, e.entry(r, n))
		budget -= n
	}
	if !preempted {
		for len(e.waiting) > 0 && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
			r := e.waiting[0]
			if r.readyMs > start {
				break
			}
			var hit []int32
			if !r.hitDone {
				e.extendHashes(r)
				hit = e.kv.match(r.hashes, (len(r.tokens)-1)/e.kv.blockSize)
			}
			base := r.computed
			if !r.hitDone {
				base = len(hit) * e.kv.blockSize
			}
			n := min(len(r.tokens)-base, budget)
			need := e.blocksFor(base+n) - len(r.blocks) - len(hit)
			if !e.kv.canAllocate(hit, max(need, 0)) {
				break
			}
			if !r.hitDone {
				e.kv.touch(hit)
				r.blocks = append(hit, r.blocks...)
				r.computed = base
				r.committed = len(hit)
				r.hitDone = true
				if !r.scheduled {
					r.cached = base
					e.metrics.prefixQueries.Add(float64(len(r.prompt)))
					e.metrics.prefixHits.Add(float64(base))
				}
			}
			if need > 0 {
				r.blocks = append(r.blocks, e.kv.allocate(need)...)
			}
			e.waiting = e.waiting[1:]
			e.running = append(e.running, r)
			if !r.scheduled {
				r.scheduled = true
				r.scheduledMs = start
				if st := e.cfg.faults.stall; st != nil && r.seq == st.nth {
					p.stallMs += st.ms
					r.stallMs = st.ms
				}
			}
			p.plan = append(p.plan, e.entry(r, n))
			budget -= n
		}
	}
	return p, start
}

func (e *engine) entry(r *request, n int) planEntry {
	done := r.computed+n == len(r.tokens)
	return planEntry{r: r, n: n, context: r.computed, samples: done,
		decode: n == 1 && done && r.computed >= len(r.prompt)-1}
}

// preempt frees r's blocks and puts it back at the head of the waiting
// queue; it will recompute its prompt and output so far.
func (e *engine) preempt(r *request) {
	e.kv.free(r.blocks)
	r.blocks, r.computed, r.committed, r.hitDone = nil, 0, 0, false
	r.preemptions++
	e.metrics.preemptions.Inc()
	e.waiting = append([]*request{r}, e.waiting...)
}

// complete applies a finished step at model time end: KV computed, full
// blocks committed to the prefix cache, one token sampled per sequence
// whose known tokens are all computed.
func (e *engine) complete(p stepPlan, end float64) {
	bs := e.kv.blockSize
	for _, pe := range p.plan {
		r := pe.r
		if r.aborted || r.finished {
			continue
		}
		r.computed += pe.n
		e.extendHashes(r)
		for ; r.committed < r.computed/bs && r.committed < len(r.hashes); r.committed++ {
			e.kv.commit(r.blocks[r.committed], r.hashes[r.committed])
		}
		if !pe.samples {
			continue
		}
		tok := outputToken(r.promptHash, r.output)
		reason := ""
		if !r.ignoreEOS && r.output+1 >= r.minTokens && r.output+1 == naturalLength(r.promptHash) {
			tok, reason = TokenIMEnd, "stop"
		}
		r.tokens = append(r.tokens, tok)
		r.output++
		if r.output == 1 {
			r.firstMs = end
		} else if e.virt == nil { // per-token metrics: nobody scrapes a virtual engine
			e.metrics.itl.Observe((end - r.lastMs) / 1000)
		}
		r.lastMs = end
		if e.virt == nil {
			e.metrics.generationTokens.Inc()
		}
		if r.output >= r.maxTokens && reason == "" {
			reason = "length"
		}
		if reason == "" {
			if r.out != nil {
				r.out.push(tok, nil)
			}
		} else {
			// The last token and the result are published together, so a
			// streaming handler can never send the last token without its
			// finish_reason.
			r.finalTok, r.hasFinal = tok, true
			e.finish(r, reason, nil)
		}
	}
	e.sweep()
}

// sweep drops finished and aborted requests from the queues, freeing the
// blocks of aborted ones.
func (e *engine) sweep() {
	keep := e.running[:0]
	for _, r := range e.running {
		switch {
		case r.finished:
		case r.aborted:
			e.abortNow(r)
		default:
			keep = append(keep, r)
		}
	}
	clear(e.running[len(keep):])
	e.running = keep
	w := e.waiting[:0]
	for _, r := range e.waiting {
		if r.aborted && !r.finished {
			e.abortNow(r)
			continue
		}
		w = append(w, r)
	}
	clear(e.waiting[len(w):])
	e.waiting = w
	pd := e.pending[:0]
	for _, r := range e.pending {
		if r.aborted && !r.finished {
			e.abortNow(r)
			continue
		}
		pd = append(pd, r)
	}
	e.pending = pd
}

func (e *engine) abortNow(r *request) {
	if r.finished {
		return
	}
	e.finish(r, "abort", nil)
}

// finish ends r: its blocks go back to the pool (or, on a prefill worker
// asked for remote decode, are held for the pull), its result is published
// and recorded.
func (e *engine) finish(r *request, reason string, err error) {
	r.finished = true
	res := &Result{RequestID: r.id, PromptTokens: len(r.prompt), CachedTokens: r.cached, OutputTokens: r.output,
		FinishReason: reason, Err: err}
	if r.remoteDecode && e.cfg.Role == RolePrefill && reason == "length" && !e.cfg.faults.refuseKV {
		res.KVTransferParams = e.holdBlocks(r)
	} else {
		e.kv.free(r.blocks)
	}
	r.blocks = nil
	res.Timing = e.timing(r)
	if reason == "length" || reason == "stop" {
		e.metrics.observe(r, res)
	}
	e.trace.request(e, r, res)
	if e.virt != nil {
		e.virt.finished(r, res)
		return
	}
	tok := -1
	if r.hasFinal {
		tok, r.hasFinal = r.finalTok, false
	}
	r.out.push(tok, res)
}

func (e *engine) timing(r *request) Timing {
	c := e.clock
	t := Timing{ArrivalMs: r.arrivalMs, QueuedMs: r.arrivalMs + e.prof.FrontendMs, StallMs: r.stallMs, Preemptions: r.preemptions,
		ArrivalMono: c.mono(r.arrivalMs), ArrivalUnixNano: r.arrival.UnixNano(),
		KVPulledTokens: r.pulledTokens, KVBytesReceived: r.kvBytesIn}
	if r.remote != nil && r.transferToMs > 0 {
		t.TransferMs = r.transferToMs - r.transferFromMs
		t.TransferLateMs = r.transferLateMs
		t.TransferFromMono, t.TransferToMono = c.mono(r.transferFromMs), c.mono(r.transferToMs)
	}
	if r.scheduled {
		t.QueueMs = r.scheduledMs - r.readyMs
		t.ScheduledMs = r.scheduledMs
		t.ScheduledMono = c.mono(r.scheduledMs)
	}
	if r.output > 0 {
		t.PrefillMs = r.firstMs - r.scheduledMs
		t.DecodeMs = r.lastMs - r.firstMs
		t.TTFTMs = r.firstMs - r.arrivalMs
		t.E2EMs = r.lastMs - r.arrivalMs
		t.FirstTokenMono, t.FinishMono = c.mono(r.firstMs), c.mono(r.lastMs)
	}
	return t
}

func (e *engine) updateGauges() {
	e.metrics.running.Set(float64(len(e.running)))
	e.metrics.waiting.Set(float64(len(e.waiting) + len(e.pending)))
	e.metrics.kvUsage.Set(e.kv.usage())
}

func (e *engine) shutdown() {
	for _, q := range [][]*request{e.running, e.waiting, e.pending} {
		for _, r := range q {
			if !r.finished {
				e.finish(r, "abort", errors.New("engine shut down"))
			}
		}
	}
	e.running, e.waiting, e.pending = nil, nil, nil
}
