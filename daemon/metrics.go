package daemon

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a Prometheus registry (not the global one) holding
// the Go and process collectors and hone's own collectors, which read
// snapshots from src. Metric names follow Prometheus practice: hone_
// prefix, base units, _total for counters, ratios not percentages, and no
// PID labels (processes are labelled by their command name).
func NewRegistry(src func() *Snapshot) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c := &cachedSnapshot{src: src, ttl: 500 * time.Millisecond}
	reg.MustRegister(threadCollector{c}, netCollector{c}, gpuCollector{c}, bpfCollector{c})
	return reg
}

// cachedSnapshot shares one snapshot between the collectors of a scrape.
type cachedSnapshot struct {
	src  func() *Snapshot
	ttl  time.Duration
	mu   sync.Mutex
	at   time.Time
	last *Snapshot
}

func (c *cachedSnapshot) get() *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || time.Since(c.at) > c.ttl {
		c.last, c.at = c.src(), time.Now()
	}
	return c.last
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("hone_"+name, help, labels, nil)
}

// processNames maps target pids to their command names.
func processNames(s *Snapshot) map[int]string {
	m := map[int]string{}
	for _, t := range s.Targets {
		m[t.PID] = t.Comm
	}
	return m
}

func nameOf(names map[int]string, pid int, fallback string) string {
	if n := names[pid]; n != "" {
		return n
	}
	if fallback != "" {
		return fallback
	}
	return "unknown"
}
