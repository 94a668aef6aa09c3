package replay

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/hone-llm/hone/slo"
)

// Reasons a level's measurement is invalid. An invalid level still shows
// its figures, but nothing decides on them: not the run's objective, not
// the optimizer's selection, not diagnose's bottleneck, not the gate.
const (
	// ReasonClientBound: the load generator (or the hops between it and
	// the engine) distorted what was measured.
	ReasonClientBound = "client_bound"
	// ReasonWarmStart: the prefix cache was not in the prescribed (cold)
	// state when the level started.
	ReasonWarmStart = "warm_start"
	// ReasonTimeScaleMismatch: the engine ran on another time scale than
	// the one the record divides by.
	ReasonTimeScaleMismatch = "time_scale_mismatch"
	// ReasonIncomplete: the level stopped before every request was sent
	// and answered (interrupted, or a setup step failed).
	ReasonIncomplete = "incomplete"
	// ReasonCounterContamination: the engine's counters moved by traffic
	// that is not this level's, so hit rates read from them are not this
	// level's either.
	ReasonCounterContamination = "counter_contamination"
	// ReasonEmulatorBound: an emulated engine's host could not keep the
	// engine's model, and host time entered the model's own clock (KV
	// pulls whose bytes crossed the side channel after the modelled link
	// would have carried them).
	ReasonEmulatorBound = "emulator_bound"
)

// The emulator's counters (hone sim serve's /metrics, merged by hone's
// proxy) that the emulator_bound verdict reads around a level: how many KV
// pulls ended after their modelled end because the bytes had not yet
// crossed the side channel, and the model seconds they added together.
const (
	EmulatorKVPullsLate       = "hone_emulator_kv_pulls_late_total"
	EmulatorKVPullLateSeconds = "hone_emulator_kv_pull_late_seconds_total"
	// EmulatorKVPullLateModelSeconds is the modelled duration of those
	// same late pulls, summed: with it, the host's wall time per pull is
	// known (scale × (late + modelled)), and so is how late the pulls would
	// be at another time scale.
	EmulatorKVPullLateModelSeconds = "hone_emulator_kv_pull_late_model_seconds_total"
)

// HostReason reports whether code is a reason the measuring host caused,
// not the deployment measured: client_bound (the load generator) or
// emulator_bound (the emulated engine's host). A rerun on a quieter host,
// or at a larger time scale, can clear it.
func HostReason(code string) bool { return code == ReasonClientBound || code == ReasonEmulatorBound }

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

// Thresholds of the verdicts, stated once for the record, the docs and the
// tests.
const (
	// ClientBoundSLOFraction: a level is client-bound when its p99
	// dispatch lag (how late the load generator sent, model time) exceeds
	// this fraction of the TTFT SLO. Every TTFT is measured from the
	// scheduled send, so lag of that size moves a pass/fail verdict by
	// more than the margin a decision may rest on, and late sends bunch up
	// (the arrival process is no longer the one the workload specifies).
	ClientBoundSLOFraction = 0.05
	// ClientBoundTTFTFraction: a level is also client-bound when its median
	// dispatch lag (or, in diagnose, its median client/proxy residual)
	// exceeds this fraction of its median TTFT: the client is then the
	// largest share of what is measured, larger than every engine-side
	// part together, and the level measures the host, not the deployment.
	ClientBoundTTFTFraction = 0.5
	// WarmStartHitRate: the warm-up requests (ids 0-7, one per session,
	// distinct prefixes) find nearly nothing cached on a cold engine; a
	// hit rate above this over them means the cache was warm.
	WarmStartHitRate = 0.5
	// CounterQueryFactor bounds the prefix-cache queries a level may add:
	// a prompt is queried once per engine it passes (two in P/D) and again
	// after each preemption; more than this many times the prompt tokens
	// sent means traffic that is not this level's.
	CounterQueryFactor = 4.0
	// EmulatorBoundTTFTFraction: a level is emulator-bound when the model
	// time its emulated engines' host added to KV pulls, per measured
	// request, exceeds this fraction of the level's median TTFT: the
	// emulated figure then differs from the model's by more than the
	// margin a prediction is checked to (5%), by host time alone.
	EmulatorBoundTTFTFraction = 0.05
)

// VerdictRule states the thresholds in words, for records and reports.
var VerdictRule = fmt.Sprintf("A level is invalid when: client_bound (p99 dispatch lag > %g%% of the TTFT SLO, "+
	"or median dispatch lag > %g%% of the median TTFT; diagnose adds the client/proxy residual against the same bounds); "+
	"warm_start (the warm-up requests' prefix-cache hit rate > %g%%: the level did not start cold); "+
	"time_scale_mismatch (the engine reports another time scale than the record's); incomplete (not every request was sent and answered); "+
	"counter_contamination (a hit rate outside [0, 1], or prefix-cache queries below the prompt tokens that reached the engine "+
	"or above %g× the prompt tokens sent); emulator_bound (an emulated engine's host added KV-transfer time to the model's clock, after the warm-ups: "+
	"more than %g%% of the median TTFT per measured request). Invalid levels never decide an objective, a selection, a bottleneck or a gate verdict.",
	100*ClientBoundSLOFraction, 100*ClientBoundTTFTFraction, 100*WarmStartHitRate, CounterQueryFactor, 100*EmulatorBoundTTFTFraction)

// Reason is one cause of an invalid verdict.
type Reason struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// Scale, on a reason the host caused (HostReason) and judged from
	// figures that say how much host time entered the model's clock,
	// estimates how many times larger the time scale would have had to be
	// for the level to clear it: host time is fixed in wall time, so in
	// model time it shrinks as 1/scale while the model's own time stays.
	// 0: no estimate.
	Scale float64 `json:"scale,omitempty"`
}

func (r Reason) String() string { return r.Code + ": " + r.Detail }

// Verdict says whether a level's (or a run's, or a record's) figures may
// decide anything, and why not.
type Verdict struct {
	Valid   bool     `json:"valid"`
	Reasons []Reason `json:"reasons"`
}

// add records a reason once per code: the first detail stays.
func (v *Verdict) add(code, format string, a ...any) { v.addScaled(code, 0, format, a...) }

// addScaled is add with the reason's Scale estimate. A second finding of
// the same code keeps the first detail and the larger estimate, or none
// when either has none.
func (v *Verdict) addScaled(code string, scale float64, format string, a ...any) {
	for i := range v.Reasons {
		if r := &v.Reasons[i]; r.Code == code {
			r.Scale = mergeScale(r.Scale, scale)
			return
		}
	}
	v.Reasons = append(v.Reasons, Reason{Code: code, Detail: fmt.Sprintf(format, a...), Scale: scale})
	v.Valid = false
}

// mergeScale is two findings' Scale for one reason: the larger, or 0 (no
// estimate) when either has none.
func mergeScale(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return max(a, b)
}

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

// Has reports whether the verdict carries a reason with this code.
func (v Verdict) Has(code string) bool {
	for _, r := range v.Reasons {
		if r.Code == code {
			return true
		}
	}
	return false
}

// Codes lists the verdict's reason codes, sorted, joined by commas.
func (v Verdict) Codes() string {
	var c []string
	for _, r := range v.Reasons {
		c = append(c, r.Code)
	}
	sort.Strings(c)
	return strings.Join(c, ",")
}

// String is "valid" or the reasons, one after another.
func (v Verdict) String() string {
	if v.Valid {
		return "valid"
	}
	var s []string
	for _, r := range v.Reasons {
		s = append(s, r.String())
	}
	return "invalid (" + strings.Join(s, "; ") + ")"
}

// Invalidate marks a level invalid for a reason found outside replay (for
// example diagnose's client/proxy residual). Call Record.Judge afterwards
// so that runs and objectives follow.
func (lr *LevelRecord) Invalidate(code, format string, a ...any) {
	lr.Verdict.add(code, format, a...)
}

// InvalidateScaled is Invalidate for a host reason with its Scale
// estimate (see Reason.Scale; 0: none).
func (lr *LevelRecord) InvalidateScaled(code string, scale float64, format string, a ...any) {
	lr.Verdict.addScaled(code, scale, format, a...)
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

// judgeCounters adds counter_contamination to the level's verdict where
// its hit rates are out of range or its prefix-cache queries do not
// match the prompt tokens it sent.
func judgeCounters(lr *LevelRecord) {
	v := &lr.Verdict
	for _, r := range []struct {
		name string
		h    *float64
	}{{"hit_rate_metrics", lr.HitRateMetrics}, {"hit_rate_metrics_measure", lr.HitRateMetricsMeasure}, {"hit_rate_cached_tokens", lr.HitRateCachedTokens}} {
		if r.h != nil && (*r.h < 0 || *r.h > 1 || math.IsNaN(*r.h)) {
			v.add(ReasonCounterContamination, "%s %.4g is outside [0, 1]", r.name, *r.h)
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
			v.add(ReasonCounterContamination, "prefix-cache queries grew by %.0f tokens, fewer than the %.0f prompt tokens that reached the engine (counters reset or restarted)", dq, reached)
		case dq > CounterQueryFactor*sent:
			v.add(ReasonCounterContamination, "prefix-cache queries grew by %.0f tokens, more than %g× the %.0f prompt tokens sent (traffic that is not this level's)", dq, CounterQueryFactor, sent)
		}
	}
}

// judge sets the level's verdict from what the level measured. Reasons
// added by Invalidate before are kept.
func (lr *LevelRecord) judge(target slo.SLO, timeScale float64) {
	v := &lr.Verdict
	v.Valid = len(v.Reasons) == 0
	if !lr.Complete {
		v.add(ReasonIncomplete, "%d of %d requests sent before the level stopped", lr.Sent, lr.Planned)
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
	lim99 := ClientBoundSLOFraction * target.TTFTMillis
	if lr.DispatchLagP99Ms > lim99 || lr.Measured > 0 && lr.DispatchLagP50Ms > ClientBoundTTFTFraction*lr.P50TTFTMs {
		// Both bounds must clear at the estimate, whichever fired.
		k := lr.DispatchLagP99Ms / lim99 // the SLO stays
		if lr.Measured > 0 && lr.DispatchLagP50Ms > 0 {
			if model > 0 {
				k = max(k, ScaleToShare(lr.DispatchLagP50Ms, host, model, ClientBoundTTFTFraction))
			} else {
				k = 0 // no model time left to judge the median bound by
			}
		}
		if lr.DispatchLagP99Ms > lim99 {
			v.addScaled(ReasonClientBound, k, "p99 dispatch lag %.3g ms > %g%% of the %g ms TTFT SLO (%.3g ms): the load generator sent late",
				lr.DispatchLagP99Ms, 100*ClientBoundSLOFraction, target.TTFTMillis, lim99)
		} else {
			v.addScaled(ReasonClientBound, k, "median dispatch lag %.3g ms > %g%% of the median TTFT %.3g ms: the load generator sent late",
				lr.DispatchLagP50Ms, 100*ClientBoundTTFTFraction, lr.P50TTFTMs)
		}
	}
	if h := lr.WarmupHitRate; h != nil && *h > WarmStartHitRate {
		v.add(ReasonWarmStart, "the warm-up requests found %.1f%% of their prompt tokens cached (a cold engine: ~0%%): the cache was warm at the start",
			100**h)
	}
	for _, q := range lr.Requests {
		if s := q.engineTimeScale(); s > 0 && math.Abs(s-timeScale) > 1e-9*timeScale {
			v.add(ReasonTimeScaleMismatch, "request %d: the engine reports time scale %g, the record divides by %g", q.ID, s, timeScale)
			break
		}
	}
	judgeCounters(lr)
	if perReq > EmulatorBoundTTFTFraction*lr.P50TTFTMs {
		v.addScaled(ReasonEmulatorBound, lateScale(perReq, modelReq, lr.DispatchLagP50Ms, model, EmulatorBoundTTFTFraction), "%.0f KV pulls ended after their modelled end because the bytes had not crossed this host's side channel: "+
			"%.3g model ms added per measured request, > %g%% of the median TTFT %.3g ms (slow the engine, not the client: a larger emulator.time_scale in the deployment spec, or hone sim serve --time-scale, or hone optimize --time-scale; or a host that keeps the modelled link)",
			pulls, perReq, 100*EmulatorBoundTTFTFraction, lr.P50TTFTMs)
	}
	if v.Reasons == nil {
		v.Reasons = []Reason{}
	}
}

// EmulatorLateness is Δ(late KV pulls), Δ(model ms they added) and
// Δ(their modelled ms) between two scrapes; ok is false when either scrape
// lacks the first two (a real engine, or an emulator that predates them);
// modelMs is 0 from an emulator that predates its counter.
func EmulatorLateness(before, after Counters) (pulls, lateMs, modelMs float64, ok bool) {
	n0, ok0 := before[EmulatorKVPullsLate]
	n1, ok1 := after[EmulatorKVPullsLate]
	s0, ok2 := before[EmulatorKVPullLateSeconds]
	s1, ok3 := after[EmulatorKVPullLateSeconds]
	if !ok0 || !ok1 || !ok2 || !ok3 {
		return 0, 0, 0, false
	}
	m0, ok4 := before[EmulatorKVPullLateModelSeconds]
	m1, ok5 := after[EmulatorKVPullLateModelSeconds]
	if ok4 && ok5 {
		modelMs = 1000 * (m1 - m0)
	}
	return n1 - n0, 1000 * (s1 - s0), modelMs, true
}

// counterDelta is Δhits and Δqueries between two scrapes.
func counterDelta(before, after Counters) (dh, dq float64, ok bool) {
	h0, q0, ok0 := before.prefixCache()
	h1, q1, ok1 := after.prefixCache()
	if !ok0 || !ok1 {
		return 0, 0, false
	}
	return h1 - h0, q1 - q0, true
}

// Judge sets every run's verdict and objective from its levels' verdicts,
// and the record's verdict from its runs'. Run it after a level was
// invalidated from outside.
func (rec *Record) Judge() {
	rec.Verdict = Verdict{Valid: true, Reasons: []Reason{}}
	for i := range rec.Runs {
		rr := &rec.Runs[i]
		rr.summarize(rec.GPUs)
		for _, r := range rr.Verdict.Reasons {
			rec.Verdict.Reasons = append(rec.Verdict.Reasons, Reason{Code: r.Code, Detail: fmt.Sprintf("run %d, %s", rr.Run+1, r.Detail), Scale: r.Scale})
			rec.Verdict.Valid = false
		}
	}
	if rec.Incomplete && !rec.Verdict.Has(ReasonIncomplete) {
		rec.Verdict.add(ReasonIncomplete, "the replay stopped early: %s", rec.Error)
	}
}

// InvalidLevels lists "run R, Q req/s: reasons" for every invalid level.
func (rec *Record) InvalidLevels() []string {
	var out []string
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			if !l.Verdict.Valid {
				out = append(out, fmt.Sprintf("run %d, %s: %s", r.Run+1, l.Name(), l.Verdict.String()))
			}
		}
	}
	return out
}

// FailedAllowance is how many of n measured requests may fail at a level
// before its p99 cannot stand for it: the 1% a p99 leaves out, rounded
// down (0 of fewer than 100).
func FailedAllowance(n int) int { return n / 100 }

// FailedLevels says, level by level, where requests failed beyond what
// the figures can absorb: every measured request failed (timeouts
// included: nothing was measured), or more than FailedAllowance of them
// ended in an error (an HTTP error, a refused or reset connection, a cut
// stream, a malformed reply). Timeouts alongside completed requests are
// the deployment missing its SLO, which the level's pass flag already
// says; interrupted requests are the run's interruption, said elsewhere.
// A level's validity is about the host and the procedure, not the
// deployment, so failures never make a level invalid: they make the run
// fail.
func (rec *Record) FailedLevels() []string {
	var out []string
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			errs, all := 0, 0
			var kinds []string
			for _, o := range []string{OutcomeHTTPError, OutcomeConnectError, OutcomeStreamCut, OutcomeMalformed, OutcomeTimeout} {
				n := l.Failures[o]
				if n == 0 {
					continue
				}
				all += n
				if o != OutcomeTimeout {
					errs += n
				}
				kinds = append(kinds, fmt.Sprintf("%d %s", n, o))
			}
			measured := l.Measured + all + l.Failures[OutcomeCanceled]
			switch {
			case all > 0 && l.Measured == 0:
				out = append(out, fmt.Sprintf("run %d, %s: every one of %d measured requests failed (%s)", r.Run+1, l.Name(), measured, strings.Join(kinds, ", ")))
			case errs > FailedAllowance(measured):
				out = append(out, fmt.Sprintf("run %d, %s: %d of %d measured requests failed (%s), more than the %d a p99 can leave out",
					r.Run+1, l.Name(), errs, measured, strings.Join(kinds, ", "), FailedAllowance(measured)))
			}
		}
	}
	return out
}
