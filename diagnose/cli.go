package diagnose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// Options is what hone diagnose report takes: the flags, by name.
type Options struct {
	Record    string   // --record: the replay record (required)
	Timelines string   // --timelines: the proxy's timelines file
	ProxyURL  string   // --proxy: fetch the timelines from this proxy
	Truth     string   // --truth: an emulator --trace-file to compare with
	Daemon    string   // --daemon: a hone daemon snapshot
	Evidence  string   // --evidence: auto, engine or kernel
	Head      string   // --http-head: auto, separate or with-first-token
	StepPIDs  []string // --step-pid API_PID=STEP_PID pairs
	// TokenBudget and MaxNumSeqs (--max-num-batched-tokens,
	// --max-num-seqs): 0 is the record's config.
	TokenBudget, MaxNumSeqs int
	Format                  string // -o: table, md or json
	Pprof                   string // --pprof: write a profile here
	// Out gets the report, Log the notes on the side.
	Out, Log io.Writer
}

// check says what is wrong with o's flags, in the order the command
// always checked them.
func (o Options) check() (map[int]int, error) {
	if o.Record == "" {
		return nil, usage.Errorf("--record: required (a hone replay record)")
	}
	if o.Head != "auto" && o.Head != "separate" && o.Head != "with-first-token" {
		return nil, usage.Errorf("--http-head: want auto, separate or with-first-token, got %q", o.Head)
	}
	switch o.Evidence {
	case EvidenceAuto, EvidenceEngine:
	case EvidenceKernel:
		if o.Daemon == "" {
			return nil, usage.Errorf("--evidence kernel: needs --daemon (a hone daemon snapshot covering the run)")
		}
	default:
		return nil, usage.Errorf("--evidence: want auto, engine or kernel, got %q", o.Evidence)
	}
	if o.MaxNumSeqs < 0 {
		return nil, usage.Errorf("--max-num-seqs: want >= 0 (0: the record's config, else unknown), got %d", o.MaxNumSeqs)
	}
	if o.TokenBudget < 0 {
		return nil, usage.Errorf("--max-num-batched-tokens: want >= 0 (0: the record's config, else unknown), got %d", o.TokenBudget)
	}
	if len(o.StepPIDs) > 0 && o.Daemon == "" {
		return nil, usage.Errorf("--step-pid: needs --daemon (a hone daemon snapshot covering the run)")
	}
	override, err := ParseStepPIDs(o.StepPIDs)
	if err != nil {
		return nil, err
	}
	if !slices.Contains([]string{"table", "md", "json"}, o.Format) {
		return nil, usage.Errorf("-o/--output: %q is not an output format: want table, md, json", o.Format)
	}
	return override, nil
}

// ParseStepPIDs parses --step-pid's API_PID=STEP_PID pairs.
func ParseStepPIDs(pairs []string) (map[int]int, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[int]int{}
	for _, p := range pairs {
		a, s, ok := strings.Cut(p, "=")
		api, err1 := strconv.Atoi(strings.TrimSpace(a))
		step, err2 := strconv.Atoi(strings.TrimSpace(s))
		if !ok || err1 != nil || err2 != nil || api <= 0 || step <= 0 {
			return nil, usage.Errorf("--step-pid: want API_PID=STEP_PID with positive process ids, got %q", p)
		}
		if prev, dup := m[api]; dup && prev != step {
			return nil, usage.Errorf("--step-pid: API server pid %d given twice (%d and %d)", api, prev, step)
		}
		m[api] = step
	}
	return m, nil
}

// Report is hone diagnose report: it reads the record and the evidence o
// names, diagnoses the record (Diagnose), and writes the report in o's
// format, with the comparison to the emulator's truth and a pprof profile
// when o asks for them. Bad input is a usage.Error.
func Report(ctx context.Context, o Options) error {
	override, err := o.check()
	if err != nil {
		return err
	}
	rec, err := replay.ReadRecord(o.Record)
	if err != nil {
		return usage.Wrap(err)
	}
	ev, err := o.evidence(ctx, override)
	if err != nil {
		return err
	}
	// What the record says of itself (as hone replay judged it), then
	// what the flags add.
	own := RecordEvidence(rec)
	ev.Source, ev.TokenBudget, ev.MaxNumSeqs, ev.Head = o.Evidence, own.TokenBudget, own.MaxNumSeqs, own.Head
	if o.TokenBudget > 0 {
		ev.TokenBudget = o.TokenBudget
	}
	knobs := RecordKnobs(rec)
	if o.MaxNumSeqs > 0 {
		knobs.MaxNumSeqs, ev.MaxNumSeqs = o.MaxNumSeqs, o.MaxNumSeqs
	}
	switch o.Head {
	case "with-first-token":
		ev.Head = HeadWithFirstToken
	case "separate":
		ev.Head = HeadSeparate
	}
	r, err := Diagnose(rec, ev, knobs)
	switch {
	case errors.Is(err, errNoneJoined):
		return usage.Wrap(noneJoined(o.Evidence, r.Measured))
	case err != nil:
		return usage.Wrap(fmt.Errorf("record %s: %w", o.Record, err))
	}
	errs, err := o.truth(r.Attributions)
	if err != nil {
		return err
	}
	if err := o.write(rec, r, errs, len(ev.Timelines) > 0); err != nil {
		return err
	}
	return o.profile(r.Attributions)
}

// evidence reads the proxy's timelines and the daemon's snapshot o names.
func (o Options) evidence(ctx context.Context, override map[int]int) (Evidence, error) {
	var ev Evidence
	var err error
	switch {
	case o.Timelines != "" && o.ProxyURL != "":
		return ev, usage.Errorf("--timelines and --proxy: give one")
	case o.Timelines != "":
		if ev.Timelines, err = ReadTimelines(o.Timelines); err != nil {
			return ev, usage.Wrap(err)
		}
	case o.ProxyURL != "":
		if ev.Timelines, err = FetchTimelines(ctx, o.ProxyURL); err != nil {
			return ev, err
		}
	}
	if o.Daemon == "" {
		return ev, nil
	}
	ds, err := ReadDaemonSnapshot(o.Daemon) // once, for both the KV connections and the kernel evidence
	if err != nil {
		return ev, usage.Errorf("--daemon: %w", err)
	}
	k := ds.Kernel
	ev.KV = ds.KV
	ev.Exchanges, ev.Steps, ev.Processes, ev.StepPIDs, ev.Daemon = k.Exchanges, k.Steps, k.Processes, override, true
	owners, err := StepOwners(k.Exchanges, k.Steps, k.Processes, override)
	if err != nil {
		return ev, usage.Errorf("%v", err)
	}
	for _, a := range slices.Sorted(maps.Keys(owners)) {
		if ow := owners[a]; ow.StepPID != a {
			fmt.Fprintf(o.Log, "kernel evidence: %s\n", ow)
		}
	}
	return ev, nil
}

// truth compares the attributions with the emulator's trace (--truth).
func (o Options) truth(atts []Attribution) ([]PartError, error) {
	if o.Truth == "" {
		return nil, nil
	}
	f, err := os.Open(o.Truth)
	if err != nil {
		return nil, usage.Errorf("--truth: %w", err)
	}
	tr, err := ReadTrace(f)
	f.Close()
	if err != nil {
		return nil, usage.Errorf("--truth %s: %w", o.Truth, err)
	}
	errs, err := Compare(atts, tr)
	return errs, usage.Wrap(err)
}

// write writes the report to o.Out in o.Format.
func (o Options) write(rec *schema.Record, r Result, errs []PartError, timelines bool) error {
	out := o.Out
	if o.Format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"diagnosis": r.Diagnosis, string(schema.ReasonClientBound): r.ClientBound, "invalid_levels": rec.InvalidLevels(),
			"truth_error": errs, "requests": r.Attributions, "unjoined": r.Unjoined})
	}
	for _, m := range r.ClientBound {
		fmt.Fprintln(out, "client/proxy residual check:", m)
	}
	for _, l := range r.Unjoined {
		fmt.Fprintf(out, "kernel evidence: run %d, %g req/s: %d of %d measured requests not split, left out:", l.Run, l.OfferedQPS, l.Unjoined, l.Requests)
		for _, why := range l.ReasonsByCount() {
			fmt.Fprintf(out, " %d %s;", l.Reasons[why], why)
		}
		fmt.Fprintln(out)
	}
	if err := r.Diagnosis.WriteTable(out, o.Format == "md"); err != nil {
		return err
	}
	if len(errs) > 0 {
		fmt.Fprintln(out, "\nagainst the emulator's ground truth (model ms):")
		for _, e := range errs {
			fmt.Fprintf(out, "  %-13s truth %9.2f  attributed %9.2f  |err| median %7.2f  p90 %7.2f  (n=%d)\n",
				e.Part, e.MeanTruth, e.MeanAttrib, e.MedianErr, e.P90AbsErr, e.Requests)
		}
	}
	if !timelines {
		fmt.Fprintln(out, "note: no proxy timelines: disaggregated legs cannot be split (give --proxy or --timelines)")
	}
	return nil
}

// profile writes a pprof profile of the attributed time (--pprof).
func (o Options) profile(atts []Attribution) error {
	if o.Pprof == "" {
		return nil
	}
	p, err := Profile(atts)
	if err != nil {
		return err
	}
	f, err := os.Create(o.Pprof)
	if err != nil {
		return err
	}
	if err := p.Write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintln(o.Log, "pprof profile written to", o.Pprof, "(go tool pprof -top", o.Pprof+")")
	return nil
}
