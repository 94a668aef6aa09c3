package diagnose

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/google/pprof/profile"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// LevelBreakdown summarises one load level's attributions (all runs at
// that offered rate together). Its figures cover the requests of the
// level's valid runs; a level with no valid run shows its invalid runs'
// figures, flagged in Invalid, and decides nothing.
type LevelBreakdown struct {
	OfferedQPS float64            `json:"offered_qps"`
	Requests   int                `json:"requests"`
	P99TTFTMs  float64            `json:"p99_ttft_ms"`
	Mean       map[string]float64 `json:"mean_ms"`    // mean of each part
	AtP99      map[string]float64 `json:"at_p99_ms"`  // parts of the request at the p99 TTFT rank
	Share      map[string]float64 `json:"ttft_share"` // mean over requests of part / TTFT
	Dominant   string             `json:"dominant"`   // the TTFT part with the largest mean
	// Tail is each part's mean over the level's slowest TailFraction of
	// requests by TTFT; TailTTFTMs is their mean TTFT (the sum of Tail).
	Tail       map[string]float64 `json:"tail_mean_ms"`
	TailTTFTMs float64            `json:"tail_ttft_ms"`
	// Valid says whether the level decides the bottleneck (some run at
	// this rate has a valid verdict). Invalid lists the reason codes of
	// its invalid runs ("run R: code,code" when other runs are valid);
	// Excluded counts those runs' requests, left out of the figures.
	Valid    bool     `json:"valid"`
	Invalid  []string `json:"invalid,omitempty"`
	Excluded int      `json:"excluded_requests,omitempty"`
	// Kernel evidence (daemon snapshot): requests joined to a KV connection,
	// their mean bytes received and first-to-last-byte time (model ms).
	KernelJoined     int     `json:"kernel_joined,omitempty"`
	KernelKVBytes    float64 `json:"kernel_kv_bytes_mean,omitempty"`
	KernelTransferMs float64 `json:"kernel_transfer_ms_mean,omitempty"`
	// KernelSplit counts requests split from kernel evidence alone (their
	// HTTP exchanges, the engines' steps, the KV connection), KernelMean
	// their mean per part (model ms); KernelCompared those that also have
	// the engines' own split (per-request metrics), and KernelDiff the
	// mean absolute difference per part between the two (disaggregated:
	// transfer and decode_queue as one span, Handoff).
	KernelSplit int                `json:"kernel_split,omitempty"`
	KernelMean  map[string]float64 `json:"kernel_split_mean_ms,omitempty"`
	// KernelUncertainty is the kernel split's mean uncertainty per part
	// (KernelParts.UncertaintyMs).
	KernelUncertainty map[string]float64 `json:"kernel_split_uncertainty_ms,omitempty"`
	KernelCompared    int                `json:"kernel_compared,omitempty"`
	KernelDiff        map[string]float64 `json:"kernel_split_diff_ms,omitempty"`
	// Sources counts the level's requests (those its figures cover) by
	// the evidence their split used: SourceEngineMetrics (the answering
	// engine's per-request metrics), SourcePrefillEngineMetrics (the
	// prefill worker's, through the proxy), SourceTimeline (the proxy's
	// timeline), SourceKernel (the daemon's KV connections). A part with
	// none of them is client timing.
	Sources map[string]int `json:"sources"`
}

// Handoff keys KernelDiff's comparison of transfer + decode_queue: vLLM's
// decode worker reports its queue after the KV inside queue_time_ms (the
// engine split's transfer), the kernel sees the KV's end apart.
const Handoff = "transfer+decode_queue"

// Evidence kinds counted in LevelBreakdown.Sources.
const (
	SourceEngineMetrics        = "engine_metrics"
	SourcePrefillEngineMetrics = "prefill_engine_metrics"
	SourceTimeline             = "proxy_timeline"
	SourceKernel               = "kernel"
)

// Diagnosis is the bottleneck verdict over the valid levels.
type Diagnosis struct {
	Kind   schema.Kind      `json:"kind"`
	Levels []LevelBreakdown `json:"levels"`
	// Bottleneck is queueing | prefill | transfer | decode_queue | decode |
	// client-bound | none. Uncertain names the runner-up part when its
	// interval overlaps the named part's: the data cannot tell them apart.
	Bottleneck string `json:"bottleneck"`
	Uncertain  string `json:"uncertain,omitempty"`
	// Growth is each part's tail mean at the highest valid level − at the
	// lowest; GrowthCI its bootstrap interval at Confidence.
	Growth   map[string]float64    `json:"growth_ms"`
	GrowthCI map[string][2]float64 `json:"growth_ci_ms"`
	// IntervalLevel is the bootstrap intervals' level (Confidence).
	// Confidence is the verdict's own: the share of the Resamples
	// bootstrap resamples in which the rule names the same part (for
	// "none": names nothing; for decode: p99 TPOT misses its SLO); for
	// a stall, the share of its level's requests the freeze reached. 0:
	// not resampled (client-bound, or no per-request TPOT).
	IntervalLevel float64 `json:"interval_level"`
	Confidence    float64 `json:"confidence"`
	// PeakInFlight is the most requests that streamed at once (first →
	// last token) at a valid level, one run; MaxNumSeqs the engines'
	// max-num-seqs where known (SummarizeKnobs). The proposals follow
	// them: a queue with PeakInFlight at MaxNumSeqs proposes raising it.
	PeakInFlight int      `json:"peak_in_flight,omitempty"`
	MaxNumSeqs   int      `json:"max_num_seqs,omitempty"`
	Rule         string   `json:"rule"`
	Summary      string   `json:"summary"`
	Proposals    []string `json:"proposals"`
}

// Label is the bottleneck as people read it: "X (uncertain: Y within the
// interval)" when the verdict is uncertain.
func (d Diagnosis) Label() string {
	if d.Uncertain != "" {
		return fmt.Sprintf("%s (uncertain: %s within the interval)", d.Bottleneck, d.Uncertain)
	}
	return d.Bottleneck
}

// SummarizeKnobs groups attributions by load level (all runs together),
// shows every level, and names the bottleneck from the valid levels only,
// by BottleneckRule: the tail mean (the slowest TailFraction of requests
// by TTFT) of each part, its growth from the lowest to the highest valid
// level with a seeded bootstrap interval, and the parts that dominate the
// TTFT budget. tpotP99 is p99 TPOT by offered rate (decode when it misses
// its SLO at a valid level). knobs are the configuration's (RecordKnobs):
// the proposals follow them.
func SummarizeKnobs(kind schema.Kind, atts []Attribution, target slo.SLO, tpotP99 map[float64]float64, knobs Knobs) Diagnosis {
	d := Diagnosis{Kind: kind, Growth: map[string]float64{}, GrowthCI: map[string][2]float64{}, IntervalLevel: Confidence, Rule: BottleneckRule,
		MaxNumSeqs: knobs.MaxNumSeqs}
	lv := groupLevels(atts)
	for _, l := range lv {
		d.Levels = append(d.Levels, l.breakdown())
	}
	if len(lv) == 0 {
		d.Bottleneck, d.Summary = "none", "no attributed requests"
		return d
	}
	decide(&d, lv, target, tpotP99)
	d.PeakInFlight = peakInFlight(lv)
	d.Proposals = proposals(d, lv)
	if d.Bottleneck == Transfer {
		if n, of := unsplitKVWaits(lv); n > 0 {
			d.Summary += fmt.Sprintf("; for %d of %d disaggregated requests nothing timed the KV pull, so the decode worker's queue after the KV is inside transfer", n, of)
			d.Proposals = append([]string{"time the KV pulls (hone diagnose report --daemon with a daemon snapshot of the run) to tell the KV wait from the decode worker's queue, then diagnose again"}, d.Proposals...)
		}
	}
	return d
}

// breakdown is the level's row: its valid requests, or all of them when
// none is valid.
func (l *level) breakdown() LevelBreakdown {
	lb := LevelBreakdown{OfferedQPS: l.q, Valid: l.decides(), Mean: map[string]float64{}, AtP99: map[string]float64{},
		Share: map[string]float64{}, Tail: map[string]float64{}, Sources: map[string]int{}}
	as := l.rowRequests(&lb)
	lb.Requests = len(as)
	p99 := as[slo.NearestRankIndex(len(as), 99)-1] // as is in TTFT order
	lb.P99TTFTMs = p99.TTFTMs
	for _, a := range as {
		for k, v := range a.Parts {
			lb.Mean[k] += v / float64(len(as))
		}
		for k, used := range map[string]bool{SourceEngineMetrics: a.EngineMetrics, SourcePrefillEngineMetrics: a.PrefillEngineMetrics,
			SourceTimeline: a.Timeline, SourceKernel: a.KernelKVBytes > 0} {
			if used {
				lb.Sources[k]++
			}
		}
		addKernel(&lb, a)
	}
	for k, v := range p99.Parts {
		lb.AtP99[k] = v
	}
	averageKernel(&lb)
	addTail(&lb, as)
	return lb
}

// rowRequests is the requests lb's row is over (the valid ones, or all
// of them when none is valid), and sets lb's Excluded and Invalid.
func (l *level) rowRequests(lb *LevelBreakdown) []Attribution {
	if lb.Valid {
		lb.Excluded = len(l.invalid)
		for _, r := range l.runs {
			if c, ok := l.codes[r]; ok {
				lb.Invalid = append(lb.Invalid, fmt.Sprintf("run %d: %s", r+1, strings.Join(c, ",")))
			}
		}
		return l.valid
	}
	seen := map[string]bool{}
	for _, r := range l.runs {
		for _, c := range l.codes[r] {
			if !seen[c] {
				seen[c] = true
				lb.Invalid = append(lb.Invalid, c)
			}
		}
	}
	sort.Strings(lb.Invalid)
	return l.invalid
}

// addKernel adds a's kernel-timed split and KV, where it has them, to
// lb's sums (averaged by averageKernel).
func addKernel(lb *LevelBreakdown, a Attribution) {
	if k := a.Kernel; k != nil {
		if lb.KernelMean == nil {
			lb.KernelMean = map[string]float64{}
		}
		lb.KernelSplit++
		kp := k.parts()
		if lb.KernelUncertainty == nil {
			lb.KernelUncertainty = map[string]float64{}
		}
		for part, v := range kp {
			lb.KernelMean[part] += v
			lb.KernelUncertainty[part] += k.UncertaintyMs[part]
		}
		engine := a.EngineParts
		if a.SplitBy == "engine" {
			engine = a.Parts
		}
		if engine != nil {
			if lb.KernelDiff == nil {
				lb.KernelDiff = map[string]float64{}
			}
			lb.KernelCompared++
			for _, part := range []string{Queueing, Prefill, Decode} {
				lb.KernelDiff[part] += math.Abs(kp[part] - engine[part])
			}
			if k.PrefillEngine != "" {
				// vLLM's decode worker counts its queue after the KV in
				// queue_time_ms (transfer here); the kernel sees the KV's
				// end apart. Their sum is one span in both.
				lb.KernelDiff[Handoff] += math.Abs(kp[Transfer] + kp[DecodeQ] - engine[Transfer] - engine[DecodeQ])
			}
		}
	}
	if a.KernelKVBytes > 0 {
		lb.KernelJoined++
		lb.KernelKVBytes += float64(a.KernelKVBytes)
		lb.KernelTransferMs += a.KernelTransferMs
	}
}

// averageKernel turns the sums addKernel made into means.
func averageKernel(lb *LevelBreakdown) {
	for k := range lb.KernelMean {
		lb.KernelMean[k] /= float64(lb.KernelSplit)
		lb.KernelUncertainty[k] /= float64(lb.KernelSplit)
	}
	for k := range lb.KernelDiff {
		lb.KernelDiff[k] /= float64(lb.KernelCompared)
	}
	if lb.KernelJoined > 0 {
		lb.KernelKVBytes /= float64(lb.KernelJoined)
		lb.KernelTransferMs /= float64(lb.KernelJoined)
	}
}

// addTail sets lb's tail means, mean shares and dominant part over as.
func addTail(lb *LevelBreakdown, as []Attribution) {
	parts := make([][]float64, len(as))
	for i, a := range as {
		parts[i] = make([]float64, len(TTFTComponents))
		for k, name := range TTFTComponents {
			parts[i][k] = a.Parts[name]
		}
	}
	tail, tailTTFT := tailMeans(parts, ttfts(as), nil)
	lb.TailTTFTMs = tailTTFT
	share := meanShares(as)
	best := -math.MaxFloat64
	for k, name := range TTFTComponents {
		lb.Tail[name], lb.Share[name] = tail[k], share[k]
		if lb.Mean[name] > best {
			best, lb.Dominant = lb.Mean[name], name
		}
	}
}

// proposals maps a bottleneck to the changes worth trying next, most
// promising first. A client-bound verdict gets changes to the
// measurement, never to the deployment: for client_bound levels (or none
// flagged) the load generator's, and one per other invalid reason.
func proposals(d Diagnosis, lv []*level) []string {
	// A queue whose engine ran max-num-seqs requests at once waited for a
	// seat: raising the limit is the first thing to try, and lowering it
	// (shorter steps) would lengthen the queue.
	atLimit := d.MaxNumSeqs > 0 && d.PeakInFlight >= d.MaxNumSeqs
	raise := fmt.Sprintf("raise max-num-seqs (now %d; up to %d requests streamed at once: the queue waits for a seat)", d.MaxNumSeqs, d.PeakInFlight)
	switch b := d.Bottleneck; b {
	case Queueing:
		out := []string{"disaggregate prefill from decode (separate queues)", "add a prefill worker / replica", "lower max-num-batched-tokens to shorten steps that block new prefills"}
		if atLimit {
			out = append([]string{raise}, out...)
		}
		return out
	case DecodeQ:
		if atLimit {
			return []string{raise, "add decode capacity (another decode worker)"}
		}
		out := []string{"add decode capacity (another decode worker)", "enable CUDA graphs (drop --enforce-eager)"}
		if d.MaxNumSeqs == 0 {
			out = append(out, fmt.Sprintf("raise max-num-seqs if the decode worker runs at its limit (up to %d requests streamed at once here)", d.PeakInFlight))
		}
		return out
	case Stall:
		return []string{"find what froze the engine at that instant (its log; the host: memory pressure, another process, a paused VM) and measure the level again",
			"no capacity change removes a one-off freeze: keep the configuration"}
	case Prefill:
		return []string{"raise the prefix-cache hit rate (session affinity routing, larger KV cache)", "add prefill capacity (more prefill workers or TP)"}
	case Transfer:
		return []string{"enable decode-side prefix caching so only uncached blocks move", "use a faster KV connector or link (NVLink/RDMA over TCP)", "colocate when transfer exceeds the queueing it saves"}
	case Decode:
		return []string{"add decode capacity (another decode worker)", "enable CUDA graphs (drop --enforce-eager)", "lower max-num-seqs to cut per-step time"}
	case ClientBound:
		return invalidRemedies(lv)
	}
	return nil
}

// invalidRemedies are the remedies of every reason the levels were
// invalid for, each code's own (schema.Rules), in the rules' order; a
// client-bound bottleneck without a code (never judged) gets
// client_bound's.
func invalidRemedies(lv []*level) []string {
	codes := map[schema.Code]bool{}
	for _, l := range lv {
		for _, c := range l.codes {
			for _, code := range c {
				codes[schema.Code(code)] = true
			}
		}
	}
	var out []string
	for _, r := range schema.Rules {
		if codes[r.Code] {
			out = append(out, r.Remedies...)
		}
	}
	if out == nil {
		r, _ := schema.RuleOf(schema.ReasonClientBound)
		out = r.Remedies
	}
	return out
}

// WriteTable renders the diagnosis for a terminal (md: Markdown).
func (d Diagnosis) WriteTable(w io.Writer, md bool) error {
	cols := append([]string{"offered_qps", "n", "p99_ttft_ms"}, TTFTComponents...)
	cols = append(cols, Decode, "dominant", "verdict")
	if md {
		fmt.Fprintf(w, "**%s** — bottleneck: **%s**. %s\n\n", d.Kind, d.Label(), d.Summary)
		fmt.Fprintln(w, "Mean milliseconds per request (model time); invalid levels are shown but decide nothing:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| "+strings.Join(cols, " | ")+" |")
		fmt.Fprintln(w, "|"+strings.Repeat("---:|", len(cols)))
	} else {
		fmt.Fprintf(w, "kind: %s  bottleneck: %s\n%s\nmean ms per request (model time; invalid levels are shown but decide nothing):\n", d.Kind, d.Label(), d.Summary)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for i, l := range d.Levels {
		row := []string{fmt.Sprintf("%g", l.OfferedQPS), fmt.Sprint(l.Requests), fmt.Sprintf("%.1f", l.P99TTFTMs)}
		for _, k := range TTFTComponents {
			row = append(row, fmt.Sprintf("%.1f", l.Mean[k]))
		}
		verdict := "valid"
		switch {
		case !l.Valid:
			verdict = "invalid: " + strings.Join(l.Invalid, ",")
		case len(l.Invalid) > 0:
			verdict = fmt.Sprintf("valid (%d requests of invalid runs left out: %s)", l.Excluded, strings.Join(l.Invalid, "; "))
		}
		row = append(row, fmt.Sprintf("%.1f", l.Mean[Decode]), l.Dominant, verdict)
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
	line := func(s string) {
		if md {
			fmt.Fprintf(w, "\n- %s", s)
		} else {
			fmt.Fprintln(w, s)
		}
	}
	if len(d.GrowthCI) > 0 {
		var g []string
		for _, k := range TTFTComponents {
			ci := d.GrowthCI[k]
			g = append(g, fmt.Sprintf("%s %+.1f [%.1f, %.1f]", k, d.Growth[k], ci[0], ci[1]))
		}
		line(fmt.Sprintf("tail-mean growth, lowest → highest valid level, ms (%g%% bootstrap interval): %s", 100*d.IntervalLevel, strings.Join(g, "; ")))
	}
	if d.Confidence > 0 {
		line(fmt.Sprintf("confidence in the verdict: %.0f%% (%s)", 100*d.Confidence, confidenceBasis(d.Bottleneck)))
	}
	for _, l := range d.Levels {
		if l.Requests > 0 && l.Sources[SourceEngineMetrics] < l.Requests {
			line(fmt.Sprintf("engine per-request metrics at %g req/s: %d of %d requests (the rest: the engine's span is client- or proxy-timed, "+
				"its queue not split out; vLLM needs --enable-per-request-metrics)", l.OfferedQPS, l.Sources[SourceEngineMetrics], l.Requests))
		}
		if l.KernelJoined > 0 {
			line(fmt.Sprintf("kernel (daemon) at %g req/s: %d requests joined to their KV pull, %.2f MB received and %.2f ms first→last byte on average",
				l.OfferedQPS, l.KernelJoined, l.KernelKVBytes/1e6, l.KernelTransferMs))
		}
		if l.KernelSplit > 0 {
			s := fmt.Sprintf("kernel split (daemon: HTTP exchanges + CUDA steps + KV connections, no engine metrics) at %g req/s: %d of %d requests, mean %s",
				l.OfferedQPS, l.KernelSplit, l.Requests, partListPM(l.KernelMean, l.KernelUncertainty))
			if l.KernelCompared > 0 {
				s += fmt.Sprintf("; against the engines' own split (%d requests) mean |difference| %s", l.KernelCompared, partList(l.KernelDiff))
			}
			line(s)
		}
	}
	for _, p := range d.Proposals {
		line("next: " + p)
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

// partList prints m's parts in TTFT order, decode and Handoff after.
func partList(m map[string]float64) string { return partListPM(m, nil) }

// partListPM is partList with each part's uncertainty (± pm[part]) where
// pm has a non-zero one.
func partListPM(m, pm map[string]float64) string {
	var out []string
	for _, k := range append(append([]string{}, TTFTComponents...), Decode, Handoff) {
		if v, ok := m[k]; ok {
			s := fmt.Sprintf("%s %.2f", k, v)
			if u := pm[k]; u > 0 {
				s += fmt.Sprintf(" ±%.2f", u)
			}
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ") + " ms"
}
