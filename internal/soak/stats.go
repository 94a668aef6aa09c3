//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FlatRule is how memory is judged flat, stated in every report.
const FlatRule = "after warm-up (the first third of the run, or later if a designed-bounded buffer was still filling), " +
	"split the rest into a middle and a last half; memory is flat when the last half's median RSS is at most " +
	"10% above the middle half's, and the medians of six equal windows after warm-up do not rise window over " +
	"window by more than 2% in all (a steady climb is growth even when each step is small)"

// flatTolerance and monotonicTolerance are FlatRule's 10% and 2%.
const (
	flatTolerance      = 0.10
	monotonicTolerance = 0.02
	monotonicWindows   = 6
)

// Sample is one RSS reading, at T seconds since the run started.
type Sample struct {
	T   float64 `json:"t_s"`
	RSS uint64  `json:"rss_bytes"`
}

// Series is one process's RSS over time.
type Series struct {
	Name    string   `json:"name"`
	PID     int      `json:"pid"`
	Samples []Sample `json:"samples"`
}

// RSSSummary is FlatRule applied to one Series.
type RSSSummary struct {
	Name          string  `json:"name"`
	PID           int     `json:"pid"`
	Samples       int     `json:"samples"`
	FirstBytes    uint64  `json:"first_bytes"`
	WarmUpBytes   uint64  `json:"warm_up_end_bytes"` // the first sample at or after warm-up's end
	LastBytes     uint64  `json:"last_bytes"`
	MaxBytes      uint64  `json:"max_bytes"`
	MiddleMedian  uint64  `json:"middle_median_bytes"`
	LastMedian    uint64  `json:"last_median_bytes"`
	Growth        float64 `json:"last_vs_middle_growth"` // LastMedian/MiddleMedian - 1
	WindowMedians []int64 `json:"window_medians_bytes"`
	Monotonic     bool    `json:"monotonic_growth"`
	Flat          bool    `json:"flat"`
	Verdict       string  `json:"verdict"`
}

// summarize applies FlatRule to s with warm-up ending at warm and the run
// ending at end (seconds).
func summarize(s Series, warm, end float64) RSSSummary {
	r := RSSSummary{Name: s.Name, PID: s.PID, Samples: len(s.Samples)}
	if len(s.Samples) == 0 {
		r.Verdict = "no samples"
		return r
	}
	r.FirstBytes = s.Samples[0].RSS
	r.LastBytes = s.Samples[len(s.Samples)-1].RSS
	for _, x := range s.Samples {
		r.MaxBytes = max(r.MaxBytes, x.RSS)
		if r.WarmUpBytes == 0 && x.T >= warm {
			r.WarmUpBytes = x.RSS
		}
	}
	mid := warm + (end-warm)/2
	var middle, last []uint64
	for _, x := range s.Samples {
		switch {
		case x.T < warm:
		case x.T < mid:
			middle = append(middle, x.RSS)
		case x.T <= end:
			last = append(last, x.RSS)
		}
	}
	if len(middle) < 3 || len(last) < 3 {
		r.Verdict = fmt.Sprintf("too few samples after warm-up (%d middle, %d last): inconclusive", len(middle), len(last))
		return r
	}
	r.MiddleMedian, r.LastMedian = median(middle), median(last)
	r.Growth = float64(r.LastMedian)/float64(r.MiddleMedian) - 1
	// Six windows after warm-up: a strict rise in every one, adding up to
	// more than monotonicTolerance, is growth.
	w := (end - warm) / monotonicWindows
	rising := true
	for i := range monotonicWindows {
		var xs []uint64
		for _, x := range s.Samples {
			if x.T >= warm+float64(i)*w && (x.T < warm+float64(i+1)*w || i == monotonicWindows-1 && x.T <= end) {
				xs = append(xs, x.RSS)
			}
		}
		if len(xs) == 0 {
			rising = false
			r.WindowMedians = append(r.WindowMedians, -1)
			continue
		}
		m := int64(median(xs))
		if n := len(r.WindowMedians); n > 0 && m <= r.WindowMedians[n-1] {
			rising = false
		}
		r.WindowMedians = append(r.WindowMedians, m)
	}
	if rising {
		first, lastW := r.WindowMedians[0], r.WindowMedians[monotonicWindows-1]
		r.Monotonic = float64(lastW) > float64(first)*(1+monotonicTolerance)
	}
	r.Flat = r.Growth <= flatTolerance && !r.Monotonic
	switch {
	case r.Flat:
		r.Verdict = fmt.Sprintf("flat (last half median %+.1f%% vs middle)", 100*r.Growth)
	case r.Monotonic:
		r.Verdict = fmt.Sprintf("GROWING: window medians rise monotonically (%s)", windowsMiB(r.WindowMedians))
	default:
		r.Verdict = fmt.Sprintf("GROWING: last half median %+.1f%% vs middle (> +%.0f%%)", 100*r.Growth, 100*flatTolerance)
	}
	return r
}

func windowsMiB(ws []int64) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%.1f", float64(w)/(1<<20))
	}
	return strings.Join(parts, " → ") + " MiB"
}

func median(xs []uint64) uint64 {
	s := append([]uint64(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// durPercentile returns the q-th percentile (0..1) of ds, sorted in place.
func durPercentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(q * float64(len(ds)-1))
	return ds[i]
}

// sampler reads the RSS and open file descriptors (sockets included) of a
// set of processes every period.
type sampler struct {
	mu     sync.Mutex
	t0     time.Time
	series []*Series
	fds    []*Series // RSS holds the descriptor count
}

func newSampler(t0 time.Time) *sampler { return &sampler{t0: t0} }

func (s *sampler) add(name string, pid int) {
	s.mu.Lock()
	s.series = append(s.series, &Series{Name: name, PID: pid})
	s.fds = append(s.fds, &Series{Name: name, PID: pid})
	s.mu.Unlock()
}

// sample takes one reading of every process and returns it, by name.
func (s *sampler) sample() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := time.Since(s.t0).Seconds()
	out := map[string]uint64{}
	for i, se := range s.series {
		rss := rssBytes(se.PID)
		if rss == 0 {
			continue // gone
		}
		se.Samples = append(se.Samples, Sample{T: t, RSS: rss})
		out[se.Name] = rss
		if n := fdCount(se.PID); n >= 0 {
			s.fds[i].Samples = append(s.fds[i].Samples, Sample{T: t, RSS: uint64(n)})
		}
	}
	return out
}

// fdSummary is one process's open descriptors: first, after warm-up, last, max.
type fdSummary struct {
	Name   string `json:"name"`
	First  uint64 `json:"first"`
	WarmUp uint64 `json:"warm_up_end"`
	Last   uint64 `json:"last"`
	Max    uint64 `json:"max"`
}

func (s *sampler) fdSummaries(warm float64) []fdSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []fdSummary
	for _, se := range s.fds {
		if len(se.Samples) == 0 {
			continue
		}
		f := fdSummary{Name: se.Name, First: se.Samples[0].RSS, Last: se.Samples[len(se.Samples)-1].RSS}
		for _, x := range se.Samples {
			f.Max = max(f.Max, x.RSS)
			if f.WarmUp == 0 && x.T >= warm {
				f.WarmUp = x.RSS
			}
		}
		out = append(out, f)
	}
	return out
}

func (s *sampler) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ns []string
	for _, se := range s.series {
		ns = append(ns, se.Name)
	}
	return ns
}

func (s *sampler) all() []Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Series, len(s.series))
	for i, se := range s.series {
		out[i] = Series{Name: se.Name, PID: se.PID, Samples: append([]Sample(nil), se.Samples...)}
	}
	return out
}

// rssLine formats one reading of every process.
func rssLine(names []string, rss map[string]uint64) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s %.0f", n, mib(rss[n]))
	}
	return "RSS MiB" + b.String()
}

// printRSSTable prints summaries as a table.
func printRSSTable(sums []RSSSummary) {
	fmt.Printf("  %-10s %7s %9s %9s %9s %9s %9s %9s  %s\n", "process", "pid", "first", "warm-up", "last", "max", "mid-med", "last-med", "verdict")
	for _, r := range sums {
		fmt.Printf("  %-10s %7d %8.1fM %8.1fM %8.1fM %8.1fM %8.1fM %8.1fM  %s\n", r.Name, r.PID,
			mib(r.FirstBytes), mib(r.WarmUpBytes), mib(r.LastBytes), mib(r.MaxBytes), mib(r.MiddleMedian), mib(r.LastMedian), r.Verdict)
	}
}

// gcLine matches a GODEBUG=gctrace=1 line: "gc N @T s ...: ..., A->B->C MB,
// ..."; C is the heap marked live by that cycle.
var gcLine = regexp.MustCompile(`^gc \d+ @([0-9.]+)s .* (\d+)->(\d+)->(\d+) MB, (\d+) MB goal`)

// liveHeapSeries reads a process's gctrace lines from its log: the live
// heap after each GC, at seconds since t0 (the process started at
// started), and the largest heap goal after warm (RSS of a Go process
// runs up to about its heap goal, twice the live heap at GOGC=100).
func liveHeapSeries(name, logPath string, pid int, started, t0 time.Time, warm float64) (s Series, goalMax uint64) {
	s = Series{Name: name, PID: pid}
	f, err := os.Open(logPath)
	if err != nil {
		return s, 0
	}
	defer f.Close()
	off := started.Sub(t0).Seconds()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := gcLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		live, _ := strconv.ParseUint(m[4], 10, 64)
		goal, _ := strconv.ParseUint(m[5], 10, 64)
		s.Samples = append(s.Samples, Sample{T: off + at, RSS: live << 20})
		if off+at >= warm {
			goalMax = max(goalMax, goal<<20)
		}
	}
	return s, goalMax
}
