package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/schema"
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
	d.unfinished()
	d.header(o.Title)
	if d.byCapacity() {
		// The answer first, with the figures that show it; then how it
		// was measured, the latency at the reference load and every search.
		d.answer()
		if err := d.figures(o.PlotDir); err != nil {
			return err
		}
		d.measurement()
		d.referenceLatency()
		d.searches()
	} else {
		d.beforeAfter()
		if err := d.figures(o.PlotDir); err != nil {
			return err
		}
	}
	d.trials()
	d.predicted()
	d.hostFloor()
	d.rescaled()
	d.notMeasured()
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
	sel  *optimizer.Trial // nil: nothing was selected, or the loop did not finish
	// candidate is the trial an unfinished loop was verifying when it
	// stopped (the log's Selected); nil when there is none or the loop
	// finished. It is not a selection.
	candidate *optimizer.Trial
	figs      map[string]int // figure number by file, once the plots are written
}

func newDoc(w io.Writer, lg *optimizer.Log) (*doc, error) {
	n := len(lg.Trials)
	if n == 0 {
		return nil, fmt.Errorf("the experiment log has no trials")
	}
	baseN := lg.BaselineN
	if baseN == 0 && !lg.Done && lg.Trials[0].Role == "baseline" {
		// The loop names its baseline once the baseline's trial has
		// returned; a log written by that trial, or cancelled during it,
		// does not name it yet.
		baseN = 1
	}
	if baseN < 1 || baseN > n {
		return nil, fmt.Errorf("the experiment log's baseline is trial %d; want one of its trials, 1 to %d", baseN, n)
	}
	if lg.Selected < 0 || lg.Selected > n {
		return nil, fmt.Errorf("the experiment log's selected trial is %d; want 0 (none) or one of its trials, 1 to %d", lg.Selected, n)
	}
	d := &doc{w: w, lg: lg, prov: provenanceOf(lg.Kind), base: &lg.Trials[baseN-1]}
	if lg.Kind == schema.KindEmulated && d.base.Spec != nil && d.base.Spec.Emulator.Profile != "" {
		d.prov.about = strings.Replace(d.prov.about, "from a cost model", "from a cost model ("+profileProvenance(d.base.Spec.Emulator.Profile)+")", 1)
	}
	switch {
	case lg.Selected > 0 && lg.Done:
		d.sel = &lg.Trials[lg.Selected-1]
	case lg.Selected > 0:
		d.candidate = &lg.Trials[lg.Selected-1]
	}
	return d, nil
}

// unfinished says, before anything else, that the log is not a result: the
// loop was cancelled or is still running (the log is rewritten after every
// trial; Done is set only when the loop finished), so nothing in it was
// selected or verified.
func (d *doc) unfinished() {
	if d.lg.Done {
		return
	}
	d.p("> **%s.**\n\n", d.stoppedLine())
}

// stoppedLine is the unfinished log's warning.
func (d *doc) stoppedLine() string {
	budget := "an unstated budget"
	if d.lg.Budget > 0 {
		budget = fmt.Sprintf("budget %d", d.lg.Budget)
	}
	return fmt.Sprintf("This log is unfinished: the loop stopped after trial %d of %s (cancelled or still running); "+
		"nothing below is a final selection", len(d.lg.Trials), budget)
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
