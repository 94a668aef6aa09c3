package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/optimizer"
)

const (
	probesTPOTFile = "capacity_probes_tpot.png"
	probesTTFTFile = "capacity_probes_ttft.png"
)

// probesFigure plots m (p99 TTFT or TPOT) at every probe of the baseline's
// and the selection's capacity searches against its offered load: passing
// probes filled, failing ones hollow, invalid ones grey; the SLO marked and
// each config's capacity (median) a vertical line, so that where the SLO
// binds, and on which limit, shows at a glance.
func (d *doc) probesFigure(m metric) *figure {
	ts := d.compared()
	file, ref := probesTPOTFile, d.lg.SLO.TPOTMillis
	if m.name == ttft.name {
		file, ref = probesTTFTFile, d.lg.SLO.TTFTMillis
	}
	whose := "baseline and selected"
	if len(ts) == 1 {
		whose = "baseline"
	}
	f := newFigure(file, d.prov.title(fmt.Sprintf("%s at each capacity probe vs offered load: %s", m.name, whose)))
	pl := f.plot
	pl.X.Label.Text = "offered load (req/s)"
	pl.X.Tick.Marker = linearTicks{}
	pl.Y.Label.Text = fmt.Sprintf("%s (%s)", m.name, d.prov.unit(m))
	if m.name == ttft.name {
		pl.Y.Scale = plot.LogScale{}
		pl.Y.Tick.Marker = logTicks{}
	}
	lo, hi, xmax := math.Inf(1), math.Inf(-1), 1.0
	var tails []string
	blank := 0
	var invalidRow glyphRow
	for i, t := range ts {
		lk := lookOf(d.mark(t), i)
		pm := probeMarksOf(t, m)
		pass, fail, invalid := pm.pass, pm.fail, pm.invalid
		lo, hi, xmax, blank = math.Min(lo, pm.lo), math.Max(hi, pm.hi), math.Max(xmax, pm.xmax), blank+pm.blank
		for _, k := range pm.tails {
			if !slices.Contains(tails, k) {
				tails = append(tails, k)
			}
		}
		hollow := draw.GlyphStyle{Color: lk.color, Radius: vg.Points(3.5), Shape: lk.hollow}
		for _, s := range []struct {
			xy  plotter.XYs
			sty draw.GlyphStyle
		}{{pass, lk.point()}, {fail, hollow}, {invalid, lk.invalidPoint()}} {
			if len(s.xy) > 0 {
				sc, _ := plotter.NewScatter(s.xy)
				sc.GlyphStyle = s.sty
				pl.Add(sc)
			}
		}
		if len(invalid) > 0 {
			invalidRow = append(invalidRow, lk.invalidPoint())
		}
		line := &vline{style: draw.LineStyle{Color: lk.color, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(2), vg.Points(3)}}}
		if t.Objective > 0 {
			line.x = t.Objective
			pl.Add(line)
		}
		f.add(fmt.Sprintf("%s: passing probes (filled), failing (hollow); capacity %.2f req/s (dotted)", d.name(t), t.Objective),
			glyphRow{lk.point(), hollow}, line)
	}
	if len(invalidRow) > 0 {
		f.add("invalid probe (hollow, grey; its config's shape): decides nothing", invalidRow)
	}
	pl.X.Min, pl.X.Max = 0, xmax*1.04
	axis := fitAxis(lo, hi, ref, m.name == ttft.name)
	axis.apply(pl)
	mark := sloMark{value: ref, unit: "ms", on: axis.refOn}
	pl.Add(mark)
	f.add(mark.legend(m.name), mark)

	f.alt = fmt.Sprintf("%s at each capacity probe, %s", m.name, whose)
	f.caption = fmt.Sprintf("%s (%s) of every probe of every run's capacity search, for the %s, at the probe's offered load: filled where the probe "+
		"passed (met the SLO at steady state), hollow where it failed, each config in its colour and shape. The dotted vertical line is the config's "+
		"capacity (median over its counted runs). ", capitalize(m.name), d.prov.unit(m), whose) + mark.caption(m.name, hi)
	var binds []string
	for _, t := range ts {
		if b := d.bindingSummary(t); b != "" {
			binds = append(binds, fmt.Sprintf("trial %d on %s", t.N, b))
		}
	}
	if len(binds) > 0 {
		f.caption += "The lowest failing load failed " + strings.Join(binds, "; ") + ". "
	}
	if len(invalidRow) > 0 {
		f.caption += "Hollow grey points are invalid probes (reasons under Invalid levels). "
	}
	if blank > 0 {
		f.caption += fmt.Sprintf("%d probes completed no window request and have no %s to draw. ", blank, m.name)
	}
	if len(tails) > 0 {
		f.caption += "Each probe's p99 is over its window's requests (" + strings.Join(tails, "; ") + ")."
	}
	return f
}

// probeMarks are one config's probes in a probes figure, by verdict, and
// the span they cover.
type probeMarks struct {
	pass, fail, invalid plotter.XYs
	lo, hi, xmax        float64
	blank               int      // probes with nothing to draw: no window request completed
	tails               []string // tailKind of each
}

// probeMarksOf gathers t's probes for m. A probe is invalid where its
// search or the record (t.InvalidLevels) found it so.
func probeMarksOf(t *optimizer.Trial, m metric) probeMarks {
	pm := probeMarks{lo: math.Inf(1), hi: math.Inf(-1)}
	inv := invalidLevelsOf(t)
	for run, r := range t.Capacity {
		for _, p := range r.Probes {
			v := p.P99TPOTMs
			if m.name == ttft.name {
				v = p.P99TTFTMs
			}
			pm.xmax = math.Max(pm.xmax, p.Load)
			if p.Measured == 0 || v <= 0 {
				pm.blank++
				continue
			}
			if k := tailKind(p.Tail); !slices.Contains(pm.tails, k) {
				pm.tails = append(pm.tails, k)
			}
			pm.lo, pm.hi = math.Min(pm.lo, v), math.Max(pm.hi, v)
			xy := plotter.XY{X: p.Load, Y: v}
			switch {
			case !p.Valid || probeInvalid(inv, run+1, p.Load) != "":
				pm.invalid = append(pm.invalid, xy)
			case p.Pass:
				pm.pass = append(pm.pass, xy)
			default:
				pm.fail = append(pm.fail, xy)
			}
		}
	}
	return pm
}

// tailKind reads a probe's tail for a caption: "max of 120" → "the max
// where fewer than 200", "p99 of 453" → "the p99 where 200 or more".
func tailKind(tail string) string {
	if strings.HasPrefix(tail, "max of") {
		return fmt.Sprintf("the max where fewer than %d", capacity.MinMeasured)
	}
	return fmt.Sprintf("the p99 where %d or more", capacity.MinMeasured)
}

// vline is a vertical line across the plot at x.
type vline struct {
	x     float64
	style draw.LineStyle
}

// Plot implements plot.Plotter; the line has no data range, so it never
// moves the y axis.
func (l *vline) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(l.x)
	c.StrokeLine2(l.style, x, c.Min.Y, x, c.Max.Y)
}

// Thumbnail implements plot.Thumbnailer.
func (l *vline) Thumbnail(c *draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	c.StrokeLine2(l.style, x, c.Min.Y, x, c.Max.Y)
}
