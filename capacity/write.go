package capacity

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/internal/jsonout"
)

// lastProbeNote is the last probe's load and note, or "none".
func lastProbeNote(r *Result) string {
	if len(r.Probes) == 0 {
		return "none"
	}
	p := r.Probes[len(r.Probes)-1]
	return loadName(r.Mode, p.Load) + noteSuffix(p.Note)
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return ": " + n
}

func loadName(mode string, x float64) string {
	if mode == Closed {
		return fmt.Sprintf("%g clients", x)
	}
	return fmt.Sprintf("%.4g req/s", x)
}

// Write prints a search's result as a table or JSON, and writes
// it to out when given.
func Write(w io.Writer, format, out string, res *Record) error {
	if out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.Write(out, append(b, '\n')); err != nil {
			return fmt.Errorf("--out %s: %w", out, err)
		}
	}
	if format == "json" {
		return jsonout.Write(w, res)
	}
	r := res.Capacity
	fmt.Fprintf(w, "kind: %s  (%s)  SLO: p99 TTFT <= %g ms, p99 TPOT <= %g ms  mode: %s\n", res.Kind, res.Source, r.SLO.TTFTMillis, r.SLO.TPOTMillis, r.Mode)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\twindow_s\tmeasured\tp99_ttft_ms\tp99_tpot_ms\tdepartures\tpass\tnote\t")
	for _, p := range r.Probes {
		win := "-"
		if p.Plan.WindowS > 0 {
			win = fmt.Sprintf("%.1f", p.Plan.WindowS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.2f\t%.3g\t%t\t%s\t\n", loadName(r.Mode, p.Load), win, p.Measured, p.P99TTFTMs, p.P99TPOTMs,
			p.DepartureQPS, p.Pass, strings.TrimSpace(p.Tail+" "+p.Note))
	}
	tw.Flush()
	switch {
	case !r.Finished():
		fmt.Fprintf(w, "capacity: not found: the search ended before its rule did (%d probes; the last: %s); the result decides nothing\n",
			len(r.Probes), lastProbeNote(r))
	case r.Bounded:
		fmt.Fprintf(w, "capacity: %s (%s fails; precision %g%%): the largest load measured to meet the SLO at steady state\n",
			loadName(r.Mode, r.Value), loadName(r.Mode, r.Upper), 100*r.Precision)
	default:
		fmt.Fprintf(w, "capacity: %s: %s\n", loadName(r.Mode, r.Value), r.Note)
	}
	if out != "" {
		fmt.Fprintf(w, "capacity (%s) written to %s\n", res.Kind, out)
	}
	return nil
}

// ProgressLine is the line a search prints as each probe ends.
func ProgressLine(mode string, p Probe) string {
	verdict := "fails"
	if p.Pass {
		verdict = "passes"
	}
	return fmt.Sprintf("capacity: %s: %s (p99 TTFT %.1f ms, p99 TPOT %.2f ms, %s; departures %.3g req/s)%s",
		loadName(mode, p.Load), verdict, p.P99TTFTMs, p.P99TPOTMs, p.Tail, p.DepartureQPS, noteSuffix(p.Note))
}
