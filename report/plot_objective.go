package report

import (
	"fmt"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/hone-llm/hone/optimizer"
)

// objectiveFigure plots every trial's objective: each run as a point —
// the runs the trial's objective counts filled, the runs it left out
// (an invalid level) hollow and grey, their reasons in the legend and the
// caption — the median of the counted runs as a tick, their range as a
// bar; the baseline and the selection in their own colours, trials that
// were not eligible light grey.
func (d *doc) objectiveFigure() *figure {
	what, file := "objective per trial: each run, median and range over counted runs", "objective.png"
	if d.byCapacity() {
		what, file = "capacity per trial: each run, median and range over counted runs", capacityFile
	}
	f := newFigure(file, d.prov.title(what))
	pl := f.plot
	pl.X.Label.Text = "trial"
	pl.Y.Label.Text = "largest passing effective load (req/s)"
	if d.byCapacity() {
		pl.Y.Label.Text = "capacity (req/s)"
	}
	var names, failed []string
	var ineligible bool
	var excluded []excludedRuns
	top := 0.0
	for i, t := range d.all() {
		name := fmt.Sprintf("%d %s", t.N, short(t.Role))
		rs := d.objectiveRuns(t)
		if len(rs) == 0 {
			name += "\n(no run)"
			failed = append(failed, fmt.Sprint(t.N))
		}
		names = append(names, name)
		lk := d.objectiveLook(t)
		c, filled := lk.color, lk.point()
		if !t.Eligible {
			c, filled.Color = invalidColor, invalidColor
		}
		var counted, left plotter.XYs
		var vs []float64
		var ex excludedRuns
		for j, r := range rs {
			pt := plotter.XY{X: float64(i) + 0.12*(float64(j)-float64(len(rs)-1)/2), Y: r.value}
			top = max(top, r.value)
			if r.valid {
				counted, vs = append(counted, pt), append(vs, r.value)
				continue
			}
			left = append(left, pt)
			ex.runs = append(ex.runs, j+1)
			for _, code := range r.reasons {
				if !slices.Contains(ex.codes, code) {
					ex.codes = append(ex.codes, code)
				}
			}
		}
		if len(vs) > 0 {
			lo, hi := slices.Min(vs), slices.Max(vs)
			bars := &rangeBars{style: draw.LineStyle{Color: c, Width: vg.Points(1)}}
			bars.add(float64(i), lo, hi)
			median, _ := plotter.NewScatter(plotter.XYs{{X: float64(i), Y: t.Objective}})
			median.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(10), Shape: tickGlyph{}}
			sc, _ := plotter.NewScatter(counted)
			sc.GlyphStyle = filled
			pl.Add(bars, median, sc)
			top = max(top, t.Objective)
			ineligible = ineligible || !t.Eligible
		}
		if len(left) > 0 {
			sc, _ := plotter.NewScatter(left)
			sc.GlyphStyle = lk.invalidPoint()
			pl.Add(sc)
			ex.trial = t.N
			excluded = append(excluded, ex)
		}
	}
	pl.NominalX(names...)
	pl.X.Tick.Label.Font.Size = vg.Points(9)
	top = max(top, d.base.Objective)
	axis := fitAxis(0, top, d.target(), false)
	axis.apply(pl)
	d.objectiveLegend(f, ineligible, excluded)
	f.alt = "objective per trial"
	f.caption = "Each trial's objective (req/s): the largest effective load among the levels a run passed. Every run is a point (drawn a little apart); " +
		"filled points are the runs the trial's objective counts, the tick is their median (the trial's objective), the bar their min–max. " +
		"The dashed line is the baseline's median, for reference; the axis leaves room above the highest mark."
	if d.byCapacity() {
		d.capacityCaption(f, axis)
	}
	f.caption += d.excludedSentence(excluded)
	if ineligible {
		f.caption += " Counted runs of trials that were not eligible are light grey (reasons in the trials table)."
	}
	if len(failed) > 0 {
		f.caption += fmt.Sprintf(" No run to draw: trial %s (it failed before measuring; see the trials table).", strings.Join(failed, ", "))
	}
	return f
}

// capacityCaption words the objective figure of a capacity log, whose
// trials' figure is their capacity, and marks the goal's target rate.
func (d *doc) capacityCaption(f *figure, axis valueAxis) {
	f.alt = "capacity per trial"
	f.caption = "Each trial's capacity (req/s): per run, the largest offered load that met the SLO at steady state in its capacity search. " +
		"Every run is a point (drawn a little apart); filled points are the runs the trial's capacity counts, the tick is their median (the trial's capacity), " +
		"the bar their min–max. The dashed line is the baseline's median, for reference."
	if tq := d.target(); tq > 0 {
		mark := sloMark{value: tq, unit: "req/s", on: axis.refOn, label: "target"}
		f.plot.Add(mark)
		f.add(fmt.Sprintf("the goal's target, %g req/s", tq), mark)
		f.caption += fmt.Sprintf(" The goal's target rate, %g req/s, is %s; a config serves it when every counted run is at or above it.", tq, mark.where())
	}
}

// excludedSentence explains the hollow grey runs, "" where there are none.
func (d *doc) excludedSentence(excluded []excludedRuns) string {
	if len(excluded) == 0 {
		return ""
	}
	var s []string
	for _, e := range excluded {
		s = append(s, e.String())
	}
	if d.byCapacity() {
		return " Hollow grey points are runs left out of their trial's capacity because a probe or the reference load was invalid: " + strings.Join(s, "; ") +
			". Their value is the search's as it stood; it decides nothing."
	}
	return " Hollow grey points are runs left out of their trial's objective because a level of theirs was invalid: " + strings.Join(s, "; ") +
		". Their value is recomputed from their levels (the largest effective load where the run's p99 TTFT and TPOT met the SLO), " +
		"as the log keeps only counted runs' objectives; it decides nothing."
}

// excludedRuns are a trial's runs left out of its objective, and the
// reason codes of their invalid levels.
type excludedRuns struct {
	trial int
	runs  []int // one-based
	codes []string
}

// String reads "trial 5, runs 1, 2, 3 (emulator_bound)".
func (e excludedRuns) String() string {
	runs := "run "
	if len(e.runs) > 1 {
		runs = "runs "
	}
	codes := strings.Join(e.codes, ", ")
	if codes == "" {
		codes = "an invalid level, no reason logged"
	}
	return fmt.Sprintf("trial %d, %s%s (%s)", e.trial, runs, joinInts(e.runs), codes)
}

// objectiveRun is one run's objective and whether the trial's objective
// counts it; reasons are the codes of its invalid levels.
type objectiveRun struct {
	value   float64
	valid   bool
	reasons []string
}

// objectiveRuns returns every run of t in run order. A run counts where
// every level of it is valid; the counted runs take their objectives from
// the log (t.Objectives, in run order). The log keeps no objective for a
// run it left out: that one is recomputed from the run's levels, as the
// replay computes it (slo.Objective), from the p99s and effective loads
// the log keeps. A log without per-run level values gives t.Objectives
// alone.
func (d *doc) objectiveRuns(t *optimizer.Trial) []objectiveRun {
	if d.byCapacity() {
		return searchRuns(t)
	}
	n := 0
	for i := range t.Levels {
		n = max(n, len(t.Levels[i].RunEffectiveQPS))
	}
	if n == 0 {
		rs := make([]objectiveRun, len(t.Objectives))
		for i, v := range t.Objectives {
			rs[i] = objectiveRun{value: v, valid: true}
		}
		return rs
	}
	rs := make([]objectiveRun, n)
	valid := 0
	for r := range rs {
		rs[r].valid = true
		for i := range t.Levels {
			l := &t.Levels[i]
			if r < len(l.RunEffectiveQPS) && r < len(l.RunP99TTFTMs) && r < len(l.RunP99TPOTMs) &&
				l.RunP99TTFTMs[r] <= d.lg.SLO.TTFTMillis && l.RunP99TPOTMs[r] <= d.lg.SLO.TPOTMillis {
				rs[r].value = max(rs[r].value, l.RunEffectiveQPS[r])
			}
			if runValid(l, r) {
				continue
			}
			rs[r].valid = false
			for _, reason := range l.Invalid {
				if run, code, ok := parseInvalid(reason); ok && run == r+1 && !slices.Contains(rs[r].reasons, code) {
					rs[r].reasons = append(rs[r].reasons, code)
				}
			}
		}
		if rs[r].valid {
			valid++
		}
	}
	if valid != len(t.Objectives) {
		return rs // the log's objectives cannot be matched to runs: every value is recomputed
	}
	k := 0
	for r := range rs {
		if rs[r].valid {
			rs[r].value = t.Objectives[k]
			k++
		}
	}
	return rs
}

// objectiveLook colours the baseline, the selection and its re-run; every
// other trial is one neutral colour.
func (d *doc) objectiveLook(t *optimizer.Trial) look {
	if m := d.mark(t); m != "" {
		return lookOf(m, 0)
	}
	return look{color: legendGrey, glyph: draw.CircleGlyph{}, hollow: draw.RingGlyph{}, width: vg.Points(1)}
}

func (d *doc) objectiveLegend(f *figure, ineligible bool, excluded []excludedRuns) {
	pl := f.plot
	ref := plotter.NewFunction(func(float64) float64 { return d.base.Objective })
	ref.Color = baselineColor
	ref.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
	pl.Add(ref)

	point := func(lk look) plot.Thumbnailer {
		sc, _ := plotter.NewScatter(plotter.XYs{{}})
		sc.GlyphStyle = lk.point()
		return sc
	}
	f.add(d.name(d.base), point(lookOf(markBaseline, 0)))
	if d.sel != nil && d.sel != d.base {
		name := d.name(d.sel)
		for _, t := range d.all() {
			if d.mark(t) == markRerun {
				name += fmt.Sprintf(", re-run as trial %d", t.N)
			}
		}
		f.add(name, point(lookOf(markSelected, 0)))
	}
	f.add("other trials", point(d.objectiveLook(&optimizer.Trial{})))
	if ineligible {
		g := d.objectiveLook(&optimizer.Trial{}).point()
		g.Color = invalidColor
		f.add("trial not eligible (light grey; reason in the trials table)", glyphRow{g})
	}
	if len(excluded) > 0 {
		var codes []string
		for _, e := range excluded {
			for _, c := range e.codes {
				if !slices.Contains(codes, c) {
					codes = append(codes, c)
				}
			}
		}
		why := "an invalid level"
		if d.byCapacity() {
			why = "an invalid probe or reference load"
		}
		if len(codes) > 0 {
			why += ": " + strings.Join(codes, ", ")
		}
		f.add("run left out of its trial's "+d.objectiveWord()+" ("+why+"; hollow, grey)", glyphRow{lookOf("", 0).invalidPoint()})
	}
	tick, _ := plotter.NewScatter(plotter.XYs{{}})
	tick.GlyphStyle = draw.GlyphStyle{Color: legendGrey, Radius: vg.Points(8), Shape: tickGlyph{}}
	f.add("median over counted runs", tick)
	f.add("min–max over counted runs", &rangeBars{style: draw.LineStyle{Color: legendGrey, Width: vg.Points(1)}})
	f.add(fmt.Sprintf("baseline median, %.3f req/s", d.base.Objective), ref)
}

// short abbreviates a role for an axis label.
func short(role string) string {
	switch role {
	case "interaction":
		return "inter."
	case "proposal":
		return "prop."
	case "ablation":
		return "abl."
	}
	return role
}
