package sim

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/replay"
)

// CommandOptions is what hone sim takes once the command has turned its
// flags into values.
type CommandOptions struct {
	// Scan is the scan: --mode, --prefix-cache, the workload flags and
	// the SLO flags.
	Scan   ScanConfig
	Format string    // -o: table or json
	Out    io.Writer // gets the result
}

// Command is hone sim: it runs the exact model over o.Scan's levels
// (Scan) and prints the levels and the objective. Bad input is a
// usage.Error naming its flag.
func Command(o CommandOptions) error {
	res, err := Scan(o.Scan)
	if err != nil {
		if pe, ok := err.(*replay.ParamError); ok {
			return replay.ParamUsage(pe)
		}
		return usage.Wrap(err)
	}
	switch o.Format {
	case "json":
		return jsonout.Write(o.Out, res)
	case "table":
		return writeTable(o.Out, res)
	}
	return usage.Errorf("-o/--output: %q is not an output format: want table, json", o.Format)
}

// writeTable is hone sim's table of res.
func writeTable(w io.Writer, res Result) error {
	fmt.Fprintf(w, "kind: %s  mode: %s  prefix_cache: %t  SLO: p99 TTFT <= %g ms, p99 TPOT <= %g ms\n",
		res.Kind, res.Config.Mode, res.Config.PrefixCache, res.Config.TTFTMillis, res.Config.TPOTMillis)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offered_qps\tp99_ttft_ms\tp99_tpot_ms\teffective_qps\tpassed\t")
	for _, l := range res.Levels {
		fmt.Fprintf(tw, "%g\t%.3f\t%.3f\t%.4f\t%t\t\n", l.OfferedQPS, l.P99TTFTMs, l.P99TPOTMs, l.EffectiveQPS, l.Passed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "objective: %s req/s (largest effective QPS among passing levels)\n",
		strconv.FormatFloat(res.Objective, 'g', -1, 64))
	return err
}
