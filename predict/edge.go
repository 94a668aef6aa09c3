package predict

import (
	"fmt"
	"strings"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// EdgeMargin is how near an SLO limit a predicted p99 may lie before the
// objective resting on it is called too close to call: 2% of the limit.
// The model leaves out what the live path adds (the proxy's and the
// client's HTTP hops, ~1% of TTFT on the emulated L4 profile), and a p99
// over a level's measured requests is one or two requests, so a predicted
// p99 within 2% of a limit may land on either side of it when measured
// (the 4-GPU regret grid's colocated DP3 without cache: predicted p99 TTFT
// 496.5 ms at 16 req/s against 500 ms, measured ~501 ms there, and its
// objective fell from 8.4 to 6.3 req/s).
const EdgeMargin = 0.02

// Edge says why rec's objective (its first run's) is too close to call
// against target: the objective's level passes with a p99 within margin
// under a limit, or a level above it (a larger effective QPS) fails only
// by p99s within margin over the limits. "" when neither: a measurement
// of the same engine should land on the same level. Only the SLO
// percentiles are judged: a level failed for another reason (incomplete,
// invalid outputs) is not a near miss.
func Edge(rec *schema.Record, target slo.SLO, margin float64) string {
	if rec == nil || len(rec.Runs) == 0 || target.TTFTMillis <= 0 || target.TPOTMillis <= 0 {
		return ""
	}
	levels := rec.Runs[0].Levels
	var top *schema.LevelRecord
	for i := range levels {
		if l := &levels[i]; l.Passed && (top == nil || l.EffectiveQPS > top.EffectiveQPS) {
			top = l
		}
	}
	var why []string
	if top != nil {
		for _, m := range edgeMetrics(top, target) {
			if m.value > (1-margin)*m.limit {
				why = append(why, fmt.Sprintf("p99 %s %.1f ms at %g req/s passes within %.0f%% under the %g ms limit", m.name, m.value, top.OfferedQPS, 100*margin, m.limit))
			}
		}
	}
	for i := range levels {
		l := &levels[i]
		if l.Passed || !l.Complete || l.Invalid > 0 || (top != nil && l.EffectiveQPS <= top.EffectiveQPS) {
			continue
		}
		near, over := true, []string{}
		for _, m := range edgeMetrics(l, target) {
			if m.value > m.limit {
				over = append(over, fmt.Sprintf("p99 %s %.1f ms", m.name, m.value))
				near = near && m.value <= (1+margin)*m.limit
			}
		}
		if near && len(over) > 0 {
			why = append(why, fmt.Sprintf("%s at %g req/s fails within %.0f%% over the limit", strings.Join(over, " and "), l.OfferedQPS, 100*margin))
		}
	}
	return strings.Join(why, "; ")
}

type edgeMetric struct {
	name         string
	value, limit float64
}

func edgeMetrics(l *schema.LevelRecord, target slo.SLO) []edgeMetric {
	return []edgeMetric{{"TTFT", l.P99TTFTMs, target.TTFTMillis}, {"TPOT", l.P99TPOTMs, target.TPOTMillis}}
}
