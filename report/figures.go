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
func (d *doc) figures(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plot directory: %w", err)
	}
	figs := []*figure{d.levelFigure(ttft), d.overviewFigure(), d.objectiveFigure(), d.levelFigure(tpot), d.levelFigure(effective)}
	for i, f := range figs {
		b, err := f.png()
		if err != nil {
			return fmt.Errorf("plot %s: %w", f.file, err)
		}
		if err := atomicfile.Write(filepath.Join(dir, f.file), b); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		d.p("![%s (%s)](%s)\n\n*Figure %d (%s). %s*\n\n", f.alt, d.prov.tag(), f.file, i+1, d.prov.label, strings.TrimSpace(f.caption))
	}
	return nil
}
