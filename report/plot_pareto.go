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

	"github.com/hone-llm/hone/optimizer"
)

const paretoFile = "pareto.png"

// paretoPoint is one config in the Pareto figure: a measured trial (its
// median capacity and its runs' range) or a predicted config.
type paretoPoint struct {
	gpus      int
	value     float64
	lo, hi    float64
	trial     *optimizer.Trial // nil: predicted
	x         float64          // drawn at, beside the others of its GPU count
	predicted bool
}

// paretoFront returns the points no other dominates — none has as much
// capacity on as few GPUs, more of one — by GPUs, ascending.
func paretoFront(ps []*paretoPoint) []*paretoPoint {
	var front []*paretoPoint
	for _, p := range ps {
		dominated := false
		for _, q := range ps {
			if q != p && q.gpus <= p.gpus && q.value >= p.value && (q.gpus < p.gpus || q.value > p.value) {
				dominated = true
				break
			}
		}
		if !dominated {
			front = append(front, p)
		}
	}
	slices.SortStableFunc(front, func(a, b *paretoPoint) int { return a.gpus - b.gpus })
	return front
}

// paretoPoints gathers the Pareto figure's configs: every eligible
// measured one (re-runs aside; left names the trials left out) and the
// predicted ones of the latest ranking, with the profile that predicted
// them.
func (d *doc) paretoPoints() (measured, predicted []*paretoPoint, left []string, profile string) {
	seen := map[string]bool{}
	for _, t := range d.all() {
		if t.Role == "verify" || seen[t.Key] {
			continue
		}
		seen[t.Key] = true
		g := gpusOf(t)
		if !t.Eligible || len(t.Objectives) == 0 || g == 0 {
			left = append(left, fmt.Sprint(t.N))
			continue
		}
		measured = append(measured, &paretoPoint{gpus: g, value: t.Objective, lo: slices.Min(t.Objectives), hi: slices.Max(t.Objectives), trial: t})
	}
	if pl := d.lg.Predict; pl != nil {
		for _, r := range pl.Ranked {
			if r.GPUs > 0 && r.Objective > 0 {
				predicted = append(predicted, &paretoPoint{gpus: r.GPUs, value: r.Objective, lo: r.Objective, hi: r.Objective, predicted: true})
			}
		}
		if n := len(pl.Profiles); n > 0 {
			profile = pl.Profiles[n-1]
		}
	}
	return measured, predicted, left, profile
}

// placePoints draws the configs of one GPU count side by side, in the
// order given, and returns the largest GPU count and the highest mark.
func placePoints(ps []*paretoPoint) (maxG int, top float64) {
	maxG = 1
	cols := map[int][]*paretoPoint{}
	for _, p := range ps {
		cols[p.gpus] = append(cols[p.gpus], p)
		maxG, top = max(maxG, p.gpus), max(top, p.hi)
	}
	for g, col := range cols {
		step := math.Min(0.12, 0.7/float64(len(col)))
		for j, p := range col {
			p.x = float64(g) + step*(float64(j)-float64(len(col)-1)/2)
		}
	}
	return maxG, top
}

// frontLine is the staircase through ps's Pareto front, run on to the
// right edge of an axis of maxG GPUs; nil when ps is empty.
func frontLine(ps []*paretoPoint, maxG int, sty draw.LineStyle) *plotter.Line {
	front := paretoFront(ps)
	if len(front) == 0 {
		return nil
	}
	var xy plotter.XYs
	for i, p := range front {
		if i > 0 {
			xy = append(xy, plotter.XY{X: p.x, Y: front[i-1].value})
		}
		xy = append(xy, plotter.XY{X: p.x, Y: p.value})
	}
	xy = append(xy, plotter.XY{X: float64(maxG) + 0.45, Y: front[len(front)-1].value})
	l, _ := plotter.NewLine(xy)
	l.LineStyle = sty
	return l
}

// paretoFigure plots capacity against GPUs: every eligible measured
// config (re-runs aside) with its runs' range, the predicted configs of
// the latest ranking hollow and grey, each set's Pareto front as a
// staircase, and the goal's target rate where it has one.
func (d *doc) paretoFigure() *figure {
	measured, predicted, left, profile := d.paretoPoints()
	what := "capacity vs GPUs: every eligible measured config, the Pareto front"
	if len(predicted) > 0 {
		what = "capacity vs GPUs: measured configs, predicted configs (hollow), Pareto fronts"
	}
	f := newFigure(paretoFile, d.prov.title(what))
	if len(predicted) > 0 {
		f.prov = &figureProvenance{label: d.prov.label + ", with PREDICTED configs", tag: d.prov.tag() + " and predicted"}
	}
	pl := f.plot
	pl.X.Label.Text = "GPUs"
	pl.Y.Label.Text = "capacity (req/s)"
	maxG, top := placePoints(append(slices.Clone(predicted), measured...))
	if len(predicted) > 0 {
		d.addPredicted(f, predicted, maxG, profile)
	}
	if l := frontLine(measured, maxG, draw.LineStyle{Color: legendGrey, Width: vg.Points(1.5)}); l != nil {
		pl.Add(l)
		f.add("measured Pareto front: no measured config has as much capacity on as few GPUs", l)
	}
	d.addMeasured(f, measured)

	var ticks []plot.Tick
	for g := 1; g <= maxG; g++ {
		ticks = append(ticks, plot.Tick{Value: float64(g), Label: fmt.Sprint(g)})
	}
	pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	pl.X.Min, pl.X.Max = 0.5, float64(maxG)+0.5
	tq := d.target()
	axis := fitAxis(0, top, tq, false)
	axis.apply(pl)

	f.alt = "capacity vs GPUs, Pareto front"
	f.caption = fmt.Sprintf("Capacity (req/s) against the GPUs a config uses, for every eligible measured config (re-runs aside; %s): the point is the median "+
		"over its counted runs, the bar their min–max, the label its trial number. The solid staircase is the measured Pareto front: configs that no "+
		"other measured config matches in capacity on as few GPUs. GPU-seconds per request at capacity is GPUs / capacity, so at one GPU count the "+
		"higher config is the cheaper per request. Configs of one GPU count are drawn side by side. ", d.prov.tag())
	if len(predicted) > 0 {
		f.caption += fmt.Sprintf("Hollow grey rings are the engine model's predicted capacities of the top %d configs of the latest ranking (profile %s): "+
			"predictions, not measurements; the dashed grey staircase is their front. ", len(predicted), profile)
	}
	if tq > 0 {
		mark := sloMark{value: tq, unit: "req/s", on: axis.refOn, label: "target"}
		pl.Add(mark)
		f.add(fmt.Sprintf("the goal's target, %g req/s: the cheapest config is the one with the fewest GPUs above it in every run", tq), mark)
		f.caption += fmt.Sprintf("The goal's target, %g req/s, is %s: the goal picks the fewest GPUs whose every run reaches it. ", tq, mark.where())
	}
	if len(left) > 0 {
		trials := "trial "
		if len(left) > 1 {
			trials = "trials "
		}
		f.caption += "Left out: " + trials + strings.Join(left, ", ") + " (not eligible or failed; see the trials table)."
	}
	return f
}

// addPredicted draws the predicted configs, hollow and grey, and their
// front, dashed.
func (d *doc) addPredicted(f *figure, predicted []*paretoPoint, maxG int, profile string) {
	if l := frontLine(predicted, maxG, draw.LineStyle{Color: invalidColor, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}); l != nil {
		f.plot.Add(l)
		f.add("predicted Pareto front (dashed, grey)", l)
	}
	var xy plotter.XYs
	for _, p := range predicted {
		xy = append(xy, plotter.XY{X: p.x, Y: p.value})
	}
	sty := draw.GlyphStyle{Color: invalidColor, Radius: vg.Points(4), Shape: draw.RingGlyph{}}
	sc, _ := plotter.NewScatter(xy)
	sc.GlyphStyle = sty
	f.plot.Add(sc)
	f.add(fmt.Sprintf("predicted capacity (engine model, profile %s): the top %d of the latest ranking", profile, len(predicted)), glyphRow{sty})
}

// addMeasured draws each measured config's median and its runs' range,
// labelled with its trial number, the baseline and the selection in their
// colours.
func (d *doc) addMeasured(f *figure, measured []*paretoPoint) {
	var labels plotter.XYLabels
	marks := map[string]bool{}
	for _, p := range measured {
		lk := d.objectiveLook(p.trial)
		bars := &rangeBars{style: draw.LineStyle{Color: lk.color, Width: vg.Points(1)}}
		bars.add(p.x, p.lo, p.hi)
		sc, _ := plotter.NewScatter(plotter.XYs{{X: p.x, Y: p.value}})
		sc.GlyphStyle = lk.point()
		f.plot.Add(bars, sc)
		labels.XYs = append(labels.XYs, plotter.XY{X: p.x, Y: p.value})
		labels.Labels = append(labels.Labels, fmt.Sprint(p.trial.N))
		if m := d.mark(p.trial); !marks[m] {
			marks[m] = true
			name := "other measured configs: median capacity, min–max over runs"
			if m != "" {
				name = d.name(p.trial)
			}
			f.add(name, sc)
		}
	}
	if len(labels.XYs) > 0 {
		ls, _ := plotter.NewLabels(labels)
		ls.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(2)}
		f.plot.Add(ls)
	}
}
