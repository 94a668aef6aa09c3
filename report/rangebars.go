package report

import (
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// rangeBars draws a vertical bar with caps from lo to hi at each x: the
// range over runs.
type rangeBars struct {
	x, lo, hi []float64
	style     draw.LineStyle
}

const capWidth vg.Length = 6 // points

func (b *rangeBars) add(x, lo, hi float64) {
	b.x, b.lo, b.hi = append(b.x, x), append(b.lo, lo), append(b.hi, hi)
}

// Plot implements plot.Plotter.
func (b *rangeBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for i := range b.x {
		x, lo, hi := trX(b.x[i]), trY(b.lo[i]), trY(b.hi[i])
		c.StrokeLine2(b.style, x, lo, x, hi)
		c.StrokeLine2(b.style, x-capWidth/2, lo, x+capWidth/2, lo)
		c.StrokeLine2(b.style, x-capWidth/2, hi, x+capWidth/2, hi)
	}
}

// DataRange implements plot.DataRanger.
func (b *rangeBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	for i := range b.x {
		xmin, xmax = math.Min(xmin, b.x[i]), math.Max(xmax, b.x[i])
		ymin, ymax = math.Min(ymin, b.lo[i]), math.Max(ymax, b.hi[i])
	}
	return xmin, xmax, ymin, ymax
}

// Thumbnail implements plot.Thumbnailer.
func (b *rangeBars) Thumbnail(c *draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	lo, hi := c.Min.Y+vg.Points(1), c.Max.Y-vg.Points(1)
	c.StrokeLine2(b.style, x, lo, x, hi)
	c.StrokeLine2(b.style, x-capWidth/2, lo, x+capWidth/2, lo)
	c.StrokeLine2(b.style, x-capWidth/2, hi, x+capWidth/2, hi)
}
