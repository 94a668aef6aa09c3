package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/slo"
)

// capacityFlags are --capacity and its settings (hone predict, hone
// replay).
type capacityFlags struct {
	on        bool
	mode      string
	precision float64
	start     float64
	max       float64
}

func (cf *capacityFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.BoolVar(&cf.on, "capacity", false, "find the capacity instead of scanning --qps: the largest load that meets the SLO at steady state, by bracketing and bisection (see --help)")
	f.StringVar(&cf.mode, "capacity-mode", capacity.Open, "with --capacity: open (offered rate, req/s) or closed (clients in flight)")
	f.Float64Var(&cf.precision, "capacity-precision", capacity.DefaultPrecision, "with --capacity: relative precision of the result (0.05: the capacity and the lowest failing load are within 5%)")
	f.Float64Var(&cf.start, "capacity-start", 0, "with --capacity: the first load probed, e.g. a predicted capacity (0: 1 req/s or 1 client)")
	f.Float64Var(&cf.max, "capacity-max", 0, "with --capacity: the largest load probed (0: 4096); a pass there is reported as a lower bound")
}

// check validates the flags: the --capacity-* settings only with
// --capacity, and --capacity never with a fixed set of levels.
func (cf *capacityFlags) check(c *cobra.Command, levelFlags ...string) error {
	f := c.Flags()
	if !cf.on {
		for _, n := range []string{"capacity-mode", "capacity-precision", "capacity-start", "capacity-max"} {
			if f.Changed(n) {
				return badInput("--%s: only with --capacity", n)
			}
		}
		return nil
	}
	for _, n := range levelFlags {
		if f.Changed(n) {
			return badInput("--%s: --capacity chooses its own loads; give one or the other", n)
		}
	}
	switch {
	case cf.mode != capacity.Open && cf.mode != capacity.Closed:
		return badInput("--capacity-mode: %q: want open (offered rate) or closed (clients in flight)", cf.mode)
	case !(cf.precision > 0 && cf.precision < 1):
		return badInput("--capacity-precision: want a fraction in (0, 1), e.g. 0.05, got %v", cf.precision)
	case !(cf.start >= 0) || cf.start > 1e6:
		return badInput("--capacity-start: want 0 (start at 1) or a positive load, got %v", cf.start)
	case !(cf.max >= 0) || cf.max > 1e6 || cf.max > 0 && cf.max < cf.start:
		return badInput("--capacity-max: want 0 (4096) or a load at least --capacity-start, got %v", cf.max)
	}
	return nil
}

// options are the search's settings for target with at least minMeasured
// window requests per probe.
func (cf *capacityFlags) options(target slo.SLO, minMeasured int, progress io.Writer) capacity.Options {
	o := capacity.Options{Mode: cf.mode, SLO: target, Precision: cf.precision, Start: cf.start, Max: cf.max, MinRequests: minMeasured}
	if progress != nil {
		o.Progress = func(p capacity.Probe) {
			verdict := "fails"
			if p.Pass {
				verdict = "passes"
			}
			fmt.Fprintf(progress, "capacity: %s: %s (p99 TTFT %.1f ms, p99 TPOT %.2f ms, %s; departures %.3g req/s)%s\n",
				loadName(cf.mode, p.Load), verdict, p.P99TTFTMs, p.P99TPOTMs, p.Tail, p.DepartureQPS, noteSuffix(p.Note))
		}
	}
	return o
}

// lastProbeNote is the last probe's load and note, or "none".
func lastProbeNote(r *capacity.Result) string {
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
	if mode == capacity.Closed {
		return fmt.Sprintf("%g clients", x)
	}
	return fmt.Sprintf("%.4g req/s", x)
}

// writeCapacity prints a search's result as a table or JSON, and writes
// it to out when given.
func writeCapacity(w io.Writer, format, out string, res *capacity.Record) error {
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
		return writeJSON(w, res)
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
