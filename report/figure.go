package report

import (
	"bytes"
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// A figure is a plot with its legend drawn below the data area, where it
// hides nothing, and the words the report puts around it.
type figure struct {
	title   []string // drawn above the plot: what it shows, then provenance
	file    string   // PNG file name in the plot directory
	alt     string   // Markdown alt text
	caption string   // what the marks mean, for the report
	// prov overrides the log's provenance in the caption and alt text,
	// for a figure that sets other figures beside the log's; nil: the log's.
	prov   *figureProvenance
	plot   *plot.Plot
	legend []legendEntry
}

// figureProvenance is where a figure's numbers come from, as its caption
// names it: label "PREDICTED vs EMULATED", tag "predicted vs emulated".
type figureProvenance struct{ label, tag string }

type legendEntry struct {
	text   string
	thumbs []plot.Thumbnailer
}

const (
	figureWidth            = 8 * vg.Inch
	plotHeight             = 4.5 * vg.Inch
	legendMargin vg.Length = 10 // points
	legendFont   vg.Length = 10
	titleFont    vg.Length = 13 // the first title line; the others are smaller
	subtitleFont vg.Length = 11
)

// newFigure starts a figure titled by the lines of title.
func newFigure(file, title string) *figure {
	return &figure{file: file, title: strings.Split(title, "\n"), plot: plot.New()}
}

// add appends a legend entry; its thumbnail is the thumbs drawn over each
// other.
func (f *figure) add(text string, thumbs ...plot.Thumbnailer) {
	f.legend = append(f.legend, legendEntry{text, thumbs})
}

// png draws the figure: the plot on top, the legend below it in one
// column, or two where they fit side by side.
func (f *figure) png() ([]byte, error) {
	cols := f.legendColumns()
	var legendHeight vg.Length
	for _, c := range cols {
		legendHeight = max(legendHeight, c.height)
	}
	titleHeight := f.titleHeight()
	img := vgimg.NewWith(vgimg.UseWH(figureWidth, titleHeight+plotHeight+legendHeight+2*legendMargin), vgimg.UseBackgroundColor(color.White))
	c := draw.New(img)
	f.drawTitle(c)
	f.drawPlot(draw.Crop(c, 0, -legendMargin, legendHeight+2*legendMargin, -titleHeight))
	x := legendMargin
	for _, col := range cols {
		col.legend.Draw(draw.Crop(c, x, 0, legendMargin, -(titleHeight + plotHeight + legendMargin)))
		x += col.width + 2*legendMargin
	}
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func titleStyle(line int) draw.TextStyle {
	size := titleFont
	if line > 0 {
		size = subtitleFont
	}
	return draw.TextStyle{Font: font.From(font.Font{Typeface: "Liberation", Variant: "Sans"}, size), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YTop}
}

func (f *figure) titleHeight() vg.Length {
	h := legendMargin
	for i := range f.title {
		h += 1.3 * titleStyle(i).Font.Size
	}
	return h
}

func (f *figure) drawTitle(c draw.Canvas) {
	y := c.Max.Y - legendMargin/2
	for i, line := range f.title {
		sty := titleStyle(i)
		c.FillText(sty, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: y}, line)
		y -= 1.3 * sty.Font.Size
	}
}

// drawPlot draws the plot into c with its y-axis label set beside it here:
// gonum pads a log axis for its label as if the axis were linear, which
// leaves a gap above the data.
func (f *figure) drawPlot(c draw.Canvas) {
	y := &f.plot.Y.Label
	if y.Text == "" {
		f.plot.Draw(c)
		return
	}
	sty := y.TextStyle
	sty.Rotation += math.Pi / 2
	h, descent := y.TextStyle.Height(y.Text), y.TextStyle.FontExtents().Descent
	const xAxisHeight vg.Length = 36 // about: tick labels and the axis label
	c.FillText(sty, vg.Point{X: c.Min.X + h - descent, Y: (c.Min.Y + xAxisHeight + c.Max.Y) / 2}, y.Text)
	text := y.Text
	y.Text = ""
	f.plot.Draw(draw.Crop(c, h+y.Padding, 0, 0, 0))
	y.Text = text
}

type legendColumn struct {
	legend        plot.Legend
	width, height vg.Length
}

func (f *figure) legendColumns() []legendColumn {
	column := func(es []legendEntry) legendColumn {
		l := plot.NewLegend()
		l.Top, l.Left = true, true
		l.TextStyle.Font.Size = legendFont
		l.Padding = vg.Points(3)
		l.ThumbnailWidth = vg.Points(24)
		for _, e := range es {
			l.Add(e.text, e.thumbs...)
		}
		r := l.Rectangle(draw.Canvas{})
		return legendColumn{legend: l, width: r.Max.X - r.Min.X, height: r.Max.Y - r.Min.Y}
	}
	if len(f.legend) == 0 {
		return nil
	}
	one := column(f.legend)
	if len(f.legend) < 4 {
		return []legendColumn{one}
	}
	half := (len(f.legend) + 1) / 2
	two := []legendColumn{column(f.legend[:half]), column(f.legend[half:])}
	if two[0].width+two[1].width+4*legendMargin > figureWidth {
		return []legendColumn{one}
	}
	return two
}

// Colours (Okabe and Ito's, distinct for colour-blind readers) and marks.
var (
	baselineColor = color.RGBA{0, 114, 178, 255}
	selectedColor = color.RGBA{213, 94, 0, 255}
	invalidColor  = color.RGBA{150, 150, 150, 255}
	legendGrey    = color.RGBA{80, 80, 80, 255}
	otherColors   = []color.Color{
		color.RGBA{0, 158, 115, 255}, color.RGBA{204, 121, 167, 255}, color.RGBA{230, 159, 0, 255},
		color.RGBA{86, 180, 233, 255}, color.RGBA{60, 60, 60, 255},
	}
	otherGlyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}}
)

// A look is how one config is drawn: its colour and mark, filled for
// valid runs.
type look struct {
	color  color.Color
	glyph  draw.GlyphDrawer
	hollow draw.GlyphDrawer // the same shape, outlined, for invalid runs
	width  vg.Length        // of its lines
}

// lookOf returns the look of a config marked m ("baseline", "selected"
// or ""); i numbers the unmarked ones.
func lookOf(m string, i int) look {
	switch m {
	case markBaseline:
		return look{color: baselineColor, glyph: draw.BoxGlyph{}, hollow: draw.SquareGlyph{}, width: vg.Points(2)}
	case markSelected, markRerun:
		return look{color: selectedColor, glyph: draw.PyramidGlyph{}, hollow: draw.TriangleGlyph{}, width: vg.Points(2)}
	}
	return look{color: otherColors[i%len(otherColors)], glyph: otherGlyphs[i%len(otherGlyphs)], hollow: draw.RingGlyph{}, width: vg.Points(1)}
}

func (l look) point() draw.GlyphStyle {
	return draw.GlyphStyle{Color: l.color, Radius: vg.Points(3), Shape: l.glyph}
}

func (l look) invalidPoint() draw.GlyphStyle {
	return draw.GlyphStyle{Color: invalidColor, Radius: vg.Points(3.5), Shape: l.hollow}
}

func (l look) line() draw.LineStyle {
	return draw.LineStyle{Color: l.color, Width: l.width}
}

// tickGlyph is a short horizontal bar: the median's mark.
type tickGlyph struct{}

func (tickGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.StrokeLine2(draw.LineStyle{Color: sty.Color, Width: vg.Points(2.5)}, pt.X-sty.Radius, pt.Y, pt.X+sty.Radius, pt.Y)
}

// glyphRow is a legend thumbnail of glyphs side by side.
type glyphRow []draw.GlyphStyle

// Thumbnail implements plot.Thumbnailer.
func (r glyphRow) Thumbnail(c *draw.Canvas) {
	w := (c.Max.X - c.Min.X) / vg.Length(len(r))
	y := (c.Min.Y + c.Max.Y) / 2
	for i, g := range r {
		c.DrawGlyph(g, vg.Point{X: c.Min.X + w*(vg.Length(i)+0.5), Y: y})
	}
}
