package optimizer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/preflight"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// DeployEvaluator is the emulated and device backend. It measures a spec
// for real: deploy.Up (emulator or vLLM workers behind hone's proxy),
// replay through the proxy, fetch the proxy's timelines, attribute, write
// the record, deploy.Down. The optimizer never talks to an engine itself.
type DeployEvaluator struct {
	// Up starts each trial's deployment; Evaluate sets Up.Owned, so that
	// a trial's processes never outlive this one (set it here too for
	// MeasureFloor's).
	Up       deploy.UpOptions
	Workload schema.Workload
	QPS      []float64
	Runs     int
	SLO      slo.SLO
	OutDir   string // records/<tag>.json and traces/<tag>/
	Hone     schema.Build
	Log      io.Writer // progress lines; nil: none
	// Capacity, when set, measures each run as a capacity search
	// (capacity.Search; one replay level per probe, every run's probes in
	// the trial's one record) instead of the QPS scan; the trial's
	// objectives are the runs' capacities. ReferenceQPS, when > 0, adds a
	// probe at that offered rate to every run, so that trials compare
	// latency at one load (CapacityRule).
	Capacity     *capacity.Options
	ReferenceQPS float64
	// ProgressEvery is how often a trial says where it is on Log
	// (0: ProgressEvery).
	ProgressEvery time.Duration

	prober   func(replay.Options, func(*schema.Record)) capacity.Prober    // nil: capacity.ReplayProber (tests plant one)
	replayer func(context.Context, replay.Options) (*schema.Record, error) // nil: replay.Run (tests plant one)
}

// CapacityRule states how a trial is measured by capacity, for the log and
// the report.
const CapacityRule = "Each run of a trial is a capacity search (" + capacity.Rule + ") against the trial's deployment; the trial's " +
	"objective is the median of its valid runs' capacities (a run whose search a host-distorted probe ended is invalid), its cost GPUs / capacity " +
	"(GPU-seconds per request served at capacity). The first run starts at the predicted capacity, the next at the run before's, each with a 1+p step (a start that passes and a load p above it that fails bracket the capacity in two probes). " +
	"Every run whose capacity reaches the reference load (reference_qps, the same offered rate for every trial) also measures it there: " +
	"latency is compared at that load, never at loads that differ, and not measured above a run's capacity."

// Evaluate implements Evaluator.
func (e *DeployEvaluator) Evaluate(ctx context.Context, spec *deploy.Spec, tag string) (t Trial) {
	start := time.Now()
	// The kind is what the endpoint proves (GET /version): an emulator
	// spec asserts emulated; a vLLM spec is device only with vLLM's own
	// version answer, else unverified.
	t = Trial{Started: start.UTC(), Kind: schema.KindUnverified}
	defer func() { t.Seconds = time.Since(start).Seconds() }()
	var m *meter // nil: no progress lines
	if e.Log != nil {
		k := 1.0
		if engine.Emulated(spec.Engine) && spec.Emulator.TimeScale > 0 {
			k = spec.Emulator.TimeScale
		}
		m = startMeter(e.Log, cmp.Or(e.ProgressEvery, ProgressEvery), "trial "+tag, time.Duration(float64(expectedFrom(ctx))*k), nil)
		defer m.Stop()
		m.setPhase("deploying")
	}
	s := CloneSpec(spec)
	s.Name = "hone-" + tag
	if len(s.Name) > 63 {
		s.Name = s.Name[:63]
	}
	backend, kind := s.Engine, schema.Kind("")
	if engine.Emulated(s.Engine) {
		t.Kind, kind = schema.KindEmulated, schema.KindEmulated
		s.Emulator.TraceDir = filepath.Join(e.OutDir, "traces", tag)
		if err := os.MkdirAll(s.Emulator.TraceDir, 0o755); err != nil {
			t.Error = err.Error()
			return t
		}
	}
	if err := s.Validate(); err != nil {
		t.Error = "invalid spec: " + err.Error()
		return t
	}
	up := e.Up
	up.Owned = true // measured, then torn down: it dies with this process
	dep, err := deploy.Up(ctx, s, up)
	if err != nil {
		t.Error = "deploy: " + err.Error()
		return t
	}
	defer func() {
		if err := dep.Down(10 * time.Second); err != nil && t.Error == "" {
			t.Error = "deploy down: " + err.Error()
		}
	}()
	var cfg map[string]any
	b, _ := json.Marshal(s)
	json.Unmarshal(b, &cfg)
	cfg[schema.ConfigScenario] = SpecKey(spec) // the gate compares records of one config under this name
	scale := 0.0                               // vLLM: real time; the emulator states its own, which must match the spec's
	if engine.Emulated(s.Engine) && s.Emulator.TimeScale > 0 {
		scale = s.Emulator.TimeScale
		t.TimeScale = scale
	}
	ropts := replay.Options{Endpoint: dep.ProxyURL(), Model: s.ServedName(), Kind: kind, Backend: backend,
		Workload: e.Workload, QPS: e.QPS, Runs: e.Runs, SLO: e.SLO, TimeScale: scale, GPUs: s.GPUsNeeded(), Config: cfg,
		Hardware:  preflight.Hardware(e.Hone.Version, e.Hone.Commit),
		ModelInfo: schema.Model{Revision: s.Model.Revision, Precision: s.Precision.DType}, Hone: e.Hone}
	if m != nil {
		ropts.Progress = m.update
		m.setPhase("replaying")
	}
	var (
		rec  *schema.Record
		caps []capacity.Result
	)
	if e.Capacity != nil {
		rec, caps, err = e.searchRuns(ctx, ropts, m)
	} else {
		rec, err = e.scanRuns(ctx, ropts)
	}
	if rec == nil {
		t.Error = fmt.Sprintf("replay: %v", err)
		return t
	}
	t.Kind = rec.Kind
	m.setPhase("diagnosing and writing the record")
	e.finishTrial(ctx, &t, rec, caps, err, dep.ProxyURL(), s.GPUsNeeded(), tag)
	return t
}

// finishTrial completes t from its replay's record: the replay's error or
// budget cut, the diagnosis (with the proxy's timelines from proxyURL), the
// record written under e.OutDir, and the trial's figures (capacity ones
// from caps when the trial measured capacity).
func (e *DeployEvaluator) finishTrial(ctx context.Context, t *Trial, rec *schema.Record, caps []capacity.Result, err error, proxyURL string, gpus int, tag string) {
	var cut *budgetCut
	switch {
	case errors.As(err, &cut):
		t.Cut = cut.Error()
	case err != nil:
		t.Error = "replay: " + err.Error()
	}
	post := ctx
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// What was measured before the deadline is still read and kept.
		var cancel context.CancelFunc
		post, cancel = context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
	}
	tls, terr := diagnose.FetchTimelines(post, proxyURL)
	// As hone diagnose report does: the client/proxy residual can make a
	// level client-bound; that re-judges the record and marks the
	// attributions in place.
	if r, derr := diagnose.Diagnose(rec, diagnose.Evidence{Timelines: tls}, diagnose.RecordKnobs(rec)); derr == nil {
		setDiagnosis(t, r.Diagnosis)
		rec.Attribution, _ = json.Marshal(map[string]any{"diagnosis": r.Diagnosis, "timelines_error": errString(terr), string(schema.ReasonClientBound): r.ClientBound})
	}
	path := filepath.Join(e.OutDir, "records", tag+".json.gz") // gzip: ~7 bytes per output token
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil && t.Error == "" {
		t.Error = err.Error()
	}
	if werr := replay.WriteRecord(path, rec); werr != nil && t.Error == "" {
		t.Error = "write record: " + werr.Error()
	}
	t.Record = path
	summarizeRecord(t, rec)
	if e.Capacity != nil {
		applyCapacity(t, rec, caps, gpus, e.ReferenceQPS)
	}
}

// searchRuns measures e.Runs capacity searches through o's endpoint, and
// returns them with one record holding every probe (run i's levels are its
// search's probes in order, then the reference load). An invalid probe
// ends its run's search, not the trial: the run is invalid by its record.
func (e *DeployEvaluator) searchRuns(ctx context.Context, o replay.Options, m *meter) (*schema.Record, []capacity.Result, error) {
	var pr probeRecord
	var results []capacity.Result
	// A good start (a prediction, an earlier run's capacity) steps by
	// 1+p: when it passes and the load p above it fails, two probes
	// bracket the capacity; a start off by more costs what a larger step
	// would (the step squares while the probes keep passing or failing).
	good := 1 + e.Capacity.Precision
	if e.Capacity.Precision <= 0 {
		good = 1 + capacity.DefaultPrecision
	}
	start, step := capacity.StartFrom(ctx), good
	if start <= 0 {
		start, step = e.Capacity.Start, e.Capacity.Step
	}
	var runErr error
	done := 0 // whole runs: the search and its reference probe
	for run := 0; run < max(e.Runs, 1); run++ {
		co := *e.Capacity
		co.SLO, co.Mode, co.Start, co.Step = e.SLO, capacity.Open, start, step
		if n := len(results); n > 0 && results[n-1].Bounded {
			co.Start, co.Step = results[n-1].Value, good
		}
		if e.Log != nil {
			co.Progress = func(p capacity.Probe) {
				fmt.Fprintf(e.Log, "optimize:   run %d: %.4g req/s %s (p99 TTFT %.1f, TPOT %.2f ms, %s)%s\n", run+1, p.Load,
					map[bool]string{true: "passes", false: "fails"}[p.Pass], p.P99TTFTMs, p.P99TPOTMs, p.Tail, noteOf(p.Note))
			}
		}
		newProber := e.prober
		if newProber == nil {
			newProber = func(o replay.Options, kept func(*schema.Record)) capacity.Prober {
				return capacity.ReplayProber(o, capacity.Open, kept)
			}
		}
		replayProbe := newProber(o, func(r *schema.Record) { pr.keep(run, r) })
		probes := 0
		probe := func(ctx context.Context, p capacity.Plan) (*schema.LevelRecord, error) {
			probes++
			m.setProbe(run+1, max(e.Runs, 1), probes)
			return replayProbe(ctx, p)
		}
		res, err := capacity.Search(ctx, probe, co)
		if res != nil {
			results = append(results, *res)
		}
		if err != nil && !errors.Is(err, capacity.ErrInvalid) {
			runErr = err
			break
		}
		// The reference load is measured where this run's capacity reaches
		// it: above capacity it would be an overload measurement (latency
		// set by the queue's growth over the window, a drain of minutes),
		// not a latency to compare.
		if e.ReferenceQPS > 0 && res != nil && res.Value >= e.ReferenceQPS {
			if _, err := probe(ctx, capacity.PlanFor(capacity.Open, e.ReferenceQPS, co, 0)); err != nil {
				runErr = err
				break
			}
		}
		done++
	}
	if done > 0 && errors.Is(runErr, context.DeadlineExceeded) {
		results = results[:done]
		runErr = keepWholeRuns(pr.rec, done, max(e.Runs, 1), runErr)
	}
	if pr.rec != nil {
		replay.Judge(pr.rec)
	}
	return pr.rec, results, runErr
}

// probeRecord gathers a trial's capacity probes into one record: run i's
// levels are its search's probes in order, then the reference load.
type probeRecord struct{ rec *schema.Record }

// keep adds probe record r (one run of one level) to run run.
func (pr *probeRecord) keep(run int, r *schema.Record) {
	if len(r.Runs) != 1 || len(r.Runs[0].Levels) != 1 {
		return
	}
	lvl, load := r.Runs[0].Levels[0], r.Runs[0].Levels[0].OfferedQPS
	if pr.rec == nil {
		pr.rec = r
		rec := pr.rec
		rec.Runs = nil
		rec.Workload.QPS = nil
		rec.Outcomes, rec.Validation.Valid, rec.Validation.Invalid, rec.Validation.Reasons = map[string]int{}, 0, 0, map[string]int{}
	}
	rec := pr.rec
	for len(rec.Runs) <= run {
		rec.Runs = append(rec.Runs, schema.RunRecord{Run: len(rec.Runs)})
	}
	rec.Runs[run].Levels = append(rec.Runs[run].Levels, lvl)
	if !slices.Contains(rec.Workload.QPS, load) {
		rec.Workload.QPS = append(rec.Workload.QPS, load)
	}
	rec.Workload.Requests = max(rec.Workload.Requests, r.Workload.Requests)
	for k, n := range r.Outcomes {
		rec.Outcomes[k] += n
	}
	rec.Validation.Valid += r.Validation.Valid
	rec.Validation.Invalid += r.Validation.Invalid
	for k, n := range r.Validation.Reasons {
		rec.Validation.Reasons[k] += n
	}
	if r.Incomplete {
		rec.Incomplete, rec.Error = true, r.Error
	}
	rec.FinishedAt = r.FinishedAt
}

// scanRuns is a levels trial's measurement: e.Runs scans of o's levels
// (replay.Run). When the time budget (the context's deadline) ends it
// during a run, the runs before it are kept (keepWholeRuns) and the error
// is a budgetCut; cut during the first, the trial has nothing to keep.
func (e *DeployEvaluator) scanRuns(ctx context.Context, o replay.Options) (*schema.Record, error) {
	run := e.replayer
	if run == nil {
		run = replay.Run
	}
	rec, err := run(ctx, o)
	if rec == nil || !errors.Is(err, context.DeadlineExceeded) {
		return rec, err
	}
	done := 0 // whole runs: every level measured to its end
	for _, r := range rec.Runs {
		whole := len(r.Levels) == len(rec.Workload.QPS)+len(rec.Workload.Concurrency)
		for _, l := range r.Levels {
			whole = whole && l.Complete
		}
		if !whole {
			break
		}
		done++
	}
	if done == 0 {
		return rec, err
	}
	err = keepWholeRuns(rec, done, max(e.Runs, 1), err)
	replay.Judge(rec)
	return rec, err
}

// keepWholeRuns trims rec to its first done runs, which the time budget
// ended after (err), and returns the budgetCut that says so: those runs
// are whole measurements and are kept; the cut one is not a measurement.
// rec stays incomplete only for a level of theirs that did not complete.
// The caller judges rec again.
func keepWholeRuns(rec *schema.Record, done, of int, err error) error {
	rec.Runs = rec.Runs[:min(done, len(rec.Runs))]
	rec.Incomplete, rec.Error = false, ""
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			if !l.Complete {
				rec.Incomplete, rec.Error = true, fmt.Sprintf("a level at %g req/s did not complete", l.OfferedQPS)
			}
		}
	}
	return &budgetCut{runs: done, of: of, err: err}
}

// budgetCut is a measurement the time budget (the context's deadline)
// ended after runs whole runs of of: those are kept.
type budgetCut struct {
	runs, of int
	err      error
}

func (c *budgetCut) Error() string {
	return fmt.Sprintf("the time budget ended during run %d of %d: the %d run(s) before it are kept (%v)", c.runs+1, c.of, c.runs, c.err)
}

func (c *budgetCut) Unwrap() error { return c.err }

func noteOf(n string) string {
	if n == "" {
		return ""
	}
	return ": " + n
}

// decidedValidly reports whether a run's capacity rests on valid
// measurements: its search ended (not on a probe the host distorted), and
// the loads that decide it — the highest passing and the lowest failing —
// are valid in the record, after diagnosis re-judged them (the client/proxy
// residual). A distorted probe the bracket moved past, or the reference
// load, decides nothing about the capacity (an invalid reference level is
// left out of latency comparisons by its own verdict).
func decidedValidly(run schema.RunRecord, c capacity.Result) bool {
	if len(c.Probes) == 0 || !c.Probes[len(c.Probes)-1].Valid {
		return false
	}
	valid := func(load float64) bool {
		ok := false
		for _, l := range run.Levels { // the last level at load: a retry supersedes
			if l.OfferedQPS == load {
				ok = l.Verdict.Valid
			}
		}
		return ok
	}
	return (c.Value == 0 || valid(c.Value)) && (c.Upper == 0 || valid(c.Upper))
}

// applyCapacity makes a trial's figures its capacity searches': a run
// counts when its capacity was decided validly (decidedValidly); failed
// requests count at the loads that passed and at the reference (a load
// beyond capacity may lose requests: that is what failing it means).
func applyCapacity(t *Trial, rec *schema.Record, caps []capacity.Result, gpus int, ref float64) {
	t.Capacity, t.ReferenceQPS = caps, ref
	t.Objectives, t.InvalidRuns, t.Failed, t.CostGPUSec = nil, 0, 0, nil
	for i, c := range caps {
		valid := i < len(rec.Runs) && decidedValidly(rec.Runs[i], c)
		if valid {
			t.Objectives = append(t.Objectives, c.Value)
		} else {
			t.InvalidRuns++
		}
		if i >= len(rec.Runs) {
			continue
		}
		for _, l := range rec.Runs[i].Levels {
			passed := l.OfferedQPS == ref
			for _, p := range c.Probes {
				passed = passed || p.Pass && p.Load == l.OfferedQPS
			}
			if passed {
				for _, n := range l.Failures {
					t.Failed += n
				}
			}
		}
	}
	t.InvalidRuns += max(len(rec.Runs)-len(caps), 0)
	t.Objective = 0
	if len(t.Objectives) > 0 {
		t.Objective = slo.Median(t.Objectives)
		if t.Objective > 0 {
			c := float64(gpus) / t.Objective
			t.CostGPUSec = &c
		}
	}
	// Per-load summaries are the reference load's: the probes' loads
	// differ from run to run and trial to trial.
	var ls []LevelSummary
	for _, l := range t.Levels {
		if ref > 0 && l.OfferedQPS == ref {
			ls = append(ls, l)
		}
	}
	t.Levels = ls
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// diagnoseTrial names a trial's bottleneck from its record's attributions
// (diagnose.SummarizeRecord with the knobs its config states, so that the
// proposals follow them; p99 TPOT from the valid levels) and fills the
// trial's diagnosis, whichever backend measured it.
func diagnoseTrial(t *Trial, rec *schema.Record, atts []diagnose.Attribution) diagnose.Diagnosis {
	d := diagnose.SummarizeRecord(rec, atts, diagnose.RecordKnobs(rec))
	setDiagnosis(t, d)
	return d
}

// setDiagnosis fills a trial's diagnosis.
func setDiagnosis(t *Trial, d diagnose.Diagnosis) {
	t.Bottleneck, t.Diagnosis, t.Proposals, t.Breakdown = d.Bottleneck, d.Summary, d.Proposals, d.Levels
}

// summarizeRecord fills a trial's figures from its record: per-run
// objectives and their median, cost at the objective's level, per-level
// medians, failures, invalid outputs and the measured hit rate.
func summarizeRecord(t *Trial, rec *schema.Record) {
	type acc struct {
		ttft, tpot, eff  []float64
		goodput          []float64
		p50ttft, p50tpot []float64
		valid            []bool
		invalid          []string
		passed           int
		measured         int
	}
	levels := map[float64]*acc{}
	var qs []float64
	var costs, hits []float64
	for _, run := range rec.Runs {
		// Only runs valid at every level decide: an invalid run's
		// objective may rest on a distorted measurement.
		if !run.Verdict.Valid {
			t.InvalidRuns++
		} else {
			t.Objectives = append(t.Objectives, run.Objective)
			if run.GPUSecondsPerRequest != nil {
				costs = append(costs, *run.GPUSecondsPerRequest)
			}
		}
		for _, l := range run.Levels {
			a := levels[l.OfferedQPS]
			if a == nil {
				a = &acc{}
				levels[l.OfferedQPS] = a
				qs = append(qs, l.OfferedQPS)
			}
			a.ttft = append(a.ttft, l.P99TTFTMs)
			a.p50ttft = append(a.p50ttft, l.P50TTFTMs)
			a.p50tpot = append(a.p50tpot, l.P50TPOTMs)
			a.tpot = append(a.tpot, l.P99TPOTMs)
			a.eff = append(a.eff, l.EffectiveQPS)
			if l.Goodput != nil {
				a.goodput = append(a.goodput, l.Goodput.Fraction)
			}
			a.valid = append(a.valid, l.Verdict.Valid)
			for _, r := range l.Verdict.Reasons {
				a.invalid = append(a.invalid, fmt.Sprintf("run %d: %s", run.Run+1, r))
			}
			a.measured = max(a.measured, l.Planned-rec.Warmups())
			if l.Passed {
				a.passed++
			}
			for k, n := range l.Failures {
				_ = k
				t.Failed += n
			}
			t.Invalid += l.Invalid
			t.Requests += l.Sent
			if l.HitRateMetricsMeasure != nil {
				hits = append(hits, *l.HitRateMetricsMeasure)
			} else if l.HitRateCachedTokens != nil {
				hits = append(hits, *l.HitRateCachedTokens)
			}
		}
	}
	sort.Float64s(qs)
	for _, q := range qs {
		a := levels[q]
		t.Levels = append(t.Levels, LevelSummary{OfferedQPS: q, P99TTFTMs: slo.Median(a.ttft), P99TPOTMs: slo.Median(a.tpot),
			EffectiveQPS: slo.Median(a.eff), PassedRuns: a.passed, Runs: len(a.ttft),
			P50TTFTMs: slo.Median(a.p50ttft), P50TPOTMs: slo.Median(a.p50tpot),
			RunP99TTFTMs: a.ttft, RunP99TPOTMs: a.tpot, RunEffectiveQPS: a.eff, RunValid: a.valid, Invalid: a.invalid, Measured: a.measured})
		if len(a.goodput) == len(a.ttft) { // every run counted it: runs stay aligned with RunValid
			t.Levels[len(t.Levels)-1].RunGoodput = a.goodput
		}
	}
	if len(t.Objectives) > 0 {
		t.Objective = slo.Median(t.Objectives)
	}
	if len(costs) > 0 {
		c := slo.Median(costs)
		t.CostGPUSec = &c
	}
	if len(hits) > 0 {
		h := slo.Median(hits)
		t.HitRate = &h
	}
	if rec.Incomplete && t.Error == "" {
		t.Error = "replay incomplete: " + rec.Error
	}
	t.InvalidLevels = rec.InvalidLevels()
}
