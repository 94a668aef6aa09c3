package gate

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/hone-llm/hone/internal/usage"
)

// CreateOptions is what hone gate baseline create takes: the flags, by
// name, and the record files.
type CreateOptions struct {
	Records []string // the RECORD arguments: run records (ReadRuns)
	Out     string   // --out: the baseline file to write (required)
	Name    string   // --name: the baseline's name ("": Out's file name)
	// Log gets the line that says what was written.
	Log io.Writer
}

// CreateBaseline is hone gate baseline create: it builds a baseline of
// the compared metrics (DefaultCompared) from o.Records' runs and writes
// it to o.Out. Bad input is a usage.Error.
func CreateBaseline(ctx context.Context, o CreateOptions) error {
	if o.Out == "" {
		return usage.Errorf("--out: required (where to write the baseline)")
	}
	runs, err := ReadRunFiles(o.Records)
	if err != nil {
		return err
	}
	n := o.Name
	if n == "" {
		n = strings.TrimSuffix(filepath.Base(o.Out), filepath.Ext(o.Out))
	}
	bl, err := NewBaseline(n, runs, DefaultCompared)
	if err != nil {
		return usage.Wrap(err)
	}
	if err := bl.Write(o.Out); err != nil {
		return fmt.Errorf("write baseline %s: %w", o.Out, err)
	}
	fmt.Fprintf(o.Log, "baseline %q: %d runs, %d series (%s) → %s\n", bl.Name, bl.Runs, len(bl.Series), bl.Kind, o.Out)
	return nil
}

// UpdateOptions is what hone gate baseline update takes: the flags, by
// name, and the record files.
type UpdateOptions struct {
	Records  []string // the RECORD arguments: run records (ReadRuns)
	Baseline string   // --baseline: the baseline file, updated in place (required)
	Keep     int      // --keep: runs kept per series, the newest (>= 1)
	// Log gets the line that says what was written.
	Log io.Writer
}

// UpdateBaseline is hone gate baseline update: it adds o.Records' runs to
// the baseline in o.Baseline (Baseline.Update), keeping the newest o.Keep
// per series, and writes it back atomically. Bad input is a usage.Error.
func UpdateBaseline(ctx context.Context, o UpdateOptions) error {
	if o.Baseline == "" {
		return usage.Errorf("--baseline: required")
	}
	if o.Keep < 1 {
		return usage.Errorf("--keep: %d: want at least 1", o.Keep)
	}
	bl, err := ReadBaseline(o.Baseline)
	if err != nil {
		return usage.Wrap(err)
	}
	runs, err := ReadRunFiles(o.Records)
	if err != nil {
		return err
	}
	if err := bl.Update(runs, DefaultCompared, o.Keep); err != nil {
		return usage.Wrap(err)
	}
	if err := bl.Write(o.Baseline); err != nil {
		return fmt.Errorf("write baseline %s: %w", o.Baseline, err)
	}
	fmt.Fprintf(o.Log, "baseline %q: now %d runs → %s\n", bl.Name, bl.Runs, o.Baseline)
	return nil
}

// ReadRunFiles reads the runs of every record file in paths (ReadRuns),
// in order. No paths, or a file that cannot be read as runs, is a
// usage.Error: the record files are the command's input.
func ReadRunFiles(paths []string) ([]Run, error) {
	if len(paths) == 0 {
		return nil, usage.Errorf("no run records given: pass one or more RECORD files")
	}
	var all []Run
	for _, p := range paths {
		runs, err := ReadRuns(p)
		if err != nil {
			return nil, usage.Wrap(err)
		}
		all = append(all, runs...)
	}
	return all, nil
}

// CheckOptions is what hone gate check takes: the flags, by name.
type CheckOptions struct {
	Baseline   string   // --baseline: the baseline file (required)
	Candidates []string // --candidate and the arguments: run records
	Config     string   // --config: a gate config file ("": defaults)
	Format     string   // -o: one of Formats
	// Out gets the report.
	Out io.Writer
}

// CheckCommand is hone gate check: it compares o.Candidates' runs with
// the baseline, writes the report in o.Format, and says how it ended: a
// usage.Failed for a regression or a suspect measurement (exit 1), a
// usage.Error for bad input, unusable or incomparable data (exit 2).
func CheckCommand(o CheckOptions) error {
	var cfg Config
	if o.Config != "" {
		var err error
		if cfg, err = ReadConfig(o.Config); err != nil {
			return usage.Wrap(err)
		}
	}
	bl, err := ReadBaseline(o.Baseline)
	if err != nil {
		return usage.Wrap(err)
	}
	runs, err := ReadRunFiles(o.Candidates)
	if err != nil {
		return err
	}
	rep := Check(bl, runs, cfg)
	if err := rep.Write(o.Out, o.Format); err != nil {
		return err
	}
	switch {
	case rep.Verdict == Suspect:
		return usage.Failed{Msg: fmt.Sprintf("gate: suspect measurement against baseline %q: implausible figures (see the suspect rows); check the records' cache procedure and time scale", bl.Name)}
	case rep.Verdict == Unusable:
		return usage.Errorf("gate: no level is valid in both the candidate and baseline %q (unusable data): %s", bl.Name, strings.Join(rep.InvalidLevels, "; "))
	case rep.ExitCode() == 1:
		return usage.Failed{Msg: fmt.Sprintf("gate: regression against baseline %q", bl.Name)}
	case rep.ExitCode() == 2:
		return usage.Errorf("gate: candidate is not comparable with baseline %q: %s", bl.Name, strings.Join(rep.Incomparable, "; "))
	}
	return nil
}
