package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/replay"
)

// Options control a report.
type Options struct {
	Command string // the command line that produced the log, for "reproduce"
	PlotDir string // where PNGs go; relative links are written to the report
	Title   string
}

// Write renders lg as Markdown to w and its plots into o.PlotDir (none
// when it is empty).
func Write(w io.Writer, lg *optimizer.Log, o Options) error {
	d, err := newDoc(w, lg)
	if err != nil {
		return err
	}
	d.header(o.Title)
	d.beforeAfter()
	if o.PlotDir != "" {
		if err := d.figures(o.PlotDir); err != nil {
			return err
		}
	}
	d.trials()
	d.predicted()
	d.hostFloor()
	d.rescaled()
	d.invalidLevels()
	d.ablations()
	d.interaction()
	d.breakdowns()
	d.decisions()
	d.reproduce(o.Command)
	d.limitations()
	return d.err
}

// doc is a report being written: the log, the two trials it compares, and
// the first write error (after which nothing more is written).
type doc struct {
	w    io.Writer
	err  error
	lg   *optimizer.Log
	prov provenance
	base *optimizer.Trial
	sel  *optimizer.Trial // nil: nothing was selected
	figs map[string]int   // figure number by file, once the plots are written
}

func newDoc(w io.Writer, lg *optimizer.Log) (*doc, error) {
	n := len(lg.Trials)
	if n == 0 {
		return nil, fmt.Errorf("the experiment log has no trials")
	}
	if lg.BaselineN < 1 || lg.BaselineN > n {
		return nil, fmt.Errorf("the experiment log's baseline is trial %d; want one of its trials, 1 to %d", lg.BaselineN, n)
	}
	if lg.Selected < 0 || lg.Selected > n {
		return nil, fmt.Errorf("the experiment log's selected trial is %d; want 0 (none) or one of its trials, 1 to %d", lg.Selected, n)
	}
	d := &doc{w: w, lg: lg, prov: provenanceOf(lg.Kind), base: &lg.Trials[lg.BaselineN-1]}
	if lg.Kind == replay.KindEmulated && d.base.Spec != nil && d.base.Spec.Emulator.Profile != "" {
		d.prov.about = strings.Replace(d.prov.about, "from a cost model", "from a cost model ("+profileProvenance(d.base.Spec.Emulator.Profile)+")", 1)
	}
	if lg.Selected > 0 {
		d.sel = &lg.Trials[lg.Selected-1]
	}
	return d, nil
}

func (d *doc) p(format string, a ...any) {
	if d.err == nil {
		_, d.err = fmt.Fprintf(d.w, format, a...)
	}
}

// Marks name a trial's part in the comparison, the same in tables, plots
// and legends.
const (
	markBaseline = "baseline"
	markSelected = "selected"
	markRerun    = "re-run of the selected config"
)

// mark returns t's mark, or "" for a trial that is neither the baseline,
// the selection nor its re-run.
func (d *doc) mark(t *optimizer.Trial) string {
	switch {
	case t.N == d.base.N:
		return markBaseline
	case d.sel != nil && t.N == d.sel.N:
		return markSelected
	case d.sel != nil && t.Role == "verify" && t.Key == d.sel.Key:
		return markRerun
	}
	return ""
}

// compared returns the trials whose levels the report shows: the baseline
// and the selection, when that is another trial.
func (d *doc) compared() []*optimizer.Trial {
	if d.sel == nil || d.sel == d.base {
		return []*optimizer.Trial{d.base}
	}
	return []*optimizer.Trial{d.base, d.sel}
}

// name is how a legend or caption names a compared trial: "baseline,
// trial 1 coloc".
func (d *doc) name(t *optimizer.Trial) string {
	m := d.mark(t)
	if d.sel == d.base && t == d.base {
		m = "baseline, also selected"
	}
	if m == "" {
		return fmt.Sprintf("trial %d %s", t.N, t.Key)
	}
	return fmt.Sprintf("%s: trial %d %s", m, t.N, t.Key)
}

// all returns every trial of the log.
func (d *doc) all() []*optimizer.Trial {
	ts := make([]*optimizer.Trial, len(d.lg.Trials))
	for i := range d.lg.Trials {
		ts[i] = &d.lg.Trials[i]
	}
	return ts
}
