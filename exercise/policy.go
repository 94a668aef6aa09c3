package exercise

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/optimizer"
)

// Budget is the CPU exercise's limit on evaluate calls per optimize.
const Budget = 4

// Evaluator runs one configuration and returns its result object exactly as
// the backend produced it. An error makes that candidate failed; the policy
// goes on within its budget. It is the exercise driver's evaluate(config)
// callback: configs are the driver's opaque objects and results its own
// shape, so it is a function over JSON objects, not optimizer.Evaluator
// over deployment specs.
type Evaluator func(ctx context.Context, cfg Config) (map[string]any, error)

// Evaluation is one call of the Evaluator: the experiment log's entry.
type Evaluation struct {
	Call   int            `json:"call"` // 1-based, in call order
	Role   string         `json:"role"` // baseline, disaggregated, ablation, verify, ...
	Config Config         `json:"config"`
	Result map[string]any `json:"result,omitempty"` // exactly as returned
	Error  string         `json:"error,omitempty"`
	View   *ResultView    `json:"-"`
}

// Failed reports whether the call raised or its result was unreadable.
func (e Evaluation) Failed() bool { return e.Error != "" || e.View == nil }

// The rules the exercise policy applies, stated once for the report, the
// decision output and exercise/README.md.
const (
	SelectionRule = "Eligible: an evaluated config whose call succeeded and that passed its SLOs at one or more load levels " +
		"(objective > 0). Selected: the eligible config with the highest objective (largest effective QPS among passing " +
		"levels); ties go to the config closest to the baseline (fewest changed settings), then to the earliest call. " +
		"With no eligible config, the baseline is kept."
	RegressionRule = "The selected config is re-run once. It is rejected if the re-run fails, passes no level, passes a " +
		"different set of levels, or reports an objective that differs from its first result (exactly, for deterministic " +
		"simulation_only results). A rejected selection falls back to the next eligible config in selection order, " +
		"and finally to the baseline."
)

// Decision is the policy's outcome.
type Decision struct {
	Selected     Config       `json:"selected"`
	SelectedCall int          `json:"selected_call"` // the call whose config was selected; 0 if none succeeded
	Verified     bool         `json:"verified"`      // the selection survived its re-run
	Log          []Evaluation `json:"log"`
	Diagnosis    []string     `json:"diagnosis"`
	Selection    string       `json:"selection_rule"`
	Regression   string       `json:"regression_rule"`
	Knobs        Knobs        `json:"-"`
}

// Optimize is submission.py's optimize(baseline, evaluate): it spends at
// most budget calls of eval, in this order:
//
//  1. the baseline;
//  2. the baseline with the deployment mode flipped (disaggregated);
//  3. the better of those two with the prefix cache off (ablation);
//  4. (budget >= 5 only) the other mode with the cache off, completing the
//     2x2 mode × cache design so their interaction can be read;
//  5. last, a verification re-run of the selected config.
//
// It diagnoses each result from which levels fail and by which SLO, selects
// by SelectionRule and applies RegressionRule. budget below 1 is an error;
// smaller budgets drop steps from the end of the list above, but the
// verification re-run is kept whenever budget >= 4. When ctx is cancelled
// (the evaluator's peer is gone) it stops and returns context.Cause(ctx).
func Optimize(ctx context.Context, baseline Config, eval Evaluator, budget int) (*Decision, error) {
	if budget < 1 {
		return nil, fmt.Errorf("budget %d: want at least 1 evaluate call", budget)
	}
	knobs, err := FindKnobs(baseline)
	if err != nil {
		return nil, err
	}
	// The log never outgrows budget, so pointers into it stay valid.
	d := &Decision{Knobs: knobs, Selection: SelectionRule, Regression: RegressionRule, Log: make([]Evaluation, 0, budget)}
	o := &optimization{ctx: ctx, eval: eval, knobs: knobs, d: d}
	left := func() int { return budget - len(d.Log) }
	// Reserve the last call for verification when the budget allows it.
	explore := budget
	if budget >= Budget {
		explore = budget - 1
	}

	stopped := func() error { return context.Cause(ctx) }
	base, ok := o.explore(baseline, explore)
	if !ok {
		return nil, stopped()
	}

	d.Diagnosis = append(d.Diagnosis, effects(d.Log, knobs)...)
	order := selectionOrder(d.Log, baseline)
	if len(order) == 0 {
		d.Selected, d.SelectedCall = clone(baseline), 0
		if !base.Failed() {
			d.SelectedCall = base.Call
		}
		d.Diagnosis = append(d.Diagnosis, "decision: no evaluated config passed its SLOs at any level; keeping the baseline")
		return d, nil
	}
	pick := order[0]
	if left() > 0 && budget >= Budget {
		if pick, ok = o.verify(order, base); !ok {
			return nil, stopped()
		}
	}
	d.Selected, d.SelectedCall = pick.Config, pick.Call
	d.Diagnosis = append(d.Diagnosis, fmt.Sprintf("decision: select call %d (%s), objective %s req/s%s",
		pick.Call, describe(pick.Config, knobs), fmtF(objective(pick)), map[bool]string{true: ", confirmed by its re-run", false: ""}[d.Verified]))
	return d, nil
}

// optimization is one Optimize: the evaluator it calls and the decision
// it logs each call in.
type optimization struct {
	ctx   context.Context
	eval  Evaluator
	knobs Knobs
	d     *Decision
}

// run evaluates cfg as the next call, logs it under role with its
// diagnosis, and returns its log entry; nil when ctx ended, with nothing
// logged.
func (o *optimization) run(role string, cfg Config) *Evaluation {
	d := o.d
	e := Evaluation{Call: len(d.Log) + 1, Role: role, Config: cfg}
	res, err := o.eval(o.ctx, clone(cfg))
	switch {
	case err != nil:
		e.Error = err.Error()
	case res == nil:
		e.Error = "evaluate returned no result"
	default:
		e.Result = res
		if v, err := ReadResult(res); err != nil {
			e.Error = err.Error()
		} else {
			e.View = &v
		}
	}
	if o.ctx.Err() != nil {
		return nil // the evaluator can no longer answer; Optimize stops
	}
	d.Log = append(d.Log, e)
	d.Diagnosis = append(d.Diagnosis, diagnoseResult(e, o.knobs))
	return &d.Log[len(d.Log)-1]
}

// explore makes Optimize's steps 1-4, within explore calls in all: the
// baseline, the other mode, and the prefix-cache ablations. It returns
// the baseline's evaluation; ok is false when ctx ended.
func (o *optimization) explore(baseline Config, explore int) (base *Evaluation, ok bool) {
	d, knobs := o.d, o.knobs
	base = o.run("baseline", clone(baseline))
	if base == nil {
		return nil, false
	}
	mode, _ := optimizer.Get(baseline, knobs.Mode)
	flipped := modeDisaggregated
	if strings.EqualFold(mode.(string), modeDisaggregated) {
		flipped = modeColocated
	}
	var alt *Evaluation
	if len(d.Log) < explore {
		if alt = o.run(flipped, With(baseline, knobs.Mode, flipped)); alt == nil {
			return nil, false
		}
	}
	if len(d.Log) < explore {
		better := base
		if alt != nil && objective(alt) > objective(base) {
			better = alt
		}
		cache, _ := optimizer.Get(better.Config, knobs.Cache)
		on, _ := cache.(bool)
		if o.run("ablation (prefix cache "+onOff(!on)+")", With(better.Config, knobs.Cache, !on)) == nil {
			return nil, false
		}
		if len(d.Log) < explore && alt != nil {
			other := alt
			if better == alt {
				other = base
			}
			if o.run("ablation (prefix cache "+onOff(!on)+", completes mode × cache)", With(other.Config, knobs.Cache, !on)) == nil {
				return nil, false
			}
		}
	}
	return base, true
}

// verify re-runs the first of order (step 5) and returns the pick: it,
// or where the regression rule rejects it the next eligible config, else
// the baseline base. ok is false when ctx ended.
func (o *optimization) verify(order []*Evaluation, base *Evaluation) (*Evaluation, bool) {
	d, knobs := o.d, o.knobs
	pick := order[0]
	v := o.run("verify", clone(pick.Config))
	if v == nil {
		return nil, false
	}
	if reason := rerunDiffers(pick, v); reason != "" {
		d.Diagnosis = append(d.Diagnosis, fmt.Sprintf("decision: call %d (%s) rejected by the regression rule: %s",
			pick.Call, describe(pick.Config, knobs), reason))
		if len(order) > 1 {
			pick = order[1]
			d.Diagnosis = append(d.Diagnosis, fmt.Sprintf("decision: falling back to call %d (%s), the next eligible config; no budget is left to re-run it",
				pick.Call, describe(pick.Config, knobs)))
		} else {
			pick = base
			d.Diagnosis = append(d.Diagnosis, "decision: no other eligible config; falling back to the baseline")
		}
	} else {
		d.Verified = true
	}
	return pick, true
}

func objective(e *Evaluation) float64 {
	if e == nil || e.Failed() {
		return math.Inf(-1)
	}
	return e.View.Objective
}

// selectionOrder orders the eligible evaluations by SelectionRule. Re-runs
// are not candidates of their own.
//
// It is not the live loop's ranking (optimizer.LiveSelectionRule) and does
// not share its code: an exercise result is one deterministic
// simulation_only figure per config, so the highest objective wins outright
// and ties fall to the baseline, then the earliest call; the live loop ranks
// medians of noisy runs, so a trial must beat another run for run
// (optimizer.Beats) and ties fall to cost. Only the distance to the
// baseline (optimizer.Distance) is one rule in both.
func selectionOrder(log []Evaluation, baseline Config) []*Evaluation {
	var out []*Evaluation
	for i := range log {
		e := &log[i]
		if e.Failed() || !e.View.Passing() || e.Role == "verify" {
			continue
		}
		out = append(out, e)
	}
	less := func(a, b *Evaluation) bool {
		if a.View.Objective != b.View.Objective {
			return a.View.Objective > b.View.Objective
		}
		if da, db := optimizer.Distance(baseline, a.Config), optimizer.Distance(baseline, b.Config); da != db {
			return da < db
		}
		return a.Call < b.Call
	}
	for i := 1; i < len(out); i++ { // insertion sort: a handful of entries, stable
		for j := i; j > 0 && less(out[j], out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// rerunDiffers applies RegressionRule to a selection and its re-run.
//
// It is not the live loop's regression rule (optimizer.LiveRegressionRule:
// the re-run's median may fall up to 10% below the first before it counts):
// the exact model is deterministic, so any difference between a config's
// re-run and its first result, however small, means the evaluator did not
// measure what it measured before, and rejects the selection.
func rerunDiffers(first, again *Evaluation) string {
	switch {
	case again.Failed():
		return "the re-run failed: " + again.Error
	case !again.View.Passing():
		return "the re-run passed no load level"
	case again.View.PassSet() != first.View.PassSet():
		return fmt.Sprintf("the re-run passed levels {%s}, the first run {%s}", again.View.PassSet(), first.View.PassSet())
	case again.View.Objective != first.View.Objective:
		return fmt.Sprintf("the re-run's objective %s differs from the first run's %s", fmtF(again.View.Objective), fmtF(first.View.Objective))
	}
	return ""
}

// diagnoseResult explains one result: which levels fail and by which SLO, and
// what that says about the bottleneck (queueing, prefill or decode).
func diagnoseResult(e Evaluation, k Knobs) string {
	head := fmt.Sprintf("call %d, %s (%s): ", e.Call, e.Role, describe(e.Config, k))
	if e.Failed() {
		return head + "failed: " + e.Error + " — counted as a failed candidate"
	}
	v := e.View
	if len(v.Levels) == 0 {
		return head + fmt.Sprintf("objective %s req/s (no per-level figures to diagnose)", fmtF(v.Objective))
	}
	var pass, ttft, tpot []string
	for _, l := range v.Levels {
		q := fmtF(l.OfferedQPS)
		switch {
		case l.Passed:
			pass = append(pass, q)
		case l.HasLatency && l.P99TPOTMs > v.SLO.TPOTMillis:
			tpot = append(tpot, q)
		default:
			ttft = append(ttft, q)
		}
	}
	s := head + fmt.Sprintf("objective %s req/s; passes {%s}", fmtF(v.Objective), strings.Join(pass, ","))
	if len(ttft)+len(tpot) == 0 {
		return s + "; every level meets both SLOs"
	}
	if len(ttft) > 0 {
		s += fmt.Sprintf("; fails {%s} on p99 TTFT", strings.Join(ttft, ","))
	}
	if len(tpot) > 0 {
		s += fmt.Sprintf("; fails {%s} on p99 TPOT", strings.Join(tpot, ","))
	}
	low := v.Levels[0]
	switch {
	case len(tpot) > 0:
		s += " → decode-bound: per-token time exceeds its SLO; more decode capacity or smaller decode batches would help"
	case !low.HasLatency:
		s += " → TTFT-bound (no latency figures to separate queueing from prefill)"
	case low.P99TTFTMs > v.SLO.TTFTMillis:
		s += fmt.Sprintf(" → prefill-bound: even at %s req/s p99 TTFT is %s ms, so a single prefill is too slow; cutting uncached prefill work (prefix caching) is what helps",
			fmtF(low.OfferedQPS), fmtF(round3(low.P99TTFTMs)))
	default:
		worst := v.Levels[len(v.Levels)-1]
		for _, l := range v.Levels {
			if !l.Passed {
				worst = l
				break
			}
		}
		s += fmt.Sprintf(" → queueing-bound: p99 TTFT is %s ms at %s req/s but %s ms at %s req/s while TPOT stays within its SLO, so requests wait behind others",
			fmtF(round3(low.P99TTFTMs)), fmtF(low.OfferedQPS), fmtF(round3(worst.P99TTFTMs)), fmtF(worst.OfferedQPS))
		if low.P99TTFTMs > v.SLO.TTFTMillis/4 {
			s += fmt.Sprintf("; an unloaded request already spends %s%% of the TTFT SLO in prefill, so uncached prefill work is the service time to cut (prefix caching)",
				fmtF(math.Round(100*low.P99TTFTMs/v.SLO.TTFTMillis)))
		} else if m, _ := optimizer.Get(e.Config, k.Mode); m == modeDisaggregated {
			s += "; prefill and decode already queue separately, so the prefill queue saturates: more prefill capacity is what helps"
		} else {
			s += "; in one FCFS queue each prefill waits for whole decodes, so separating prefill and decode queues (disaggregation) is what helps"
		}
	}
	return s
}

func describe(c Config, k Knobs) string {
	m, _ := optimizer.Get(c, k.Mode)
	on, _ := optimizer.Get(c, k.Cache)
	return fmt.Sprintf("%s=%v, %s=%v", k.Mode, m, k.Cache, on)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func fmtF(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// effects states, for every pair of successful explorations that differ in
// exactly one knob, how the objective moved; with the full 2x2 design it
// also reads the mode × cache interaction.
func effects(log []Evaluation, k Knobs) []string {
	var out []string
	type cell struct {
		mode  string
		cache bool
	}
	obj := map[cell]float64{}
	for i := range log {
		a := &log[i]
		if a.Failed() || a.Role == "verify" {
			continue
		}
		m, _ := optimizer.Get(a.Config, k.Mode)
		c, _ := optimizer.Get(a.Config, k.Cache)
		ms, _ := m.(string)
		cb, _ := c.(bool)
		obj[cell{strings.ToLower(ms), cb}] = a.View.Objective
		for j := 0; j < i; j++ {
			b := &log[j]
			if b.Failed() || b.Role == "verify" || optimizer.Distance(a.Config, b.Config) != 1 {
				continue
			}
			out = append(out, fmt.Sprintf("effect: %s → %s moves the objective %s → %s req/s (%s)",
				describe(b.Config, k), describe(a.Config, k), fmtF(b.View.Objective), fmtF(a.View.Objective), change(b.View.Objective, a.View.Objective)))
		}
	}
	cc, okCC := obj[cell{modeColocated, true}]
	dc, okDC := obj[cell{modeDisaggregated, true}]
	cn, okCN := obj[cell{modeColocated, false}]
	dn, okDN := obj[cell{modeDisaggregated, false}]
	if okCC && okDC && okCN && okDN {
		out = append(out, fmt.Sprintf("interaction: disaggregation gains %s req/s with the prefix cache on and %s req/s with it off; the mode × cache interaction is %s req/s",
			fmtF(dc-cc), fmtF(dn-cn), fmtF((dc-cc)-(dn-cn))))
	}
	return out
}

func change(from, to float64) string {
	if from == 0 {
		if to == 0 {
			return "no change"
		}
		return "from zero"
	}
	return fmt.Sprintf("%+.1f%%", 100*(to-from)/from)
}
