package replay

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/schema"
)

// writeSummary prints a record's summary as the -o format asks: json
// (summary), vllm-bench-json (WriteVLLMBench) or a table (writeTable).
// out is where the record was written.
func writeSummary(w io.Writer, format string, rec *schema.Record, out string, bad []string) error {
	switch format {
	case "json":
		return jsonout.Write(w, summary(rec, out))
	case FormatVLLMBench:
		return WriteVLLMBench(w, rec)
	}
	writeTable(w, rec, out, bad)
	return nil
}

// writeTable prints the runs' objectives, every level's serving
// statistics (vllm bench serve's figures, model time) and the verdict.
func writeTable(w io.Writer, rec *schema.Record, out string, bad []string) {
	for _, r := range rec.Runs {
		fmt.Fprintf(w, "run %d: objective %.4g req/s (%s, valid levels only)", r.Run+1, r.Objective, rec.Kind)
		if r.GPUSecondsPerRequest != nil {
			fmt.Fprintf(w, ", %.4g GPU-s/request", *r.GPUSecondsPerRequest)
		}
		fmt.Fprintln(w)
	}
	for i, s := range ServeStatsByLevel(rec) {
		writeLevelTable(w, rec, i, s)
	}
	fmt.Fprintf(w, "\ncache: %s; time scale %g\n", rec.Cache.Procedure, rec.TimeScale)
	fmt.Fprintf(w, "record (%s, %d requests: %s) written to %s\n", rec.Kind,
		rec.Validation.Valid+rec.Validation.Invalid, outcomeSummary(rec.Outcomes), out)
	for _, l := range bad {
		fmt.Fprintln(w, "INVALID", l)
	}
	failed := rec.FailedLevels()
	for _, l := range failed {
		fmt.Fprintln(w, "FAILED", l)
	}
	switch {
	case len(bad) == 0 && len(failed) == 0:
		fmt.Fprintln(w, "verdict: every level valid, no level lost requests")
	case len(failed) > 0:
		fmt.Fprintf(w, "verdict: requests failed at %d level(s): the deployment did not serve the load (see FAILED above)\n", len(failed))
	}
}

// writeLevelTable prints level i's serving statistics s.
func writeLevelTable(w io.Writer, rec *schema.Record, i int, s ServeStats) {
	valid := "valid"
	if !s.Valid {
		valid = "INVALID: does not count"
	}
	load := fmt.Sprintf("%g req/s offered", s.OfferedQPS)
	if s.Concurrency > 0 {
		load = fmt.Sprintf("%d clients (closed loop)", s.Concurrency)
	}
	fmt.Fprintf(w, "\n== %s: %d run(s), %d completed, %d failed (%s, model time; %s)\n",
		load, s.Runs, s.Completed, s.Failed, rec.Kind, valid)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "request throughput\t%.2f\treq/s\t\n", s.RequestThroughput)
	fmt.Fprintf(tw, "output token throughput\t%.1f\ttok/s\t\n", s.OutputTokenThroughput)
	fmt.Fprintf(tw, "total token throughput\t%.1f\ttok/s\t\n", s.TotalTokenThroughput)
	if g := LevelGoodput(rec, i); g != nil {
		fmt.Fprintf(tw, "goodput (%s)\t%.2f\treq/s\t%.1f%% of %d measured requests\t\n", g.Limits, g.QPS, 100*g.Fraction, g.Measured)
	}
	tw.Flush()
	if short := notSteadyRuns(rec, s.OfferedQPS); len(short) > 0 && s.Concurrency == 0 {
		fmt.Fprintf(w, "not at steady state (run %s): the effective rate fell more than %.0f%% short of the offered %g req/s while the SLO was met: "+
			"a burst figure (the window ends with the last requests' decode), not saturation; hone replay --capacity measures at steady state\n",
			strings.Join(short, ", "), 100*SteadyTolerance, s.OfferedQPS)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ms\tmean\tmedian\tp90\tp99\t")
	for _, m := range []struct {
		name string
		d    Dist
	}{{"TTFT", s.TTFT}, {"TPOT", s.TPOT}, {"ITL", s.ITL}, {"E2E", s.E2E}} {
		if m.name == "ITL" && m.d.N == 0 && rec.ChunksDropped {
			fmt.Fprintf(tw, "ITL\tn/a (the record's chunks were dropped)\t\t\t\t\n")
			continue
		}
		if (m.name == "TPOT" || m.name == "ITL") && m.d.N == 0 && s.Completed > 0 {
			fmt.Fprintf(tw, "%s\tn/a (no request produced two tokens)\t\t\t\t\n", m.name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", m.name, m.d.Mean, m.d.Median, m.d.P90, m.d.P99)
	}
	tw.Flush()
}

// outcomeSummary counts the record's outcomes, e.g. "120 ok, 8 timeout".
func outcomeSummary(m map[string]int) string {
	var parts []string
	for _, o := range []string{schema.OutcomeOK, schema.OutcomeHTTPError, schema.OutcomeConnectError, schema.OutcomeStreamCut,
		schema.OutcomeMalformed, schema.OutcomeTimeout, schema.OutcomeCanceled} {
		if m[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[o], o))
		}
	}
	return strings.Join(parts, ", ")
}

// notSteadyRuns names the runs (1-based) whose level at offered rate qps
// is NotSteady.
func notSteadyRuns(rec *schema.Record, qps float64) []string {
	var out []string
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			if l.OfferedQPS == qps && l.Concurrency == 0 && l.NotSteady {
				out = append(out, strconv.Itoa(r.Run+1))
			}
		}
	}
	return out
}

// summary is -o json: the record's path, kind and verdict, each run's
// objective and every level's serving statistics.
func summary(rec *schema.Record, out string) map[string]any {
	runs := []map[string]any{}
	for _, r := range rec.Runs {
		runs = append(runs, map[string]any{"run": r.Run, "objective": r.Objective, "gpu_seconds_per_request": r.GPUSecondsPerRequest})
	}
	m := map[string]any{"record": out, "kind": rec.Kind, "time_scale": rec.TimeScale, "cache": rec.Cache.Procedure,
		"outcomes": rec.Outcomes, "invalid_levels": rec.InvalidLevels(), "failed_levels": rec.FailedLevels(), "runs": runs, "levels": ServeStatsByLevel(rec)}
	if rec.Workload.Trace != nil {
		m["trace"] = rec.Workload.Trace
	}
	return m
}
