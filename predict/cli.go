package predict

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// Note says what a predicted figure is, under every table hone predict
// prints.
const Note = "predicted: the emulator's scheduler in virtual time with the profile's cost model; not a measurement"

// CommandOptions is what hone predict takes once the command has checked
// its flags and turned them into values.
type CommandOptions struct {
	SpecArg string       // SPEC as given on the command line, naming it in errors
	Spec    *deploy.Spec // SPEC, loaded
	// Options are the prediction's: --profile resolved (never nil), the
	// workload and SLO flags, --qps or --concurrency. Command sets
	// KeepRequests when OutPath is set, and with Grid and Capacity makes
	// each point's objective its capacity.
	Options Options
	// Capacity (--capacity and its --capacity-* settings), when set, finds
	// the capacity instead of scanning levels; Command sets its Progress
	// (lines on Log, none with Grid).
	Capacity *capacity.Options
	Grid     bool // --grid
	Axes     Axes // --grid-*, with Grid
	Top      int  // --top, with Grid
	// Trace (--trace, opened) sends the trace's requests instead of the
	// workload, TraceSpeed (--trace-speed) times faster; nil: the workload.
	Trace      *replay.TraceFile
	TraceSpeed float64
	OutPath    string // --out: the run record, or with Grid every point
	Format     string // -o: table or json
	// Out gets the result, Log the progress.
	Out, Log io.Writer
}

// Command is hone predict: it predicts o.Spec (a level scan, a trace or
// a capacity search) or with o.Grid every spec of its grid, and prints
// the result. Bad input is a usage.Error. A grid catches SIGINT and
// SIGTERM while its specs are predicted and prints what it has; cut short,
// or with no spec predicted, it is a usage.Failed.
func Command(ctx context.Context, o CommandOptions) error {
	o.Options.KeepRequests = o.OutPath != ""
	if o.Grid {
		if o.Capacity != nil {
			co := *o.Capacity
			co.Progress = nil // the grid's progress is its own
			o.Options.Capacity, o.Options.QPS = &co, nil
		}
		return o.grid(ctx)
	}
	if o.Capacity != nil {
		co := *o.Capacity
		co.Progress = func(p capacity.Probe) { fmt.Fprintln(o.Log, capacity.ProgressLine(co.Mode, p)) }
		res, err := CapacityRecord(ctx, o.Spec, o.Options, co)
		if err != nil {
			return o.predictErr(err)
		}
		return capacity.Write(o.Out, o.Format, o.OutPath, res)
	}
	var rec *schema.Record
	var err error
	if o.Trace != nil {
		rec, err = RunTrace(o.Spec, o.Options, o.Trace, o.TraceSpeed)
	} else {
		rec, err = Run(o.Spec, o.Options)
	}
	if err != nil {
		return o.predictErr(err)
	}
	if o.OutPath != "" {
		if err := replay.WriteRecord(o.OutPath, rec); err != nil {
			return err
		}
	}
	if o.Format == "json" {
		return jsonout.Write(o.Out, withoutRequests(rec))
	}
	writeTable(o.Out, o.Spec, o.Options.Profile, rec)
	replay.WriteTraceHitRates(o.Out, rec)
	if o.OutPath != "" {
		fmt.Fprintf(o.Out, "record (%s, profile %s) written to %s\n", rec.Kind, o.Options.Profile.Name, o.OutPath)
	}
	return nil
}

// predictErr is err, from predicting the spec, as bad input: a workload
// parameter names its flag, anything else the spec.
func (o CommandOptions) predictErr(err error) error {
	var pe *replay.ParamError
	if errors.As(err, &pe) {
		return replay.ParamUsage(pe)
	}
	return usage.Errorf("%s: cannot predict: %v", o.SpecArg, err)
}

// withoutRequests is rec without its per-request records: -o json prints
// the summaries (--out keeps everything).
func withoutRequests(rec *schema.Record) *schema.Record {
	r := *rec
	r.Runs = make([]schema.RunRecord, len(rec.Runs))
	for i, run := range rec.Runs {
		run.Levels = append([]schema.LevelRecord(nil), run.Levels...)
		for j := range run.Levels {
			run.Levels[j].Requests = nil
		}
		r.Runs[i] = run
	}
	return &r
}
