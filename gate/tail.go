package gate

import (
	"fmt"
	"math"
	"sort"

	"github.com/hone-llm/hone/slo"
)

// A level's p99 over its own few dozen requests is their maximum: between
// two runs of one deployment it moved from 18 to 101 ms, so the gate
// compares tails on every measured request of the runs valid at a level,
// pooled (the runs are exchangeable: one deployment, one schedule), each
// side with a confidence interval from its order statistics.
const (
	// TailConfidence is the two-sided confidence, in percent, of each
	// side's interval for a tail percentile (slo.PercentileCI).
	TailConfidence = 95.0
	// LooseTailChange is the change a "max of n" tail must exceed to fail
	// (or the metric's fail threshold, whichever is larger): with too few
	// requests for an interval the figure is a maximum, which one slow
	// request sets. Two replays of one emulated deployment shaped like the
	// demo (3 runs × 40 measured requests a level, time scale 0.25) had
	// pooled TTFT maxima up to 2.4× apart at a level, so only a maximum
	// more than 4× the baseline's is read as the deployment's.
	LooseTailChange = 3.0
)

// TailMinRequests is the pooled count a side needs for its p99
// interval's upper rank: 368 at 95% (0.99^n <= 0.025).
var TailMinRequests = slo.MinCountForCI(99, TailConfidence)

// TailRule states the tail rule in words, for reports and help.
var TailRule = fmt.Sprintf("p99 TTFT and p99 TPOT are compared on the measured requests pooled over the runs valid at the level, "+
	"when both sides carry per-request values: each side's p99 (nearest rank) with its distribution-free %g%% confidence interval "+
	"from order statistics (binomial ranks). A tail fails only when the candidate's interval lies wholly above the baseline's "+
	"(candidate's lower bound > baseline's upper bound) and its p99 is worse by more than the metric's fail threshold; "+
	"it warns when the intervals are apart and the change is between the warn and fail thresholds, and is pass otherwise. "+
	"With fewer than %d pooled requests on a side (too few for the interval's upper rank) both figures are the pooled maximum, "+
	"\"max of n\", which fails only when worse by more than max(the fail threshold, %g%%) and never warns or improves. "+
	"Without per-request values on a side (a schema-2 baseline, a simulation record) a tail is compared per run, as every other metric",
	TailConfidence, TailMinRequests, 100*LooseTailChange)

// Tail is a tail metric's comparison on pooled per-request values.
type Tail struct {
	Percentile float64 `json:"percentile"`
	Confidence float64 `json:"confidence"` // percent, two-sided, per side
	// MinRequests is the pooled count a side needs for its interval's
	// upper rank; with fewer on either side both figures are maxima.
	MinRequests int        `json:"min_requests"`
	MaxOfN      bool       `json:"max_of_n"`
	Baseline    TailFigure `json:"baseline"`
	Candidate   TailFigure `json:"candidate"`
}

// TailFigure is one side's pooled tail.
type TailFigure struct {
	Runs     int `json:"runs"`
	Requests int `json:"requests"`
	// Value is the pooled percentile (nearest rank), or the pooled
	// maximum when the comparison is "max of n".
	Value float64 `json:"value"`
	// The interval [x(LowerRank), x(UpperRank)] of the sorted pooled
	// values; a rank is 0 (and its bound omitted) when the requests are
	// too few for it.
	LowerRank int     `json:"ci_lower_rank,omitempty"`
	UpperRank int     `json:"ci_upper_rank,omitempty"`
	Lower     float64 `json:"ci_lower,omitempty"`
	Upper     float64 `json:"ci_upper,omitempty"`
}

// pool is a series' per-request values over its runs, sorted; ok is false
// when a run has none (a record without per-request detail). s holds the
// valid runs only.
func pool(s Series) (all []float64, ok bool) {
	if len(s.Samples) != len(s.Values) {
		return nil, false
	}
	for _, v := range s.Samples {
		if len(v) == 0 {
			return nil, false
		}
		all = append(all, v...)
	}
	sort.Float64s(all)
	return all, true
}

// tailFigure is the pooled figure of sorted values, n >= 1.
func tailFigure(sorted []float64, runs int, p float64) TailFigure {
	n := len(sorted)
	f := TailFigure{Runs: runs, Requests: n, Value: sorted[slo.NearestRankIndex(n, p)-1]}
	f.LowerRank, f.UpperRank = slo.PercentileCI(n, p, TailConfidence)
	if f.LowerRank > 0 {
		f.Lower = sorted[f.LowerRank-1]
	}
	if f.UpperRank > 0 {
		f.Upper = sorted[f.UpperRank-1]
	}
	return f
}

// compareTail compares a tail metric on pooled per-request values; base
// and cand hold their valid runs. why says, when ok is false, which side
// lacks per-request values.
func compareTail(base, cand Series, cfg Config) (r Result, why string, ok bool) {
	p := Metrics[base.Metric].Percentile
	b, okb := pool(base)
	c, okc := pool(cand)
	switch {
	case p == 0:
		return r, "", false
	case !okb && !okc:
		return r, "no per-request values on either side", false
	case !okb:
		return r, "the baseline has no per-request values (recreate it from replay records)", false
	case !okc:
		return r, "the candidate has no per-request values", false
	}
	t := &Tail{Percentile: p, Confidence: TailConfidence, MinRequests: slo.MinCountForCI(p, TailConfidence),
		Baseline: tailFigure(b, len(base.Values), p), Candidate: tailFigure(c, len(cand.Values), p)}
	if t.Baseline.UpperRank == 0 || t.Candidate.UpperRank == 0 {
		t.MaxOfN = true
		t.Baseline.Value, t.Candidate.Value = b[len(b)-1], c[len(c)-1]
	}
	r = Result{Series: base, Candidate: cand.Values, Tail: t}
	r.BaseCenter, r.CandCenter = t.Baseline.Value, t.Candidate.Value
	r.Change = relChange(r.BaseCenter, r.CandCenter)
	r.Worse = (base.Direction == HigherIsBetter && r.CandCenter < r.BaseCenter) ||
		(base.Direction == LowerIsBetter && r.CandCenter > r.BaseCenter)
	r.Threshold, _ = cfg.thresholds(base.Metric)
	if t.MaxOfN {
		r.Threshold = math.Max(r.Threshold, LooseTailChange)
		r.Test = fmt.Sprintf("max of n (%d vs %d requests pooled; a p%g interval needs %d a side)", len(b), len(c), p, t.MinRequests)
	} else {
		r.Test = fmt.Sprintf("pooled p%g, %g%% CI (%d vs %d requests)", p, TailConfidence, len(b), len(c))
	}
	return r, "", true
}

// decideTail gives a pooled tail its verdict (see TailRule).
func decideTail(r *Result, cfg Config) {
	fail, warn := cfg.thresholds(r.Series.Metric)
	t := r.Tail
	size := math.Abs(r.Change)
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
	if t.MaxOfN {
		if r.Worse && size > r.Threshold {
			r.Verdict, r.Reason = Fail, fmt.Sprintf("candidate max of %d %.4g ms, baseline max of %d %.4g ms: worse by %s > the loose %s (too few requests for a p%g interval)",
				t.Candidate.Requests, t.Candidate.Value, t.Baseline.Requests, t.Baseline.Value, pct(size), pct(r.Threshold), t.Percentile)
			return
		}
		r.Verdict, r.Reason = Pass, fmt.Sprintf("candidate max of %d, baseline max of %d: change %s; too few requests for a p%g interval (%d a side), so only a change beyond %s fails",
			t.Candidate.Requests, t.Baseline.Requests, pct(r.Change), t.Percentile, t.MinRequests, pct(r.Threshold))
		return
	}
	b, c := t.Baseline, t.Candidate
	ci := fmt.Sprintf("candidate %.4g [%.4g, %.4g] ms, baseline %.4g [%.4g, %.4g] ms", c.Value, c.Lower, c.Upper, b.Value, b.Lower, b.Upper)
	above, below := c.Lower > b.Upper, c.Upper < b.Lower
	if r.Series.Direction == HigherIsBetter {
		above, below = below, above
	}
	switch {
	case r.Worse && above && size > fail:
		r.Verdict, r.Reason = Fail, fmt.Sprintf("worse by %s > %s threshold, and the candidate's interval lies wholly above the baseline's: %s", pct(size), pct(fail), ci)
	case r.Worse && above && warn > 0 && size > warn:
		r.Verdict, r.Reason = Warn, fmt.Sprintf("worse by %s > %s warn threshold, intervals apart: %s", pct(size), pct(warn), ci)
	case !r.Worse && below && size > fail:
		r.Verdict, r.Reason = Improved, fmt.Sprintf("better by %s, the candidate's interval wholly below the baseline's: %s", pct(size), ci)
	case above || below:
		r.Verdict, r.Reason = Pass, fmt.Sprintf("change %s within threshold (intervals apart): %s", pct(r.Change), ci)
	default:
		r.Verdict, r.Reason = Pass, fmt.Sprintf("change %s within the uncertainty (intervals overlap): %s", pct(r.Change), ci)
	}
}
