package predict

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// writeTable is hone predict's table of rec, spec's prediction with
// prof.
func writeTable(w io.Writer, spec *deploy.Spec, prof *emulator.Profile, rec *schema.Record) {
	profile := prof.Name
	fmt.Fprintf(w, "kind: %s  profile: %s  spec: %s  gpus: %d  SLO: p99 TTFT <= %g ms, p99 TPOT <= %g ms\n",
		rec.Kind, emulator.ProfileLabel(prof), spec.Name, spec.GPUsNeeded(), rec.SLO.TTFTMillis, rec.SLO.TPOTMillis)
	fmt.Fprintf(w, "profile %s: %s\n", profile, emulator.ValidationNote(profile))
	if note := prof.KVCacheNote(spec.Precision.KVCacheDType); note != "" {
		fmt.Fprintln(w, note)
	}
	if len(rec.Runs) == 0 {
		fmt.Fprintln(w, "no levels")
		return
	}
	run := rec.Runs[0]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	first := "offered_qps"
	if rec.Workload.LoadMode() == schema.LoadClosed {
		first = "clients"
	}
	// Goodput gets a column when --goodput set its limits (by default they
	// are the SLO's own, per request: the record still has it).
	goodput := rec.SLO.Goodput.Set()
	head := first + "\tp50_ttft_ms\tp90_ttft_ms\tp99_ttft_ms\tp50_tpot_ms\tp90_tpot_ms\tp99_tpot_ms\teffective_qps\tgpu_s_per_req\thit_rate\t"
	if goodput {
		head += "goodput\tgoodput_qps\t"
	}
	fmt.Fprintln(tw, head+"passed\t")
	for _, l := range run.Levels {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.4f\t%s\t%s\t", levelNumber(l.Level),
			l.P50TTFTMs, l.P90TTFTMs, l.P99TTFTMs, l.P50TPOTMs, l.P90TPOTMs, l.P99TPOTMs, l.EffectiveQPS,
			optFloat(l.GPUSecondsPerRequest, "%.4g"), optPercent(l.HitRateCachedTokens))
		if goodput {
			if g := l.Goodput; g != nil {
				fmt.Fprintf(tw, "%.1f%%\t%.4f\t", 100*g.Fraction, g.QPS)
			} else {
				fmt.Fprint(tw, "-\t-\t")
			}
		}
		fmt.Fprintf(tw, "%t\t\n", l.Passed)
	}
	tw.Flush()
	if goodput {
		fmt.Fprintf(w, "goodput: the share (and rate) of measured requests within %s\n", rec.SLO.Goodput)
	}
	fmt.Fprintf(w, "objective: %s req/s (largest effective QPS among passing levels)",
		strconv.FormatFloat(run.Objective, 'g', -1, 64))
	if run.GPUSecondsPerRequest != nil {
		fmt.Fprintf(w, ", %.4g GPU-s/request at that level", *run.GPUSecondsPerRequest)
	}
	fmt.Fprintln(w)
	if e := Edge(rec, rec.SLO, EdgeMargin); e != "" {
		fmt.Fprintf(w, "too close to call: %s; a measurement may land one level higher or lower\n", e)
	}
	fmt.Fprintln(w, Note)
}

func optFloat(v *float64, format string) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf(format, *v)
}

func optPercent(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// levelNumber is a level's load as the table's first column gives it: its
// offered rate, or its clients.
func levelNumber(l slo.Level) string {
	if l.Concurrency > 0 {
		return strconv.Itoa(l.Concurrency)
	}
	return strconv.FormatFloat(l.OfferedQPS, 'g', -1, 64)
}

// writeGridTable is hone predict --grid's table: res's ranked rows and
// Pareto front, then the specs that failed.
func writeGridTable(w io.Writer, res GridResult, prof *emulator.Profile, failed []Point, out string) {
	fmt.Fprintf(w, "kind: %s  profile: %s  base: %s  grid: %d specs within %d GPUs  SLO: p99 TTFT <= %g ms, p99 TPOT <= %g ms\n",
		res.Kind, emulator.ProfileLabel(prof), res.Base, res.Specs, res.Budget, res.SLO.TTFTMillis, res.SLO.TPOTMillis)
	fmt.Fprintf(w, "profile %s: %s\n", res.Profile, emulator.ValidationNote(res.Profile))
	fmt.Fprintf(w, "\ntop %d of %d (--top; * on the Pareto front; ~ too close to call), %s\n", len(res.Ranked), res.Specs, strings.SplitN(res.Rule, ";", 2)[0])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\tspec\tgpus\tobjective_qps\tgpu_s_per_req\tp99_ttft_ms\tp99_tpot_ms\tpareto\tedge")
	for _, r := range res.Ranked {
		writeGridRow(tw, r)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nPareto front, objective against GPU-s/request (%d specs, cheapest first):\n", len(res.Pareto))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\tspec\tgpus\tobjective_qps\tgpu_s_per_req\tp99_ttft_ms\tp99_tpot_ms\tpareto\tedge")
	for _, r := range res.Pareto {
		writeGridRow(tw, r)
	}
	tw.Flush()
	edges := 0
	for _, r := range res.Ranked {
		if r.Edge != "" {
			edges++
		}
	}
	if edges > 0 {
		fmt.Fprintf(w, "\n~ too close to call (%d of the %d shown): the objective rests on a level whose predicted p99 lies within %.0f%% of an SLO limit, "+
			"so a measurement may land one level higher or lower (-o json's edge says which level and limit)\n", edges, len(res.Ranked), 100*EdgeMargin)
	}
	if len(failed) > 0 {
		fmt.Fprintf(w, "\n%d specs could not be predicted:\n", len(failed))
		for i, p := range failed {
			if i == 10 {
				fmt.Fprintf(w, "  ... and %d more (see --out)\n", len(failed)-i)
				break
			}
			fmt.Fprintf(w, "  %s: %s\n", p.Name(), p.Err)
		}
	}
	if out != "" {
		fmt.Fprintf(w, "\nevery point written to %s\n", out)
	}
	fmt.Fprintln(w, Note)
}

func writeGridRow(w io.Writer, r GridRow) {
	mark, edge := "", ""
	if r.Pareto {
		mark = "*"
	}
	if r.Edge != "" {
		edge = "~"
	}
	obj := strconv.FormatFloat(r.Objective, 'f', 3, 64)
	if r.Error != "" {
		obj = "error"
	}
	fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Rank, r.Name, r.GPUs, obj, optFloat(r.Cost, "%.4g"),
		optFloat(r.P99TTFTMs, "%.2f"), optFloat(r.P99TPOTMs, "%.2f"), mark, edge)
}
