package calibrate

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/hone-llm/hone/sim/emulator"
)

// writeValidationPlot draws predicted against measured step latency, one
// panel per phase, the fitted TPs and the held-out one in their colours,
// on log axes with the diagonal.
func writeValidationPlot(path string, p *emulator.Profile, held *StepData) error {
	var sets []*StepData
	for _, tp := range []string{"tp1", "tp2"} {
		d, err := ReadStepDir(goldenDir + tp)
		if err != nil {
			return err
		}
		sets = append(sets, d)
	}
	sets = append(sets, held)
	colours := []color.Color{color.RGBA{70, 130, 180, 255}, color.RGBA{60, 160, 90, 255}, color.RGBA{210, 60, 40, 255}}
	img := vgimg.New(15*vg.Inch, 5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}
	for i, ph := range Phases {
		pl := plot.New()
		pl.Title.Text = ph + " steps: predicted vs measured (ms)"
		pl.X.Label.Text = "measured step latency (ms)"
		pl.Y.Label.Text = "predicted (ms)"
		pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
		pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		lo, hi := 1e9, 0.0
		for k, d := range sets {
			q := *p
			q.TP = d.TP
			sc := ScoreSteps(d, func(s emulator.StepSummary) float64 { return q.Steps.SummaryMs(s, d.TP, q.Model.Hidden, false) })
			var xy plotter.XYs
			for _, pt := range sc.Points {
				if pt.Phase == ph {
					xy = append(xy, plotter.XY{X: pt.Measured, Y: pt.Predicted})
					lo, hi = min(lo, pt.Measured, pt.Predicted), max(hi, pt.Measured, pt.Predicted)
				}
			}
			s, err := plotter.NewScatter(xy)
			if err != nil {
				return err
			}
			s.GlyphStyle.Color = colours[k]
			s.GlyphStyle.Radius = vg.Points(1.2)
			pl.Add(s)
			label := "fitted"
			if k == len(sets)-1 {
				label = "held out"
			}
			pl.Legend.Add(label+" TP "+itoa(d.TP), s)
		}
		diag, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
		if err != nil {
			return err
		}
		diag.Color = color.Gray{Y: 120}
		pl.Add(diag)
		pl.Legend.Top, pl.Legend.Left = true, true
		pl.Draw(tiles.At(dc, i, 0))
	}
	return savePNG(path, img)
}

func itoa(n int) string { return fmt.Sprint(n) }

func savePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
