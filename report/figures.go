package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hone-llm/hone/internal/atomicfile"
)

// figures writes every plot into dir and links each from the report with
// a caption that says what its marks mean and where its figures come from.
// A capacity log's figures are its Pareto front, each trial's capacity
// and the compared trials' probes: its one load level (the reference load)
// makes no curve, so it has no level figures.
func (d *doc) figures(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plot directory: %w", err)
	}
	figs := []*figure{d.levelFigure(ttft), d.overviewFigure(), d.objectiveFigure(), d.levelFigure(tpot), d.levelFigure(effective)}
	if d.byCapacity() {
		figs = []*figure{d.paretoFigure(), d.objectiveFigure(), d.probesFigure(tpot), d.probesFigure(ttft)}
	}
	if d.lg.Predict != nil {
		figs = append(figs, d.predictedFigure())
	}
	d.figs = map[string]int{}
	for i, f := range figs {
		b, err := f.png()
		if err != nil {
			return fmt.Errorf("plot %s: %w", f.file, err)
		}
		if err := atomicfile.Write(filepath.Join(dir, f.file), b); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		prov := figureProvenance{label: d.prov.label, tag: d.prov.tag()}
		if f.prov != nil {
			prov = *f.prov
		}
		d.p("![%s (%s)](%s)\n\n*Figure %d (%s). %s*\n\n", f.alt, prov.tag, f.file, i+1, prov.label, strings.TrimSpace(f.caption))
		d.figs[f.file] = i + 1
	}
	return nil
}
