package report

import (
	"fmt"
	"image/color"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const predictedFile = "predicted-vs-measured.png"

// Profiles are told apart by colour and shape: the start, then each
// calibrated profile in turn.
var profileGlyphs = [][2]draw.GlyphDrawer{
	{draw.CircleGlyph{}, draw.RingGlyph{}},
	{draw.BoxGlyph{}, draw.SquareGlyph{}},
	{draw.PyramidGlyph{}, draw.TriangleGlyph{}},
}

func profileLook(i int) look {
	g := profileGlyphs[i%len(profileGlyphs)]
	return look{color: otherColors[i%len(otherColors)], glyph: g[0], hollow: g[1], width: vg.Points(1)}
}

// predictedFigure plots every trial's measured median objective, with its
// runs' range, against the objective predicted for it; the line y = x and
// the band within which the error stays inside the bound.
func (d *doc) predictedFigure() *figure {
	pl := d.lg.Predict
	title := fmt.Sprintf(d.words("measured vs predicted objective per trial\nx: PREDICTED by the engine model, before measuring\ny: %s: %s"),
		strings.ToUpper(d.prov.tag()), d.prov.short)
	f := newFigure(predictedFile, title)
	f.prov = &figureProvenance{label: "PREDICTED vs " + d.prov.label, tag: d.predictedTag()}
	p := f.plot
	p.X.Label.Text = d.words("predicted objective (req/s)")
	p.Y.Label.Text = fmt.Sprintf("%s %s (req/s)", d.prov.tag(), d.objectiveWord())

	pts := d.predictedPoints()
	lim := pts.lim
	if lim <= 0 {
		lim = 1
	}
	lim *= 1.08

	b := pl.ErrorBound
	top := lim * 100
	if b < 1 {
		top = lim / (1 - b)
	}
	band, _ := plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}, {X: lim, Y: lim / (1 + b)}, {X: lim, Y: top}})
	band.Color = color.RGBA{220, 220, 220, 255}
	band.LineStyle.Width = 0
	diag := plotter.NewFunction(func(x float64) float64 { return x })
	diag.Color = legendGrey
	diag.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
	// The band first, so that everything else is drawn over it.
	p.Add(band, diag)
	p.Add(pts.bars...)

	for i, name := range pts.profiles {
		filled, ok := pts.groups[name]
		if !ok {
			continue
		}
		lk := profileLook(i)
		thumbs := []draw.GlyphStyle{lk.point()}
		if len(filled) > 0 {
			sc, _ := plotter.NewScatter(filled)
			sc.GlyphStyle = lk.point()
			p.Add(sc)
		}
		f.add(d.profileLegend(i, name), glyphRow(thumbs))
	}
	if len(pts.labels.XYs) > 0 {
		ls, _ := plotter.NewLabels(pts.labels)
		ls.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(3)}
		p.Add(ls)
	}
	f.add(d.words("min–max of the runs' objectives"), &rangeBars{style: draw.LineStyle{Color: legendGrey, Width: vg.Points(1)}})
	f.add("measured = predicted", diag)
	f.add(fmt.Sprintf(d.words("objective error within %s of the measured objective"), pctBound(b)), band)
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, lim, 0, lim

	f.alt = d.words("measured vs predicted objective per trial")
	f.caption = fmt.Sprintf(d.words("Each trial's measured objective (%s, req/s: the median over its runs, the bar their min–max) against the objective "+
		"the engine model predicted for it before it ran (req/s), labelled with the trial's number; colour and shape name the profile the "+
		"prediction came from. The dashed line is measured = predicted; inside the grey band the objective error (measured − predicted) / "+
		"measured is within the loop's bound, %s, and outside it the loop recalibrates the profile."), d.prov.tag(), pctBound(b))
	f.caption += " " + d.words(leftOutSentence(len(d.lg.Trials), pts.unpredicted, pts.failed, pts.ineligible))
	return f
}

// predictedPoints are predictedFigure's points: each profile's trials,
// measured against predicted objective (profiles: the loop's, then those
// only a prediction names), their labels and run ranges, the largest
// value drawn, and the trials left out, by why.
type predictedPoints struct {
	profiles                        []string
	groups                          map[string]plotter.XYs
	labels                          plotter.XYLabels
	bars                            []plot.Plotter
	lim                             float64
	unpredicted, failed, ineligible []string
}

// predictedPoints gathers predictedFigure's points from the trials.
func (d *doc) predictedPoints() predictedPoints {
	pts := predictedPoints{profiles: slices.Clone(d.lg.Predict.Profiles), groups: map[string]plotter.XYs{}}
	for _, t := range d.all() {
		pr := t.Predicted
		switch {
		case pr == nil || pr.Error != "":
			pts.unpredicted = append(pts.unpredicted, fmt.Sprint(t.N))
			continue
		case t.Error != "":
			pts.failed = append(pts.failed, fmt.Sprint(t.N))
			continue
		case !t.Eligible:
			// Its objective decides nothing (0 where no run counted):
			// drawn, it would read as a prediction that missed.
			pts.ineligible = append(pts.ineligible, fmt.Sprint(t.N))
			continue
		}
		i := slices.Index(pts.profiles, pr.Profile)
		if i < 0 {
			pts.profiles = append(pts.profiles, pr.Profile)
			i = len(pts.profiles) - 1
		}
		xy := plotter.XY{X: pr.Objective, Y: t.Objective}
		pts.groups[pr.Profile] = append(pts.groups[pr.Profile], xy)
		pts.lim = max(pts.lim, pr.Objective, t.Objective)
		if lo, hi, ok := objectiveRange(t); ok {
			rb := &rangeBars{style: draw.LineStyle{Color: profileLook(i).color, Width: vg.Points(1)}}
			rb.add(pr.Objective, lo, hi)
			pts.bars = append(pts.bars, rb)
			pts.lim = max(pts.lim, hi)
		}
		pts.labels.XYs = append(pts.labels.XYs, xy)
		pts.labels.Labels = append(pts.labels.Labels, fmt.Sprint(t.N))
	}
	return pts
}

// profileLegend names profile i: the start, or the trial it was
// calibrated after.
func (d *doc) profileLegend(i int, name string) string {
	if i == 0 {
		return fmt.Sprintf("predicted with %s (the start)", name)
	}
	for _, c := range d.lg.Predict.Calibrations {
		if c.To == name && c.Error == "" {
			return fmt.Sprintf("predicted with %s (calibrated after trial %d)", name, c.AfterTrial)
		}
	}
	return "predicted with " + name
}

// leftOutSentence says which trials the predicted-vs-measured figure
// leaves out and why: no prediction, failed, or not eligible (their
// objective is no measurement, and drawn at 0 it would read as a
// prediction that missed).
func leftOutSentence(trials int, unpredicted, failed, ineligible []string) string {
	n := len(unpredicted) + len(failed) + len(ineligible)
	if n == 0 {
		return fmt.Sprintf("All %d trials are drawn.", trials)
	}
	var why []string
	for _, g := range []struct {
		ts     []string
		reason string
	}{
		{unpredicted, "no prediction"},
		{failed, "the trial failed"},
		{ineligible, "not eligible: the objective decides nothing, and is not drawn at 0"},
	} {
		switch len(g.ts) {
		case 0:
		case 1:
			why = append(why, fmt.Sprintf("trial %s (%s)", g.ts[0], g.reason))
		default:
			why = append(why, fmt.Sprintf("trials %s (%s)", strings.Join(g.ts, ", "), g.reason))
		}
	}
	return fmt.Sprintf("Left out: %d of %d trials: %s.", n, trials, strings.Join(why, "; "))
}
