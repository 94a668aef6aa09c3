package report

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Headroom beyond the data on a value axis, so that no mark sits on an
// edge and is cut in half: a factor on a log axis, a fraction of the top
// on a linear one (whose bottom is 0).
const (
	logPad    = 1.15
	linearPad = 0.08
)

// valueAxis is a fitted value axis: its range, and whether the reference
// (an SLO) lies on it.
type valueAxis struct {
	min, max float64
	refOn    bool
}

// fitAxis fits a value axis to data spanning lo to hi (lo > 0 on a log
// axis; a linear axis starts at 0), padded so that no mark sits on an
// edge. A reference ref (0: none) is brought onto the axis only where the
// data still fill at least half of it — on a log axis, ref is at most as
// many decades above the data as the data span (at least a factor 2); on
// a linear one, at most twice the data's top — and always where it lies
// below the data, which it then condemns. Otherwise the axis is the
// data's, and the reference is marked at its top edge (sloMark), not
// drawn to scale.
func fitAxis(lo, hi, ref float64, logScale bool) valueAxis {
	if !(hi > 0) || math.IsInf(hi, 0) {
		// Nothing to fit: show the reference, or a unit axis.
		top := max(ref, 1)
		if logScale {
			return valueAxis{min: top / 10, max: top * logPad, refOn: ref > 0}
		}
		return valueAxis{min: 0, max: top * (1 + linearPad), refOn: ref > 0}
	}
	if logScale {
		lo = math.Min(math.Max(lo, hi/1e6), hi)
		span := math.Max(hi/lo, 2)
		on := ref > 0 && ref <= lo*span*span
		a := valueAxis{min: lo / logPad, max: hi * logPad, refOn: on}
		if on {
			a.min, a.max = math.Min(lo, ref)/logPad, math.Max(hi, ref)*logPad
		}
		return a
	}
	on := ref > 0 && ref <= 2*hi
	top := hi
	if on {
		top = math.Max(hi, ref)
	}
	return valueAxis{min: 0, max: top * (1 + linearPad), refOn: on}
}

// apply sets pl's y range to a.
func (a valueAxis) apply(pl *plot.Plot) {
	pl.Y.Min, pl.Y.Max = a.min, a.max
}

// sloMark marks an SLO on a value axis fitted by fitAxis: a dashed line
// labelled "SLO 500 ms" where the SLO is on the axis, else the label
// "SLO 2000 ms ↑" at the top edge — the limit lies above every mark, and
// stretching the axis to it would squeeze the data into its bottom.
type sloMark struct {
	value float64
	unit  string // "ms"
	on    bool   // valueAxis.refOn
	label string // drawn before the value; "" is "SLO" (a goal's "target" too)
}

var sloLine = draw.LineStyle{Color: legendGrey, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(5), vg.Points(4)}}

// text is the mark's label on the plot.
func (s sloMark) text() string {
	label := s.label
	if label == "" {
		label = "SLO"
	}
	if s.on {
		return fmt.Sprintf("%s %g %s", label, s.value, s.unit)
	}
	return fmt.Sprintf("%s %g %s ↑", label, s.value, s.unit)
}

// where says where the mark is, for a caption: "the dashed line labelled
// \"target 12 req/s\"", or, off the axis, "labelled … at the top edge".
func (s sloMark) where() string {
	if s.on {
		return fmt.Sprintf("the dashed line labelled %q", s.text())
	}
	return fmt.Sprintf("above every mark, labelled %q at the top edge", s.text())
}

func sloTextStyle(yAlign draw.YAlignment) draw.TextStyle {
	return draw.TextStyle{Color: legendGrey, Font: font.From(font.Font{Typeface: "Liberation", Variant: "Sans"}, legendFont),
		Handler: plot.DefaultTextHandler, XAlign: draw.XLeft, YAlign: yAlign}
}

// Plot implements plot.Plotter. The mark has no data range: it never
// moves the axis.
func (s sloMark) Plot(c draw.Canvas, p *plot.Plot) {
	const inset vg.Length = 4 // points
	if !s.on {
		c.FillText(sloTextStyle(draw.YTop), vg.Point{X: c.Min.X + inset, Y: c.Max.Y - inset/2}, s.text())
		return
	}
	_, trY := p.Transforms(&c)
	y := trY(s.value)
	c.StrokeLine2(sloLine, c.Min.X, y, c.Max.X, y)
	c.FillText(sloTextStyle(draw.YBottom), vg.Point{X: c.Min.X + inset, Y: y + inset/2}, s.text())
}

// Thumbnail implements plot.Thumbnailer: the dashed line, or the arrow of
// a mark at the top edge.
func (s sloMark) Thumbnail(c *draw.Canvas) {
	if !s.on {
		sty := sloTextStyle(draw.YCenter)
		sty.XAlign = draw.XCenter
		c.FillText(sty, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: (c.Min.Y + c.Max.Y) / 2}, "↑")
		return
	}
	y := (c.Min.Y + c.Max.Y) / 2
	c.StrokeLine2(sloLine, c.Min.X, y, c.Max.X, y)
}

// legend is the mark's legend entry, name being the limit ("p99 TTFT").
func (s sloMark) legend(name string) string {
	if s.on {
		return fmt.Sprintf("SLO: %s ≤ %g %s (dashed line)", name, s.value, s.unit)
	}
	return fmt.Sprintf("SLO: %s ≤ %g %s, above every mark: labelled at the top edge, off the axis", name, s.value, s.unit)
}

// caption says how the axis relates to the SLO, for a figure's caption.
func (s sloMark) caption(name string, dataTop float64) string {
	if s.on {
		return fmt.Sprintf("The axis is fitted to the data and the SLO (%s ≤ %g %s), drawn as a dashed line. ", name, s.value, s.unit)
	}
	return fmt.Sprintf("The axis is fitted to the data: the SLO (%s ≤ %g %s) lies %s above the highest mark (%.3g %s), "+
		"so it is labelled at the top edge (↑) instead of stretching the axis to it. ", name, s.value, s.unit, times(s.value/dataTop), dataTop, s.unit)
}

// times writes a ratio as "27×".
func times(r float64) string {
	if r >= 10 {
		return fmt.Sprintf("%.0f×", r)
	}
	return fmt.Sprintf("%.1f×", r)
}
