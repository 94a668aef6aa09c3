package report

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/hone-llm/hone/optimizer"
)

// levelFigure plots m against offered load for the baseline and the
// selection: every run as a point, the median of the valid runs as a line
// with a tick, their range as a bar; invalid runs hollow and grey.
func (d *doc) levelFigure(m metric) *figure {
	ts := d.compared()
	what := m.name + " vs offered load: baseline and selected"
	if len(ts) == 1 {
		what = m.name + " vs offered load: baseline"
	}
	f := d.newLevelFigure(m, m.file, what)
	step := dodgeStep(d.lg.QPS, len(ts))
	var invalid glyphRow
	var ss []series
	for i, t := range ts {
		s := d.levelSeries(t, m, i, float64(i)-float64(len(ts)-1)/2, step)
		s.addTo(f.plot, true)
		f.add(d.name(t)+": runs (points), median of valid runs (line)", s.thumbs()...)
		invalid = s.invalidMark(invalid)
		ss = append(ss, s)
	}
	axis := d.finishLevelFigure(f, m, invalid, ss)
	f.alt = what
	whose := "the baseline and the selected config"
	if len(ts) == 1 {
		whose = "the baseline"
	}
	f.caption = fmt.Sprintf("%s (%s) at each offered load, for %s. Each point is one run; the line joins "+
		"the medians of the valid runs (a tick marks each), the bar spans their min–max. ", capitalize(m.name), d.prov.unit(m), whose) + axis + d.invalidSentence(len(invalid) > 0) +
		d.dodgeSentence(len(ts)) + d.p99Sentence(m, ts...)
	if m.name == effective.name {
		f.caption += "The dotted line is effective = offered: a config that keeps up with the offered load lies on it."
	}
	return f
}

// overviewFigure plots p99 TTFT for every config the loop measured
// (re-runs aside): the median of the valid runs and their range.
func (d *doc) overviewFigure() *figure {
	var ts []*optimizer.Trial
	var keys []string
	for _, t := range d.all() {
		if t.Role == "verify" || len(t.Levels) == 0 || slices.Contains(keys, t.Key) {
			continue
		}
		keys = append(keys, t.Key)
		ts = append(ts, t)
	}
	f := d.newLevelFigure(ttft, "p99_ttft_all.png", "p99 TTFT vs offered load: every config")
	step := dodgeStep(d.lg.QPS, len(ts))
	var invalid glyphRow
	var ss []series
	other := 0
	for i, t := range ts {
		k := other
		if d.mark(t) == "" {
			other++
		}
		s := d.levelSeriesLook(t, ttft, lookOf(d.mark(t), k), float64(i)-float64(len(ts)-1)/2, step)
		s.addTo(f.plot, false)
		f.add(d.name(t), s.thumbs()...)
		invalid = s.invalidMark(invalid)
		ss = append(ss, s)
	}
	axis := d.finishLevelFigure(f, ttft, invalid, ss)
	f.alt = "p99 TTFT vs offered load, every config"
	f.caption = fmt.Sprintf("p99 TTFT (%s) at each offered load for every config measured (re-runs aside). The line joins the medians "+
		"of each config's valid runs, marked with its symbol; the bar spans their min–max. ", d.prov.unit(ttft)) + axis + d.invalidSentence(len(invalid) > 0) +
		d.dodgeSentence(len(ts)) + d.p99Sentence(ttft, ts...)
	return f
}

func (d *doc) newLevelFigure(m metric, file, what string) *figure {
	title := d.prov.title(what)
	if m.name != effective.name {
		if note := p99Notes(measuredCounts(d.all()...)); note != "" {
			title += "\n" + note
		}
	}
	f := newFigure(file, title)
	f.plot.X.Label.Text = "offered load (req/s)"
	f.plot.Y.Label.Text = fmt.Sprintf("%s (%s)", m.name, d.prov.unit(m))
	f.plot.X.Min = 0
	if m.name == ttft.name {
		f.plot.Y.Scale = plot.LogScale{}
		f.plot.Y.Tick.Marker = logTicks{}
	} else {
		f.plot.Y.Min = 0
	}
	return f
}

// finishLevelFigure adds the marks every level figure explains: the bar,
// invalid runs where there are any, and the SLO or the offered load; it
// fits the axes to ss, every mark drawn (invalid runs too), and returns
// the caption's sentence on the value axis.
func (d *doc) finishLevelFigure(f *figure, m metric, invalid glyphRow, ss []series) string {
	f.add("min–max over valid runs", &rangeBars{style: draw.LineStyle{Color: legendGrey, Width: vg.Points(1)}})
	if len(invalid) > 0 {
		f.add("invalid run (hollow, grey; its config's shape): left out of median and range", invalid)
	}
	pl := f.plot
	lo, hi, xmax := seriesRange(ss)
	// The x axis runs to the last level plus room for its marks.
	pl.X.Max = math.Max(xmax, slices.Max(append([]float64{1}, d.lg.QPS...))) * 1.04
	var ref float64
	switch m.name {
	case ttft.name:
		ref = d.lg.SLO.TTFTMillis
	case tpot.name:
		ref = d.lg.SLO.TPOTMillis
	case effective.name:
		line := plotter.NewFunction(func(x float64) float64 { return x })
		line.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
		line.Color = invalidColor
		pl.Add(line)
		f.add("effective = offered", line)
		// The diagonal runs to the top level: the axis holds it.
		fitAxis(0, math.Max(hi, pl.X.Max), 0, false).apply(pl)
		return ""
	}
	axis := fitAxis(lo, hi, ref, m.name == ttft.name)
	axis.apply(pl)
	if !(ref > 0) {
		return ""
	}
	mark := sloMark{value: ref, unit: "ms", on: axis.refOn}
	pl.Add(mark)
	f.add(mark.legend(m.name), mark)
	return mark.caption(m.name, hi)
}

// seriesRange is the span of every value ss draw (valid and invalid
// runs, medians, bars) and their largest x.
func seriesRange(ss []series) (lo, hi, xmax float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	see := func(x, y float64) {
		lo, hi, xmax = math.Min(lo, y), math.Max(hi, y), math.Max(xmax, x)
	}
	for _, s := range ss {
		for _, pts := range append([]plotter.XYs{s.valid, s.invalid}, s.medians...) {
			for _, p := range pts {
				see(p.X, p.Y)
			}
		}
		for i := range s.bars.x {
			see(s.bars.x[i], s.bars.lo[i])
			see(s.bars.x[i], s.bars.hi[i])
		}
	}
	return lo, hi, xmax
}

// series is one config's marks in a level figure.
type series struct {
	look           look
	valid, invalid plotter.XYs
	medians        []plotter.XYs // runs of levels with a valid run; a level without one breaks the line
	bars           *rangeBars
}

func (d *doc) levelSeries(t *optimizer.Trial, m metric, i int, slot, step float64) series {
	return d.levelSeriesLook(t, m, lookOf(d.mark(t), i), slot, step)
}

// levelSeriesLook gathers t's marks for m, shifted by slot·step along x.
func (d *doc) levelSeriesLook(t *optimizer.Trial, m metric, lk look, slot, step float64) series {
	floor := 0.0
	if m.name == ttft.name {
		floor = 0.1 // the log axis
	}
	s := series{look: lk, bars: &rangeBars{style: draw.LineStyle{Color: lk.color, Width: vg.Points(1)}}}
	var seg plotter.XYs
	for j := range t.Levels {
		l := &t.Levels[j]
		x := l.OfferedQPS + slot*step
		rs := levelRuns(l, m)
		for _, r := range rs {
			pt := plotter.XY{X: x, Y: math.Max(r.value, floor)}
			if r.valid {
				s.valid = append(s.valid, pt)
			} else {
				s.invalid = append(s.invalid, pt)
			}
		}
		sp := validSpread(rs)
		if sp.n == 0 {
			if len(seg) > 0 {
				s.medians = append(s.medians, seg)
			}
			seg = nil
			continue
		}
		s.bars.add(x, math.Max(sp.min, floor), math.Max(sp.max, floor))
		seg = append(seg, plotter.XY{X: x, Y: math.Max(sp.median, floor)})
	}
	if len(seg) > 0 {
		s.medians = append(s.medians, seg)
	}
	return s
}

// addTo draws s: bars, the median line with ticks, then the runs (every
// run's point when points is true) and the invalid runs on top.
func (s series) addTo(pl *plot.Plot, points bool) {
	if len(s.bars.x) > 0 {
		pl.Add(s.bars)
	}
	for _, seg := range s.medians {
		line, _ := plotter.NewLine(seg)
		line.LineStyle = s.look.line()
		ticks, _ := plotter.NewScatter(seg)
		ticks.GlyphStyle = draw.GlyphStyle{Color: s.look.color, Radius: vg.Points(6), Shape: tickGlyph{}}
		if !points {
			ticks.GlyphStyle = s.look.point()
		}
		pl.Add(line, ticks)
	}
	if points && len(s.valid) > 0 {
		sc, _ := plotter.NewScatter(s.valid)
		sc.GlyphStyle = s.look.point()
		pl.Add(sc)
	}
	if len(s.invalid) > 0 {
		sc, _ := plotter.NewScatter(s.invalid)
		sc.GlyphStyle = s.look.invalidPoint()
		pl.Add(sc)
	}
}

// invalidMark adds s's invalid-run glyph to row, where s has invalid runs
// and row lacks it.
func (s series) invalidMark(row glyphRow) glyphRow {
	if len(s.invalid) == 0 {
		return row
	}
	g := s.look.invalidPoint()
	for _, h := range row {
		if h.Shape == g.Shape {
			return row
		}
	}
	return append(row, g)
}

// thumbs are s's legend marks: its line and its point.
func (s series) thumbs() []plot.Thumbnailer {
	line, _ := plotter.NewLine(plotter.XYs{{}})
	line.LineStyle = s.look.line()
	pt, _ := plotter.NewScatter(plotter.XYs{{}})
	pt.GlyphStyle = s.look.point()
	return []plot.Thumbnailer{line, pt}
}

// dodgeStep is how far apart along x the configs of a level figure are
// drawn, so that their points and bars do not cover each other: together
// they span under 40% of the closest two offered loads' gap.
func dodgeStep(qps []float64, configs int) float64 {
	q := slices.Clone(qps)
	slices.Sort(q)
	gap := math.Inf(1)
	for i := 1; i < len(q); i++ {
		if g := q[i] - q[i-1]; g > 0 {
			gap = math.Min(gap, g)
		}
	}
	if math.IsInf(gap, 1) {
		gap = 1
	}
	return 0.4 * gap / float64(max(configs, 1))
}

func (d *doc) dodgeSentence(configs int) string {
	if configs < 2 {
		return ""
	}
	return fmt.Sprintf("Configs are drawn side by side, up to %.2g req/s from their offered load, so their marks do not overlap. ",
		dodgeStep(d.lg.QPS, configs)*float64(configs-1)/2)
}

func (d *doc) invalidSentence(any bool) string {
	if !any {
		return "No run was invalid at any level shown. "
	}
	return "Hollow grey points are invalid runs: shown, but left out of the median and the range (reasons under Invalid levels). "
}

// p99Sentence states which request the plotted p99 is, where n < 200.
func (d *doc) p99Sentence(m metric, ts ...*optimizer.Trial) string {
	if m.name == effective.name {
		return ""
	}
	if note := p99Notes(measuredCounts(ts...)); note != "" {
		return "Here, " + note + "."
	}
	return ""
}
