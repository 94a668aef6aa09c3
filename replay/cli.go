package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/schema"
)

// FormatVLLMBench is hone replay's -o vllm-bench-json: every level as vllm
// bench serve --save-result writes a result (WriteVLLMBench).
const FormatVLLMBench = "vllm-bench-json"

// CommandOptions is what hone replay takes: the replay (Options) as its
// flags state it, and the flags that are not the replay's, by name.
type CommandOptions struct {
	// Replay is the replay the flags state: --endpoint,
	// --tokenize-endpoint, --model ("": the endpoint's one model),
	// --kind, --backend, --cache, --runs, --gpus, --time-scale (0 when
	// not given: the engine's), --request-timeout,
	// --cached-tokens-reported, --revision and --precision (ModelInfo),
	// the workload's flags (Workload, QPS or Concurrency, SLO) and Hone
	// (the build). Command adds Config, Hardware, Shard, Progress and,
	// with a trace, SpillDir.
	Replay Options

	Config   string        // --config: a JSON file with the deployment config to store
	Scenario string        // --scenario: config.scenario
	Shard    string        // --shard: INDEX/COUNT, "" for none
	StartAt  string        // --start-at: RFC 3339 or unix nanoseconds
	LevelGap time.Duration // --level-gap

	Trace           string  // --trace: a trace file instead of the seed workload
	TraceSpeed      float64 // --trace-speed
	TraceBlockSize  int     // --trace-block-size
	EngineBlockSize int     // --engine-block-size

	Record string // --out: where the run record goes
	Format string // -o: table, json or vllm-bench-json
	// TTY says the progress goes to a terminal (and not CI): a bar
	// redrawn in place, not a line every 30 s.
	TTY bool
	// Changed says whether a flag was given on the command line.
	Changed func(flag string) bool

	// Hardware is what the client host knows of itself, for the record
	// (preflight.Hardware, which imports this package); nil: nothing.
	Hardware func() map[string]any
	// Judge applies diagnose's client-bound rule to a record before it
	// is printed or written (diagnose.JudgeRecord, which imports this
	// package), returning the levels it marked; nil: replay's own
	// verdicts stand.
	Judge func(*schema.Record) ([]string, error)
	// Capacity, when set (--capacity), runs instead of the scan: a
	// capacity search whose probes are one-level replays of run, the
	// replay the flags state (capacity.ReplaySearch, in a package that
	// imports this one).
	Capacity func(ctx context.Context, run Options, progress *ProgressPrinter) error

	// Out gets the summary, Log the progress and the notes on the side.
	Out, Log io.Writer
}

// Command is hone replay: it resolves the model when o does not name
// one, states the replay (shard, config), then, until SIGINT or SIGTERM,
// runs it (of the trace, or the workload), writes its record (when a
// request was sent) and prints its summary in o.Format; or, with
// o.Capacity, runs the capacity search instead. Bad input is a
// usage.Error; an invalid or failed level, a run that stopped early, or
// an interruption is a usage.Failed.
func Command(ctx context.Context, o CommandOptions) error {
	if err := o.resolveModel(ctx); err != nil {
		return err
	}
	run, pp, err := o.options()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.Capacity != nil {
		return o.Capacity(ctx, run, pp)
	}
	return o.record(ctx, run, pp)
}

// resolveModel takes the endpoint's one served model when --model is not
// given, as vllm bench serve does.
func (o *CommandOptions) resolveModel(ctx context.Context) error {
	if o.Replay.Model != "" {
		return nil
	}
	served, err := ServedModels(ctx, o.Replay.Endpoint)
	switch {
	case err != nil:
		return usage.Errorf("--model: not given, and the endpoint's model list could not be read (%v): give the served model name", err)
	case len(served) != 1:
		return usage.Errorf("--model: not given, and the endpoint serves %d models (%s): name one", len(served), strings.Join(served, ", "))
	}
	o.Replay.Model = served[0]
	fmt.Fprintf(o.Log, "replay: --model not given: %s, the one model the endpoint serves\n", o.Replay.Model)
	return nil
}

// options states the replay o asks for, and the printer of its progress.
func (o *CommandOptions) options() (Options, *ProgressPrinter, error) {
	sh, err := o.shard()
	if err != nil {
		return Options{}, nil, err
	}
	cfg := map[string]any{}
	if o.Config != "" {
		b, err := os.ReadFile(o.Config)
		if err != nil {
			return Options{}, nil, usage.Errorf("--config: %v", err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return Options{}, nil, usage.Errorf("--config %s: want a JSON object: %v", o.Config, err)
		}
	}
	if o.Scenario != "" {
		cfg[schema.ConfigScenario] = o.Scenario
	}
	pp := &ProgressPrinter{W: o.Log, TTY: o.TTY}
	run := o.Replay
	run.Config, run.Progress, run.Shard = cfg, pp.Update, sh
	if o.Hardware != nil {
		run.Hardware = o.Hardware()
	}
	return run, pp, nil
}

// shard turns --shard, --start-at and --level-gap into the replay's
// shard; nil without --shard.
func (o *CommandOptions) shard() (*Shard, error) {
	if o.Shard == "" {
		for _, f := range []string{"start-at", "level-gap"} {
			if o.Changed != nil && o.Changed(f) {
				return nil, usage.Errorf("--%s: only with --shard", f)
			}
		}
		return nil, nil
	}
	var s Shard
	i, n, ok := strings.Cut(o.Shard, "/")
	var err1, err2 error
	s.Index, err1 = strconv.Atoi(i)
	s.Count, err2 = strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || s.Count < 1 || s.Index < 0 || s.Index >= s.Count {
		return nil, usage.Errorf("--shard: want INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/3, got %q", o.Shard)
	}
	if o.StartAt == "" {
		return nil, usage.Errorf("--start-at: required with --shard: the instant every shard starts the first level, e.g. %s",
			time.Now().Add(time.Minute).UTC().Format(time.RFC3339))
	}
	if ns, err := strconv.ParseInt(o.StartAt, 10, 64); err == nil {
		s.StartAt = time.Unix(0, ns)
	} else if s.StartAt, err = time.Parse(time.RFC3339Nano, o.StartAt); err != nil {
		return nil, usage.Errorf("--start-at: want an RFC 3339 instant (e.g. 2026-12-01T07:00:00Z) or unix nanoseconds, got %q", o.StartAt)
	}
	if o.LevelGap <= 0 {
		return nil, usage.Errorf("--level-gap: want a positive duration (model time), got %v", o.LevelGap)
	}
	s.LevelGap = o.LevelGap
	if o.Replay.Cache == "" {
		return nil, usage.Errorf("--cache: with --shard, want reset or fresh-prefixes: shards cannot agree on what auto would find")
	}
	return &s, nil
}

// record runs the replay (of the trace, or the workload), writes its
// record and reports it; the verdict is the error.
func (o *CommandOptions) record(ctx context.Context, run Options, pp *ProgressPrinter) error {
	var rec *schema.Record
	var err error
	if o.Trace != "" {
		tf, terr := OpenTrace(o.Trace, o.TraceBlockSize, o.EngineBlockSize)
		if terr != nil {
			return usage.Errorf("--trace: %v", terr)
		}
		run.SpillDir = filepath.Dir(o.Record) // the chunks wait on the record's disk, not in memory
		rec, err = RunTrace(ctx, run, tf, o.TraceSpeed)
	} else {
		rec, err = Run(ctx, run)
	}
	pp.Close()
	var pe *ParamError
	if errors.As(err, &pe) {
		return ParamUsage(pe)
	}
	judge(o.Judge, o.Log, rec, o.Trace != "")
	// A record is written when a request was sent: one that never
	// reached the endpoint (unreachable, wrong model, no /tokenize)
	// holds nothing to keep, and must not leave a run.json behind.
	written := "no record written (no request was sent)"
	if rec != nil && sentAny(rec) {
		if werr := WriteRecord(o.Record, rec); werr != nil {
			return fmt.Errorf("%w (and the record could not be written: %v)", orNil(err), werr)
		}
		written = "partial record (incomplete) written to " + o.Record
	}
	var me *ModelError
	switch {
	case errors.As(err, &me):
		return usage.Errorf("--model: %v; %s", err, written)
	case err != nil && ctx.Err() != nil:
		return usage.Failed{Msg: fmt.Sprintf("interrupted: %s", written)}
	case err != nil:
		return usage.Failed{Msg: fmt.Sprintf("%v; %s", err, written)}
	}
	bad := rec.InvalidLevels()
	if err := writeSummary(o.Out, o.Format, rec, o.Record, bad); err != nil {
		return err
	}
	if o.Format == "table" {
		WriteTraceHitRates(o.Out, rec)
	}
	if sh := run.Shard; sh != nil {
		fmt.Fprintf(o.Log, "shard %d/%d: merge every shard's record with 'hone replay merge'\n", sh.Index, sh.Count)
	}
	return verdict(rec, bad)
}

// MergeOptions is what hone replay merge takes.
type MergeOptions struct {
	Record string   // --out: where the merged record goes (required)
	Shards []string // the arguments: every shard's record
	Format string   // -o: table, json or vllm-bench-json
	// Judge is CommandOptions.Judge: diagnose's client-bound rule.
	Judge func(*schema.Record) ([]string, error)
	// Out gets the summary, Log the notes on the side.
	Out, Log io.Writer
}

// Merge is hone replay merge: it merges the records of a sharded replay
// (MergeShardFiles) into the record one process would have written,
// writes it to o.Record and prints its summary. Bad input is a
// usage.Error; an incomplete shard, or an invalid or failed level, is a
// usage.Failed.
func Merge(ctx context.Context, o MergeOptions) error {
	if o.Record == "" {
		return usage.Errorf("--out: want a path for the merged record")
	}
	if err := atomicfile.CheckWritable(o.Record); err != nil {
		return usage.Errorf("--out: %v", err)
	}
	if len(o.Shards) == 0 {
		return usage.Errorf("want every shard's record, e.g. hone replay merge --out run.json.gz shard0.json.gz shard1.json.gz")
	}
	rec, err := MergeShardFiles(o.Shards...)
	if err != nil {
		return usage.Wrap(err)
	}
	judge(o.Judge, o.Log, rec, rec.Workload.Kind == schema.WorkloadTrace)
	if err := WriteRecord(o.Record, rec); err != nil {
		return err
	}
	bad := rec.InvalidLevels()
	if err := writeSummary(o.Out, o.Format, rec, o.Record, bad); err != nil {
		return err
	}
	if rec.Incomplete {
		return usage.Failed{Msg: fmt.Sprintf("a shard stopped early (%s): the merged record %s is incomplete", rec.Error, o.Record)}
	}
	return verdict(rec, bad)
}

// judge applies j (diagnose's client-bound rule) to rec before it is
// printed or written, so that hone diagnose report finds the verdicts it
// would reach itself (one verdict per level, judged once), and notes the
// levels it marked on log. A trace's record is left as replay judged it:
// attributing 10^5 requests would hold them all again.
func judge(j func(*schema.Record) ([]string, error), log io.Writer, rec *schema.Record, trace bool) {
	if j == nil || rec == nil || trace {
		return
	}
	marked, err := j(rec)
	if err != nil {
		return // nothing attributable: replay's own verdicts stand
	}
	for _, m := range marked {
		fmt.Fprintf(log, "client-bound (diagnose's rule): %s\n", m)
	}
}

func orNil(err error) error {
	if err == nil {
		return errors.New("run finished")
	}
	return err
}

// sentAny reports whether the replay sent at least one request.
func sentAny(rec *schema.Record) bool {
	for _, run := range rec.Runs {
		for _, l := range run.Levels {
			if l.Sent > 0 {
				return true
			}
		}
	}
	return false
}

// verdict is the exit status of a written, complete record: a
// usage.Failed when a level is invalid or lost requests beyond what its
// figures can absorb (Record.FailedLevels), else nil.
func verdict(rec *schema.Record, bad []string) error {
	var why []string
	if len(bad) > 0 {
		why = append(why, fmt.Sprintf("%d of the record's levels are invalid: they do not count", len(bad)))
	}
	if failed := rec.FailedLevels(); len(failed) > 0 {
		why = append(why, fmt.Sprintf("requests failed at %d level(s): %s", len(failed), failed[0]))
	}
	if len(why) > 0 {
		return usage.Failed{Msg: strings.Join(why, "; ") + " (see above)"}
	}
	return nil
}
