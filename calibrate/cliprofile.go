package calibrate

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// ProfileCheckOptions is what hone profile check takes: the argument and
// the flags, by name.
type ProfileCheckOptions struct {
	Profile string // PROFILE: a built-in name or a .yaml file
	Steps   string // --steps: the step-data directory to predict
	Format  string // -o: table or json (checked by the caller)
	// Out gets the result.
	Out io.Writer
}

// ProfileCheck is hone profile check: it predicts every measured step of
// o.Steps with o.Profile (CheckSteps) and writes the errors per phase in
// o.Format. Bad input is a usage.Error.
func ProfileCheck(o ProfileCheckOptions) error {
	if o.Steps == "" {
		return usage.Errorf("--steps: required: a step-data directory to check the profile against")
	}
	p, err := emulator.LookupProfile(o.Profile)
	if err != nil {
		return usage.Errorf("PROFILE: %v", err)
	}
	data, err := ReadStepDirs("--steps", []string{o.Steps})
	if err != nil {
		return err
	}
	res, err := CheckSteps(p, data[0])
	if err != nil {
		return usage.Errorf("%v", err)
	}
	if o.Format == "json" {
		return jsonout.Write(o.Out, res)
	}
	writeCheckTable(o.Out, res)
	return nil
}

func writeCheckTable(w io.Writer, r *CheckResult) {
	fmt.Fprintf(w, "profile %s (%s) predicting %s at TP %d (%d mis-booked pairs scored as one)\n", r.Profile, r.ProfileSource, r.Data, r.TP, r.MisbookedPairs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tsteps\tmedian APE\tp90 APE")
	for _, ph := range Phases {
		s := r.Phases[ph]
		fmt.Fprintf(tw, "%s\t%d\t%.2f%%\t%.2f%%\n", ph, s.Steps, s.MedianAPE, s.P90APE)
	}
	fmt.Fprintf(tw, "all\t%d\t%.2f%%\t%.2f%%\n", r.All.Steps, r.All.MedianAPE, r.All.P90APE)
	tw.Flush()
	for _, w2 := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", w2)
	}
}

// ProfileStepsOptions is what hone profile steps takes: the flags, by name.
type ProfileStepsOptions struct {
	Daemon string // --daemon: a daemon snapshot with the engine's steps
	Record string // --record: the replay record of the requests the engine served
	Out    string // --out: the step-data directory to write
	PID    int    // --pid: the engine process (0: the one process with steps)
	Budget int    // --budget: token budget per step (0: the record's spec's)
	TP     int    // --tp: tensor-parallel size (0: the record's)
	// Stdout gets the summary line.
	Stdout io.Writer
}

// ProfileSteps is hone profile steps: it joins the daemon snapshot's
// engine steps with the replay record (StepsFromEvidence) and writes the
// step-data directory o.Out. Bad input is a usage.Error.
func ProfileSteps(o ProfileStepsOptions) error {
	if o.Daemon == "" {
		return usage.Errorf("--daemon: required: a daemon snapshot (hone daemon --out) with the engine's steps")
	}
	if o.Record == "" {
		return usage.Errorf("--record: required: the replay record of the requests the engine served")
	}
	if o.Out == "" {
		return usage.Errorf("--out: required: the step-data directory to write")
	}
	ev, err := diagnose.ReadKernelEvidence(o.Daemon)
	if err != nil {
		return usage.Errorf("--daemon %s: %v", o.Daemon, err)
	}
	rec, err := replay.ReadRecord(o.Record)
	if err != nil {
		return usage.Errorf("--record: %v", err)
	}
	budget := o.Budget
	if budget == 0 {
		budget = budgetOf(rec)
		if budget == 0 {
			return usage.Errorf("--budget: required: the record's spec does not state knobs.max_num_batched_tokens")
		}
	}
	if o.TP < 0 {
		return usage.Errorf("--tp %d: want >= 1", o.TP)
	}
	d, err := StepsFromEvidence(ev, o.PID, rec, budget, o.TP)
	if err != nil {
		return usage.Errorf("%v", err)
	}
	if err := WriteStepDir(o.Out, d); err != nil {
		return err
	}
	fmt.Fprintf(o.Stdout, "%d steps of %s (TP %d) written to %s: %s and %s\n", len(d.Steps), d.Dir, d.TP, o.Out, StepsFile, MetadataFile)
	return nil
}

// budgetOf is the token budget the record's spec states, 0 when none.
func budgetOf(rec *schema.Record) int {
	k, _ := rec.Config.Knobs()
	return k.MaxNumBatchedTokens
}
