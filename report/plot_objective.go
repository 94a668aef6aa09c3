package report

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/hone-llm/hone/optimizer"
)

// objectiveFigure plots every trial's objective: each run as a point, the
// median as a tick, the range as a bar; the baseline and the selection in
// their own colours, trials that were not eligible hollow and grey.
func (d *doc) objectiveFigure() *figure {
	what := "objective per trial: each run, median and range over runs"
	f := newFigure("objective.png", d.prov.title(what))
	pl := f.plot
	pl.X.Label.Text = "trial"
	pl.Y.Label.Text = "largest passing effective load (req/s)"
	pl.Y.Min = 0
	var names []string
	var ineligible bool
	for i, t := range d.all() {
		names = append(names, fmt.Sprintf("%d %s", t.N, short(t.Role)))
		lk := d.objectiveLook(t)
		runs := t.Objectives
		if len(runs) == 0 {
			runs = []float64{t.Objective}
		}
		pts := make(plotter.XYs, len(runs))
		lo, hi := runs[0], runs[0]
		for j, v := range runs {
			pts[j] = plotter.XY{X: float64(i) + 0.12*(float64(j)-float64(len(runs)-1)/2), Y: v}
			lo, hi = min(lo, v), max(hi, v)
		}
		c := lk.color
		sty := lk.point()
		if !t.Eligible {
			c, sty = invalidColor, lk.invalidPoint()
			ineligible = true
		}
		bars := &rangeBars{style: draw.LineStyle{Color: c, Width: vg.Points(1)}}
		bars.add(float64(i), lo, hi)
		median, _ := plotter.NewScatter(plotter.XYs{{X: float64(i), Y: t.Objective}})
		median.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(10), Shape: tickGlyph{}}
		sc, _ := plotter.NewScatter(pts)
		sc.GlyphStyle = sty
		pl.Add(bars, median, sc)
	}
	pl.NominalX(names...)
	pl.X.Tick.Label.Font.Size = vg.Points(9)
	d.objectiveLegend(f, ineligible)
	f.alt = "objective per trial"
	f.caption = "Each trial's objective (req/s): the largest effective load among the levels a run passed. Points are runs (drawn a little apart), " +
		"the tick is the median over runs (the trial's objective), the bar spans the runs' min–max. " +
		"The dashed line is the baseline's median, for reference."
	if ineligible {
		f.caption += " Hollow grey marks are trials that were not eligible (reasons in the trials table)."
	}
	return f
}

// objectiveLook colours the baseline, the selection and its re-run; every
// other trial is one neutral colour.
func (d *doc) objectiveLook(t *optimizer.Trial) look {
	if m := d.mark(t); m != "" {
		return lookOf(m, 0)
	}
	return look{color: legendGrey, glyph: draw.CircleGlyph{}, hollow: draw.RingGlyph{}, width: vg.Points(1)}
}

func (d *doc) objectiveLegend(f *figure, ineligible bool) {
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
		sc, _ := plotter.NewScatter(plotter.XYs{{}})
		sc.GlyphStyle = lookOf("", 0).invalidPoint()
		f.add("not eligible (hollow, grey)", sc)
	}
	tick, _ := plotter.NewScatter(plotter.XYs{{}})
	tick.GlyphStyle = draw.GlyphStyle{Color: legendGrey, Radius: vg.Points(8), Shape: tickGlyph{}}
	f.add("median over runs", tick)
	f.add("min–max over runs", &rangeBars{style: draw.LineStyle{Color: legendGrey, Width: vg.Points(1)}})
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
