package proxy

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// backend is a worker and its health.
type backend struct {
	Worker
	seed  uint64 // the worker's rendezvous-hash identity
	up    atomic.Bool
	fails int // consecutive failed health checks; health loop only
}

// pool is one role's workers.
type pool struct {
	backends []*backend
	rr       atomic.Uint64
}

// pick chooses a worker: by rendezvous hashing of key when affinity is on
// and a key exists (a worker leaving moves only its own sessions), otherwise
// round-robin. Workers out of rotation are skipped while any is in; exclude
// lists workers already tried.
func (p *pool) pick(key uint64, haveKey bool, exclude []*backend) *backend {
	if p == nil {
		return nil
	}
	var cand [16]*backend
	list := cand[:0]
	for _, b := range p.backends {
		if b.up.Load() && !contains(exclude, b) {
			list = append(list, b)
		}
	}
	if len(list) == 0 { // health may be stale: try the rest rather than refuse
		for _, b := range p.backends {
			if !contains(exclude, b) {
				list = append(list, b)
			}
		}
	}
	if len(list) == 0 {
		return nil
	}
	if !haveKey {
		return list[int(p.rr.Add(1)-1)%len(list)]
	}
	best, bestScore := list[0], uint64(0)
	for _, b := range list {
		if s := mix64(key ^ b.seed); s >= bestScore {
			best, bestScore = b, s
		}
	}
	return best
}

// workerSeed is a worker's rendezvous-hash identity, from its name.
func workerSeed(name string) uint64 { return mix64(hashString("w:" + name)) }

// Router is one pool's worker choice outside a running proxy: the same
// rendezvous hashing and round robin as pick, every worker healthy.
// Package predict routes its virtual requests with it, so a prediction
// sends each session where the proxy would.
type Router struct {
	p   pool
	idx map[*backend]int
}

// NewRouter is a router over workers with these names, in this order.
func NewRouter(names []string) *Router {
	r := &Router{idx: map[*backend]int{}}
	for i, n := range names {
		b := &backend{Worker: Worker{Name: n}, seed: workerSeed(n)}
		b.up.Store(true)
		r.p.backends = append(r.p.backends, b)
		r.idx[b] = i
	}
	return r
}

// Pick returns the index of the worker the proxy picks for a request with
// affinity key (haveKey false: round robin, in call order); -1 when the
// router has no workers.
func (r *Router) Pick(key uint64, haveKey bool) int {
	b := r.p.pick(key, haveKey, nil)
	if b == nil {
		return -1
	}
	return r.idx[b]
}

// PromptKey is the affinity key the proxy computes for a request whose
// prompt is the token ids ids and that carries no session header (as
// affinityKey reads a token-id prompt: its first n ids).
func PromptKey(ids []int, n int) (uint64, bool) {
	if len(ids) > n+1 {
		ids = ids[:n+1] // affinityKey reads n of them
	}
	raw := make([]byte, 0, 8*len(ids)+2)
	raw = append(raw, '[')
	for i, id := range ids {
		if i > 0 {
			raw = append(raw, ',')
		}
		raw = strconv.AppendInt(raw, int64(id), 10)
	}
	raw = append(raw, ']')
	return affinityKey("", map[string]json.RawMessage{"prompt": raw}, n)
}

func contains(l []*backend, b *backend) bool {
	for _, x := range l {
		if x == b {
			return true
		}
	}
	return false
}

// mix64 is splitmix64's finalizer: a cheap, well-spread 64-bit mix.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// affinityKey hashes the session header if present, else the prompt's
// leading tokens: the first n token ids of a token-id prompt (whitespace
// ignored, so clients that format JSON differently agree), or the first 4n
// bytes of a text prompt or chat messages. ok is false when there is
// nothing to hash.
func affinityKey(header string, fields map[string]json.RawMessage, n int) (uint64, bool) {
	if header != "" {
		return hashString("h:" + header), true
	}
	raw, ok := fields["prompt"]
	if !ok {
		raw, ok = fields["messages"]
	}
	if !ok || len(raw) == 0 {
		return 0, false
	}
	h := fnv.New64a()
	var buf [512]byte
	out := buf[:0]
	flush := func() {
		h.Write(out)
		out = out[:0]
	}
	if raw[0] == '[' && len(raw) > 1 {
		// Token ids: stop after n numbers at depth 1; a nested list (a batch
		// of prompts) is hashed as text below.
		commas, flat := 0, true
		for _, c := range raw[1:] {
			switch {
			case c == ' ' || c == '\n' || c == '\t' || c == '\r':
				continue
			case c == ',':
				commas++
			case c == '[' || c == '{' || c == '"':
				flat = false
			}
			if !flat || commas >= n {
				break
			}
			out = append(out, c)
			if len(out) == cap(out) {
				flush()
			}
		}
		if flat {
			flush()
			return h.Sum64(), true
		}
		out = out[:0]
		h.Reset()
	}
	limit := 4 * n
	if limit > len(raw) {
		limit = len(raw)
	}
	h.Write(raw[:limit])
	return h.Sum64(), true
}

// healthLoop checks every worker's /health each interval: two failures in a
// row take a worker out of rotation, one success lets it back in.
func (p *Proxy) healthLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.HealthInterval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, b := range p.set().all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.checkHealth(ctx, b)
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Proxy) checkHealth(ctx context.Context, b *backend) {
	// A fixed, generous timeout: a busy engine answering /health late is
	// not a dead one, and two misses in a row are needed to take it out.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ok := false
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, b.URL+"/health", nil)
	if err == nil {
		resp, err := p.health.Do(req)
		if err == nil {
			resp.Body.Close()
			ok = resp.StatusCode == http.StatusOK
		}
	}
	if ctx.Err() != nil {
		return
	}
	if ok {
		b.fails = 0
		p.setUp(b, true, "health check passed")
		return
	}
	b.fails++
	if b.fails >= 2 {
		p.setUp(b, false, "health check failed twice")
	}
}

// setUp moves a worker into or out of rotation, logging and counting the
// change.
func (p *Proxy) setUp(b *backend, up bool, why string) {
	if b.up.Swap(up) == up {
		return
	}
	to, v := "out", 0.0
	if up {
		to, v = "in", 1
	}
	p.m.workerUp.WithLabelValues(b.Name, b.Role).Set(v)
	p.m.healthChg.WithLabelValues(b.Name, to).Inc()
	p.log.Info("worker rotation", "worker", b.Name, "role", b.Role, "to", to, "why", why)
}
