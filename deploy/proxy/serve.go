package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/hone-llm/hone/internal/guard"
	"github.com/hone-llm/hone/schema"
)

// serveHealth is 200 while every role has a worker in rotation.
func (p *Proxy) serveHealth(w http.ResponseWriter, r *http.Request) {
	for role, pl := range p.set().pools {
		up := false
		for _, b := range pl.backends {
			up = up || b.up.Load()
		}
		if !up {
			http.Error(w, "no "+role+" worker in rotation", http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (p *Proxy) serveOwnMetrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(p.m.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// serveMetrics is the workers' /metrics merged — each series labelled
// hone_worker, families kept whole — followed by the proxy's own, so a
// client scraping the front door sees the deployment's engine counters
// (prefix-cache hits and queries summed over workers) as if from one engine.
func (p *Proxy) serveMetrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	all := p.set().all
	texts := make([][]byte, len(all))
	var wg sync.WaitGroup
	for i, b := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/metrics", nil)
			if err != nil {
				return
			}
			resp, err := p.health.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				texts[i], _ = io.ReadAll(io.LimitReader(resp.Body, 32<<20))
			}
		}()
	}
	wg.Wait()
	var out bytes.Buffer
	names := make([]string, len(all))
	for i, b := range all {
		names[i] = b.Name
	}
	mergeExposition(&out, names, texts)
	mfs, err := p.m.reg.Gather()
	if err == nil {
		for _, mf := range mfs {
			expfmt.MetricFamilyToText(&out, mf)
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(out.Bytes())
}

// mergeExposition writes the Prometheus text of several workers as one:
// every family's HELP and TYPE once, then its samples from each worker with
// a hone_worker label added.
func mergeExposition(out *bytes.Buffer, workers []string, texts [][]byte) {
	type family struct {
		meta    []string
		samples []string
	}
	var order []string
	fams := map[string]*family{}
	get := func(name string) *family {
		f := fams[name]
		if f == nil {
			f = &family{}
			fams[name] = f
			order = append(order, name)
		}
		return f
	}
	for i, text := range texts {
		label := `hone_worker="` + workers[i] + `"`
		cur := ""
		sc := bufio.NewScanner(bytes.NewReader(text))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				continue
			}
			if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
				f := strings.Fields(line)
				if len(f) < 3 {
					continue
				}
				cur = f[2]
				fam := get(cur)
				if !hasPrefixLine(fam.meta, line[:7]) {
					fam.meta = append(fam.meta, line)
				}
				continue
			}
			if line[0] == '#' {
				continue
			}
			name := line
			if j := strings.IndexAny(line, "{ "); j >= 0 {
				name = line[:j]
			}
			fam := cur
			if fam == "" || !strings.HasPrefix(name, fam) {
				fam = name
			}
			var s string
			if j := strings.IndexByte(line, '{'); j >= 0 && j == len(name) {
				if line[j+1] == '}' {
					s = name + "{" + label + line[j+1:]
				} else {
					s = name + "{" + label + "," + line[j+1:]
				}
			} else {
				s = name + "{" + label + "}" + line[len(name):]
			}
			f := get(fam)
			f.samples = append(f.samples, s)
		}
	}
	for _, name := range order {
		f := fams[name]
		for _, m := range f.meta {
			out.WriteString(m)
			out.WriteByte('\n')
		}
		for _, s := range f.samples {
			out.WriteString(s)
			out.WriteByte('\n')
		}
	}
}

func hasPrefixLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// TimelinePage is GET /hone/timeline's answer (schema/timeline.go).
type TimelinePage = schema.TimelinePage

// MaxTimelinePage is the most timelines one GET /hone/timeline answers,
// and the default page size: about 10 MB of JSON. A larger ?limit= is
// refused (400) rather than clamped, so that no client mistakes a short
// page for everything; clients page with ?since=next until a page comes
// back empty (diagnose.FetchTimelines).
const MaxTimelinePage = 10_000

// serveTimeline answers GET /hone/timeline?since=SEQ&limit=N.
func (p *Proxy) serveTimeline(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, limit := uint64(0), MaxTimelinePage
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, "since: want a sequence number, got "+strconv.Quote(v), http.StatusBadRequest)
			return
		}
		since = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			http.Error(w, "limit: want a positive integer, got "+strconv.Quote(v), http.StatusBadRequest)
			return
		}
		if n > MaxTimelinePage {
			http.Error(w, fmt.Sprintf("limit: at most %d timelines a page, got %d; page with ?since= the answer's next", MaxTimelinePage, n), http.StatusBadRequest)
			return
		}
		limit = n
	}
	// A full page is encoded in memory (some 10 MB): a few at a time.
	select {
	case p.pages <- struct{}{}:
		defer func() { <-p.pages }()
	case <-r.Context().Done():
		return
	}
	tls, next, dropped := p.tl.since(since, limit)
	if tls == nil {
		tls = []Timeline{}
	}
	page := TimelinePage{Timelines: tls, Next: next, Dropped: dropped, Counts: p.Counts()}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(page)
}

// Counts returns the finished requests per outcome so far.
func (p *Proxy) Counts() Counts {
	c := Counts{}
	mfs, err := p.m.reg.Gather()
	if err != nil {
		return c
	}
	for _, mf := range mfs {
		if mf.GetName() != "hone_proxy_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					c[l.GetValue()] = uint64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return c
}

// WorkerStatus is one worker's state, for GET /hone/workers.
type WorkerStatus struct {
	Worker
	InRotation bool `json:"in_rotation"`
}

func (p *Proxy) serveWorkers(w http.ResponseWriter, r *http.Request) {
	var out []WorkerStatus
	for _, b := range p.set().all {
		out = append(out, WorkerStatus{Worker: b.Worker, InRotation: b.up.Load()})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// serveForward sends any other route (/tokenize, /detokenize, /v1/models,
// /version, ...) to one worker that serves clients: a colocated replica or
// a decode worker.
func (p *Proxy) serveForward(w http.ResponseWriter, r *http.Request) {
	set := p.set()
	pl := set.pools[RoleColocated]
	if pl == nil {
		pl = set.pools[RoleDecode]
	}
	b := pl.pick(0, false, nil)
	if b == nil {
		writeError(w, http.StatusServiceUnavailable, "no worker to forward to", nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.PrefillTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, b.URL+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, k := range []string{"Content-Type", "Accept", "Authorization"} {
		if v := r.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		if e := guard.BodyError(r); e != nil {
			// The client's body broke a limit while it streamed upstream.
			w.Header().Set("Connection", "close")
			writeError(w, e.Status, e.Message, nil)
			return
		}
		writeError(w, http.StatusBadGateway, "worker "+b.Name+": "+err.Error(), nil)
		return
	}
	defer resp.Body.Close()
	for _, k := range []string{"Content-Type", "Cache-Control"} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}
