package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/slo"
)

// A log measured by capacity (optimizer.Log.Measure "capacity") answers
// the spec's question — the config that meets its goal within the SLO —
// so its report leads with that answer, in capacities: each trial's is the
// median of its runs' capacity searches, its cost GPUs / capacity. Its
// per-load figures hold one load, the reference load, where every run of
// every trial measured latency at the same offered rate.

// measureCapacity is optimizer.Log.Measure for a capacity-measured log.
const measureCapacity = "capacity"

// byCapacity reports whether the log's trials were measured by capacity;
// a log without Measure predates it and scanned levels.
func (d *doc) byCapacity() bool { return d.lg.Measure == measureCapacity }

// objectiveWord names a trial's figure: "capacity" or "objective".
func (d *doc) objectiveWord() string {
	if d.byCapacity() {
		return "capacity"
	}
	return "objective"
}

// load writes an offered rate for a table: as given in a levels log (the
// user's --qps), to 4 digits in a capacity log, whose loads a search chose
// (23.152287119047426 req/s).
func (d *doc) load(q float64) string {
	if d.byCapacity() {
		return strconv.FormatFloat(q, 'g', 4, 64)
	}
	return strconv.FormatFloat(q, 'g', -1, 64)
}

// sloText is "p99 TTFT ≤ 500 ms, p99 TPOT ≤ 12 ms".
func (d *doc) sloText() string {
	return fmt.Sprintf("p99 TTFT ≤ %g ms, p99 TPOT ≤ %g ms", d.lg.SLO.TTFTMillis, d.lg.SLO.TPOTMillis)
}

// goal is the log's goal; a log without one asked for the most capacity.
func (d *doc) goal() (name string, target float64) {
	g := d.lg.Goal
	switch g.Goal {
	case deploy.GoalCheapest, deploy.GoalPerGPU:
		return g.Goal, g.TargetQPS
	}
	return deploy.GoalCapacity, g.TargetQPS
}

// target is the goal's target rate, 0 when it has none.
func (d *doc) target() float64 {
	if name, t := d.goal(); name == deploy.GoalCheapest && t > 0 {
		return t
	}
	return 0
}

// goalText says the goal in words: "the cheapest config (fewest GPUs)
// serving 12 req/s within p99 TTFT ≤ 500 ms, p99 TPOT ≤ 12 ms".
func (d *doc) goalText() string {
	name, _ := d.goal()
	switch {
	case name == deploy.GoalCheapest && d.target() > 0:
		return fmt.Sprintf("the cheapest config (fewest GPUs) serving %g req/s within %s", d.target(), d.sloText())
	case name == deploy.GoalCheapest:
		return fmt.Sprintf("the cheapest config (fewest GPUs) within %s; the spec gives no target rate", d.sloText())
	case name == deploy.GoalPerGPU:
		return fmt.Sprintf("the most capacity per GPU within %s", d.sloText())
	}
	budget := "the GPU budget"
	if s := d.base.Spec; s != nil && s.GPUs.Budget > 0 {
		budget = fmt.Sprintf("a budget of %d GPUs", s.GPUs.Budget)
	}
	return fmt.Sprintf("the most capacity within %s and %s", budget, d.sloText())
}

// capacityRun is one run's capacity search and whether the trial's
// capacity counts it.
type capacityRun struct {
	res     *capacity.Result
	counted bool
}

// capacityRuns returns t's searches in run order. The log keeps the
// counted runs' values (t.Objectives, in run order) and every search: a
// search is counted when its last probe is valid, no level of its run is
// invalid in the record (t.InvalidLevels), the run's reference load is
// valid where the log has it, and its value is the next counted one.
func capacityRuns(t *optimizer.Trial) []capacityRun {
	rs := make([]capacityRun, len(t.Capacity))
	bad := map[int]bool{}
	for _, l := range invalidLevelsOf(t) {
		bad[l.run] = true
	}
	k := 0
	for i := range t.Capacity {
		r := &t.Capacity[i]
		rs[i].res = r
		valid := len(r.Probes) > 0 && r.Probes[len(r.Probes)-1].Valid && !bad[i+1]
		if len(t.Levels) > 0 && i < len(t.Levels[0].RunValid) {
			valid = valid && t.Levels[0].RunValid[i]
		}
		if valid && k < len(t.Objectives) && r.Value == t.Objectives[k] {
			rs[i].counted = true
			k++
		}
	}
	return rs
}

// gpusOf is the GPUs t's config uses; 0 when the log has no spec.
func gpusOf(t *optimizer.Trial) int {
	if t.Spec == nil {
		return 0
	}
	return t.Spec.GPUsNeeded()
}

// gpusCell is t's GPUs, "—" where the log has no spec.
func gpusCell(t *optimizer.Trial) string {
	if g := gpusOf(t); g > 0 {
		return fmt.Sprint(g)
	}
	return "—"
}

// capacityCell is "14.20 (13.80–14.50)": the median over counted runs and
// their range.
func capacityCell(t *optimizer.Trial) string {
	if len(t.Objectives) == 0 {
		return "—"
	}
	lo, hi := slices.Min(t.Objectives), slices.Max(t.Objectives)
	if lo == hi {
		return fmt.Sprintf("%.2f", t.Objective)
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", t.Objective, lo, hi)
}

// costCell is GPU-seconds per request at capacity, GPUs / capacity, over
// the counted runs' range: "0.0704 (0.0690–0.0725)".
func costCell(t *optimizer.Trial) string {
	g := gpusOf(t)
	if t.CostGPUSec == nil {
		return "—"
	}
	if g == 0 || len(t.Objectives) == 0 || slices.Min(t.Objectives) <= 0 {
		return fmt.Sprintf("%.4f", *t.CostGPUSec)
	}
	lo, hi := float64(g)/slices.Max(t.Objectives), float64(g)/slices.Min(t.Objectives)
	if lo == hi {
		return fmt.Sprintf("%.4f", *t.CostGPUSec)
	}
	return fmt.Sprintf("%.4f (%.4f–%.4f)", *t.CostGPUSec, lo, hi)
}

// meetsTarget: every counted run's capacity reaches the target (the
// optimizer's rule for the cheapest goal).
func meetsTarget(t *optimizer.Trial, target float64) bool {
	return len(t.Objectives) > 0 && slices.Min(t.Objectives) >= target
}

// targetCostCell is GPU-seconds per request at the target rate, GPUs /
// target, for a config that serves it in every run.
func (d *doc) targetCostCell(t *optimizer.Trial) string {
	tq, g := d.target(), gpusOf(t)
	switch {
	case tq <= 0 || g == 0:
		return "—"
	case !meetsTarget(t, tq):
		return fmt.Sprintf("— (does not serve %g req/s in every run)", tq)
	}
	return fmt.Sprintf("%.4f", float64(g)/tq)
}

// searchCell says how far to trust t's runs' capacities: where every
// counted run is bounded, the loads they passed and failed at — "every run
// bounded ±5%: passed 13.8–14.5, failed 14.35–15.08 req/s" — else which
// runs are lower bounds or unbounded, and why.
func searchCell(t *optimizer.Trial) string {
	var prec []float64
	var loose []string
	var passed, failed []float64
	for i, r := range capacityRuns(t) {
		if !r.counted {
			continue
		}
		if !slices.Contains(prec, r.res.Precision) {
			prec = append(prec, r.res.Precision)
		}
		passed, failed = append(passed, r.res.Value), append(failed, r.res.Upper)
		if !r.res.Bounded {
			loose = append(loose, fmt.Sprintf("run %d %s", i+1, valueCell(r.res)))
		}
	}
	if len(prec) == 0 {
		return "—"
	}
	p := make([]string, len(prec))
	for i, v := range prec {
		p[i] = pctBound(v)
	}
	if len(loose) == 0 {
		return fmt.Sprintf("every run bounded %s: passed %s, failed %s req/s", strings.Join(p, ", "), span(passed), span(failed))
	}
	return "precision " + strings.Join(p, ", ") + "; " + strings.Join(loose, "; ")
}

// span is "13.8–14.5", or "23.15" where every value is one.
func span(v []float64) string {
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return fmt.Sprintf("%.4g", lo)
	}
	return fmt.Sprintf("%.4g–%.4g", lo, hi)
}

// failedBy names why probe p failed: the limits it exceeded, or that it
// did not keep up, lost requests or was invalid.
func failedBy(p capacity.Probe, s slo.SLO) string {
	var why []string
	if !p.Valid {
		why = append(why, "invalid")
	}
	if p.Failed > 0 {
		why = append(why, fmt.Sprintf("%d failed", p.Failed))
	}
	switch ttftOver, tpotOver := p.P99TTFTMs > s.TTFTMillis, p.P99TPOTMs > s.TPOTMillis; {
	case ttftOver && tpotOver:
		why = append(why, "TTFT+TPOT")
	case ttftOver:
		why = append(why, "TTFT")
	case tpotOver:
		why = append(why, "TPOT")
	}
	if p.Valid && p.Failed == 0 && s.Met(p.P99TTFTMs, p.P99TPOTMs) && !p.Steady {
		why = append(why, "not steady")
	}
	if p.Measured == 0 && len(why) == 0 {
		why = append(why, "nothing completed")
	}
	return strings.Join(why, ", ")
}

// binding names what failed a search at its upper bound — the lowest load
// measured to fail — or "" where no load failed.
func binding(r *capacity.Result, s slo.SLO) string {
	if r.Upper <= 0 {
		return ""
	}
	var by string
	for _, p := range r.Probes {
		if !p.Pass && p.Load == r.Upper {
			by = failedBy(p, s)
		}
	}
	return by
}

// bindingSummary is "p99 TPOT in 3 of 3 runs" over t's counted runs.
func (d *doc) bindingSummary(t *optimizer.Trial) string {
	count := map[string]int{}
	var order []string
	n := 0
	for _, r := range capacityRuns(t) {
		if !r.counted {
			continue
		}
		n++
		b := binding(r.res, d.lg.SLO)
		if b == "" {
			b = "nothing (no load failed)"
		}
		if count[b] == 0 {
			order = append(order, b)
		}
		count[b]++
	}
	var s []string
	for _, b := range order {
		s = append(s, fmt.Sprintf("%s in %d of %d runs", limitWords(b), count[b], n))
	}
	return strings.Join(s, "; ")
}

// limitWords spells a failure for a sentence: "TPOT" → "p99 TPOT".
func limitWords(b string) string {
	switch b {
	case "TTFT":
		return "p99 TTFT"
	case "TPOT":
		return "p99 TPOT"
	case "TTFT+TPOT":
		return "p99 TTFT and p99 TPOT"
	case "not steady":
		return "steady state (departures fell short of the offered rate)"
	}
	return b
}

// answer leads a capacity report: the goal in words, the selected
// config's capacity and cost with their uncertainty, the baseline's, and
// the change.
func (d *doc) answer() {
	tag := d.prov.tag()
	name, _ := d.goal()
	d.p("## Answer (%s)\n\n", tag)
	d.p("**Goal** (spec.objective `%s`): %s, at steady state.\n\n", name, d.goalText())
	switch {
	case !d.lg.Done:
		d.p("**No answer yet**: the loop stopped after trial %d, before it selected anything. The baseline as measured:\n\n", len(d.lg.Trials))
	case d.sel == nil:
		d.p("**No answer**: no trial was eligible and verified. The baseline as measured:\n\n")
	case d.sel == d.base:
		d.p("**The baseline stays**: no measured config met the goal better than it beyond the runs' noise. %s.\n\n", capitalize(d.capacitySentence(d.sel, true)))
	default:
		d.p("**Selected**: %s.\n\n", d.capacitySentence(d.sel, true))
		d.p("Baseline: %s.\n\n", d.capacitySentence(d.base, false))
		d.p("%s\n\n", d.capacityChange())
	}
	d.answerTable()
}

// capacitySentence states t's capacity, its uncertainty and its cost:
// "trial 3 `coloc-r1`, 1 GPU: capacity **14.20 req/s** (median of 3 runs:
// 13.80 / 14.20 / 14.50 req/s; every run bounded ±5%; the SLO binds on p99
// TPOT in 3 of 3 runs); 0.0833 GPU-s per request at 12 req/s, 0.0704
// (0.0690–0.0725) at capacity".
func (d *doc) capacitySentence(t *optimizer.Trial, bold bool) string {
	b := func(s string) string {
		if bold {
			return "**" + s + "**"
		}
		return s
	}
	g := gpusOf(t)
	gpus := fmt.Sprintf("%d GPUs", g)
	switch g {
	case 0:
		gpus = "GPUs not logged"
	case 1:
		gpus = "1 GPU"
	}
	s := fmt.Sprintf("trial %d `%s`, %s: ", t.N, t.Key, gpus)
	if len(t.Objectives) == 0 {
		return s + "no counted run, so no capacity (" + t.Reason + ")"
	}
	s += fmt.Sprintf("capacity %s (median of %d runs: %s req/s; %s", b(fmt.Sprintf("%.2f req/s", t.Objective)), len(t.Objectives), joinF3(t.Objectives), searchCell(t))
	if bs := d.bindingSummary(t); bs != "" {
		s += "; the SLO binds on " + bs
	}
	s += ")"
	if tq := d.target(); tq > 0 && g > 0 {
		if meetsTarget(t, tq) {
			s += fmt.Sprintf("; serves %g req/s in every run at %s (%d / %g)", tq, b(fmt.Sprintf("%.4f GPU-s per request", float64(g)/tq)), g, tq)
		} else {
			s += fmt.Sprintf("; does **not** serve %g req/s in every run (lowest run %.2f req/s)", tq, slices.Min(t.Objectives))
		}
		s += fmt.Sprintf(", %s GPU-s per request at capacity", costCell(t))
	} else {
		s += fmt.Sprintf("; %s GPU-s per request at capacity (GPUs / capacity)", b(costCell(t)))
	}
	if name, _ := d.goal(); name == deploy.GoalPerGPU && g > 0 {
		s += fmt.Sprintf("; %.2f req/s per GPU", t.Objective/float64(g))
	}
	return s
}

// capacityChange is the selection against the baseline: GPUs, cost at
// the target, capacity and cost at capacity.
func (d *doc) capacityChange() string {
	b, s := d.base, d.sel
	var parts []string
	if gb, gs := gpusOf(b), gpusOf(s); gb > 0 && gs > 0 {
		parts = append(parts, fmt.Sprintf("GPUs %d → %d", gb, gs))
		if tq := d.target(); tq > 0 && meetsTarget(s, tq) {
			if meetsTarget(b, tq) {
				parts = append(parts, fmt.Sprintf("GPU-s per request at %g req/s %s", tq, pct(float64(gb)/tq, float64(gs)/tq)))
			} else {
				parts = append(parts, fmt.Sprintf("the baseline does not serve %g req/s in every run", tq))
			}
		}
	}
	if b.Objective > 0 {
		parts = append(parts, "capacity "+pct(b.Objective, s.Objective))
	}
	if b.CostGPUSec != nil && s.CostGPUSec != nil && *b.CostGPUSec > 0 {
		parts = append(parts, "GPU-s per request at capacity "+pct(*b.CostGPUSec, *s.CostGPUSec))
	}
	v := "not verified"
	if d.lg.Verified {
		v = "verified by a re-run"
		for _, t := range d.all() {
			if d.mark(t) == markRerun {
				v = fmt.Sprintf("verified by its re-run, trial %d (capacity %s req/s)", t.N, capacityCell(t))
			}
		}
	}
	return fmt.Sprintf("Change vs the baseline (%s): %s. The selection is %s.", d.prov.tag(), strings.Join(parts, "; "), v)
}

// answerTable sets the baseline and the selection side by side.
func (d *doc) answerTable() {
	tq := d.target()
	atTarget := ""
	if tq > 0 {
		atTarget = fmt.Sprintf(" GPU-s / request at %g req/s |", tq)
	}
	d.p("| [%s] | config | GPUs | capacity, req/s: median (min–max) | per run, req/s | search | GPU-s / request at capacity |%s\n", d.prov.tag(), atTarget)
	d.p("|---|---|---:|---:|---|---|---:|%s\n", strings.Repeat("---:|", strings.Count(atTarget, "|")))
	row := func(name string, t *optimizer.Trial) {
		d.p("| %s | `%s` | %s | %s | %s | %s | %s |", name, t.Key, gpusCell(t), capacityCell(t), joinRuns(t.Objectives, "%.2f"), searchCell(t), costCell(t))
		if tq > 0 {
			d.p(" %s |", d.targetCostCell(t))
		}
		d.p("\n")
	}
	row(fmt.Sprintf("**baseline** (trial %d)", d.base.N), d.base)
	if d.sel != nil && d.sel != d.base {
		row(fmt.Sprintf("**selected** (trial %d)", d.sel.N), d.sel)
	}
	d.p("\nCapacity is the largest offered rate that met the SLO at steady state in a run's search (rule under [Measurement](#measurement-%s)); "+
		"a bounded run's capacity passed and a load at most the precision above it failed. A trial's capacity is the median over its counted runs; "+
		"GPU-s per request at capacity is GPUs / capacity", d.prov.tag())
	if tq > 0 {
		d.p(", at %g req/s GPUs / %g, for a config whose every run serves it", tq, tq)
	}
	d.p(".\n\n")
}

// measurement states how trials were measured, for a capacity log: the
// workload, the search, the SLO, the reference load, and p99.
func (d *doc) measurement() {
	lg := d.lg
	w := lg.Workload
	d.p("## Measurement (%s)\n\n", d.prov.tag())
	prec := []string{}
	for _, t := range d.all() {
		for _, r := range t.Capacity {
			if p := pctBound(r.Precision); r.Precision > 0 && !slices.Contains(prec, p) {
				prec = append(prec, p)
			}
		}
	}
	precision := "its stated precision"
	if len(prec) > 0 {
		precision = "precision " + strings.Join(prec, ", ")
	}
	d.p("Workload: %d input tokens (%d cached after warm-up), %d output tokens, seed %d. Each trial ran %d runs, each a capacity search "+
		"(open loop, %s): every probe measured at least %d window requests after the %d session warm-ups. SLO: %s. ",
		w.InputTokens, w.InputTokens-w.UncachedTokens, w.OutputTokens, w.Seed, lg.Runs, precision, capacity.MinMeasured, replay.Sessions, d.sloText())
	if lg.ReferenceQPS > 0 {
		d.p("Every run also measured the **reference load, %g req/s**: latencies are compared there, at one offered rate for every trial. ", lg.ReferenceQPS)
	}
	d.p("Rule: %s\n\n", lg.CapacityRule)
	d.p("%s", p99Definition)
	for _, n := range measuredCounts(d.all()...) {
		d.p(" At the reference load %s.", p99Explained(n))
	}
	d.p(" A probe's p99 over fewer than %d window requests is reported as the \"max of n\" it is.\n\n", capacity.MinMeasured)
}

// referenceLatency is the latency at the reference load of the baseline
// and the selection, for a capacity log.
func (d *doc) referenceLatency() {
	d.p("## Latency at the reference load (%s)\n\n", d.prov.tag())
	if d.lg.ReferenceQPS <= 0 {
		d.p("The log names no reference load: latencies were measured only at each search's probes (below).\n\n")
		return
	}
	d.p("Every run of every trial measured %g req/s; the same offered rate for each config, so their latencies compare.\n\n", d.lg.ReferenceQPS)
	for _, t := range d.compared() {
		if why := d.pastCapacity(t); why != "" {
			d.p("**%s: %s**: its latency there is past its capacity, not comparable with a config below its own.\n\n", capitalize(d.name(t)), why)
		}
		d.levelTable(t)
	}
}

// pastCapacity says why the reference load is beyond t's capacity — a
// counted run's capacity below it, or a run that failed the SLO there —
// and "" where it lies below every run's.
func (d *doc) pastCapacity(t *optimizer.Trial) string {
	ref := d.lg.ReferenceQPS
	caps := t.Objectives
	if len(caps) == 0 { // no run counted: the searches as they stood say as much
		for _, r := range t.Capacity {
			if r.Value > 0 {
				caps = append(caps, r.Value)
			}
		}
	}
	var why []string
	if len(caps) > 0 && slices.Min(caps) < ref {
		why = append(why, fmt.Sprintf("%g req/s is above its capacity in a run (lowest %.2f req/s)", ref, slices.Min(caps)))
	}
	if len(t.Levels) > 0 {
		if l := t.Levels[0]; l.PassedRuns < l.Runs {
			why = append(why, fmt.Sprintf("%d of %d runs failed the SLO at %g req/s", l.Runs-l.PassedRuns, l.Runs, ref))
		}
	}
	return strings.Join(why, "; ")
}

// searches lists every run's capacity search, compactly: its probes in
// order (✓ passed, ✗ failed and what failed it), the capacity and the
// probes either side of it.
func (d *doc) searches() {
	tag := d.prov.tag()
	d.p("## Capacity searches, every run (%s)\n\n", tag)
	d.p("Each run's probes in the order measured, offered req/s: ✓ met the SLO at steady state; ✗ failed, with what failed it "+
		"(TTFT or TPOT: that p99 exceeded its limit; not steady: departures fell short of the offered rate while the SLO was met; invalid: the host distorted it). "+
		"The bracket is the capacity (the highest passing load) and the lowest failing load, with their p99 TTFT / p99 TPOT (%s); a run in italics is left out of its trial's capacity.", d.prov.ms())
	if n, ok := d.figs[probesTPOTFile]; ok {
		whose := "the baseline's and the selection's probes"
		if len(d.compared()) == 1 {
			whose = "the baseline's probes"
		}
		d.p(" Figures %d and %d draw %s.", n, d.figs[probesTTFTFile], whose)
	}
	d.p("\n\n")
	d.p("| [%s] # | config | run | probes, req/s | capacity, req/s | bracket: p99 TTFT / TPOT, %s | SLO bound by |\n|---:|---|---:|---|---:|---|---|\n", tag, d.prov.ms())
	any := false
	for _, t := range d.all() {
		inv := invalidLevelsOf(t)
		for i, r := range capacityRuns(t) {
			any = true
			run := fmt.Sprint(i + 1)
			if !r.counted {
				run = "*" + run + " (left out)*"
			}
			var ps []string
			for _, p := range r.res.Probes {
				mark := "✓"
				if !p.Pass {
					mark = "✗ " + failedBy(p, d.lg.SLO)
				}
				if code := probeInvalid(inv, i+1, p.Load); code != "" && p.Valid {
					mark += " (invalid: " + code + ")" // the record's verdict, after the search
				}
				ps = append(ps, fmt.Sprintf("%.3g %s", p.Load, mark))
			}
			value := valueCell(r.res)
			by := binding(r.res, d.lg.SLO)
			if by == "" {
				by = "—"
			}
			d.p("| %d | `%s` | %s | %s | %s | %s | %s |\n", t.N, t.Key, run, strings.Join(ps, " → "), value, bracketCell(r.res), by)
		}
	}
	if !any {
		d.p("| — | | | no trial logged a search | | | |\n")
	}
	d.p("\n")
}

// valueCell is a search's capacity and how far it is bounded: "14.20",
// "4096.00 (a lower bound: no load failed)", "none (no load passed)";
// the search's note follows where it is not bounded.
func valueCell(r *capacity.Result) string {
	var s string
	switch {
	case r.Bounded:
		return fmt.Sprintf("%.2f", r.Value)
	case r.Value > 0 && r.Upper == 0:
		s = fmt.Sprintf("%.2f (a lower bound: no load failed)", r.Value)
	case r.Value > 0:
		s = fmt.Sprintf("%.2f (not bounded: the lowest failing load is %.3g)", r.Value, r.Upper)
	case r.Upper > 0:
		s = "none (no load passed)"
	default:
		s = "none (the search ended before a load passed or failed)"
	}
	if r.Note != "" {
		s += ": " + mdCell(r.Note)
	}
	return s
}

// bracketCell is the passing probe at the capacity and the failing one
// above it: "12.3: 120 / 11.6; 12.9: 135 / 12.4".
func bracketCell(r *capacity.Result) string {
	var s []string
	find := func(load float64, pass bool) {
		for i := len(r.Probes) - 1; i >= 0; i-- {
			if p := r.Probes[i]; p.Load == load && p.Pass == pass {
				s = append(s, fmt.Sprintf("%.3g: %.0f / %.1f (%s)", load, p.P99TTFTMs, p.P99TPOTMs, p.Tail))
				return
			}
		}
	}
	if r.Value > 0 {
		find(r.Value, true)
	}
	if r.Upper > 0 {
		find(r.Upper, false)
	}
	if len(s) == 0 {
		return "—"
	}
	return strings.Join(s, "; ")
}

// capacityAblations compares each ablation with the selection: capacity
// (both at steady state, the SLO binding) and latency at the reference
// load, where it lies below both capacities.
func (d *doc) capacityAblations(abl []*optimizer.Trial) {
	ref := d.lg.ReferenceQPS
	d.p("Each ablation reverses one factor of the selection. Capacity: both figures come from capacity searches, at steady state with the SLO binding. ")
	if ref > 0 {
		d.p("Latency: at the reference load, %g req/s, the same offered rate for both (p50: median over runs; p99: each run); "+
			"where it lies above either config's capacity, their latencies are not compared.\n\n", ref)
	} else {
		d.p("The log names no reference load, so latencies are not compared.\n\n")
	}
	ms := d.prov.ms()
	d.p("| [%s] # | config | change | capacity, req/s: median (min–max) | vs selected | p50 TTFT at %g req/s, %s | p99 TTFT, per run | p50 TPOT, %s | p99 TPOT, per run |\n"+
		"|---:|---|---|---:|---:|---:|---|---:|---|\n", d.prov.tag(), ref, ms, ms)
	selPast := d.pastCapacity(d.sel)
	row := func(t *optimizer.Trial, change, vs string, past string) {
		lat := "| — | — | — | —"
		if len(t.Levels) > 0 && ref > 0 {
			l := t.Levels[0]
			lat = fmt.Sprintf("| %.1f | %s | %.2f | %s", l.P50TTFTMs, joinRuns(l.RunP99TTFTMs, "%.1f"), l.P50TPOTMs, joinRuns(l.RunP99TPOTMs, "%.2f"))
		}
		if past != "" {
			lat = "| *not compared: " + past + "* | | |"
		}
		d.p("| %d | `%s` | %s | %s | %s %s |\n", t.N, t.Key, change, capacityCell(t), vs, lat)
	}
	row(d.sel, "**selected**", "—", selPast)
	for _, t := range abl {
		past := d.pastCapacity(t)
		if past == "" && selPast != "" {
			past = "above the selection's capacity"
		}
		vs := "—"
		if len(t.Objectives) > 0 && d.sel.Objective > 0 {
			vs = pct(d.sel.Objective, t.Objective)
		}
		change := strings.TrimPrefix(t.Why, "ablation: ")
		if !t.Eligible {
			change += " (not eligible: " + mdCell(t.Reason) + ")"
		}
		row(t, change, vs, past)
	}
	d.p("\n")
}

// joinRuns writes each run's value: "31.2 / 30.8 / 33.0".
func joinRuns(v []float64, f string) string {
	if len(v) == 0 {
		return "—"
	}
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(s, " / ")
}

// invalidProbes lists every invalid probe of the log's searches, and why
// (the reference load's invalid runs are listed by level apart).
func (d *doc) invalidProbes() int {
	n := 0
	for _, t := range d.all() {
		for _, l := range invalidLevelsOf(t) {
			if l.load == d.lg.ReferenceQPS {
				continue
			}
			n++
			d.p("- trial %d `%s`, run %d, probe at %.4g req/s: %s\n", t.N, t.Key, l.run, l.load, mdCell(l.verdict))
		}
	}
	return n
}

// invalidLevel is one invalid level of a trial's record: a probe, or the
// reference load.
type invalidLevel struct {
	run     int // one-based
	load    float64
	code    string // the first reason's
	verdict string // "invalid (client_bound: …)"
}

// invalidLevelsOf reads t.InvalidLevels, the record's final verdicts —
// after diagnose's client/proxy residual, which a search's own probe
// verdicts (Probe.Valid) predate — with every probe a search itself found
// invalid that they do not name.
func invalidLevelsOf(t *optimizer.Trial) []invalidLevel {
	var out []invalidLevel
	for _, s := range t.InvalidLevels {
		if l, ok := parseInvalidLevel(s); ok {
			out = append(out, l)
		}
	}
	for i, r := range t.Capacity {
		for _, p := range r.Probes {
			if !p.Valid && !slices.ContainsFunc(out, func(l invalidLevel) bool { return l.run == i+1 && l.load == p.Load }) {
				out = append(out, invalidLevel{run: i + 1, load: p.Load, code: probeCode(p.Note), verdict: p.Note})
			}
		}
	}
	return out
}

// parseInvalidLevel reads "run 1, 23.7465 req/s: invalid (client_bound:
// detail)" as replay.Record.InvalidLevels writes it.
func parseInvalidLevel(s string) (invalidLevel, bool) {
	head, verdict, ok := strings.Cut(s, ": ")
	if !ok {
		return invalidLevel{}, false
	}
	var l invalidLevel
	if _, err := fmt.Sscanf(head, "run %d, %g req/s", &l.run, &l.load); err != nil {
		return invalidLevel{}, false
	}
	l.verdict = verdict
	l.code = "invalid"
	if code, _, ok := strings.Cut(strings.TrimPrefix(verdict, "invalid ("), ":"); ok && !strings.Contains(code, " ") {
		l.code = code
	}
	return l, true
}

// probeInvalid is the reason code of run's (one-based) probe at load
// where the record or the search found it invalid, "" where neither did.
func probeInvalid(ls []invalidLevel, run int, load float64) string {
	for _, l := range ls {
		if l.run == run && l.load == load {
			return l.code
		}
	}
	return ""
}

// lowerBounds counts the counted runs whose capacity is not bounded.
func lowerBounds(ts []*optimizer.Trial) int {
	n := 0
	for _, t := range ts {
		for _, r := range capacityRuns(t) {
			if r.counted && !r.res.Bounded {
				n++
			}
		}
	}
	return n
}

// maxPrecision is the coarsest precision of the log's searches.
func maxPrecision(ts []*optimizer.Trial) float64 {
	p := 0.0
	for _, t := range ts {
		for _, r := range t.Capacity {
			p = math.Max(p, r.Precision)
		}
	}
	return p
}

// capacityTrials lists every trial of a capacity log, failed ones too.
func (d *doc) capacityTrials() {
	tq := d.target()
	d.p("| [%s] # | role | config | why | GPUs | capacity, req/s: median (min–max) | per run, req/s | GPU-s / request at capacity |", d.prov.tag())
	align := "|---:|---|---|---|---:|---:|---|---:|"
	if tq > 0 {
		d.p(" serves %g req/s |", tq)
		align += "---|"
	}
	d.p(" eligible | invalid probes | bottleneck | seconds |\n%s---|---|---|---:|\n", align)
	for _, t := range d.all() {
		elig := "yes"
		if !t.Eligible {
			elig = "no: " + mdCell(t.Reason)
		}
		d.p("| %d | %s | `%s` | %s | %s | %s | %s | %s |", t.N, d.roleCell(t), t.Key, t.Why, gpusCell(t), capacityCell(t), joinRuns(t.Objectives, "%.2f"), costCell(t))
		if tq > 0 {
			serves := "no"
			if meetsTarget(t, tq) {
				serves = "yes, every run"
			}
			d.p(" %s |", serves)
		}
		d.p(" %s | %s | %s | %.0f |\n", elig, d.invalidProbesCell(t), t.Bottleneck, t.Seconds)
	}
	d.p("\n")
}

// invalidProbesCell names t's invalid levels: "run 1 at 23.7 req/s:
// client_bound".
func (d *doc) invalidProbesCell(t *optimizer.Trial) string {
	var s []string
	for _, l := range invalidLevelsOf(t) {
		load := fmt.Sprintf("%.3g req/s", l.load)
		if l.load == d.lg.ReferenceQPS {
			load = fmt.Sprintf("the reference %g req/s", l.load)
		}
		s = append(s, fmt.Sprintf("run %d at %s: %s", l.run, load, l.code))
	}
	if len(s) == 0 {
		return "—"
	}
	return "**invalid** " + strings.Join(s, "; ")
}

// probeCode is the first reason code of an invalid probe's note,
// "invalid: [client_bound: detail]" → "client_bound".
func probeCode(note string) string {
	s := strings.TrimPrefix(strings.TrimPrefix(note, "invalid: "), "[")
	if code, _, ok := strings.Cut(s, ":"); ok && code != "" && !strings.Contains(code, " ") {
		return code
	}
	return "invalid"
}

// capacityFile is the capacity-per-trial figure of a capacity log.
const capacityFile = "capacity.png"

// searchRuns is objectiveRuns for a capacity log: each run's search
// value, counted or not, with the reason codes of a left-out run (its
// invalid probes', else its reference load's).
func searchRuns(t *optimizer.Trial) []objectiveRun {
	if len(t.Capacity) == 0 {
		rs := make([]objectiveRun, len(t.Objectives))
		for i, v := range t.Objectives {
			rs[i] = objectiveRun{value: v, valid: true}
		}
		return rs
	}
	var rs []objectiveRun
	for i, r := range capacityRuns(t) {
		or := objectiveRun{value: r.res.Value, valid: r.counted}
		if !r.counted {
			for _, l := range invalidLevelsOf(t) {
				if l.run == i+1 && !slices.Contains(or.reasons, l.code) {
					or.reasons = append(or.reasons, l.code)
				}
			}
			for _, l := range t.Levels {
				for _, reason := range l.Invalid {
					if run, code, ok := parseInvalid(reason); ok && run == i+1 && !slices.Contains(or.reasons, code) {
						or.reasons = append(or.reasons, code)
					}
				}
			}
		}
		rs = append(rs, or)
	}
	return rs
}
