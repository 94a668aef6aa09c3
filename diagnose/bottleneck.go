package diagnose

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// ClientBound is the bottleneck when the measurement, not the deployment,
// bounds what was measured: every level is invalid, a level that would
// decide (the lowest or the highest offered rate) is invalid for
// replay.ReasonClientBound, or the client part is what the rule names.
// Its proposals fix the measurement, never the serving configuration.
const ClientBound = "client-bound"

// clientBoundSummary opens the summary of a ClientBound diagnosis.
const clientBoundSummary = "client-bound: the measurement, not the deployment, is the bottleneck"

// The bottleneck rule's constants, stated once for the rule, the docs and
// the tests.
const (
	// TailFraction: a level's tail is its requests whose TTFT is in the top
	// TailFraction (at least one request). A part's tail mean is its mean
	// over those requests: what the slowest requests, the ones the p99 SLO
	// is about, are made of. Because every part is read on the same
	// requests, the tail means add up to the tail's mean TTFT, and a
	// part's growth is its exact contribution to the tail's growth. (The
	// top decile of each part's own values would not add up, and would
	// credit a part's independent jitter with tail it does not cause.)
	TailFraction = 0.1
	// Resamples is the number of bootstrap resamples (requests drawn with
	// replacement within each level, seeded, so one input gives one
	// output) behind every interval.
	Resamples = 1000
	// Confidence of the bootstrap percentile intervals.
	Confidence = 0.9
	// GrowthFraction: a part grows with load when the lower end of its
	// growth interval exceeds this fraction of the lowest valid level's
	// tail TTFT (and 1 ms).
	GrowthFraction = 0.1
	// DominantShare: a part dominates the TTFT budget when its mean share
	// of a request's TTFT (part / TTFT, averaged over requests: one request
	// moves it by at most 1/n) exceeds this at every valid level.
	DominantShare = 0.5
	// SLOBudgetFraction: a part also dominates when the lower end of its
	// tail mean's interval exceeds this fraction of the TTFT SLO at every
	// valid level.
	SLOBudgetFraction = 0.5
	// MaterialFraction: a move or a part is material against the SLO when
	// it exceeds this fraction of the TTFT SLO. The growth rule's bar is
	// at least this (a 2 ms move under a 2,000 ms SLO names nothing,
	// however small the lowest level's tail), and a part that dominates by
	// its share of TTFT is named only when its tail mean is this large at
	// every valid level.
	MaterialFraction = 0.05
	// StallTPOTs: a freeze is a span of at least this many TPOT SLOs in
	// which no request of a level (one run) received a chunk, while a
	// request that had already streamed chunks was still streaming: the
	// engine stopped, not its queue.
	StallTPOTs = 10

	bootstrapSeed = 0x686f6e65 // "hone"
)

// Stall is the verdict when a single freeze at one level explains what
// the rule would otherwise name: the requests in flight across it are an
// outlier set, one event, not a capacity bottleneck.
const Stall = "stall"

// BottleneckRule states the rule in words, for reports and records.
var BottleneckRule = fmt.Sprintf("Only valid levels decide. client-bound when every level is invalid or the lowest or highest level is "+
	"invalid for client_bound; when a freeze of %d TPOT SLOs or more (no stream received a chunk while one was mid-stream) "+
	"is found, the rule is read again without the requests in flight across it: when it then names nothing the verdict is stall, "+
	"else that verdict (a verdict of none stands); "+
	"decode when p99 TPOT misses its SLO at a valid level; when the tail's TTFT interval lies above the "+
	"TTFT SLO already at the lowest valid level, the part with the largest tail mean there; else the part whose tail-mean growth from "+
	"the lowest to the highest valid level is largest among those whose %g%% bootstrap interval (%d resamples of requests within each "+
	"level) lies above %g%% of the lowest level's tail TTFT and above %g%% of the TTFT SLO; else a part whose mean share of TTFT exceeds "+
	"%g%% at every valid level with its tail mean above %g%% of the TTFT SLO, or whose tail mean's interval "+
	"lies above %g%% of the TTFT SLO at every valid level; else none. The tail is the top %g%% of a level's requests by TTFT. When the "+
	"runner-up's interval overlaps the named part's, the verdict is uncertain. A named client part is client-bound. The confidence "+
	"is the verdict's own: the share of bootstrap resamples in which the rule names the same part.",
	StallTPOTs, 100*Confidence, Resamples, 100*GrowthFraction, 100*MaterialFraction, 100*DominantShare, 100*MaterialFraction,
	100*SLOBudgetFraction, 100*TailFraction)

// level holds one offered rate's attributions, all runs together.
type level struct {
	q       float64
	valid   []Attribution    // requests of valid runs, by TTFT (ties: run, id)
	invalid []Attribution    // requests of invalid runs, same order
	codes   map[int][]string // invalid run → its reason codes
	runs    []int            // every run seen at this level, ascending

	// Over the valid requests (set by study): tail means per part
	// (TTFTComponents order), the tail's mean TTFT, mean per-request
	// shares, and Resamples bootstrap tail means per part.
	tail     []float64
	tailTTFT float64
	share    []float64
	boot     [][]float64
	bootTTFT []float64
}

// groupLevels groups attributions by offered rate, in ascending order,
// each level's requests in a fixed order whatever the input's.
func groupLevels(atts []Attribution) []*level {
	by := map[float64]*level{}
	var out []*level
	for _, a := range atts {
		l := by[a.OfferedQPS]
		if l == nil {
			l = &level{q: a.OfferedQPS, codes: map[int][]string{}}
			by[a.OfferedQPS] = l
			out = append(out, l)
		}
		if i := sort.SearchInts(l.runs, a.Run); i == len(l.runs) || l.runs[i] != a.Run {
			l.runs = append(l.runs, a.Run)
			sort.Ints(l.runs)
		}
		if len(a.Invalid) > 0 {
			l.invalid = append(l.invalid, a)
			l.codes[a.Run] = a.Invalid
		} else {
			l.valid = append(l.valid, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].q < out[j].q })
	for _, l := range out {
		byTTFT(l.valid)
		byTTFT(l.invalid)
	}
	return out
}

func byTTFT(as []Attribution) {
	sort.SliceStable(as, func(i, j int) bool {
		a, b := as[i], as[j]
		if a.TTFTMs != b.TTFTMs {
			return a.TTFTMs < b.TTFTMs
		}
		if a.Run != b.Run {
			return a.Run < b.Run
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.RequestID < b.RequestID
	})
}

// decides reports whether the level has valid requests.
func (l *level) decides() bool { return len(l.valid) > 0 }

// clientBound: no valid run, and some run invalid for client_bound.
func (l *level) clientBound() bool {
	if l.decides() {
		return false
	}
	for _, c := range l.codes {
		for _, code := range c {
			if schema.Code(code) == schema.ReasonClientBound {
				return true
			}
		}
	}
	return false
}

// study computes the level's tail means, shares and bootstrap over its
// valid requests. The RNG is seeded by the offered rate, so a level's
// intervals do not depend on which other levels were measured.
func (l *level) study() {
	n := len(l.valid)
	parts := make([][]float64, n) // parts[i][k]
	ttft := make([]float64, n)
	for i, a := range l.valid {
		ttft[i] = a.TTFTMs
		parts[i] = make([]float64, len(TTFTComponents))
		for k, name := range TTFTComponents {
			parts[i][k] = a.Parts[name]
		}
	}
	l.share = meanShares(l.valid)
	l.tail, l.tailTTFT = tailMeans(parts, ttft, nil)
	rng := rand.New(rand.NewPCG(bootstrapSeed, math.Float64bits(l.q)))
	counts := make([]int, n)
	l.boot, l.bootTTFT = make([][]float64, Resamples), make([]float64, Resamples)
	for b := range l.boot {
		clear(counts)
		for range n {
			counts[rng.IntN(n)]++
		}
		l.boot[b], l.bootTTFT[b] = tailMeans(parts, ttft, counts)
	}
}

// tailMeans is the mean of every part, and of TTFT, over the top
// TailFraction of requests by TTFT. parts and ttft are in ascending TTFT
// order; counts, when given, is how often each request was drawn.
func tailMeans(parts [][]float64, ttft []float64, counts []int) ([]float64, float64) {
	n := len(ttft)
	k := max(1, int(math.Ceil(TailFraction*float64(n))))
	sum := make([]float64, len(TTFTComponents))
	sumTTFT := 0.0
	left := k
	for i := n - 1; i >= 0 && left > 0; i-- {
		c := 1
		if counts != nil {
			c = counts[i]
		}
		c = min(c, left)
		left -= c
		for j, v := range parts[i] {
			sum[j] += float64(c) * v
		}
		sumTTFT += float64(c) * ttft[i]
	}
	for j := range sum {
		sum[j] /= float64(k)
	}
	return sum, sumTTFT / float64(k)
}

// meanShares is each part's mean share of TTFT, per request.
func meanShares(as []Attribution) []float64 {
	s := make([]float64, len(TTFTComponents))
	n := 0
	for _, a := range as {
		if !(a.TTFTMs > 0) {
			continue
		}
		n++
		for k, name := range TTFTComponents {
			s[k] += a.Parts[name] / a.TTFTMs
		}
	}
	for k := range s {
		if n > 0 {
			s[k] /= float64(n)
		}
	}
	return s
}

// interval is the Confidence percentile interval of values (sorted in
// place).
func interval(values []float64) [2]float64 {
	sort.Float64s(values)
	cut := int(float64(len(values)) * (1 - Confidence) / 2)
	return [2]float64{values[cut], values[len(values)-1-cut]}
}

// tailInterval is part k's tail-mean interval at a level.
func (l *level) tailInterval(k int) [2]float64 {
	v := make([]float64, len(l.boot))
	for b, m := range l.boot {
		v[b] = m[k]
	}
	return interval(v)
}

// growthInterval is part k's tail-mean growth interval from lo to hi.
func growthInterval(lo, hi *level, k int) [2]float64 {
	v := make([]float64, Resamples)
	for b := range v {
		v[b] = hi.boot[b][k] - lo.boot[b][k]
	}
	return interval(v)
}

// pick is a verdict among parts: the named part (index into
// TTFTComponents), the runner-up when its interval overlaps the named
// part's (-1 when none does).
type pick struct{ named, within int }

// rank names the part with the largest point value among those allowed
// and flags the runner-up (largest point value among the other parts)
// when its interval reaches the named part's.
func rank(point []float64, ci [][2]float64, allowed func(k int) bool, skip int) (pick, bool) {
	p := pick{named: -1, within: -1}
	for k := range point {
		if allowed(k) && (p.named < 0 || point[k] > point[p.named]) {
			p.named = k
		}
	}
	if p.named < 0 {
		return p, false
	}
	runner := -1
	for k := range point {
		if k != p.named && k != skip && (runner < 0 || point[k] > point[runner]) {
			runner = k
		}
	}
	if runner >= 0 && ci[runner][1] >= ci[p.named][0] {
		p.within = runner
	}
	return p, true
}

// decide applies the rule to the grouped levels.
func decide(d *Diagnosis, lv []*level, target slo.SLO, tpotP99 map[float64]float64) {
	var valid []*level
	for _, l := range lv {
		if l.decides() {
			valid = append(valid, l)
		}
	}
	if len(valid) == 0 {
		clientBound(d, "every level is invalid")
		return
	}
	var bound []string
	for i, l := range lv {
		if (i == 0 || i == len(lv)-1) && l.clientBound() {
			bound = append(bound, fmt.Sprintf("%g req/s", l.q))
		}
	}
	if len(bound) > 0 {
		clientBound(d, "the load generator bounds the measurement at "+strings.Join(bound, " and ")+", where the verdict would be read")
		return
	}
	for _, l := range valid {
		l.study()
	}
	decideValid(d, valid, target, tpotP99)
	if st := findStall(valid, target); st != nil {
		decideStall(d, valid, st, target, tpotP99)
	}
}

// decideValid applies the rule from the TPOT check on, to studied valid
// levels.
func decideValid(d *Diagnosis, valid []*level, target slo.SLO, tpotP99 map[float64]float64) {
	lo, hi := valid[0], valid[len(valid)-1]
	for _, l := range valid {
		if v, ok := tpotP99[l.q]; ok && v > target.TPOTMillis {
			d.Bottleneck = Decode
			d.Summary = fmt.Sprintf("p99 TPOT %.1f ms at %g req/s exceeds its %g ms SLO: decode steps are too slow for the batch", v, l.q, target.TPOTMillis)
			d.Confidence = tpotSupport(l, target)
			return
		}
	}
	nk := len(TTFTComponents)
	point, ci := make([]float64, nk), make([][2]float64, nk)
	if len(valid) > 1 {
		for k, name := range TTFTComponents {
			point[k] = hi.tail[k] - lo.tail[k]
			ci[k] = growthInterval(lo, hi, k)
			d.Growth[name], d.GrowthCI[name] = point[k], ci[k]
		}
	}
	loTTFT := interval(append([]float64(nil), lo.bootTTFT...))
	if loTTFT[0] > target.TTFTMillis {
		overSLO(d, lo, loTTFT, target)
		return
	}
	// The bar a move must clear: its interval above GrowthFraction of the
	// lowest level's tail, and material against the SLO.
	floor := MaterialFraction * target.TTFTMillis
	thr := math.Max(math.Max(1, GrowthFraction*loTTFT[0]), floor)
	// The bar is at least MaterialFraction of the SLO, which is the
	// client-bound bound (replay.ClientBoundSLOFraction): a client part
	// that clears it is past that bound, and the verdict is client-bound;
	// the host's own cost rising inside the bound never clears it.
	grows := func(k int) bool { return len(valid) > 1 && ci[k][0] > thr }
	// growsIn is the rule's pick in bootstrap resample b (-1: none grows).
	growsIn := func(b int) int {
		best := -1
		for k := range TTFTComponents {
			if g := hi.boot[b][k] - lo.boot[b][k]; g > thr && (best < 0 || g > hi.boot[b][best]-lo.boot[b][best]) {
				best = k
			}
		}
		return best
	}
	if p, ok := rank(point, ci, grows, -1); ok {
		d.Confidence = support(func(b int) bool { return growsIn(b) == p.named })
		if TTFTComponents[p.named] == Client {
			clientBound(d, fmt.Sprintf("the client part's tail mean grows by %.1f ms [%.1f, %.1f] from %g to %g req/s",
				point[p.named], ci[p.named][0], ci[p.named][1], lo.q, hi.q))
			return
		}
		named(d, p)
		d.Summary = fmt.Sprintf("%s grows most with load: its tail mean rises by %.1f ms [%.1f, %.1f] (%g%% interval) from %g to %g req/s "+
			"(tail TTFT %.1f → %.1f ms; the tail is the slowest %g%% of requests)",
			d.Label(), point[p.named], ci[p.named][0], ci[p.named][1], 100*Confidence, lo.q, hi.q, lo.tailTTFT, hi.tailTTFT, 100*TailFraction)
		return
	}
	if dominant(d, valid, target) {
		return
	}
	d.Bottleneck = "none"
	largest := 0
	for k := range hi.tail {
		if hi.tail[k] > hi.tail[largest] {
			largest = k
		}
	}
	d.Confidence = 1
	if len(valid) > 1 {
		d.Confidence = support(func(b int) bool { return growsIn(b) < 0 })
	}
	d.Summary = fmt.Sprintf("no part grows beyond its interval and %.0f ms (%g%% of the TTFT SLO) or dominates the TTFT budget (tail TTFT %.1f → %.1f ms from %g to %g req/s); largest part of the tail: %s",
		floor, 100*MaterialFraction, lo.tailTTFT, hi.tailTTFT, lo.q, hi.q, TTFTComponents[largest])
}

// support is the share of the Resamples bootstrap resamples for which
// same holds: in each, the rule is read on that resample's tail means.
func support(same func(b int) bool) float64 {
	n := 0
	for b := range Resamples {
		if same(b) {
			n++
		}
	}
	return float64(n) / Resamples
}

// tpotSupport is the share of bootstrap resamples of l's requests whose
// p99 TPOT misses the SLO, where the requests carry their TPOT; 0 (not
// resampled) where they do not.
func tpotSupport(l *level, target slo.SLO) float64 {
	var tp []float64
	for _, a := range l.valid {
		if a.tpot > 0 {
			tp = append(tp, a.tpot)
		}
	}
	if len(tp) == 0 {
		return 0
	}
	rng := rand.New(rand.NewPCG(bootstrapSeed, math.Float64bits(l.q)^1))
	draw := make([]float64, len(tp))
	return support(func(int) bool {
		for i := range draw {
			draw[i] = tp[rng.IntN(len(tp))]
		}
		return slo.NearestRank(draw, 99) > target.TPOTMillis
	})
}

// overSLO names the largest part of the tail at the lowest valid level,
// whose tail TTFT is over the TTFT SLO (its whole interval).
func overSLO(d *Diagnosis, lo *level, tailTTFT [2]float64, target slo.SLO) {
	ci := make([][2]float64, len(TTFTComponents))
	for k := range ci {
		ci[k] = lo.tailInterval(k)
	}
	p, _ := rank(lo.tail, ci, func(int) bool { return true }, -1)
	d.Confidence = support(func(b int) bool { return argmax(lo.boot[b]) == p.named })
	if TTFTComponents[p.named] == Client {
		clientBound(d, fmt.Sprintf("the slowest requests' TTFT is over the %g ms SLO at %g req/s and the client part is the largest part of it", target.TTFTMillis, lo.q))
		return
	}
	named(d, p)
	d.Summary = fmt.Sprintf("the slowest %g%% of requests take %.0f ms [%.0f, %.0f] to the first token even at %g req/s (SLO %g ms); %s is the largest part of that (%.1f ms [%.1f, %.1f])",
		100*TailFraction, lo.tailTTFT, tailTTFT[0], tailTTFT[1], lo.q, target.TTFTMillis, d.Label(), lo.tail[p.named], ci[p.named][0], ci[p.named][1])
}

func argmax(v []float64) int {
	best := 0
	for k := range v {
		if v[k] > v[best] {
			best = k
		}
	}
	return best
}

// dominant names a part that holds the TTFT budget at every valid level,
// growing or not, when it is material against the SLO.
func dominant(d *Diagnosis, valid []*level, target slo.SLO) bool {
	floor := MaterialFraction * target.TTFTMillis
	best, bestMin := -1, 0.0
	for k := range TTFTComponents {
		m, tail := math.Inf(1), math.Inf(1)
		for _, l := range valid {
			m, tail = math.Min(m, l.share[k]), math.Min(tail, l.tail[k])
		}
		if m > DominantShare && tail > floor && (best < 0 || m > bestMin) {
			best, bestMin = k, m
		}
	}
	why := ""
	if best >= 0 {
		why = fmt.Sprintf("its mean share of TTFT is at least %.0f%% at every valid level (its tail mean over %.0f ms, %g%% of the TTFT SLO)",
			100*bestMin, floor, 100*MaterialFraction)
	} else if target.TTFTMillis > 0 {
		lim := SLOBudgetFraction * target.TTFTMillis
		for k := range TTFTComponents {
			m := math.Inf(1)
			for _, l := range valid {
				m = math.Min(m, l.tailInterval(k)[0])
			}
			if m > lim && (best < 0 || m > bestMin) {
				best, bestMin = k, m
			}
		}
		if best >= 0 {
			why = fmt.Sprintf("its tail mean is above %.1f ms (%g%% interval) at every valid level, over %g%% of the %g ms TTFT SLO",
				bestMin, 100*Confidence, 100*SLOBudgetFraction, target.TTFTMillis)
		}
	}
	if best < 0 {
		return false
	}
	// Support: the resamples in which the part has the largest tail mean
	// at every valid level.
	d.Confidence = support(func(b int) bool {
		for _, l := range valid {
			if argmax(l.boot[b]) != best {
				return false
			}
		}
		return true
	})
	if TTFTComponents[best] == Client {
		clientBound(d, "the client part dominates the TTFT budget: "+why)
		return true
	}
	d.Bottleneck = TTFTComponents[best]
	d.Summary = fmt.Sprintf("%s dominates the TTFT budget: %s (no part grows beyond its interval)", d.Bottleneck, why)
	return true
}

// named sets the bottleneck from a pick.
func named(d *Diagnosis, p pick) {
	d.Bottleneck = TTFTComponents[p.named]
	if p.within >= 0 {
		d.Uncertain = TTFTComponents[p.within]
	}
}

// clientBound sets the measurement verdict.
func clientBound(d *Diagnosis, why string) {
	d.Bottleneck, d.Uncertain = ClientBound, ""
	d.Summary = clientBoundSummary + " (" + why + ")"
}

func ttfts(as []Attribution) []float64 {
	v := make([]float64, len(as))
	for i, a := range as {
		v[i] = a.TTFTMs
	}
	return v
}
