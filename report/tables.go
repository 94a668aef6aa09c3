package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/optimizer"
)

// Every table's first header cell carries the log's kind, "[emulated]", so
// a table copied out of the report keeps its provenance.

// beforeAfter is the baseline against the selection, then every level of
// each.
func (d *doc) beforeAfter() {
	d.p("## Before and after (%s)\n\n", d.prov.tag())
	switch {
	case !d.lg.Done:
		d.p("**The loop did not reach selection**: it stopped after trial %d, so no trial is selected or verified, and the baseline is not a decision either.", len(d.lg.Trials))
		if c := d.candidate; c != nil {
			d.p(" Trial %d `%s` was the candidate being verified when it stopped; its re-run was not judged.", c.N, c.Key)
		}
		d.p(" Below: the baseline as measured; every trial so far is in the trials table.\n\n")
	case d.sel == nil:
		d.p("No trial was eligible and verified: the baseline stays.\n\n")
	}
	d.p("| [%s] | config | objective, req/s (median) | per run, req/s | GPU-s / request | prefix hit rate | verified |\n|---|---|---:|---|---:|---:|---|\n", d.prov.tag())
	row := func(name string, t *optimizer.Trial, verified string) {
		d.p("| %s | `%s` | %.3f | %s | %s | %s | %s |\n", name, t.Key, t.Objective, joinF3(t.Objectives), fmtPtr(t.CostGPUSec, "%.4f"), fmtPtrPct(t.HitRate), verified)
	}
	row(fmt.Sprintf("**baseline** (trial %d)", d.base.N), d.base, "—")
	if d.sel != nil {
		row(fmt.Sprintf("**selected** (trial %d)", d.sel.N), d.sel, fmt.Sprint(d.lg.Verified))
		d.change()
	}
	d.p("\n")
	for _, t := range d.compared() {
		d.levelTable(t)
	}
}

// change states the selection's objective and cost against the baseline's.
func (d *doc) change() {
	b, s := d.base, d.sel
	if b.Objective <= 0 {
		return
	}
	d.p("\nObjective %+.1f%% vs the baseline", 100*(s.Objective-b.Objective)/b.Objective)
	if b.CostGPUSec != nil && s.CostGPUSec != nil && *b.CostGPUSec > 0 {
		d.p("; cost %+.1f%% GPU-seconds per request", 100*(*s.CostGPUSec-*b.CostGPUSec) / *b.CostGPUSec)
	}
	d.p(" (%s).\n", d.prov.tag())
}

// levelTable is every level of t: medians over valid runs with their
// range, and each level's verdict.
func (d *doc) levelTable(t *optimizer.Trial) {
	perRun := false
	for _, l := range t.Levels {
		perRun = perRun || len(l.RunP99TTFTMs) > 0
	}
	what := "every level"
	if d.byCapacity() {
		what = "at the reference load"
	}
	if perRun {
		d.p("%s, %s: median over valid runs (min–max)", capitalize(d.name(t)), what)
	} else {
		d.p("%s, %s: median over runs (the log holds no per-run values)", capitalize(d.name(t)), what)
	}
	if note := p99Notes(measuredCounts(t)); note != "" {
		d.p("; %s", note)
	}
	d.p(".\n\n")
	if len(t.Levels) == 0 {
		d.p("No level was measured.\n\n")
		return
	}
	withGoodput := true
	for _, l := range t.Levels {
		withGoodput = withGoodput && len(l.RunGoodput) > 0
	}
	goodputHead, goodputRule := "", ""
	if withGoodput {
		goodputHead, goodputRule = fmt.Sprintf(" goodput (%s), %% |", d.lg.SLO.Limits()), "---:|"
	}
	d.p("| [%s] offered, req/s | %s, %s | %s, %s | %s, %s |%s passed runs | validity |\n|---:|---:|---:|---:|%s---:|---|\n",
		d.prov.tag(), ttft.name, d.prov.unit(ttft), tpot.name, d.prov.unit(tpot), effective.name, d.prov.unit(effective), goodputHead, goodputRule)
	for i := range t.Levels {
		l := &t.Levels[i]
		cell := ""
		if withGoodput {
			cell = " " + spreadCell(l, goodput, "%.1f") + " |"
		}
		d.p("| %s | %s | %s | %s |%s %d/%d | %s |\n", d.load(l.OfferedQPS), spreadCell(l, ttft, "%.1f"), spreadCell(l, tpot, "%.2f"),
			spreadCell(l, effective, "%.3f"), cell, l.PassedRuns, l.Runs, verdictCell(l))
	}
	if withGoodput {
		d.p("\nGoodput: the share of a run's measured requests within the per-request limits %s (replay's goodput; failed requests count as not met).\n", d.lg.SLO.Limits())
	}
	d.p("\n")
}

// spreadCell is "median (min–max)" over l's valid runs; a level with no
// valid run shows the median over all of them, marked.
func spreadCell(l *optimizer.LevelSummary, m metric, f string) string {
	s := validSpread(levelRuns(l, m))
	switch {
	case s.n == 0:
		return fmt.Sprintf("*"+f+", no valid run*", m.median(l))
	case s.min == s.max:
		return fmt.Sprintf(f, s.median)
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", s.median, s.min, s.max)
}

// trials lists every trial, failed ones too.
func (d *doc) trials() {
	d.p("## Every trial, failed ones too (%s)\n\n", d.prov.tag())
	if d.byCapacity() {
		d.capacityTrials()
		return
	}
	d.p("| [%s] # | role | config | why | objective, req/s | per run, req/s | GPU-s/req | eligible | invalid levels | bottleneck | seconds |\n"+
		"|---:|---|---|---|---:|---|---:|---|---|---|---:|\n", d.prov.tag())
	for i := range d.lg.Trials {
		t := &d.lg.Trials[i]
		elig := "yes"
		if !t.Eligible {
			elig = "no: " + t.Reason
		}
		d.p("| %d | %s | `%s` | %s | %.3f | %s | %s | %s | %s | %s | %.0f |\n", t.N, d.roleCell(t), t.Key, t.Why, t.Objective, joinF3(t.Objectives),
			fmtPtr(t.CostGPUSec, "%.4f"), elig, invalidLevelsCell(t), t.Bottleneck, t.Seconds)
	}
	d.p("\n")
}

// roleCell is t's role with its mark in bold.
func (d *doc) roleCell(t *optimizer.Trial) string {
	switch m := d.mark(t); m {
	case "":
		return t.Role
	case t.Role:
		return "**" + m + "**"
	default:
		return t.Role + ", **" + m + "**"
	}
}

// invalidLevelsCell names t's levels with an invalid run and why: "16
// req/s: client_bound".
func invalidLevelsCell(t *optimizer.Trial) string {
	var s []string
	for i := range t.Levels {
		l := &t.Levels[i]
		if levelInvalid(l) {
			s = append(s, fmt.Sprintf("%g req/s: %s", l.OfferedQPS, strings.Join(reasonCodes(l), ", ")))
		}
	}
	if len(s) == 0 {
		return "—"
	}
	return "**invalid** " + strings.Join(s, "; ")
}

// interaction is the 2×2 of topology and prefix caching.
func (d *doc) interaction() {
	d.p("## Interaction (%s)\n\n", d.prov.tag())
	in := d.lg.Interaction
	if in == nil {
		d.p("The 2×2 (topology × prefix caching) was not completed within the budget.\n\n")
		return
	}
	what := "objectives"
	if d.byCapacity() {
		what = "capacities, median over runs"
	}
	d.p("%s × %s, %s (req/s):\n\n", in.Factors[0], in.Factors[1], what)
	d.p("| [%s] | cache on | cache off |\n|---|---:|---:|\n", d.prov.tag())
	cell := func(i int) string {
		for _, u := range in.Unmeasured {
			if strings.HasPrefix(u, fmt.Sprintf("trial %d ", in.Cells[i])) {
				return fmt.Sprintf("not measured (trial %d)", in.Cells[i])
			}
		}
		return fmt.Sprintf("%.3f (trial %d)", in.Values[i], in.Cells[i])
	}
	d.p("| selected topology | %s | %s |\n", cell(0), cell(1))
	d.p("| other topology | %s | %s |\n\n", cell(2), cell(3))
	d.p("%s.\n\n", in.Text)
}

// breakdowns split the baseline's and the selection's TTFT into its parts.
func (d *doc) breakdowns() {
	d.p("## Where the time went (%s; mean per request, %s)\n\n", d.prov.tag(), d.prov.ms())
	n := 0
	for _, t := range d.compared() {
		n += len(t.Breakdown)
	}
	if n == 0 {
		d.p("The log holds no latency attribution for the baseline or the selection.\n\n")
	}
	if d.byCapacity() && n > 0 {
		d.p("Rows are the reference load's and each counted run's capacity's (the probes' loads differ from run to run; every probe's attribution is in the trial's record).\n\n")
	}
	for _, t := range d.compared() {
		if len(t.Breakdown) == 0 {
			continue
		}
		rows := d.breakdownRows(t)
		d.p("Trial %d `%s` (%s) — bottleneck **%s**: %s\n\n", t.N, t.Key, d.mark(t), t.Bottleneck, t.Diagnosis)
		var ns []int
		for _, l := range rows {
			if !slices.Contains(ns, l.Requests) {
				ns = append(ns, l.Requests)
			}
		}
		slices.Sort(ns)
		d.p("The p99 TTFT here is over every run's requests at a level together (n in the requests column)")
		if note := p99Notes(ns); note != "" {
			d.p("; %s", note)
		}
		d.p(".\n\n")
		// TTFT's parts, then their sum, then the pooled p99 for scale —
		// all before the first token. Decode comes after it, at another
		// scale, so it has a table of its own.
		parts := diagnose.TTFTComponents
		cols := append(append([]string{fmt.Sprintf("[%s] offered, req/s", d.prov.tag()), "requests"}, parts...), "= mean TTFT", "p99 TTFT (pooled; not a sum)")
		d.p("Time to first token, split into its parts (mean per request):\n\n")
		d.p("| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
		for _, l := range rows {
			cells := []string{d.load(l.OfferedQPS), fmt.Sprint(l.Requests)}
			for _, k := range parts {
				cells = append(cells, fmt.Sprintf("%.1f", l.Mean[k]))
			}
			cells = append(cells, fmt.Sprintf("%.1f", meanTTFT(l)), fmt.Sprintf("%.1f", l.P99TTFTMs))
			d.p("| %s |\n", strings.Join(cells, " | "))
		}
		d.p("\nAfter the first token: %s (first to last token, not part of TTFT), mean per request:\n\n", diagnose.Decode)
		d.p("| [%s] offered, req/s | requests | mean TTFT | mean %s | %s share of send → last token |\n|---:|---:|---:|---:|---:|\n",
			d.prov.tag(), diagnose.Decode, diagnose.Decode)
		for _, l := range rows {
			ttft, dec := meanTTFT(l), l.Mean[diagnose.Decode]
			share := "—"
			if ttft+dec > 0 {
				share = fmt.Sprintf("%.0f%%", 100*dec/(ttft+dec))
			}
			d.p("| %s | %d | %.1f | %.1f | %s |\n", d.load(l.OfferedQPS), l.Requests, ttft, dec, share)
		}
		d.p("\n")
	}
}

// breakdownRows are t's attributed levels the report shows: every one of
// a levels log; a capacity log's at the reference load and at each counted
// run's capacity, where the SLO binds.
func (d *doc) breakdownRows(t *optimizer.Trial) []diagnose.LevelBreakdown {
	if !d.byCapacity() {
		return t.Breakdown
	}
	loads := []float64{d.lg.ReferenceQPS}
	for _, r := range capacityRuns(t) {
		if r.counted {
			loads = append(loads, r.res.Value)
		}
	}
	var rows []diagnose.LevelBreakdown
	for _, l := range t.Breakdown {
		if slices.Contains(loads, l.OfferedQPS) {
			rows = append(rows, l)
		}
	}
	return rows
}

// meanTTFT is a level's mean TTFT: the sum of its parts' means, as the
// parts add up to each request's TTFT.
func meanTTFT(l diagnose.LevelBreakdown) float64 {
	sum := 0.0
	for _, k := range diagnose.TTFTComponents {
		sum += l.Mean[k]
	}
	return sum
}
