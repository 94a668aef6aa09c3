package proxy

import (
	"fmt"
	"net/url"
	"strings"
)

// workerSet is the proxy's workers at one moment. It is never changed once
// published: SetWorkers builds a new one and swaps it in, so a request
// routes against one consistent set, and a request already on a removed
// worker finishes there.
type workerSet struct {
	all   []*backend
	pools map[string]*pool
}

func (p *Proxy) set() *workerSet { return p.ws.Load() }

// roles is the pools a mode has.
func roles(mode string) []string {
	if mode == ModeDisaggregated {
		return []string{RolePrefill, RoleDecode}
	}
	return []string{RoleColocated}
}

// buildSet makes the set of workers ws, reusing old's backend for a worker
// of the same name, role, URL and KV address (keeping its health), and
// carrying each pool's round-robin counter over.
func (p *Proxy) buildSet(old *workerSet, ws []Worker) *workerSet {
	keep := map[Worker]*backend{}
	if old != nil {
		for _, b := range old.all {
			keep[b.Worker] = b
		}
	}
	set := &workerSet{pools: map[string]*pool{}}
	for _, r := range roles(p.cfg.Mode) {
		pl := &pool{}
		if old != nil && old.pools[r] != nil {
			pl.rr.Store(old.pools[r].rr.Load())
		}
		set.pools[r] = pl
	}
	for _, w := range ws {
		w.URL = strings.TrimRight(w.URL, "/")
		b := keep[w]
		if b == nil {
			b = &backend{Worker: w, seed: workerSeed(w.Name)}
			b.up.Store(true)
			p.m.workerUp.WithLabelValues(w.Name, w.Role).Set(1)
		}
		delete(keep, w)
		set.all = append(set.all, b)
		pl := set.pools[w.Role]
		pl.backends = append(pl.backends, b)
	}
	for w := range keep { // removed
		p.m.workerUp.DeleteLabelValues(w.Name, w.Role)
	}
	return set
}

// SetWorkers replaces the proxy's workers, safely under concurrent
// requests: a worker not in ws gets no new request (those already on it
// finish, or fail into the usual retry and fallback), a new one gets new
// requests at once, in rotation until health checks say otherwise. A
// worker kept (same name, role, URL, KV address) keeps its health and its
// sessions: rendezvous hashing moves only the sessions of workers that
// come or go. A pool may be empty; requests for it get 503 until a worker
// arrives.
func (p *Proxy) SetWorkers(ws []Worker) error {
	names := map[string]bool{}
	for i, w := range ws {
		if err := checkWorker(p.cfg, w); err != nil {
			return fmt.Errorf("workers[%d]: %w", i, err)
		}
		if names[w.Name] {
			return fmt.Errorf("workers[%d].name: %q twice", i, w.Name)
		}
		names[w.Name] = true
	}
	p.wsMu.Lock()
	defer p.wsMu.Unlock()
	old := p.set()
	set := p.buildSet(old, ws)
	p.ws.Store(set)
	p.log.Info("workers changed", "workers", len(set.all), "before", len(old.all))
	return nil
}

// Workers is the proxy's workers now.
func (p *Proxy) Workers() []Worker {
	all := p.set().all
	out := make([]Worker, len(all))
	for i, b := range all {
		out[i] = b.Worker
	}
	return out
}

func checkWorker(c Config, w Worker) error {
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url: want http://host:port, got %q", w.URL)
	}
	if w.Name == "" {
		return fmt.Errorf("name: empty")
	}
	ok := false
	for _, r := range roles(c.Mode) {
		ok = ok || r == w.Role
	}
	if !ok {
		return fmt.Errorf("role: want one of %v in a %s deployment, got %q", roles(c.Mode), c.Mode, w.Role)
	}
	if c.Connector == P2pNcclConnector && w.KVAddr == "" {
		return fmt.Errorf("kv_addr: P2pNcclConnector needs each worker's kv_ip:kv_port")
	}
	return nil
}
