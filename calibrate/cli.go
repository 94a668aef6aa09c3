package calibrate

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"golang.org/x/term"

	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/sim/emulator"
)

// RunOptions is what hone calibrate takes: the flags, by name.
type RunOptions struct {
	Records []string // --records: the run records to fit the linear form to
	Profile string   // --profile: the start profile (built-in name or .yaml)
	Out     string   // --out: the profile file to write (.yaml)
	MaxIter int      // --max-iter
	Force   bool     // --force: write a fit that is worse than its start
	Format  string   // -o: table or json (checked by the caller)
	// Steps are --steps and the flags that go with it: given step-data
	// directories, Run fits the step-cost form instead of Records.
	Steps StepsOptions
	// Stdout gets the report, Log the progress and warnings.
	Stdout, Log io.Writer
}

// StepsOptions are hone calibrate --steps' flags, by name.
type StepsOptions struct {
	Dirs      []string // --steps: step-data directories
	Model     string   // --model: the model's Hugging Face config.json
	GPU       string   // --gpu
	AllReduce string   // --allreduce: a measured all-reduce table
	Name      string   // --name: the profile's name (default: --out's file name)
	Bootstrap int      // --bootstrap: replicates for the standard errors
}

// Run is hone calibrate: with step-data directories (o.Steps.Dirs) it fits
// the step-cost form (StepProfile), else the linear form to o.Records
// (Calibrate); it writes the profile to o.Out and reports the fit in
// o.Format. A linear fit that predicts its own records worse than its start
// is reported, not written (an error), unless o.Force. Bad input is a
// usage.Error.
func Run(o RunOptions) error {
	if len(o.Steps.Dirs) > 0 {
		if len(o.Records) > 0 {
			return usage.Errorf("--steps and --records: give one: steps fit the step-cost form, records the linear form")
		}
		return o.runSteps()
	}
	inputs, cfg, err := o.check()
	if err != nil {
		return err
	}
	if term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("CI") == "" {
		cfg.Progress = o.Log
	}
	res, err := Calibrate(inputs, cfg)
	if err != nil {
		return usage.Errorf("%v", err)
	}
	// A fit that predicts its own records worse than its start is
	// reported, not written, unless forced.
	worse := res.Worse()
	write := worse == "" || o.Force
	if write {
		if err := emulator.WriteProfileFile(o.Out, res.Profile); err != nil {
			return err
		}
	}
	if o.Format == "json" {
		if err := jsonout.Write(o.Stdout, res); err != nil {
			return err
		}
	} else {
		writeTable(o.Stdout, res, len(inputs), o.Out, write)
	}
	if !write {
		return fmt.Errorf("not written: the calibrated profile predicts its own records worse than %s (%s); --force writes it anyway", res.Start.Name, worse)
	}
	if worse != "" {
		fmt.Fprintf(o.Log, "warning: written with --force although it predicts its own records worse than %s (%s)\n", res.Start.Name, worse)
	}
	return nil
}

// check checks the records mode's flags, in the order the command always
// checked them, and reads the records and the start profile.
func (o RunOptions) check() ([]Input, Config, error) {
	if len(o.Records) == 0 {
		return nil, Config{}, usage.Errorf("--records: required: the run records to calibrate against (comma-separated or repeated)")
	}
	if o.Out == "" {
		return nil, Config{}, usage.Errorf("--out: required: the profile file to write (.yaml)")
	}
	if ext := strings.ToLower(filepath.Ext(o.Out)); ext != ".yaml" && ext != ".yml" {
		return nil, Config{}, usage.Errorf("--out %s: want a .yaml or .yml path (--profile reads profile files by that extension)", o.Out)
	}
	if o.MaxIter < 1 {
		return nil, Config{}, usage.Errorf("--max-iter: want at least 1, got %d", o.MaxIter)
	}
	var inputs []Input
	for _, p := range o.Records {
		if p == "" {
			return nil, Config{}, usage.Errorf("--records: an empty path")
		}
		in, err := InputFromRecord(p)
		if err != nil {
			return nil, Config{}, usage.Errorf("--records: %v", err)
		}
		inputs = append(inputs, in)
	}
	cfg := Config{MaxIter: o.MaxIter}
	if o.Profile != "" {
		p, err := emulator.LookupProfile(o.Profile)
		if err != nil {
			return nil, Config{}, usage.Errorf("--profile: %v", err)
		}
		cfg.Start = p
	}
	return inputs, cfg, nil
}

// writeTable writes hone calibrate's table of a linear fit of records
// inputs: the coefficients, the predictions before and after against the
// measurements, the notes, and whether the profile was written to out.
func writeTable(w io.Writer, res *Result, records int, out string, written bool) {
	conv := "converged"
	if !res.Converged {
		conv = "not converged"
	}
	fmt.Fprintf(w, "calibrated %s from %d records: %d observations, %d iterations (%s), %d predictions of every record\n",
		res.Start.Name, records, res.Observations, res.Iterations, conv, res.Evaluations)
	writeCoefficients(w, res)
	fmt.Fprintf(w, "residual RMS (relative error): %.4g at the start, %.4g calibrated\n", res.StartRMSResidual, res.RMSResidual)

	fmt.Fprintf(w, "\np50 predicted vs measured (relative error), before: %s, after: %s\n", res.Start.Name, res.Profile.Name)
	writePredictionErrors(w, res)
	fmt.Fprintln(w, "before, after: from the schedule alone, as hone predict says beforehand; after*: each run predicted with the arrivals its record shows (the client's and the proxy's hops included), the median")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
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

// writeCoefficients is writeTable's table of the fitted coefficients.
func writeCoefficients(w io.Writer, res *Result) {
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
}

// writePredictionErrors is writeTable's table of p50 predictions against
// the measurements, record by record.
func writePredictionErrors(w io.Writer, res *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "record\toffered_qps\tttft_ms measured\tbefore\tafter\tafter*\ttpot_ms measured\tbefore\tafter\tafter*")
	for _, e := range res.PredictionError {
		nan := math.NaN()
		g := LevelPrediction{P50TTFTMs: nan, P50TPOTMs: nan, TTFTRelErr: nan, TPOTRelErr: nan}
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
}

// fmtMs and fmtQPS print a figure (n/a for NaN); fmtPred and fmtPredQPS
// add its relative error (none for NaN).
func fmtMs(v float64) string  { return fmtNum("%.2f", v) }
func fmtQPS(v float64) string { return fmtNum("%.3f", v) }

func fmtPred(v, rel float64) string    { return fmtWithErr("%.2f", v, rel) }
func fmtPredQPS(v, rel float64) string { return fmtWithErr("%.3f", v, rel) }

func fmtNum(format string, v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

func fmtWithErr(format string, v, rel float64) string {
	if math.IsNaN(rel) {
		return fmtNum(format, v)
	}
	return fmt.Sprintf(format+" (%+.1f%%)", v, 100*rel)
}
