package replay

import (
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// GoodputOf counts reqs' measured requests (ids >= warmups) against
// limits; nil when limits set nothing or no request was measured.
func GoodputOf(reqs []schema.RequestRecord, warmups int, limits slo.PerRequest, windowSeconds float64) *schema.Goodput {
	if !limits.Set() {
		return nil
	}
	out := &schema.Goodput{Limits: limits}
	for _, q := range reqs {
		if q.ID < warmups {
			continue
		}
		out.Measured++
		if goodRequest(limits, q) {
			out.Good++
		}
	}
	if out.Measured == 0 {
		return nil
	}
	out.Fraction = float64(out.Good) / float64(out.Measured)
	if windowSeconds > 0 {
		out.QPS = float64(out.Good) / windowSeconds
	}
	return out
}

// goodRequest: a request that did not complete never meets the limits.
func goodRequest(limits slo.PerRequest, q schema.RequestRecord) bool {
	if q.Outcome != schema.OutcomeOK || q.TTFTMs == nil || q.FinishMs == nil {
		return false
	}
	tpot := q.TPOTMs
	if q.OutputTokens < 2 {
		tpot = nil
	}
	return limits.Met(*q.TTFTMs, tpot, *q.FinishMs-q.ScheduledMs)
}

// LevelGoodput pools level i's goodput over rec's runs, as LevelServeStats
// pools the rest (pooledLevels: the runs valid at the level when there are
// any, else all of them). The rate is the pooled good requests over the runs'
// summed windows; nil when no run has a goodput.
func LevelGoodput(rec *schema.Record, i int) *schema.Goodput {
	var levels []*schema.LevelRecord
	for _, l := range pooledLevels(rec, i) {
		if l.Goodput != nil {
			levels = append(levels, l)
		}
	}
	if len(levels) == 0 {
		return nil
	}
	out := &schema.Goodput{Limits: levels[0].Goodput.Limits}
	window := 0.0
	for _, l := range levels {
		out.Good += l.Goodput.Good
		out.Measured += l.Goodput.Measured
		window += l.WindowSeconds
	}
	out.Fraction = float64(out.Good) / float64(out.Measured)
	if window > 0 {
		out.QPS = float64(out.Good) / window
	}
	return out
}
