package diagnose

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/hone-llm/hone/slo"
)

// stall is a freeze found at one level of one run: no request received a
// chunk from model ms from to to, while a request that had streamed
// before it streamed again after it. hit are the level's requests (of
// that run) in flight across it: sent before it ended, their last chunk
// after it began.
type stall struct {
	l        *level
	run      int
	from, to float64
	hit      map[int]bool // index into l.valid
}

// findStall returns the longest freeze of StallTPOTs TPOT SLOs or more at
// a valid level, nil when there is none (or the requests carry no chunk
// times). An engine that is slow, queued or preempting still sends some
// request a chunk every step; only a stopped engine leaves every stream
// silent at once.
func findStall(valid []*level, target slo.SLO) *stall {
	if !(target.TPOTMillis > 0) {
		return nil
	}
	least := StallTPOTs * target.TPOTMillis
	var best *stall
	for _, l := range valid {
		byRun := map[int][]int{}
		for i, a := range l.valid {
			byRun[a.Run] = append(byRun[a.Run], i)
		}
		for _, run := range slices.Sorted(maps.Keys(byRun)) {
			idx := byRun[run]
			var all []float64
			for _, i := range idx {
				all = append(all, l.valid[i].chunks...)
			}
			slices.Sort(all)
			for j := 1; j < len(all); j++ {
				from, to := all[j-1], all[j]
				if to-from < least || best != nil && to-from <= best.to-best.from {
					continue
				}
				if !midStream(l, idx, from, to) {
					continue
				}
				st := &stall{l: l, run: run, from: from, to: to, hit: map[int]bool{}}
				for _, i := range idx {
					if a := l.valid[i]; a.life[0] < to && a.life[1] > from {
						st.hit[i] = true
					}
				}
				best = st
			}
		}
	}
	return best
}

// midStream: some request has chunks both at or before from and at or
// after to — it was streaming, and its stream stopped with every other.
func midStream(l *level, idx []int, from, to float64) bool {
	for _, i := range idx {
		c := l.valid[i].chunks
		if len(c) > 1 && c[0] <= from && c[len(c)-1] >= to {
			return true
		}
	}
	return false
}

// decideStall re-reads d, the verdict on every request, without the
// stall's outlier set: the rule on the other requests (the stalled
// level's p99 TPOT recomputed from theirs). A verdict the freeze did not
// make stands, noted; one that names nothing without the freeze's
// requests becomes Stall; else the verdict without them, noted.
func decideStall(d *Diagnosis, valid []*level, st *stall, target slo.SLO, tpotP99 map[float64]float64) {
	what := fmt.Sprintf("a single %.0f ms freeze at %g req/s (run %d, %.0f–%.0f ms into the level): no stream received a chunk while %d requests were in flight across it",
		st.to-st.from, st.l.q, st.run+1, st.from, st.to, len(st.hit))
	if d.Bottleneck == "none" {
		d.Summary += "; " + what + ", which moves no verdict"
		return
	}
	var rest []*level
	tp := maps.Clone(tpotP99)
	if tp == nil {
		tp = map[float64]float64{}
	}
	for _, l := range valid {
		if l != st.l {
			rest = append(rest, l)
			continue
		}
		kept := &level{q: l.q, invalid: l.invalid, codes: l.codes, runs: l.runs}
		var tpot []float64
		for i, a := range l.valid {
			if !st.hit[i] {
				kept.valid = append(kept.valid, a)
				if a.tpot > 0 {
					tpot = append(tpot, a.tpot)
				}
			}
		}
		delete(tp, l.q)
		if len(tpot) > 0 {
			tp[l.q] = slo.NearestRank(tpot, 99)
		}
		if kept.decides() {
			kept.study()
			rest = append(rest, kept)
		}
	}
	without := Diagnosis{Growth: map[string]float64{}, GrowthCI: map[string][2]float64{}}
	if len(rest) > 0 {
		decideValid(&without, rest, target, tp)
	}
	if len(rest) > 0 && without.Bottleneck != "none" {
		d.Bottleneck, d.Uncertain, d.Confidence, d.Growth, d.GrowthCI = without.Bottleneck, without.Uncertain, without.Confidence, without.Growth, without.GrowthCI
		d.Summary = without.Summary + "; left out: " + what + " (an outlier set, one event)"
		return
	}
	// Support: the share of the level's requests, in that run, the
	// freeze reached — how much of the level one event accounts for.
	n := 0
	for _, a := range st.l.valid {
		if a.Run == st.run {
			n++
		}
	}
	was := d.Label()
	d.Bottleneck, d.Uncertain, d.Confidence = Stall, "", float64(len(st.hit))/math.Max(1, float64(n))
	d.Summary = "stall: " + what + "; an outlier set, one event, not a capacity bottleneck: with them the rule names " + was +
		", without them nothing"
}
