package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// The predict-then-measure loop logs a prediction beside every
// measurement. Predicted figures come from the engine model, not from the
// log's kind, so every table and plot of them names both: "[predicted vs
// emulated]".

// predictedTag names the two sources a predicted-vs-measured figure sets
// side by side.
func (d *doc) predictedTag() string {
	return "predicted vs " + d.prov.tag()
}

// predicted is the predict-then-measure loop's part of the report: the
// rule, every trial's prediction against its measurement, the
// calibrations, why exploration stopped, and the top of the ranking.
// Logs of the diagnosis-driven loop have none.
func (d *doc) predicted() {
	pl := d.lg.Predict
	if pl == nil {
		return
	}
	d.p("## Predicted vs measured (%s)\n\n", d.predictedTag())
	d.p("Rule: %s\n\n", pl.Rule)
	d.p(d.words("The engine model predicted the %d configs of the grid with %s; predicting took %.1f s in all. "+
		"Error bound: a trial whose measured objective misses its prediction by more than %s of the measured objective recalibrates the profile.\n\n"),
		pl.GridSize, d.profilesUsed(), pl.Seconds, pctBound(pl.ErrorBound))
	d.p("**Predicted figures are the engine model's** (the emulator's scheduler in virtual time with the cost profile named in each row), "+
		"made before the trial was measured; they are not measurements. **Measured figures are %s** (kind `%s`): %s. "+
		"%s error is (measured − predicted) / measured.", d.prov.label, d.lg.Kind, d.prov.about, capitalize(d.objectiveWord()))
	if d.byCapacity() {
		d.p(" **Part of the agreement is structural**: a trial's first search starts at its predicted capacity, so the predicted load is " +
			"always one of the loads measured, and a measured capacity equal to the prediction says only that the predicted load passed and " +
			"the next load up (within the search's precision) failed: the prediction is right to the precision, nothing finer. An error of 0 " +
			"is that, not an exact match.")
	}
	if n, ok := d.figs[predictedFile]; ok {
		d.p(d.words(" Figure %d ([%s](%s)) plots each eligible trial's measured objective against its prediction (its caption names the trials left out)."), n, predictedFile, predictedFile)
	}
	d.p("\n\n")
	d.predictedTable()
	d.calibrations()
	d.p("### Why exploration stopped (%s)\n\n", d.predictedTag())
	if pl.StopReason == "" {
		d.p("The log gives no stop reason: the loop did not finish exploring.\n\n")
	} else {
		d.p("%s.\n\n", capitalize(strings.TrimSuffix(pl.StopReason, ".")))
	}
	d.ranking()
}

// profilesUsed lists the log's profiles: "`a` (the start), then `b`
// (calibrated after trial 3)".
func (d *doc) profilesUsed() string {
	pl := d.lg.Predict
	if len(pl.Profiles) == 0 {
		return "no profile named in the log"
	}
	after := map[string]int{}
	for _, c := range pl.Calibrations {
		if c.Error == "" && c.To != "" {
			after[c.To] = c.AfterTrial
		}
	}
	s := make([]string, len(pl.Profiles))
	for i, p := range pl.Profiles {
		switch n, ok := after[p]; {
		case i == 0:
			s[i] = fmt.Sprintf("`%s` (the start)", p)
		case ok:
			s[i] = fmt.Sprintf("`%s` (calibrated after trial %d)", p, n)
		default:
			s[i] = fmt.Sprintf("`%s`", p)
		}
	}
	if len(s) == 1 {
		return "one profile, " + s[0]
	}
	return fmt.Sprintf("%d profiles, %s", len(s), strings.Join(s, ", then "))
}

// predictedTable is one row per trial: its prediction against its
// measurement, the objective and the p50 latencies at the level nearest
// the objective.
func (d *doc) predictedTable() {
	tag := d.prov.tag()
	d.p(d.words("| [%s] # | role | config | predicted with profile | predicted objective, req/s | %s objective, req/s: median (min–max) | objective error "+
		"| at offered, req/s | p50 TTFT, ms: predicted → %s | p50 TPOT, ms: predicted → %s |\n"+
		"|---:|---|---|---|---:|---:|---:|---:|---:|---:|\n"), d.predictedTag(), tag, tag, tag)
	var errs []float64
	beyond, edges := 0, 0
	for _, t := range d.all() {
		predicted, profile := "not predicted", "—"
		if p := t.Predicted; p != nil {
			profile = "`" + p.Profile + "` (" + validationCell(p.Profile) + ")"
			predicted = fmt.Sprintf("%.3f", p.Objective)
			if p.Rank > 0 {
				predicted += fmt.Sprintf(" (rank %d)", p.Rank)
			}
			if p.Edge != "" {
				predicted += " ~ too close to call: " + mdCell(p.Edge)
				edges++
			}
			if p.Error != "" {
				predicted = "**prediction failed**: " + mdCell(p.Error)
			}
			if e := p.ObjectiveError; e != nil && p.Error == "" {
				errs = append(errs, math.Abs(*e))
				if math.Abs(*e) > d.lg.Predict.ErrorBound {
					beyond++
				}
			}
		}
		q, ttftCell, tpotCell := d.nearestLevelCells(t)
		if d.byCapacity() && q != "—" && d.pastCapacity(t) != "" {
			q += " (past its capacity: not comparable)"
		}
		d.p("| %d | %s | `%s` | %s | %s | %s | %s | %s | %s | %s |\n", t.N, d.roleCell(t), t.Key, profile, predicted,
			measuredObjectiveCell(t), d.objectiveErrorCell(t), q, ttftCell, tpotCell)
	}
	d.p("\n")
	where := "The p50 columns are at the offered level nearest the trial's measured objective (its predicted objective where nothing was measured): " +
		"the prediction's one run against the median over the trial's runs."
	if d.byCapacity() {
		where = "The p50 columns are at the reference load, the one load every run of every trial measured: the prediction's where it probed that load " +
			"(— where it did not) against the median over the trial's runs."
	}
	d.p("Predicted times are the engine model's virtual time; %s times are %s. %s", d.prov.tag(), d.prov.ms(), where)
	if len(errs) > 0 {
		d.p(d.words(" Median |objective error| over the %d trials with both a prediction and a measured objective: %.1f%%; %d of them beyond %s."),
			len(errs), 100*slo.Median(errs), beyond, pctBound(d.lg.Predict.ErrorBound))
	}
	if edges > 0 {
		are := "predictions are"
		if edges == 1 {
			are = "prediction is"
		}
		d.p(d.words(" %d %s too close to call (~): a deciding level's predicted p99 lies within %.0f%% of an SLO limit, so a measurement may land a level "+
			"higher or lower and the objective error there says little about the model."), edges, are, 100*predict.EdgeMargin)
	}
	d.p("\n\n")
}

// measuredObjectiveCell is a trial's median objective and its runs' range.
func measuredObjectiveCell(t *optimizer.Trial) string {
	if t.Error != "" {
		return "**trial failed**: " + mdCell(t.Error)
	}
	s := fmt.Sprintf("%.3f", t.Objective)
	if lo, hi, ok := objectiveRange(t); ok && lo != hi {
		s += fmt.Sprintf(" (%.3f–%.3f)", lo, hi)
	}
	if !t.Eligible {
		s += ", not eligible"
	}
	return s
}

// objectiveRange is the min and max of t's runs' objectives.
func objectiveRange(t *optimizer.Trial) (lo, hi float64, ok bool) {
	if len(t.Objectives) == 0 {
		return 0, 0, false
	}
	lo, hi = t.Objectives[0], t.Objectives[0]
	for _, v := range t.Objectives {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi, true
}

// objectiveErrorCell is t's relative objective error, in bold beyond the
// bound, with the calibration it led to.
func (d *doc) objectiveErrorCell(t *optimizer.Trial) string {
	p := t.Predicted
	switch {
	case p == nil || p.Error != "":
		return "—"
	case t.Error != "":
		return "n/a: the trial failed"
	case p.ObjectiveError == nil:
		return "n/a: measured 0"
	}
	e := *p.ObjectiveError
	s := fmt.Sprintf("%+.1f%%", 100*e)
	if math.Abs(e) <= d.lg.Predict.ErrorBound {
		return s
	}
	s = "**" + s + "**, beyond " + pctBound(d.lg.Predict.ErrorBound)
	for _, c := range d.lg.Predict.Calibrations {
		if c.AfterTrial == t.N {
			if c.Error != "" {
				return s + "; calibration failed"
			}
			return s + "; calibrated"
		}
	}
	return s
}

// nearestLevelCells are the offered load nearest t's objective and the
// p50 TTFT and TPOT predicted and measured there.
func (d *doc) nearestLevelCells(t *optimizer.Trial) (qps, ttftCell, tpotCell string) {
	var pred []optimizer.PredictedLevel
	target := t.Objective
	if p := t.Predicted; p != nil && p.Error == "" {
		pred = p.Levels
		if target <= 0 || t.Error != "" {
			target = p.Objective
		}
	}
	offered := make([]float64, 0, len(t.Levels)+len(pred))
	for _, l := range t.Levels {
		offered = append(offered, l.OfferedQPS)
	}
	if len(offered) == 0 {
		for _, l := range pred {
			offered = append(offered, l.OfferedQPS)
		}
	}
	if len(offered) == 0 {
		return "—", "—", "—"
	}
	q := nearest(offered, target)
	var m *optimizer.LevelSummary
	for i := range t.Levels {
		if t.Levels[i].OfferedQPS == q {
			m = &t.Levels[i]
		}
	}
	var p *optimizer.PredictedLevel
	for i := range pred {
		if pred[i].OfferedQPS == q {
			p = &pred[i]
		}
	}
	cell := func(f string, pv, mv func() float64) string {
		a, b := "—", "—"
		if p != nil {
			a = fmt.Sprintf(f, pv())
		}
		if m != nil && mv() > 0 {
			b = fmt.Sprintf(f, mv())
		}
		return a + " → " + b
	}
	ttftCell = cell("%.1f", func() float64 { return p.P50TTFTMs }, func() float64 { return m.P50TTFTMs })
	tpotCell = cell("%.2f", func() float64 { return p.P50TPOTMs }, func() float64 { return m.P50TPOTMs })
	return fmt.Sprintf("%g", q), ttftCell, tpotCell
}

// nearest is the value of vs nearest x, the smaller on a tie.
func nearest(vs []float64, x float64) float64 {
	best := vs[0]
	for _, v := range vs[1:] {
		if dv, db := math.Abs(v-x), math.Abs(best-x); dv < db || (dv == db && v < best) {
			best = v
		}
	}
	return best
}

// calibrations lists every refit of the profile: on which trials, each
// coefficient against its start, and the error before and after.
func (d *doc) calibrations() {
	cs := d.lg.Predict.Calibrations
	d.p("### Calibrations (%s)\n\n", d.predictedTag())
	if len(cs) == 0 {
		d.p(d.words("None: no measured objective missed its prediction by more than %s.\n\n"), pctBound(d.lg.Predict.ErrorBound))
		return
	}
	for _, c := range cs {
		if c.Error != "" {
			d.p("**After trial %d**: the calibration failed (%s); the profile stayed `%s`.\n\n", c.AfterTrial, c.Error, c.From)
			d.calibrationNotes(c)
			continue
		}
		d.p(d.words("**After trial %d**: `%s` → `%s`, fitted to the %s records of trials %s (hone calibrate's least squares). "+
			"Median |objective error| of the measured trials: %s → %s (before: the predictions they were measured against; "+
			"after: the calibrated profile's predictions of the same trials)."),
			c.AfterTrial, c.From, c.To, d.prov.tag(), joinInts(c.Trials), fmtPtrPct(c.ErrorBefore), fmtPtrPct(c.ErrorAfter))
		if c.Path != "" {
			d.p(" Written to `%s`.", c.Path)
		}
		d.p("\n\n")
		if len(c.Coefficients) > 0 {
			d.p("| [calibrated after trial %d] coefficient | start | value ± SE | relative SE | fitted | why |\n|---|---:|---:|---:|---|---|\n", c.AfterTrial)
			for _, k := range c.Coefficients {
				fitted := "no"
				if k.Fitted {
					fitted = "yes"
				}
				why := mdCell(k.Why)
				if why == "" {
					why = "—"
				}
				d.p("| `%s` | %s | %s | %s | %s | %s |\n", k.Name, fmtCoef(k.Start), valueSE(k.Value, k.StdErr), relSE(k.RelStdErr), fitted, why)
			}
			d.p("\n")
		}
		d.calibrationNotes(c)
	}
}

func (d *doc) calibrationNotes(c optimizer.Calibration) {
	for _, n := range c.Notes {
		d.p("- %s\n", n)
	}
	if len(c.Notes) > 0 {
		d.p("\n")
	}
}

// ranking is the top of the latest ranking, with its Pareto front and
// the trials that measured its configs.
func (d *doc) ranking() {
	pl := d.lg.Predict
	profile := "no profile named"
	if n := len(pl.Profiles); n > 0 {
		profile = "profile `" + pl.Profiles[n-1] + "`"
	}
	d.p("### Top of the latest ranking (predicted, %s)\n\n", profile)
	if len(pl.Ranked) == 0 {
		d.p("The log holds no ranking.\n\n")
		return
	}
	d.p(d.words("The best %d of the %d configs of the grid as the latest profile predicts them. Pareto: no other config is predicted both "+
		"at least as high an objective and at least as low a cost (GPU-seconds per request), and better in one. "+
		"The measured column gives the trial that measured the config and its %s median objective."), len(pl.Ranked), pl.GridSize, d.prov.tag())
	if n, ok := d.figs[paretoFile]; ok {
		d.p(" Figure %d's fronts are by GPUs instead (as much capacity on as few GPUs), the order the goal's target asks for.", n)
	}
	d.p("\n\n")
	d.p(d.words("| [predicted] rank | config | predicted objective, req/s | GPU-s / request | GPUs | Pareto | measured (%s) |\n|---:|---|---:|---:|---:|---|---|\n"), d.prov.tag())
	for _, r := range pl.Ranked {
		config := "`" + r.Key + "`"
		if r.Name != "" && r.Name != r.Key {
			config += " (" + mdCell(r.Name) + ")"
		}
		pareto := "—"
		if r.Pareto {
			pareto = "**yes**"
		}
		measured := "—"
		if r.Measured > 0 {
			measured = fmt.Sprintf("trial %d", r.Measured)
			if r.Measured <= len(d.lg.Trials) {
				if t := &d.lg.Trials[r.Measured-1]; t.Error == "" {
					measured += fmt.Sprintf(": %.3f req/s", t.Objective)
				}
			}
		}
		d.p("| %d | %s | %.3f | %s | %d | %s | %s |\n", r.Rank, config, r.Objective, fmtPtr(r.CostGPUSec, "%.4f"), r.GPUs, pareto, measured)
	}
	d.p("\n")
}

// pctBound is an error bound as "±10%".
func pctBound(b float64) string {
	return fmt.Sprintf("±%g%%", math.Round(1000*b)/10)
}

// fmtCoef prints a coefficient: they span orders of magnitude.
func fmtCoef(v float64) string {
	return fmt.Sprintf("%.4g", v)
}

func valueSE(v, se float64) string {
	if se <= 0 || math.IsNaN(se) || math.IsInf(se, 0) {
		return fmtCoef(v)
	}
	return fmtCoef(v) + " ± " + fmt.Sprintf("%.2g", se)
}

func relSE(r float64) string {
	if r <= 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*r)
}

// mdCell makes s safe inside a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// validationCell is how far a profile's predictions were from measured
// requests (exact lengths), in a few words.
func validationCell(profile string) string {
	for _, v := range emulator.ProfileValidation(profile) {
		if v.LengthRatio == 0 {
			return fmt.Sprintf("validated: median error TTFT %.1f%%, TPOT %.1f%% on %d measured rows", v.TTFTMedian, v.TPOTMedian, v.Rows)
		}
	}
	return "not validated against measured requests"
}

// words fits a sentence written for a levels log to the log's kind of
// figure: in a capacity log a trial's objective is its capacity.
func (d *doc) words(s string) string {
	if !d.byCapacity() {
		return s
	}
	return strings.NewReplacer(" an objective", " a capacity", "objectives", "capacities", "objective", "capacity").Replace(s)
}
