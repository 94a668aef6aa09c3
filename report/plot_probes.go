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
	value := func(p capacity.Probe) float64 {
		if m.name == ttft.name {
			return p.P99TTFTMs
		}
		return p.P99TPOTMs
	}
	lo, hi, xmax := math.Inf(1), math.Inf(-1), 1.0
	var tails []string
	blank := 0
	var invalidRow glyphRow
	for i, t := range ts {
		lk := lookOf(d.mark(t), i)
		var pass, fail, invalid plotter.XYs
		inv := invalidLevelsOf(t)
		for run, r := range t.Capacity {
			for _, p := range r.Probes {
				v := value(p)
				xmax = math.Max(xmax, p.Load)
				if p.Measured == 0 || v <= 0 {
					blank++
					continue
				}
				if !slices.Contains(tails, tailKind(p.Tail)) {
					tails = append(tails, tailKind(p.Tail))
				}
				lo, hi = math.Min(lo, v), math.Max(hi, v)
				xy := plotter.XY{X: p.Load, Y: v}
				switch {
				case !p.Valid || probeInvalid(inv, run+1, p.Load) != "":
					invalid = append(invalid, xy)
				case p.Pass:
					pass = append(pass, xy)
				default:
					fail = append(fail, xy)
				}
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
