package diagnose

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/google/pprof/profile"

	"github.com/hone-llm/hone/replay"
)

// LevelBreakdown summarises one load level's attributions.
type LevelBreakdown struct {
	OfferedQPS float64            `json:"offered_qps"`
	Requests   int                `json:"requests"`
	P99TTFTMs  float64            `json:"p99_ttft_ms"`
	Mean       map[string]float64 `json:"mean_ms"`    // mean of each part
	AtP99      map[string]float64 `json:"at_p99_ms"`  // parts of the request at the p99 TTFT rank
	Share      map[string]float64 `json:"ttft_share"` // mean part / mean TTFT
	Dominant   string             `json:"dominant"`   // the TTFT part with the largest mean
	// Kernel evidence (daemon snapshot): requests joined to a KV connection,
	// their mean bytes received and first-to-last-byte time (model ms).
	KernelJoined     int     `json:"kernel_joined,omitempty"`
	KernelKVBytes    float64 `json:"kernel_kv_bytes_mean,omitempty"`
	KernelTransferMs float64 `json:"kernel_transfer_ms_mean,omitempty"`
}

// Diagnosis is the bottleneck verdict over all levels.
type Diagnosis struct {
	Kind       string             `json:"kind"`
	Levels     []LevelBreakdown   `json:"levels"`
	Bottleneck string             `json:"bottleneck"` // queueing | prefill | transfer | decode_queue | client | decode | none
	Growth     map[string]float64 `json:"growth_ms"`  // mean part at the highest level − at the lowest
	Summary    string             `json:"summary"`
	Proposals  []string           `json:"proposals"`
}

// Summarize groups attributions by load level (all runs together) and
// names the bottleneck: the TTFT part of the p99-rank request that grows
// most from the lowest to the highest offered load; when TTFT is already over the SLO at the lowest
// load, the part that dominates there; decode when TPOT misses its SLO.
func Summarize(kind string, atts []Attribution, slo replay.SLO, tpotP99 map[float64]float64) Diagnosis {
	by := map[float64][]Attribution{}
	var qs []float64
	for _, a := range atts {
		if _, ok := by[a.OfferedQPS]; !ok {
			qs = append(qs, a.OfferedQPS)
		}
		by[a.OfferedQPS] = append(by[a.OfferedQPS], a)
	}
	sort.Float64s(qs)
	d := Diagnosis{Kind: kind, Growth: map[string]float64{}}
	for _, q := range qs {
		as := by[q]
		lb := LevelBreakdown{OfferedQPS: q, Requests: len(as), Mean: map[string]float64{}, AtP99: map[string]float64{}, Share: map[string]float64{}}
		sort.SliceStable(as, func(i, j int) bool { return as[i].TTFTMs < as[j].TTFTMs })
		p99 := as[replay.NearestRankIndex(len(as), 99)-1]
		lb.P99TTFTMs = p99.TTFTMs
		meanTTFT := 0.0
		for _, a := range as {
			meanTTFT += a.TTFTMs / float64(len(as))
			for k, v := range a.Parts {
				lb.Mean[k] += v / float64(len(as))
			}
		}
		for k, v := range p99.Parts {
			lb.AtP99[k] = v
		}
		for _, a := range as {
			if a.KernelKVBytes > 0 {
				lb.KernelJoined++
				lb.KernelKVBytes += float64(a.KernelKVBytes)
				lb.KernelTransferMs += a.KernelTransferMs
			}
		}
		if lb.KernelJoined > 0 {
			lb.KernelKVBytes /= float64(lb.KernelJoined)
			lb.KernelTransferMs /= float64(lb.KernelJoined)
		}
		best := -math.MaxFloat64
		for _, k := range TTFTComponents {
			if meanTTFT > 0 {
				lb.Share[k] = lb.Mean[k] / meanTTFT
			}
			if lb.Mean[k] > best {
				best, lb.Dominant = lb.Mean[k], k
			}
		}
		d.Levels = append(d.Levels, lb)
	}
	if len(d.Levels) == 0 {
		d.Bottleneck, d.Summary = "none", "no attributed requests"
		return d
	}
	// The SLO is on p99, so growth is read on the request at the p99 rank
	// of each level: what the slowest requests gain with load.
	lo, hi := d.Levels[0], d.Levels[len(d.Levels)-1]
	grow, which := -math.MaxFloat64, ""
	for _, k := range TTFTComponents {
		d.Growth[k] = hi.AtP99[k] - lo.AtP99[k]
		if d.Growth[k] > grow {
			grow, which = d.Growth[k], k
		}
	}
	decodeBound := false
	for q, v := range tpotP99 {
		if v > slo.TPOTMillis && q >= lo.OfferedQPS {
			decodeBound = true
		}
	}
	switch {
	case decodeBound:
		d.Bottleneck = Decode
		d.Summary = fmt.Sprintf("p99 TPOT exceeds its %g ms SLO: decode steps are too slow for the batch", slo.TPOTMillis)
	case lo.P99TTFTMs > slo.TTFTMillis:
		d.Bottleneck = lo.Dominant
		d.Summary = fmt.Sprintf("p99 TTFT is %.0f ms even at %g req/s (SLO %g ms); %s dominates (%.0f%% of mean TTFT)",
			lo.P99TTFTMs, lo.OfferedQPS, slo.TTFTMillis, lo.Dominant, 100*lo.Share[lo.Dominant])
	case len(d.Levels) > 1 && grow > 0.1*math.Max(lo.P99TTFTMs, 1):
		d.Bottleneck = which
		d.Summary = fmt.Sprintf("%s of the p99 request grows by %.1f ms from %g to %g req/s (p99 TTFT %.1f → %.1f ms): it is what load adds",
			which, grow, lo.OfferedQPS, hi.OfferedQPS, lo.P99TTFTMs, hi.P99TTFTMs)
	default:
		d.Bottleneck = "none"
		d.Summary = fmt.Sprintf("TTFT barely grows with load (p99 %.1f → %.1f ms); largest part: %s", lo.P99TTFTMs, hi.P99TTFTMs, hi.Dominant)
	}
	d.Proposals = proposals(d.Bottleneck)
	return d
}

// proposals maps a bottleneck to the changes worth trying next, most
// promising first. The optimizer reads these.
func proposals(b string) []string {
	switch b {
	case Queueing:
		return []string{"disaggregate prefill from decode (separate queues)", "add a prefill worker / replica", "lower max-num-batched-tokens to shorten steps that block new prefills"}
	case Prefill:
		return []string{"raise the prefix-cache hit rate (session affinity routing, larger KV cache)", "add prefill capacity (more prefill workers or TP)"}
	case Transfer:
		return []string{"enable decode-side prefix caching so only uncached blocks move", "use a faster KV connector or link (NVLink/RDMA over TCP)", "colocate when transfer exceeds the queueing it saves"}
	case DecodeQ, Decode:
		return []string{"add decode capacity (another decode worker)", "enable CUDA graphs (drop --enforce-eager)", "lower max-num-seqs to cut per-step time"}
	case Client:
		return []string{"check the client host and proxy (dispatch lag, hops): the engine is not the bottleneck"}
	}
	return nil
}

// WriteTable renders the diagnosis for a terminal (md: Markdown).
func (d Diagnosis) WriteTable(w io.Writer, md bool) error {
	cols := append([]string{"offered_qps", "n", "p99_ttft_ms"}, TTFTComponents...)
	cols = append(cols, Decode, "dominant")
	if md {
		fmt.Fprintf(w, "**%s** — bottleneck: **%s**. %s\n\n", d.Kind, d.Bottleneck, d.Summary)
		fmt.Fprintln(w, "Mean milliseconds per request (model time):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| "+strings.Join(cols, " | ")+" |")
		fmt.Fprintln(w, "|"+strings.Repeat("---:|", len(cols)))
	} else {
		fmt.Fprintf(w, "kind: %s  bottleneck: %s\n%s\nmean ms per request (model time):\n", d.Kind, d.Bottleneck, d.Summary)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for i, l := range d.Levels {
		row := []string{fmt.Sprintf("%g", l.OfferedQPS), fmt.Sprint(l.Requests), fmt.Sprintf("%.1f", l.P99TTFTMs)}
		for _, k := range TTFTComponents {
			row = append(row, fmt.Sprintf("%.1f", l.Mean[k]))
		}
		row = append(row, fmt.Sprintf("%.1f", l.Mean[Decode]), l.Dominant)
		if md {
			fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
			continue
		}
		if i == 0 {
			fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if !md {
		tw.Flush()
	}
	for _, l := range d.Levels {
		if l.KernelJoined > 0 {
			line := fmt.Sprintf("kernel (daemon) at %g req/s: %d requests joined to their KV pull, %.2f MB received and %.2f ms first→last byte on average",
				l.OfferedQPS, l.KernelJoined, l.KernelKVBytes/1e6, l.KernelTransferMs)
			if md {
				fmt.Fprintf(w, "\n- %s", line)
			} else {
				fmt.Fprintln(w, line)
			}
		}
	}
	for _, p := range d.Proposals {
		if md {
			fmt.Fprintf(w, "\n- next: %s", p)
		} else {
			fmt.Fprintf(w, "next: %s\n", p)
		}
	}
	if md {
		fmt.Fprintln(w)
	}
	return nil
}

// Profile renders attributions as a pprof profile: one sample per request
// and part, stack [part, offered-QPS level, "ttft"|"decode"], value in
// nanoseconds of model time, so `go tool pprof -top` ranks where time went.
func Profile(atts []Attribution) (*profile.Profile, error) {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "latency", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "request", Unit: "count"},
		Period:     1,
	}
	funcs := map[string]*profile.Function{}
	locs := map[string]*profile.Location{}
	loc := func(name string) *profile.Location {
		if l, ok := locs[name]; ok {
			return l
		}
		f := &profile.Function{ID: uint64(len(funcs) + 1), Name: name, SystemName: name}
		funcs[name] = f
		p.Function = append(p.Function, f)
		l := &profile.Location{ID: uint64(len(locs) + 1), Line: []profile.Line{{Function: f}}}
		locs[name] = l
		p.Location = append(p.Location, l)
		return l
	}
	for _, a := range atts {
		level := fmt.Sprintf("qps=%g", a.OfferedQPS)
		for _, k := range append(append([]string(nil), TTFTComponents...), Decode) {
			v := a.Parts[k]
			if v <= 0 {
				continue
			}
			phase := "ttft"
			if k == Decode {
				phase = "decode"
			}
			p.Sample = append(p.Sample, &profile.Sample{
				Location: []*profile.Location{loc(k), loc(level), loc(phase)},
				Value:    []int64{int64(v * 1e6)},
				Label:    map[string][]string{"request_id": {a.RequestID}},
			})
		}
	}
	return p, p.CheckValid()
}
