package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/sim/emulator"
)

func init() { subcommands = append(subcommands, newCalibrateCmd) }

func newCalibrateCmd() *cobra.Command {
	var o calibrateFlags
	c := withHelp(&cobra.Command{
		Use:   "calibrate (--records R1,R2 | --steps DIR ...) --out PROFILE.yaml",
		Short: "Fit a linear cost profile to measured records, so that predictions match the device",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}, "calibrate", nil)
	o.bind(c)
	return c
}

// calibrateFlags are hone calibrate's flags; run carries the command out.
type calibrateFlags struct {
	records      []string
	profile, out string
	maxIter      int
	output       outputFormat
	st           stepFlags
	force        bool
}

// bind registers the flags on c.
func (o *calibrateFlags) bind(c *cobra.Command) {
	f := c.Flags()
	f.StringSliceVar(&o.records, "records", nil, "run records to calibrate against (comma-separated, or the flag repeated)")
	f.StringVar(&o.profile, "profile", "", "start profile: a built-in name or a .yaml file (default: the first record's spec's emulator.profile, else "+emulator.DefaultProfile+")")
	f.StringVar(&o.out, "out", "", "write the calibrated profile here (.yaml)")
	f.IntVar(&o.maxIter, "max-iter", calibrate.DefaultMaxIter, "most Levenberg–Marquardt iterations")
	f.BoolVar(&o.force, "force", false, "write the profile even when it predicts its own records worse than the start profile")
	o.st.register(f)
	o.output.register(f, "table", "", "table", "json")
}

// run is hone calibrate.
func (o *calibrateFlags) run(c *cobra.Command) error {
	if err := o.output.check(); err != nil {
		return err
	}
	if len(o.st.dirs) > 0 {
		if len(o.records) > 0 {
			return badInput("--steps and --records: give one: steps fit the step-cost form, records the linear form")
		}
		return runCalibrateSteps(c.OutOrStdout(), o.st, o.out, o.output.value)
	}
	if len(o.records) == 0 {
		return badInput("--records: required: the run records to calibrate against (comma-separated or repeated)")
	}
	if o.out == "" {
		return badInput("--out: required: the profile file to write (.yaml)")
	}
	if ext := strings.ToLower(filepath.Ext(o.out)); ext != ".yaml" && ext != ".yml" {
		return badInput("--out %s: want a .yaml or .yml path (--profile reads profile files by that extension)", o.out)
	}
	if o.maxIter < 1 {
		return badInput("--max-iter: want at least 1, got %d", o.maxIter)
	}
	var inputs []calibrate.Input
	for _, p := range o.records {
		if p == "" {
			return badInput("--records: an empty path")
		}
		in, err := calibrate.InputFromRecord(p)
		if err != nil {
			return badInput("--records: %v", err)
		}
		inputs = append(inputs, in)
	}
	cfg := calibrate.Config{MaxIter: o.maxIter}
	if o.profile != "" {
		p, err := emulator.LookupProfile(o.profile)
		if err != nil {
			return badInput("--profile: %v", err)
		}
		cfg.Start = p
	}
	if term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("CI") == "" {
		cfg.Progress = c.ErrOrStderr()
	}
	res, err := calibrate.Calibrate(inputs, cfg)
	if err != nil {
		return badInput("%v", err)
	}
	// A fit that predicts its own records worse than its start is
	// reported, not written, unless forced.
	worse := res.Worse()
	write := worse == "" || o.force
	if write {
		if err := emulator.WriteProfileFile(o.out, res.Profile); err != nil {
			return err
		}
	}
	w := c.OutOrStdout()
	if o.output.value == "json" {
		if err := writeJSON(w, res); err != nil {
			return err
		}
	} else {
		writeCalibrateTable(w, res, len(inputs), o.out, write)
	}
	if !write {
		return fmt.Errorf("not written: the calibrated profile predicts its own records worse than %s (%s); --force writes it anyway", res.Start.Name, worse)
	}
	if worse != "" {
		fmt.Fprintf(c.ErrOrStderr(), "warning: written with --force although it predicts its own records worse than %s (%s)\n", res.Start.Name, worse)
	}
	return nil
}

func writeCalibrateTable(w io.Writer, res *calibrate.Result, records int, out string, written bool) {
	conv := "converged"
	if !res.Converged {
		conv = "not converged"
	}
	fmt.Fprintf(w, "calibrated %s from %d records: %d observations, %d iterations (%s), %d predictions of every record\n",
		res.Start.Name, records, res.Observations, res.Iterations, conv, res.Evaluations)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "coefficient\tvalue\t± std err\trel\tstart\tfitted")
	for _, co := range res.Coefficients {
		se, rel, fitted := "-", "-", "yes"
		if !math.IsNaN(co.StdErr) {
			se = fmt.Sprintf("± %.3g", co.StdErr)
		}
		if !math.IsNaN(co.RelStdErr) && !math.IsInf(co.RelStdErr, 0) {
			rel = fmt.Sprintf("%.2g%%", 100*co.RelStdErr)
		}
		if !co.Fitted {
			fitted = "no: " + co.Why
		}
		fmt.Fprintf(tw, "%s\t%.6g\t%s\t%s\t%.6g\t%s\n", co.Name, co.Value, se, rel, co.Start, fitted)
	}
	tw.Flush()
	fmt.Fprintf(w, "residual RMS (relative error): %.4g at the start, %.4g calibrated\n", res.StartRMSResidual, res.RMSResidual)

	fmt.Fprintf(w, "\np50 predicted vs measured (relative error), before: %s, after: %s\n", res.Start.Name, res.Profile.Name)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "record\toffered_qps\tttft_ms measured\tbefore\tafter\tafter*\ttpot_ms measured\tbefore\tafter\tafter*")
	for _, e := range res.PredictionError {
		nan := math.NaN()
		g := calibrate.LevelPrediction{P50TTFTMs: nan, P50TPOTMs: nan, TTFTRelErr: nan, TPOTRelErr: nan}
		if e.AfterGivenArrivals != nil {
			g = *e.AfterGivenArrivals
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Input, e.OfferedQPS,
			fmtMs(e.MeasuredP50TTFTMs), fmtPred(e.Before.P50TTFTMs, e.Before.TTFTRelErr), fmtPred(e.After.P50TTFTMs, e.After.TTFTRelErr),
			fmtPred(g.P50TTFTMs, g.TTFTRelErr),
			fmtMs(e.MeasuredP50TPOTMs), fmtPred(e.Before.P50TPOTMs, e.Before.TPOTRelErr), fmtPred(e.After.P50TPOTMs, e.After.TPOTRelErr),
			fmtPred(g.P50TPOTMs, g.TPOTRelErr))
	}
	tw.Flush()
	fmt.Fprintln(w, "before, after: from the schedule alone, as hone predict says beforehand; after*: each run predicted with the arrivals its record shows (the client's and the proxy's hops included), the median")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "record\tobjective_qps measured\tbefore\tafter")
	for _, o := range res.Objective {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Input, fmtQPS(o.Measured), fmtPredQPS(o.Before, o.BeforeRelErr), fmtPredQPS(o.After, o.AfterRelErr))
	}
	tw.Flush()
	if len(res.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range res.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	if !written {
		fmt.Fprintf(w, "\nprofile %s NOT written to %s: it predicts its own records worse than %s\n", res.Profile.Name, out, res.Start.Name)
		return
	}
	fmt.Fprintf(w, "\nprofile %s written to %s (linear): use it with hone predict --profile %s, hone sim serve --profile %s, or a spec's emulator.profile\n",
		res.Profile.Name, out, out, out)
}

func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtPred(v, rel float64) string {
	if math.IsNaN(rel) {
		return fmtMs(v)
	}
	return fmt.Sprintf("%.2f (%+.1f%%)", v, 100*rel)
}

func fmtQPS(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", v)
}

func fmtPredQPS(v, rel float64) string {
	if math.IsNaN(rel) {
		return fmtQPS(v)
	}
	return fmt.Sprintf("%.3f (%+.1f%%)", v, 100*rel)
}
