package replay

import (
	"fmt"
	"math"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// MinValidRuns is how many valid runs a figure repeated over runs needs
// before anything decides on it, when more than one run was made: one run
// cannot show its noise, and runs the host made invalid cast doubt on the
// ones it spared. A session of one run by design is judged on that run (by
// threshold alone). The optimizer's eligibility and the gate's comparisons
// both use it.
const MinValidRuns = 2

// EnoughValid reports whether valid runs of all suffice: at least one, and
// MinValidRuns when all is more than one.
func EnoughValid(valid, all int) bool { return valid >= 1 && valid >= min(MinValidRuns, all) }

// ScaleToShare is the factor k by which the time scale must grow for host
// time h (model ms at the measured scale) to be at most the fraction f of
// a figure made of model time and host time (model ms; host includes h):
// host time is wall time, so at k times the scale it is 1/k as much model
// time, and h/k <= f (model + host/k) when k >= (h - f host) / (f model).
// 0 (no estimate) when the figure has no model time left.
func ScaleToShare(h, host, model, f float64) float64 {
	if !(model > 0) || !(h > 0) {
		return 0
	}
	return max(h-f*host, 0) / (f * model)
}

// lateScale is ScaleToShare for late KV pulls: per request, late model ms
// and their pulls' modelled ms b. A late pull took the host scale ×
// (late + b) of wall time; at k times the scale that is (late + b)/k of
// model time, late by (late + b)/k - b where that is positive. With the
// level's other host time lag (1/k as much) and its model time model, the
// smallest k with (late+b)/k - b <= f (model + lag/k + (late+b)/k - b).
// Without b (an emulator before its counter) it is ScaleToShare's, which
// is larger: every late ms then counts as host time.
func lateScale(late, b, lag, model, f float64) float64 {
	if !(model > 0) || !(late > 0) {
		return 0
	}
	a := late + b
	return max(a*(1-f)-f*lag, 0) / (f*model + b*(1-f))
}

// judgeLevel sets the level's verdict from what the level measured. Reasons
// added by Invalidate before are kept.
func judgeLevel(lr *schema.LevelRecord, target slo.SLO, timeScale float64) {
	v := &lr.Verdict
	v.Valid = len(v.Reasons) == 0
	if !lr.Complete {
		v.Add(schema.ReasonIncomplete, "%d of %d requests sent before the level stopped", lr.Sent, lr.Planned)
	}
	// The host time inside a median TTFT, which is measured from the
	// scheduled send: the dispatch lag and the model time late KV pulls
	// added (the mean per request stands in for the median's share). What
	// is left is the model's, which no time scale changes; the scale
	// estimates of the host reasons rest on it.
	perReq, pulls, modelReq := 0.0, 0.0, 0.0
	from := lr.Counters.Before // the warm-ups' pulls, cold and longest, are in no measured figure
	if lr.Counters.Warmup != nil && !lr.WarmupOverlap {
		from = lr.Counters.Warmup
	}
	if n, late, mod, ok := EmulatorLateness(from, lr.Counters.After); ok && lr.Measured > 0 && late > 0 {
		perReq, pulls, modelReq = late/float64(lr.Measured), n, max(mod, 0)/float64(lr.Measured)
	}
	host := lr.DispatchLagP50Ms + perReq
	model := lr.P50TTFTMs - host
	lim99 := schema.ClientBoundSLOFraction * target.TTFTMillis
	if lr.DispatchLagP99Ms > lim99 || lr.Measured > 0 && lr.DispatchLagP50Ms > schema.ClientBoundTTFTFraction*lr.P50TTFTMs {
		// Both bounds must clear at the estimate, whichever fired.
		k := lr.DispatchLagP99Ms / lim99 // the SLO stays
		if lr.Measured > 0 && lr.DispatchLagP50Ms > 0 {
			if model > 0 {
				k = max(k, ScaleToShare(lr.DispatchLagP50Ms, host, model, schema.ClientBoundTTFTFraction))
			} else {
				k = 0 // no model time left to judge the median bound by
			}
		}
		if lr.DispatchLagP99Ms > lim99 {
			v.AddScaled(schema.ReasonClientBound, k, "p99 dispatch lag %.3g ms > %g%% of the %g ms TTFT SLO (%.3g ms): the load generator sent late",
				lr.DispatchLagP99Ms, 100*schema.ClientBoundSLOFraction, target.TTFTMillis, lim99)
		} else {
			v.AddScaled(schema.ReasonClientBound, k, "median dispatch lag %.3g ms > %g%% of the median TTFT %.3g ms: the load generator sent late",
				lr.DispatchLagP50Ms, 100*schema.ClientBoundTTFTFraction, lr.P50TTFTMs)
		}
	}
	if h := lr.WarmupHitRate; h != nil && *h > schema.WarmStartHitRate {
		v.Add(schema.ReasonWarmStart, "the warm-up requests found %.1f%% of their prompt tokens cached (a cold engine: ~0%%): the cache was warm at the start",
			100**h)
	}
	for _, q := range lr.Requests {
		if s := engineTimeScale(&q); s > 0 && math.Abs(s-timeScale) > 1e-9*timeScale {
			v.Add(schema.ReasonTimeScaleMismatch, "request %d: the engine reports time scale %g, the record divides by %g", q.ID, s, timeScale)
			break
		}
	}
	judgeCounters(lr)
	if perReq > schema.EmulatorBoundTTFTFraction*lr.P50TTFTMs {
		v.AddScaled(schema.ReasonEmulatorBound, lateScale(perReq, modelReq, lr.DispatchLagP50Ms, model, schema.EmulatorBoundTTFTFraction), "%.0f KV pulls ended after their modelled end because the bytes had not crossed this host's side channel: "+
			"%.3g model ms added per measured request, > %g%% of the median TTFT %.3g ms (slow the engine, not the client: a larger emulator.time_scale in the deployment spec, or hone sim serve --time-scale, or hone optimize --time-scale; or a host that keeps the modelled link)",
			pulls, perReq, 100*schema.EmulatorBoundTTFTFraction, lr.P50TTFTMs)
	}
	judgeDelivery(lr)
	if v.Reasons == nil {
		v.Reasons = []schema.Reason{}
	}
}

// judgeDelivery finds an emulated level whose tokens the host delivered
// late: over the measured requests that carry the emulator's own timing
// (its time_scale key: an emulation's ground truth), the client's median
// or p99 TPOT exceeds the engine's by more than
// schema.EmulatorBoundTPOTFraction. The engine's TPOT of a request is its
// decode time (first to last token, model ms) over the tokens after the
// first, as the client's is; what differs is host time, on the emulator's
// writes or the client's reads.
func judgeDelivery(lr *schema.LevelRecord) {
	var client, eng []float64
	for _, q := range lr.Requests {
		if q.ID < Sessions || q.Outcome != schema.OutcomeOK || q.TPOTMs == nil || q.OutputTokens < 2 {
			continue
		}
		m, ok := schema.DecodeEngineMetrics(q.EngineMetrics)
		if !ok || m.TimeScale == nil || m.DecodeTimeMs == nil {
			continue
		}
		client = append(client, *q.TPOTMs)
		eng = append(eng, *m.DecodeTimeMs/float64(q.OutputTokens-1))
	}
	if len(client) == 0 {
		return
	}
	f := schema.EmulatorBoundTPOTFraction
	for _, p := range []struct {
		name string
		q    float64
	}{{"median", 50}, {"p99", 99}} {
		c, e := slo.NearestRank(client, p.q), slo.NearestRank(eng, p.q)
		if h := c - e; e > 0 && h > f*e {
			lr.Verdict.AddScaled(schema.ReasonEmulatorBound, ScaleToShare(h, h, e, f),
				"the client's %s TPOT %.3g ms is %.1f%% over the emulated engine's own %.3g ms (model time) for the same %d requests, > %g%%: "+
					"the host delivered tokens late (a starved client or emulator); a larger time scale, or a quieter host",
				p.name, c, 100*h/e, e, len(client), 100*f)
			return
		}
	}
}

// judgeCounters finds counter_contamination: a hit rate outside [0, 1], or
// prefix-cache queries that grew by fewer tokens than reached the engine
// or by more than CounterQueryFactor times those sent.
func judgeCounters(lr *schema.LevelRecord) {
	v := &lr.Verdict
	for _, r := range []struct {
		name string
		h    *float64
	}{{"hit_rate_metrics", lr.HitRateMetrics}, {"hit_rate_metrics_measure", lr.HitRateMetricsMeasure}, {"hit_rate_cached_tokens", lr.HitRateCachedTokens}} {
		if r.h != nil && (*r.h < 0 || *r.h > 1 || math.IsNaN(*r.h)) {
			v.Add(schema.ReasonCounterContamination, "%s %.4g is outside [0, 1]", r.name, *r.h)
		}
	}
	if _, dq, ok := counterDelta(lr.Counters.Before, lr.Counters.After); ok && dq != 0 {
		var reached, sent float64
		for _, q := range lr.Requests {
			sent += float64(q.InputTokens)
			if q.FirstMs != nil {
				reached += float64(q.InputTokens)
			}
		}
		switch {
		case dq < reached:
			v.Add(schema.ReasonCounterContamination, "prefix-cache queries grew by %.0f tokens, fewer than the %.0f prompt tokens that reached the engine (counters reset or restarted)", dq, reached)
		case dq > schema.CounterQueryFactor*sent:
			v.Add(schema.ReasonCounterContamination, "prefix-cache queries grew by %.0f tokens, more than %g× the %.0f prompt tokens sent (traffic that is not this level's)", dq, schema.CounterQueryFactor, sent)
		}
	}
}

// EmulatorLateness is Δ(late KV pulls), Δ(model ms they added) and
// Δ(their modelled ms) between two scrapes; ok is false when either scrape
// lacks the first two (a real engine, or an emulator that predates them);
// modelMs is 0 from an emulator that predates its counter.
func EmulatorLateness(before, after schema.Counters) (pulls, lateMs, modelMs float64, ok bool) {
	n0, ok0 := before[schema.EmulatorKVPullsLate]
	n1, ok1 := after[schema.EmulatorKVPullsLate]
	s0, ok2 := before[schema.EmulatorKVPullLateSeconds]
	s1, ok3 := after[schema.EmulatorKVPullLateSeconds]
	if !ok0 || !ok1 || !ok2 || !ok3 {
		return 0, 0, 0, false
	}
	m0, ok4 := before[schema.EmulatorKVPullLateModelSeconds]
	m1, ok5 := after[schema.EmulatorKVPullLateModelSeconds]
	if ok4 && ok5 {
		modelMs = 1000 * (m1 - m0)
	}
	return n1 - n0, 1000 * (s1 - s0), modelMs, true
}

// counterDelta is Δhits and Δqueries between two scrapes.
func counterDelta(before, after schema.Counters) (dh, dq float64, ok bool) {
	h0, q0, ok0 := prefixCache(before)
	h1, q1, ok1 := prefixCache(after)
	if !ok0 || !ok1 {
		return 0, 0, false
	}
	return h1 - h0, q1 - q0, true
}

// Judge sets every run's verdict and objective from its levels' verdicts,
// and the record's verdict from its runs'. Run it after a level was
// invalidated from outside.
func Judge(rec *schema.Record) {
	rec.Verdict = schema.Verdict{Valid: true, Reasons: []schema.Reason{}}
	for i := range rec.Runs {
		rr := &rec.Runs[i]
		summarizeRun(rr, rec.GPUs)
		for _, r := range rr.Verdict.Reasons {
			rec.Verdict.Reasons = append(rec.Verdict.Reasons, schema.Reason{Code: r.Code, Detail: fmt.Sprintf("run %d, %s", rr.Run+1, r.Detail), Scale: r.Scale})
			rec.Verdict.Valid = false
		}
	}
	if rec.Incomplete && !rec.Verdict.Has(schema.ReasonIncomplete) {
		rec.Verdict.Add(schema.ReasonIncomplete, "the replay stopped early: %s", rec.Error)
	}
}
