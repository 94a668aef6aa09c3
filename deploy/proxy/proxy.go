package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/guard"
)

// Proxy routes requests to a deployment's workers.
type Proxy struct {
	cfg     Config
	log     *slog.Logger
	client  *http.Client // upstream legs; timeouts come from contexts
	health  *http.Client
	ws      atomic.Pointer[workerSet] // the workers now; SetWorkers swaps it
	wsMu    sync.Mutex                // serializes SetWorkers
	tl      *timelines
	m       *metrics
	mux     *http.ServeMux
	guard   *guard.Guard
	handler http.Handler  // mux under guard's body limits
	pages   chan struct{} // GET /hone/timeline pages being encoded
	idBase  string
	idSeq   atomic.Uint64
	healthy atomic.Bool // the health loop runs
	// eng are the workers' engine's facts: its request id header, the
	// response heads passed on, its cache-reset route (Config.Engine).
	eng engine.Facts
}

// New validates cfg, fills its defaults and builds a proxy. Workers start in
// rotation; Run's health checks take them out and back in.
func New(cfg Config, log *slog.Logger) (*Proxy, error) {
	if err := cfg.fill(); err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tr := &http.Transport{
		Proxy:               nil, // never through an HTTP(S)_PROXY: workers are local
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		// Below the emulator's keep-alive idle timeout (guard's 60 s), so
		// the proxy drops an idle worker connection before the worker does.
		IdleConnTimeout:    50 * time.Second,
		DisableCompression: true,
		// A coding prompt's body, and the first streamed chunk that echoes
		// its ids, are tens of KiB: one syscall each, not one per 4 KiB.
		ReadBufferSize:  64 << 10,
		WriteBufferSize: 64 << 10,
	}
	g, err := guard.New(cfg.Limits)
	if err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	p := &Proxy{
		guard:  g,
		pages:  make(chan struct{}, 4),
		cfg:    cfg,
		log:    log,
		client: &http.Client{Transport: tr},
		health: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, DisableCompression: true}},
		tl:     newTimelines(cfg.TimelineCapacity, cfg.TimelineBytes),
		m:      newMetrics(),
		mux:    http.NewServeMux(),
		idBase: hex.EncodeToString(rnd[:]),
		eng:    engine.FactsOf(cfg.engineName()),
	}
	p.ws.Store(p.buildSet(nil, cfg.Workers))
	p.mux.HandleFunc("POST /v1/completions", p.serveGenerate)
	p.mux.HandleFunc("POST /v1/chat/completions", p.serveGenerate)
	p.mux.HandleFunc("GET /health", p.serveHealth)
	p.mux.HandleFunc("GET /metrics", p.serveMetrics)
	p.mux.HandleFunc("GET /hone/metrics", p.serveOwnMetrics)
	p.mux.HandleFunc("GET /hone/timeline", p.serveTimeline)
	p.mux.HandleFunc("GET /hone/workers", p.serveWorkers)
	if p.eng.Cache.ResetRoute != "" {
		p.mux.HandleFunc(p.eng.Cache.ResetRoute, p.serveResetPrefixCache)
	}
	p.mux.HandleFunc("/", p.serveForward)
	p.handler = g.Handler(p.mux)
	return p, nil
}

// Handler serves the proxy's routes, every request body under the size
// limit and the body deadline.
func (p *Proxy) Handler() http.Handler { return p.handler }

// Config is the proxy's configuration with defaults filled in.
func (p *Proxy) Config() Config { return p.cfg }

// Run checks worker health until ctx ends.
func (p *Proxy) Run(ctx context.Context) {
	p.healthy.Store(true)
	p.healthLoop(ctx)
}

// ListenAndServe serves on cfg.Listen and checks health until ctx ends, then
// shuts down, letting in-flight requests finish for up to grace. The
// server has cfg's limits: header, body and idle timeouts, header and body
// sizes, and at most MaxConnections clients at once.
func (p *Proxy) ListenAndServe(ctx context.Context, ready func(addr string), grace time.Duration) error {
	l, err := net.Listen("tcp", p.cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy listen: %w", err)
	}
	srv := p.guard.Server(p.handler)
	ln := p.guard.Listener(l, srv)
	defer p.guard.LimitHeap()()
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go p.Run(hctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}

// Counts is the number of finished requests per outcome.
type Counts map[string]uint64

// Timelines returns finished requests' timelines with Seq > after (oldest
// first, at most limit, all when limit <= 0) and the cursor for the next
// call.
func (p *Proxy) Timelines(after uint64, limit int) ([]Timeline, uint64) {
	out, cursor, _ := p.tl.since(after, limit)
	return out, cursor
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

var (
	errLegTimeout = errors.New("leg timed out")
	errStalled    = errors.New("stream stalled")
)

// request is one client request in flight.
type request struct {
	tl      Timeline
	path    string
	fields  map[string]json.RawMessage
	body    []byte
	key     uint64
	haveKey bool
	header  http.Header // headers to forward upstream
}

func (p *Proxy) newRequestID() string {
	return "hone-" + p.idBase + "-" + strconv.FormatUint(p.idSeq.Add(1), 10)
}

// forwardHeaders are passed to workers; the rest are the proxy's business.
var forwardHeaders = []string{"Authorization", "Traceparent", "Tracestate"}

func (p *Proxy) serveGenerate(w http.ResponseWriter, r *http.Request) {
	p.m.inFlight.Inc()
	defer p.m.inFlight.Dec()
	rq := &request{path: r.URL.Path, header: http.Header{}}
	rq.tl = Timeline{Path: r.URL.Path, Received: now()}
	rq.tl.RequestID = r.Header.Get(p.eng.HTTP.RequestIDHeader)
	if rq.tl.RequestID == "" {
		rq.tl.RequestID = p.newRequestID()
	}
	defer p.finish(&rq.tl)
	for _, h := range forwardHeaders {
		if v := r.Header.Get(h); v != "" {
			rq.header.Set(h, v)
		}
	}
	// The body, and the copies of it the legs send, are held to the end:
	// they count against the body memory budget until then.
	body, release, lerr := p.guard.ReadBodyDecoded(w, r, p.bodyCopies())
	defer release()
	if lerr != nil {
		p.clientError(w, &rq.tl, lerr.Status, OutcomeFailed, lerr.Message)
		return
	}
	rq.body = body
	var err error
	if rq.fields, err = splitObject(body); err != nil {
		p.clientError(w, &rq.tl, http.StatusBadRequest, OutcomeFailed, err.Error())
		return
	}
	if p.cfg.Routing == SessionAffinity {
		rq.key, rq.haveKey = affinityKey(r.Header.Get(p.cfg.SessionHeader), rq.fields, p.cfg.AffinityTokens)
	}
	if p.cfg.Mode == ModeColocated {
		b := p.set().pools[RoleColocated].pick(rq.key, rq.haveKey, nil)
		if b == nil {
			p.clientError(w, &rq.tl, http.StatusServiceUnavailable, OutcomeFailed, "no colocated worker")
			return
		}
		p.m.overhead.Observe(now().Sub(rq.tl.Received).Seconds())
		p.stream(w, r, rq, b, body, rq.tl.RequestID)
		return
	}
	p.disaggregated(w, r, rq)
}

// bodyCopies is how many more objects of a request body's size the proxy
// holds beside it while it serves the request: none colocated (the fields
// are slices of the body, and the body goes upstream as it is); two
// disaggregated (the prefill leg's body, and the decode leg's, spliced or
// re-encoded).
func (p *Proxy) bodyCopies() int {
	if p.cfg.Mode == ModeDisaggregated {
		return 2
	}
	return 0
}

// disaggregated runs the NIXL two-leg protocol with retry and fallback.
func (p *Proxy) disaggregated(w http.ResponseWriter, r *http.Request, rq *request) {
	set := p.set()
	dec := set.pools[RoleDecode].pick(rq.key, rq.haveKey, nil)
	if dec == nil {
		p.clientError(w, &rq.tl, http.StatusServiceUnavailable, OutcomeFailed, "no decode worker")
		return
	}
	prefillBody, err := prefillRequest(rq.fields)
	if err != nil {
		p.clientError(w, &rq.tl, http.StatusBadRequest, OutcomeFailed, err.Error())
		return
	}
	var (
		params  json.RawMessage
		tried   []*backend
		pre     *backend
		spent   time.Duration // in prefill legs, excluded from the proxy's own time
		reqID   = rq.tl.RequestID
		p2p     = p.cfg.Connector == P2pNcclConnector
		prefOK  bool
		attempt int
	)
	for attempt = 0; attempt < 2; attempt++ {
		b := set.pools[RolePrefill].pick(rq.key, rq.haveKey, tried)
		if b == nil {
			break
		}
		tried = append(tried, b)
		if attempt > 0 {
			rq.tl.Retries++
			p.m.retries.Inc()
		}
		id := reqID
		if p2p {
			id = p2pRequestID(b.KVAddr, dec.KVAddr, reqID)
		}
		legStart := time.Now()
		leg, got, status, errBody := p.prefillLeg(r.Context(), b, rq, prefillBody, id)
		spent += time.Since(legStart)
		rq.tl.Prefill = append(rq.tl.Prefill, leg)
		if r.Context().Err() != nil {
			p.clientGone(&rq.tl)
			return
		}
		if status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests {
			// The request itself is bad: another worker would say the same.
			rq.tl.Status = status
			rq.tl.Outcome = OutcomeFailed
			rq.tl.Error = "prefill worker " + b.Name + " rejected the request"
			w.Header().Set(p.eng.HTTP.RequestIDHeader, reqID)
			writeRaw(w, status, errBody)
			s := now()
			rq.tl.FirstByte, rq.tl.LastByte = &s, &s
			return
		}
		if leg.Error == "" && (p2p || got != nil) {
			params, pre, prefOK = got, b, true
			p.m.prefill.Observe(leg.Answered.Sub(leg.Sent).Seconds())
			break
		}
	}
	id := reqID
	fields := rq.fields
	if prefOK {
		if p2p {
			id = p2pRequestID(pre.KVAddr, dec.KVAddr, reqID)
		} else {
			fields = withField(fields, "kv_transfer_params", params)
		}
	} else if p2p {
		// No fallback for P2pNcclConnector: its decode worker is a
		// kv_consumer that always waits for the whole prompt's KV
		// (p2p_nccl_engine.py recv_tensor blocks), so a decode-side
		// prefill would stall that worker and every request behind it.
		p.m.overhead.Observe((now().Sub(rq.tl.Received) - spent).Seconds())
		p.clientError(w, &rq.tl, http.StatusBadGateway, OutcomeFailed,
			fmt.Sprintf("prefill failed on %d worker(s) tried; P2pNcclConnector has no decode-side fallback (its decode worker would wait for KV that never comes)", len(tried)))
		return
	} else {
		// Declared fallback: the decode worker prefills locally.
		rq.tl.Error = "prefill failed; decode-side prefill"
		if _, ok := fields["kv_transfer_params"]; ok {
			fields = withField(fields, "kv_transfer_params", nil)
		}
	}
	body := rq.body
	switch {
	case prefOK && !p2p && len(fields) == len(rq.fields)+1:
		// The client sent no kv_transfer_params: splice them in rather than
		// re-encode a prompt of thousands of tokens.
		body = spliceField(rq.body, "kv_transfer_params", params)
	case len(fields) != len(rq.fields) || prefOK && !p2p:
		body = encodeFields(fields)
	}
	p.m.overhead.Observe((now().Sub(rq.tl.Received) - spent).Seconds())
	p.stream(w, r, rq, dec, body, id)
	if !prefOK && rq.tl.Outcome == OutcomeSuccess {
		rq.tl.Outcome = OutcomeFallback
	}
}

// p2pRequestID spells the request id vLLM's P2pNcclConnector parses to find
// its peer (disagg_proxy_p2p_nccl_xpyd.py).
func p2pRequestID(prefillKV, decodeKV, id string) string {
	if prefillKV == "" {
		return id
	}
	return "___prefill_addr_" + prefillKV + "___decode_addr_" + decodeKV + "_" + id
}

// withField returns a copy of f with key set to v (removed when v is nil).
func withField(f map[string]json.RawMessage, key string, v json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(f)+1)
	for k, x := range f {
		out[k] = x
	}
	if v == nil {
		delete(out, key)
	} else {
		out[key] = v
	}
	return out
}

var (
	rawFalse     = json.RawMessage("false")
	rawOne       = json.RawMessage("1")
	remoteDecode = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
)

// prefillRequest is the prefill leg's body: the original with stream false,
// max_tokens 1, min_tokens and stream_options removed, and
// kv_transfer_params asking for a remote decode.
func prefillRequest(f map[string]json.RawMessage) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(f)+3)
	for k, v := range f {
		switch k {
		// return_token_ids would have the prefill worker echo the whole
		// prompt's ids (tens of KiB for a coding prompt) in an answer of
		// which the proxy keeps only kv_transfer_params.
		// min_tokens and min_completion_tokens conflict with max_tokens 1
		// (vLLM's own disaggregation proxies drop both).
		case "min_tokens", "min_completion_tokens", "stream_options", "return_token_ids":
			continue
		}
		out[k] = v
	}
	out["stream"] = rawFalse
	out["max_tokens"] = rawOne
	if _, ok := f["max_completion_tokens"]; ok {
		out["max_completion_tokens"] = rawOne
	}
	out["kv_transfer_params"] = remoteDecode
	return encodeFields(out), nil
}

// encodeFields writes a JSON object from already-valid raw values (they came
// out of json.Unmarshal or are constants), without json.Marshal's second
// validation pass over a long prompt.
func encodeFields(f map[string]json.RawMessage) []byte {
	n := 2
	for k, v := range f {
		n += len(k) + len(v) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	first := true
	for k, v := range f {
		if !first {
			b = append(b, ',')
		}
		first = false
		kb, _ := json.Marshal(k)
		b = append(b, kb...)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}')
}

// spliceField returns body (a JSON object lacking key) with key: v added
// first.
func spliceField(body []byte, key string, v json.RawMessage) []byte {
	i := bytes.IndexByte(body, '{')
	kb, _ := json.Marshal(key)
	out := make([]byte, 0, len(body)+len(kb)+len(v)+2)
	out = append(out, body[:i+1]...)
	out = append(out, kb...)
	out = append(out, ':')
	out = append(out, v...)
	rest := bytes.TrimLeft(body[i+1:], " \t\r\n")
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// prefillLeg sends the prefill request and reads the whole reply. params is
// the reply's kv_transfer_params (nil when absent or null).
func (p *Proxy) prefillLeg(ctx context.Context, b *backend, rq *request, body []byte, id string) (leg Leg, params json.RawMessage, status int, errBody []byte) {
	leg = Leg{Worker: b.Name}
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.PrefillTimeout, errLegTimeout)
	defer cancel()
	req, err := p.legRequest(ctx, b, rq, body, id)
	if err != nil {
		leg.Error = err.Error()
		return
	}
	leg.Sent = now()
	resp, err := p.client.Do(req)
	if err != nil {
		leg.Error = p.legError("prefill", b, ctx, err)
		return
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	leg.Status = status
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	a := now()
	leg.Answered = &a
	if err != nil {
		leg.Error = p.legError("prefill", b, ctx, err)
		return
	}
	if status != http.StatusOK {
		leg.Error = "status " + strconv.Itoa(status)
		p.m.legFails.WithLabelValues("prefill", "status").Inc()
		return leg, nil, status, data
	}
	var reply struct {
		KV      json.RawMessage `json:"kv_transfer_params"`
		Metrics json.RawMessage `json:"metrics"`
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		leg.Error = "reply is not JSON"
		p.m.legFails.WithLabelValues("prefill", "malformed").Inc()
		return
	}
	if len(reply.Metrics) > 0 && reply.Metrics[0] == '{' {
		leg.EngineMetrics = reply.Metrics
	}
	if len(reply.KV) == 0 || string(reply.KV) == "null" || reply.KV[0] != '{' {
		if p.cfg.Connector != P2pNcclConnector {
			leg.Error = "no kv_transfer_params in the reply"
			p.m.legFails.WithLabelValues("prefill", "no_params").Inc()
		}
		return leg, nil, status, nil
	}
	return leg, reply.KV, status, nil
}

// legRequest is one leg's upstream request: the client's path and
// headers, a JSON body and the request's id, to worker b.
func (p *Proxy) legRequest(ctx context.Context, b *backend, rq *request, body []byte, id string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL+rq.path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = rq.header.Clone()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(p.eng.HTTP.RequestIDHeader, id)
	return req, nil
}

// legError classifies an upstream error, counts it, and takes a worker that
// refused the connection out of rotation at once.
func (p *Proxy) legError(leg string, b *backend, ctx context.Context, err error) string {
	switch {
	case errors.Is(context.Cause(ctx), errLegTimeout):
		p.m.legFails.WithLabelValues(leg, "timeout").Inc()
		return "timeout"
	case errors.Is(context.Cause(ctx), errStalled):
		p.m.legFails.WithLabelValues(leg, "stalled").Inc()
		return "stream stalled"
	case ctx.Err() != nil:
		return "client went away"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		p.setUp(b, false, "connection refused")
		p.m.legFails.WithLabelValues(leg, "connect").Inc()
		return "connect: " + oe.Err.Error()
	}
	p.m.legFails.WithLabelValues(leg, "io").Inc()
	return err.Error()
}

// stream sends the streaming leg (the colocated request, or disaggregated
// decode) and passes its answer through unchanged, flushing as bytes come.
// The response headers must come within DecodeTimeout, and the stream may be
// silent for at most StreamIdleTimeout.
func (p *Proxy) stream(w http.ResponseWriter, r *http.Request, rq *request, b *backend, body []byte, id string) {
	tl := &rq.tl
	if b == nil {
		p.clientError(w, tl, http.StatusServiceUnavailable, OutcomeFailed, "no worker to send to")
		return
	}
	leg := &Leg{Worker: b.Name}
	tl.Decode = leg
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	timer := time.AfterFunc(p.cfg.DecodeTimeout, func() { cancel(errLegTimeout) })
	defer timer.Stop()
	resp := p.sendStream(ctx, w, r, rq, b, leg, body, id)
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	a := now()
	leg.Answered = &a
	leg.Status = resp.StatusCode
	timer.Stop()
	x := &relay{p: p, w: w, r: r, ctx: ctx, resp: resp, b: b, tl: tl, leg: leg, idle: p.cfg.StreamIdleTimeout}
	x.timer = time.AfterFunc(x.idle, func() { cancel(errStalled) })

	h := w.Header()
	for _, k := range p.eng.HTTP.ResponseHeads {
		if v := resp.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	h.Set(p.eng.HTTP.RequestIDHeader, tl.RequestID)
	w.WriteHeader(resp.StatusCode)
	tl.Status = resp.StatusCode
	if isEventStream(resp.Header) {
		x.ev = new(eventWatch)
	}
	if x.copy() {
		p.streamOutcome(tl, resp, x.ev, b)
	}
}

// sendStream sends the streaming leg to b and returns the response, or nil
// when none came (the timeline and the client's answer then written).
func (p *Proxy) sendStream(ctx context.Context, w http.ResponseWriter, r *http.Request, rq *request, b *backend, leg *Leg,
	body []byte, id string) *http.Response {
	tl := &rq.tl
	req, err := p.legRequest(ctx, b, rq, body, id)
	if err != nil {
		p.clientError(w, tl, http.StatusInternalServerError, OutcomeFailed, err.Error())
		return nil
	}
	leg.Sent = now()
	resp, err := p.client.Do(req)
	if err != nil {
		leg.Error = p.legError("decode", b, ctx, err)
		switch {
		case r.Context().Err() != nil:
			p.clientGone(tl)
		case errors.Is(context.Cause(ctx), errLegTimeout):
			p.clientError(w, tl, http.StatusGatewayTimeout, OutcomeTimeout, "worker "+b.Name+" sent no response within "+p.cfg.DecodeTimeout.String())
		default:
			p.clientError(w, tl, http.StatusBadGateway, OutcomeFailed, "worker "+b.Name+": "+leg.Error)
		}
		return nil
	}
	return resp
}

// relay passes a streaming leg's answer to the client.
type relay struct {
	p     *Proxy
	w     http.ResponseWriter
	r     *http.Request   // the client's
	ctx   context.Context // the leg's
	resp  *http.Response
	b     *backend
	tl    *Timeline
	leg   *Leg
	timer *time.Timer // the stream's idle timer
	idle  time.Duration
	ev    *eventWatch // an event stream's, nil for other bodies
	sent  int64       // body bytes written to the client
}

// delivered says whether the client has been sent the whole answer: an
// event stream's [DONE], or a body's Content-Length in bytes. From then on
// the client may close whenever it likes, and whatever the worker does
// after it (end, stall, break) changes nothing the client saw.
func (x *relay) delivered() bool {
	if x.ev != nil {
		return x.ev.done
	}
	return x.resp.ContentLength >= 0 && x.sent == x.resp.ContentLength
}

// copy passes the body through, flushing as bytes come. It returns false
// when the request ended here (the client gone, or the stream broken
// before the answer was whole), its timeline written.
func (x *relay) copy() bool {
	rc := http.NewResponseController(x.w)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	first := true
	for {
		n, rerr := x.resp.Body.Read(buf)
		if n > 0 {
			x.timer.Reset(x.idle)
			_, werr := x.w.Write(buf[:n])
			if werr == nil {
				if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
					werr = ferr
				}
			}
			if werr != nil {
				if x.delivered() {
					return true // the client left after its answer; only trailing bytes are lost
				}
				x.p.clientGone(x.tl)
				return false
			}
			x.sent += int64(n)
			if x.ev != nil {
				x.ev.write(buf[:n])
			}
			s := now()
			if first {
				first = false
				fb := s
				x.tl.FirstByte = &fb
			}
			x.tl.LastByte = &s
		}
		if rerr == io.EOF {
			return true
		}
		if rerr != nil {
			return x.readFailed(rerr)
		}
	}
}

// readFailed handles a failed read of the worker's answer: it returns
// true when the answer was whole all the same.
func (x *relay) readFailed(rerr error) bool {
	tl, leg, name := x.tl, x.leg, x.b.Name
	if x.delivered() {
		// A client that closes after [DONE] cancels this leg: that is
		// no fault of the worker's. Anything else is, but the answer
		// was whole.
		if x.r.Context().Err() == nil {
			leg.Error = x.p.legError("decode", x.b, x.ctx, rerr) + " (after the answer was delivered)"
		}
		return true
	}
	leg.Error = x.p.legError("decode", x.b, x.ctx, rerr)
	switch {
	case x.r.Context().Err() != nil:
		x.p.clientGone(tl)
	case errors.Is(context.Cause(x.ctx), errStalled):
		tl.Outcome, tl.Error = OutcomeTimeout, "worker "+name+" was silent for "+x.idle.String()
		x.p.streamError(x.w, x.resp, tl.Error)
	default:
		tl.Outcome, tl.Error = OutcomeFailed, "worker "+name+": "+leg.Error
		x.p.streamError(x.w, x.resp, tl.Error)
	}
	return false
}

// streamOutcome judges a streaming leg passed through whole: a status other
// than 200, or an error event, fails the request.
func (p *Proxy) streamOutcome(tl *Timeline, resp *http.Response, ev *eventWatch, b *backend) {
	if resp.StatusCode != http.StatusOK {
		tl.Outcome = OutcomeFailed
		if tl.Error == "" {
			tl.Error = "worker " + b.Name + " answered " + strconv.Itoa(resp.StatusCode)
		} else {
			tl.Error += "; worker " + b.Name + " answered " + strconv.Itoa(resp.StatusCode)
		}
		p.m.legFails.WithLabelValues("decode", "status").Inc()
		return
	}
	if ev != nil && ev.errEvent {
		// The client reads an error event as a failed request, [DONE] or not.
		tl.Outcome = OutcomeFailed
		msg := "worker " + b.Name + " sent an error event"
		if tl.Error == "" {
			tl.Error = msg
		} else {
			tl.Error += "; " + msg
		}
		p.m.legFails.WithLabelValues("decode", "error_event").Inc()
		return
	}
	tl.Outcome = OutcomeSuccess
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "text/event-stream")
}

// streamError ends a response whose headers are already sent: an SSE error
// event for streams (no [DONE], so clients see it was cut), nothing more for
// other bodies.
func (p *Proxy) streamError(w http.ResponseWriter, resp *http.Response, msg string) {
	if !isEventStream(resp.Header) {
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "hone_proxy_error", "code": http.StatusBadGateway}})
	w.Write([]byte("data: "))
	w.Write(b)
	w.Write([]byte("\n\n"))
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// clientError answers with an OpenAI-style JSON error.
func (p *Proxy) clientError(w http.ResponseWriter, tl *Timeline, status int, outcome, msg string) {
	tl.Outcome, tl.Status = outcome, status
	if tl.Error == "" {
		tl.Error = msg
	} else {
		tl.Error += "; " + msg
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "hone_proxy_error", "code": status}})
	w.Header().Set(p.eng.HTTP.RequestIDHeader, tl.RequestID)
	writeRaw(w, status, b)
	s := now()
	tl.FirstByte, tl.LastByte = &s, &s
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// clientGone records a request whose client left: a failure, since no
// answer was delivered.
func (p *Proxy) clientGone(tl *Timeline) {
	tl.Outcome = OutcomeFailed
	if tl.Status == 0 {
		tl.Status = 499
	}
	if tl.Error == "" {
		tl.Error = "client went away"
	} else {
		tl.Error += "; client went away"
	}
}

// finish stores the timeline and counts its outcome.
func (p *Proxy) finish(tl *Timeline) {
	if tl.Outcome == "" {
		tl.Outcome = OutcomeFailed
		tl.Error = "proxy bug: request ended without an outcome"
	}
	p.m.requests.WithLabelValues(tl.Outcome).Inc()
	if tl.FirstByte != nil {
		p.m.ttfb.Observe(tl.FirstByte.Sub(tl.Received).Seconds())
	}
	if tl.LastByte != nil {
		p.m.duration.Observe(tl.LastByte.Sub(tl.Received).Seconds())
	}
	p.tl.add(tl)
}
