package emulator

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Virtual time: the engine above (scheduler, KV cache with prefix hashing
// and LRU eviction, preemption, cost profile, the P/D handoff) driven by a
// discrete-event loop instead of the wall clock. A step ends at its
// modelled end exactly; a request reaches its engine at the instant the
// workload says; the proxy's hops and the client cost nothing. One run is
// a pure function of its inputs: no goroutine, socket or clock is read.
//
// The wall-time server and this loop share every decision the engine
// makes. What differs is only what happens between decisions: where run
// sleeps until a step's end (taking in messages meanwhile, which join the
// next step), Simulate jumps to the earliest pending event, handling every
// event of one instant before the engine schedules again, as run's drain
// does for messages that are already queued.

// VirtualRequest is one request of a virtual run: its prompt, its output
// length (ignore_eos, as the replay client sends) and when the proxy
// receives it, in model milliseconds. Worker is the engine that serves it
// (colocated) or prefills it (disaggregated); Decode is the decode worker,
// or -1 for a colocated request. Routing is the caller's: a proxy's
// routing policies depend only on the request and arrival order.
type VirtualRequest struct {
	ID string
	// Prompt is given up to Simulate: a request's output tokens are
	// written after it, in its capacity beyond its length when there is
	// room for MaxTokens (a copy is made otherwise).
	Prompt []int
	// Render, when Prompt is nil, makes the prompt (PromptLen tokens) at
	// the request's arrival, and the simulation drops it when the request
	// has ended: a trace of 10^5 requests then holds the prompts of the
	// requests in flight, not all of them.
	Render    func() []int
	PromptLen int
	MaxTokens int
	ArrivalMs float64
	Worker    int
	Decode    int
	// Shared, when not empty, names the first SharedLen tokens, which
	// every request with the same Shared string begins with (a session's
	// code prefix): its hashes are computed once per run, not once per
	// request. Only speed depends on it.
	Shared    string
	SharedLen int
	// DecodeHopMs is the proxy's hop between the prefill leg's end and the
	// decode worker's receipt (disaggregated); 0, the default, makes the
	// hop free. DecodeAtMs, when later, is the decode worker's receipt
	// itself (a measured one; never before the prefill's end plus the
	// hop). A check or a calibration that replays a live run's own timing
	// sets them.
	DecodeHopMs, DecodeAtMs float64
}

// VirtualOutcome is what became of one VirtualRequest: the serving
// engine's result (the decode worker's, disaggregated) with the first and
// last token's model instants, and, disaggregated, the prefill leg's result.
type VirtualOutcome struct {
	ID        string
	ArrivalMs float64 // the proxy's receipt
	FirstMs   float64 // first output token sampled
	FinishMs  float64 // last output token sampled
	Result    Result
	Prefill   *Result
}

// RequestMetrics is the per-request metrics object the serving engine
// would return with the result (vLLM's semantics; see RequestMetrics).
func (o *VirtualOutcome) RequestMetrics() *RequestMetrics { return requestMetrics(&o.Result, 1) }

// Simulate runs reqs through engines configured by workers, in virtual
// time, and returns one outcome per request, indexed like reqs. Each
// Config is resolved as Start resolves it (profile, defaults, limits);
// TimeScale, hosts, ports, guard limits and traces are not read. Faults
// other than stall and slow-transfer are refused.
func Simulate(workers []Config, reqs []VirtualRequest) ([]VirtualOutcome, error) {
	return SimulateLoad(workers, reqs, ClosedLoop{From: len(reqs)})
}

// ClosedLoop is a closed-loop load over a run's requests from index From
// on: at most Concurrency of them in flight, as Concurrency clients that
// each send their next request when their last one ends (vllm bench
// serve --max-concurrency). The first Concurrency of them arrive at their
// own ArrivalMs; every later one arrives, in index order, at the instant
// an earlier one of them ends (its last token, or its failure), and its
// ArrivalMs is overwritten with that instant. Requests before From arrive
// at their ArrivalMs (open loop).
type ClosedLoop struct {
	From        int
	Concurrency int
	// GapMs is from an end to the arrival it releases (the client's
	// receipt of the last token, its next send and the HTTP hops); 0: at
	// the same instant.
	GapMs float64
}

// SimulateLoad is Simulate with the requests from load.From on sent in a
// closed loop. Outcomes' ArrivalMs are when each request arrived.
func SimulateLoad(workers []Config, reqs []VirtualRequest, load ClosedLoop) ([]VirtualOutcome, error) {
	if load.From < 0 || load.From > len(reqs) {
		return nil, fmt.Errorf("closed loop from request %d: want 0..%d", load.From, len(reqs))
	}
	if load.From < len(reqs) && load.Concurrency < 1 {
		return nil, fmt.Errorf("closed loop of concurrency %d: want at least 1", load.Concurrency)
	}
	if !(load.GapMs >= 0) || math.IsInf(load.GapMs, 0) {
		return nil, fmt.Errorf("closed loop gap %v ms: want a finite time >= 0", load.GapMs)
	}
	c := &vcluster{reqs: reqs, outcomes: make([]VirtualOutcome, len(reqs)),
		promptHash: make([]uint64, len(reqs)), hashed: make([]bool, len(reqs)),
		closedFrom: load.From, nextClosed: min(len(reqs), load.From+max(load.Concurrency, 0)), closedGapMs: load.GapMs}
	for i := range workers {
		w, err := newVWorker(c, i, workers[i])
		if err != nil {
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
		c.workers = append(c.workers, w)
	}
	for i, q := range reqs {
		if err := c.check(i, q); err != nil {
			return nil, err
		}
		if i < c.nextClosed {
			c.arrivals = append(c.arrivals, i)
		}
	}
	// Arrivals in time order, equal ones in request order; they come
	// before any other event of their instant.
	slices.SortStableFunc(c.arrivals, func(a, b int) int { return cmp.Compare(reqs[a].ArrivalMs, reqs[b].ArrivalMs) })
	if err := c.loop(); err != nil {
		return nil, err
	}
	return c.outcomes, nil
}

type evKind uint8

const (
	evArrive  evKind = iota // a request reaches its (first) worker
	evDecode                // the proxy forwards a finished prefill to its decode worker
	evStepEnd               // the worker's step in flight ends
	evLoaded                // a KV pull ended at the decode worker
	evRelease               // the prefill worker frees a pulled request's blocks
	evIntake                // the engine core takes a request in, the profile's frontend_ms after its receipt
)

type event struct {
	at     float64
	seq    uint64
	kind   evKind
	worker int
	req    int // index into the run's requests
	r      *request
	// evLoaded
	fromMs, endMs, model float64
	bytes                int64
	// evDecode
	params *KVTransferParams
	id     string
}

// eventHeap is a binary min-heap of events by (at, seq), typed so that
// pushing and popping allocate nothing.
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h *eventHeap) push(ev event) {
	*h = append(*h, ev)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = event{}
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r := l + 1; r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

type vcluster struct {
	workers  []*vworker
	events   eventHeap
	arrivals []int // request indices in arrival order; next is the first not yet arrived
	next     int
	seq      uint64
	now      float64
	reqs     []VirtualRequest
	outcomes []VirtualOutcome
	// index of each in-flight request (by engine request pointer) in reqs
	index map[*request]int
	dirty []bool
	err   error
	// memo holds each shared prefix's FNV state and block hashes, per
	// block size.
	memo map[memoKey]*prefixMemo
	// promptHash[i], once hashed[i], is request i's prompt hash: a decode
	// leg takes its prefill leg's.
	promptHash []uint64
	hashed     []bool
	// closed loop: requests from closedFrom on; nextClosed is the next
	// one to release when one of them ends
	closedFrom, nextClosed int
	closedGapMs            float64
}

type memoKey struct {
	shared    string
	blockSize int
}

type prefixMemo struct {
	fnv    uint64   // FNV-1a state after the prefix
	hashes []uint64 // chained hashes of its full blocks
}

type vworker struct {
	c    *vcluster
	i    int
	e    *engine
	busy bool
	step stepPlan
}

func newVWorker(c *vcluster, i int, cfg Config) (*vworker, error) {
	switch {
	case cfg.Faults.CrashAfter > 0, cfg.Faults.RefuseKV, cfg.Faults.CutAfter > 0:
		return nil, fmt.Errorf("faults other than stall and slow-transfer have no meaning in virtual time")
	}
	prof, blocks, err := cfg.resolveEngine()
	if err != nil {
		return nil, err
	}
	cfg.EngineID = fmt.Sprintf("virtual-%d", i)
	w := &vworker{c: c, i: i}
	w.e = &engine{cfg: &cfg, prof: prof, scale: 1, kv: newKVCache(blocks, cfg.BlockSize, !cfg.DisablePrefixCaching),
		clock: &clock{epoch: time.Unix(0, 0), scale: 1}, metrics: newMetrics(cfg.Model), holds: map[string]*hold{}, virt: w}
	c.dirty = append(c.dirty, false)
	return w, nil
}

// promptLen is the prompt's length, given or to be rendered.
func (q *VirtualRequest) promptLen() int {
	if q.Prompt == nil && q.Render != nil {
		return q.PromptLen
	}
	return len(q.Prompt)
}

func (c *vcluster) check(i int, q VirtualRequest) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("virtual request %d (%q): %s", i, q.ID, fmt.Sprintf(format, a...))
	}
	switch {
	case q.Worker < 0 || q.Worker >= len(c.workers):
		return bad("worker %d: want 0..%d", q.Worker, len(c.workers)-1)
	case q.promptLen() == 0 || q.MaxTokens < 1:
		return bad("want a prompt and max tokens >= 1")
	case math.IsNaN(q.ArrivalMs) || math.IsInf(q.ArrivalMs, 0) || q.ArrivalMs < 0:
		return bad("arrival %v ms: want a finite time >= 0", q.ArrivalMs)
	}
	first := c.workers[q.Worker].e.cfg
	if q.promptLen()+q.MaxTokens > first.MaxModelLen {
		return bad("%d prompt + %d output tokens exceed max-model-len %d", q.promptLen(), q.MaxTokens, first.MaxModelLen)
	}
	if q.Decode < 0 {
		if first.Role != RoleColocated {
			return bad("worker %d is a %s worker: a request without a decode worker needs a colocated one", q.Worker, first.Role)
		}
		return nil
	}
	if q.Decode >= len(c.workers) {
		return bad("decode worker %d: want 0..%d", q.Decode, len(c.workers)-1)
	}
	if first.Role != RolePrefill || c.workers[q.Decode].e.cfg.Role != RoleDecode {
		return bad("workers %d and %d are %s and %s: want prefill and decode", q.Worker, q.Decode, first.Role, c.workers[q.Decode].e.cfg.Role)
	}
	return nil
}

func (c *vcluster) push(ev event) {
	c.seq++
	ev.seq = c.seq
	c.events.push(ev)
}

// loop handles events in time order; after the last event of each
// instant, every worker that took something in schedules its next step.
func (c *vcluster) loop() error {
	c.index = make(map[*request]int, len(c.reqs))
	for {
		var ev event
		switch {
		case c.next < len(c.arrivals) && (len(c.events) == 0 || c.reqs[c.arrivals[c.next]].ArrivalMs <= c.events[0].at):
			i := c.arrivals[c.next]
			c.next++
			ev = event{at: c.reqs[i].ArrivalMs, kind: evArrive, worker: c.reqs[i].Worker, req: i}
		case len(c.events) > 0:
			ev = c.events.pop()
		default:
			return c.unfinished()
		}
		c.now = ev.at
		c.handle(ev)
		if c.err != nil {
			return c.err
		}
		if (c.next < len(c.arrivals) && c.reqs[c.arrivals[c.next]].ArrivalMs == c.now) ||
			(len(c.events) > 0 && c.events[0].at == c.now) {
			continue
		}
		for i, d := range c.dirty {
			if d {
				c.dirty[i] = false
				c.workers[i].kick()
			}
		}
	}
}

// unfinished is an error naming the first request that never finished.
func (c *vcluster) unfinished() error {
	for i, o := range c.outcomes {
		if o.Result.FinishReason == "" {
			return fmt.Errorf("virtual request %d (%q) never finished", i, o.ID)
		}
	}
	return nil
}

func (c *vcluster) handle(ev event) {
	w := c.workers[ev.worker]
	e := w.e
	switch ev.kind {
	case evArrive:
		q := &c.reqs[ev.req]
		var r *request
		if q.Decode >= 0 {
			r = c.newRequest(e, ev.req, 1) // the proxy's prefill leg: max_tokens 1
			r.remoteDecode = true
		} else {
			r = c.newRequest(e, ev.req, q.MaxTokens)
		}
		c.index[r] = ev.req
		c.outcomes[ev.req] = VirtualOutcome{ID: q.ID, ArrivalMs: q.ArrivalMs}
		c.intake(w, r)
	case evDecode:
		r := c.newRequest(e, ev.req, c.reqs[ev.req].MaxTokens)
		r.remote = ev.params
		c.index[r] = ev.req
		c.intake(w, r)
	case evIntake:
		e.handle(msg{kind: msgAdd, req: ev.r})
	case evStepEnd:
		end := ev.at
		e.complete(w.step, end)
		e.clockMs = end
		e.retryPending()
		w.busy = false
	case evLoaded:
		e.loaded(msg{kind: msgLoaded, req: ev.r, endMs: ev.endMs, fromMs: ev.fromMs, bytes: ev.bytes, model: ev.model})
	case evRelease:
		e.release(ev.id)
		e.retryPending()
	}
	c.dirty[ev.worker] = true
}

// intake hands r to its engine core, at once or frontend_ms later (as the
// server does after its receipt).
func (c *vcluster) intake(w *vworker, r *request) {
	if fe := w.e.prof.FrontendMs; fe > 0 {
		c.push(event{at: c.now + fe, kind: evIntake, worker: w.i, r: r})
		return
	}
	w.e.handle(msg{kind: msgAdd, req: r})
}

func (c *vcluster) newRequest(e *engine, i int, maxTokens int) *request {
	q := &c.reqs[i]
	if q.Prompt == nil && q.Render != nil {
		// Rendered once: a disaggregated request's decode leg reuses its
		// prefill leg's.
		if q.Prompt = q.Render(); len(q.Prompt) != q.PromptLen {
			panic(fmt.Sprintf("virtual request %q: Render made %d tokens, PromptLen says %d", q.ID, len(q.Prompt), q.PromptLen))
		}
	}
	r := &request{id: q.ID, prompt: q.Prompt, maxTokens: maxTokens, ignoreEOS: true, arrivalMs: c.now,
		arrival: time.Unix(0, int64(c.now*1e6)), seq: e.arrivals.Add(1)}
	// The output goes after the prompt, in place when the caller left room
	// (see VirtualRequest.Prompt). A prefill leg's one token and then its
	// decode leg's tokens use the same room: the decode leg begins after
	// the prefill leg has ended, and an ended request's tokens are never
	// read again.
	r.tokens = q.Prompt
	if cap(q.Prompt)-len(q.Prompt) < maxTokens {
		r.tokens = slices.Grow(q.Prompt[:len(q.Prompt):len(q.Prompt)], maxTokens)
	}
	if q.Shared == "" || q.SharedLen <= 0 || q.SharedLen > len(q.Prompt) {
		if !c.hashed[i] {
			c.promptHash[i], c.hashed[i] = hashTokens(0, q.Prompt), true
		}
		r.promptHash = c.promptHash[i]
		return r
	}
	// The same hashes as hashTokens and extendHashes would compute, the
	// shared prefix's taken from the memo.
	bs := e.kv.blockSize
	k := memoKey{q.Shared, bs}
	m := c.memo[k]
	if m == nil {
		pre := q.Prompt[:q.SharedLen]
		m = &prefixMemo{fnv: fnvTokens(0xcbf29ce484222325, pre)}
		var parent uint64
		for j := 0; j < len(pre)/bs; j++ {
			parent = hashTokens(parent, pre[j*bs:(j+1)*bs])
			m.hashes = append(m.hashes, parent)
		}
		if c.memo == nil {
			c.memo = map[memoKey]*prefixMemo{}
		}
		c.memo[k] = m
	}
	if !c.hashed[i] {
		c.promptHash[i], c.hashed[i] = mix(fnvTokens(m.fnv, q.Prompt[q.SharedLen:])), true
	}
	r.promptHash = c.promptHash[i]
	r.hashes = append(make([]uint64, 0, len(r.tokens)/bs+(maxTokens+bs-1)/bs+1), m.hashes...)
	return r
}

// kick starts the worker's next step if it is idle and has work.
func (w *vworker) kick() {
	if w.busy {
		return
	}
	e := w.e
	step, start := e.schedule()
	if len(step.plan) == 0 {
		return
	}
	e.entBuf = step.entries(e.entBuf)
	end := start + e.prof.StepMs(e.entBuf, e.cfg.EnforceEager) + step.stallMs
	w.busy, w.step = true, step
	w.c.push(event{at: end, kind: evStepEnd, worker: w.i})
}

// pull models the decode worker's KV pull from the prefill worker that
// holds r's blocks, as pullOnce and servePull do over the side channel:
// the bytes beyond the decode worker's local hit, moved in the prefill
// worker's TransferMs (times its slow-transfer fault), starting at the
// decode worker's receipt (or, for the exercise profile, at the prefill's
// end). The KV is usable at the modelled end; the prefill worker frees its
// blocks then, when the pull is acknowledged.
func (w *vworker) pull(r *request, from int) {
	c := w.c
	pre := c.workers[c.reqs[c.index[r]].Worker].e
	id := *r.remote.RemoteRequestID
	h, ok := pre.holds[id]
	if !ok {
		c.err = fmt.Errorf("virtual request %q: no held KV on prefill worker %d", id, c.reqs[c.index[r]].Worker)
		return
	}
	bytes := int64(h.promptLen-from) * int64(pre.prof.Model.KVBytesPerToken())
	model := pre.prof.TransferMs(bytes) * pre.cfg.faults.slowTransfer
	fromMs := r.transferFromMs
	if w.e.prof.Exercise != nil && fromMs == r.arrivalMs+w.e.prof.FrontendMs {
		fromMs = min(fromMs, h.readyMs)
	}
	end := fromMs + model
	at := max(end, c.now)
	c.push(event{at: at, kind: evLoaded, worker: w.i, r: r, fromMs: fromMs, endMs: end, bytes: bytes, model: model})
	c.push(event{at: at, kind: evRelease, worker: pre.virt.i, id: id})
}

// finished takes a request's end: a prefill leg goes on to its decode
// worker after the request's DecodeHopMs (0: at once); a serving engine's
// result is the request's outcome.
func (w *vworker) finished(r *request, res *Result) {
	c := w.c
	i, ok := c.index[r]
	if !ok {
		return
	}
	delete(c.index, r)
	q := c.reqs[i]
	o := &c.outcomes[i]
	if w.e.cfg.Role == RolePrefill {
		pr := *res
		o.Prefill = &pr
		if res.KVTransferParams == nil {
			c.err = fmt.Errorf("virtual request %q: prefill ended %q without KV for the decode worker", q.ID, res.FinishReason)
			return
		}
		c.push(event{at: max(c.now+max(q.DecodeHopMs, 0), q.DecodeAtMs), kind: evDecode, worker: q.Decode, req: i, params: res.KVTransferParams})
		return
	}
	o.Result = *res
	o.FirstMs, o.FinishMs = r.firstMs, r.lastMs
	if c.reqs[i].Render != nil {
		c.reqs[i].Prompt = nil // rendered: nothing reads it again
	}
	c.release(i)
}

// release sends the closed loop's next request when request i, one of the
// closed loop's, has ended.
func (c *vcluster) release(i int) {
	if i < c.closedFrom || c.nextClosed >= len(c.reqs) {
		return
	}
	k := c.nextClosed
	c.nextClosed++
	at := c.now + c.closedGapMs
	c.reqs[k].ArrivalMs = at
	c.push(event{at: at, kind: evArrive, worker: c.reqs[k].Worker, req: k})
}
