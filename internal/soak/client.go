//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Client-side outcomes of one request.
const (
	kindOK         = "ok"          // 200, every token chunk, then [DONE]
	kindShort      = "short"       // 200 and [DONE], but fewer token chunks than max_tokens
	kindErrorEvent = "error_event" // 200, then an SSE error event
	kindCut        = "cut"         // 200, but the stream ended without [DONE]
	kindTransport  = "transport"   // no response (connect/write/header error)
	// non-200 answers are "http_<status>"
)

// clientOutcome is what the load client saw of one request.
type clientOutcome struct {
	kind   string
	status int // 0 when no response came
}

func (o clientOutcome) ok() bool { return o.kind == kindOK }

// proxyOutcome is what the proxy's timeline says of one request.
type proxyOutcome struct {
	outcome string
	status  int
}

func (o proxyOutcome) ok() bool { return o.outcome == "success" || o.outcome == "fallback" }

// agrees says whether the client's view and the proxy's are the same
// outcome: both answered, or both failed with the status the client got.
func agrees(c clientOutcome, p proxyOutcome) bool {
	if c.ok() != p.ok() {
		return false
	}
	if c.status != 0 && c.status != p.status {
		return false
	}
	return true
}

// reconciler matches the client's outcomes with the proxy's timelines by
// X-Request-Id as both arrive, keeping only the unmatched ones, so its
// memory stays bounded however long the run.
type reconciler struct {
	mu          sync.Mutex
	client      map[string]clientOutcome
	proxy       map[string]proxyOutcome
	matrix      map[string]uint64 // "client kind / proxy outcome" -> count
	agree       uint64
	disagree    uint64
	duplicates  uint64 // timelines whose request id was already matched or pending
	disagreeEx  []string
	proxyByKind map[string]uint64 // timelines seen, by outcome
}

func newReconciler() *reconciler {
	return &reconciler{
		client: map[string]clientOutcome{}, proxy: map[string]proxyOutcome{},
		matrix: map[string]uint64{}, proxyByKind: map[string]uint64{},
	}
}

func (r *reconciler) match(id string, c clientOutcome, p proxyOutcome) {
	r.matrix[c.kind+" / "+p.outcome]++
	if agrees(c, p) {
		r.agree++
		return
	}
	r.disagree++
	if len(r.disagreeEx) < 20 {
		r.disagreeEx = append(r.disagreeEx, fmt.Sprintf("%s: client %s (status %d), proxy %s (status %d)", id, c.kind, c.status, p.outcome, p.status))
	}
}

func (r *reconciler) addClient(id string, c clientOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.proxy[id]; ok {
		delete(r.proxy, id)
		r.match(id, c, p)
		return
	}
	r.client[id] = c
}

func (r *reconciler) addProxy(id string, p proxyOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.proxyByKind[p.outcome]++
	if c, ok := r.client[id]; ok {
		delete(r.client, id)
		r.match(id, c, p)
		return
	}
	if _, dup := r.proxy[id]; dup {
		r.duplicates++
		return
	}
	r.proxy[id] = p
}

// pending returns the unmatched counts.
func (r *reconciler) pending() (clientOnly, proxyOnly int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.client), len(r.proxy)
}

// loadConfig is what the client sends.
type loadConfig struct {
	base      string // the proxy, http://host:port
	model     string
	prompts   []string
	maxTokens int
	streams   int
	runID     string
	timeout   time.Duration // one request's limit
}

// loadClient keeps exactly cfg.streams streaming requests in flight.
type loadClient struct {
	cfg   loadConfig
	hc    *http.Client
	rec   *reconciler
	seq   atomic.Uint64
	inFly atomic.Int64

	mu     sync.Mutex
	kinds  map[string]uint64
	durs   []time.Duration // of ok requests, for percentiles (reservoir)
	nDurs  uint64
	tokens uint64
}

func newLoadClient(cfg loadConfig, rec *reconciler) *loadClient {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.streams * 2,
		MaxIdleConnsPerHost: cfg.streams * 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &loadClient{cfg: cfg, hc: &http.Client{Transport: tr}, rec: rec, kinds: map[string]uint64{}, durs: make([]time.Duration, 0, maxDurSamples)}
}

// run starts cfg.streams loops (spread over ramp) and returns when stop is
// closed and every loop's last request has ended, or hard is cancelled.
func (c *loadClient) run(stop <-chan struct{}, hard context.Context, ramp time.Duration) {
	var wg sync.WaitGroup
	for i := range c.cfg.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ramp > 0 {
				select {
				case <-time.After(ramp * time.Duration(i) / time.Duration(c.cfg.streams)):
				case <-stop:
					return
				}
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.one(hard)
			}
		}()
	}
	wg.Wait()
}

// maxDurSamples bounds the duration reservoir; it is allocated up front so
// that it does not grow during the run.
const maxDurSamples = 100_000

func (c *loadClient) record(o clientOutcome, d time.Duration, tokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds[o.kind]++
	c.tokens += uint64(tokens)
	if o.kind == kindOK {
		c.nDurs++
		if len(c.durs) < maxDurSamples {
			c.durs = append(c.durs, d)
		} else if j := rand.Uint64N(c.nDurs); j < maxDurSamples { // reservoir sampling
			c.durs[j] = d
		}
	}
}

var (
	dataPrefix = []byte("data: ")
	doneEvent  = []byte("[DONE]")
	// An SSE error event: the proxy's {"error": ...} or an engine's
	// {"object": "error", ...}.
	errorPrefix = []byte(`{"error"`)
	errorObject = []byte(`"object":"error"`)
)

// one sends one streaming request and records its outcome.
func (c *loadClient) one(ctx context.Context) {
	seq := c.seq.Add(1)
	id := c.cfg.runID + "-" + strconv.FormatUint(seq, 10)
	prompt := c.cfg.prompts[int(seq)%len(c.cfg.prompts)]
	body, _ := json.Marshal(map[string]any{
		"model": c.cfg.model, "prompt": prompt, "max_tokens": c.cfg.maxTokens,
		"ignore_eos": true, "stream": true, "temperature": 0,
	})
	c.inFly.Add(1)
	defer c.inFly.Add(-1)
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	o, tokens := c.do(rctx, id, body)
	c.record(o, time.Since(start), tokens)
	c.rec.addClient(id, o)
}

func (c *loadClient) do(ctx context.Context, id string, body []byte) (clientOutcome, int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return clientOutcome{kind: kindTransport}, 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := c.hc.Do(req)
	if err != nil {
		return clientOutcome{kind: kindTransport}, 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return clientOutcome{kind: "http_" + strconv.Itoa(resp.StatusCode), status: resp.StatusCode}, 0
	}
	o := clientOutcome{kind: kindCut, status: resp.StatusCode}
	br := bufio.NewReaderSize(resp.Body, 4096)
	tokens, done, errEvent := 0, false, false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && bytes.HasPrefix(line, dataPrefix) {
			payload := bytes.TrimSpace(line[len(dataPrefix):])
			switch {
			case bytes.Equal(payload, doneEvent):
				done = true
			case bytes.HasPrefix(payload, errorPrefix) || bytes.Contains(payload, errorObject):
				errEvent = true
			default:
				tokens++
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			// EOF after [DONE] is the normal end; read to EOF so the
			// connection is reused.
			break
		}
	}
	switch {
	case errEvent:
		o.kind = kindErrorEvent
	case !done:
		o.kind = kindCut
	case tokens < c.cfg.maxTokens:
		o.kind = kindShort
	default:
		o.kind = kindOK
	}
	return o, tokens
}

func (c *loadClient) snapshot() (kinds map[string]uint64, started uint64, inFlight int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kinds = map[string]uint64{}
	for k, v := range c.kinds {
		kinds[k] = v
	}
	return kinds, c.seq.Load(), c.inFly.Load()
}

// timelinePoller reads the proxy's GET /hone/timeline with ?since= and feeds
// the reconciler.
type timelinePoller struct {
	base    string
	rec     *reconciler
	cursor  uint64
	seen    uint64
	dropped uint64
	pages   uint64
	counts  map[string]uint64 // the proxy's outcome counters, from the last page
}

type timelinePage struct {
	Timelines []struct {
		Seq       uint64 `json:"seq"`
		RequestID string `json:"request_id"`
		Outcome   string `json:"outcome"`
		Status    int    `json:"status"`
	} `json:"timelines"`
	Next    uint64            `json:"next"`
	Dropped uint64            `json:"dropped"`
	Counts  map[string]uint64 `json:"counts"`
}

// maxTimelinePage is the proxy's page cap (proxy.MaxTimelinePage); the
// poller pages with ?since= until a page is short.
const maxTimelinePage = 10_000

// poll reads every timeline finished since the last poll.
func (t *timelinePoller) poll(ctx context.Context) error {
	for {
		b, err := getBody(ctx, t.base+"/hone/timeline?since="+strconv.FormatUint(t.cursor, 10))
		if err != nil {
			return err
		}
		var pg timelinePage
		if err := json.Unmarshal(b, &pg); err != nil {
			return fmt.Errorf("timeline page: %w", err)
		}
		t.pages++
		t.dropped += pg.Dropped
		t.counts = pg.Counts
		for _, tl := range pg.Timelines {
			t.seen++
			t.rec.addProxy(tl.RequestID, proxyOutcome{outcome: tl.Outcome, status: tl.Status})
		}
		t.cursor = pg.Next
		if len(pg.Timelines) < maxTimelinePage {
			return nil
		}
	}
}

func sumCounts(m map[string]uint64) uint64 {
	var s uint64
	for _, v := range m {
		s += v
	}
	return s
}
