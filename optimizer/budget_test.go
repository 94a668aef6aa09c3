package optimizer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// fakeClock is a clock that moves only when a trial says it took time.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

// clockedEvaluator is simEvaluator on a fake clock: every trial takes
// per × its time scale (1 when it has none), and it keeps the time scale
// and the deadline every trial was given.
type clockedEvaluator struct {
	simEvaluator
	clock     *fakeClock
	per       time.Duration
	scales    []float64
	deadlines []time.Time
}

func (e *clockedEvaluator) Evaluate(ctx context.Context, s *deploy.Spec, tag string) Trial {
	k := s.Emulator.TimeScale
	e.scales = append(e.scales, k)
	dl, _ := ctx.Deadline()
	e.deadlines = append(e.deadlines, dl)
	if k <= 0 {
		k = 1
	}
	e.clock.t = e.clock.t.Add(time.Duration(k * float64(e.per)))
	return e.simEvaluator.Evaluate(ctx, s, tag)
}

// TestFloorScalerReturnsToSpecScale is the check of issue 43, item 4: an
// optimize begun under a CPU hog and continued after the hog stops runs
// its first trials at the scale the loaded floor needs and returns to the
// spec's scale at the first trial that begins after the hog ended. The
// floor is a script on a fake clock: 100 ms real p99 while the hog runs
// (its first 150 s), 4 ms after; every trial takes 100 s × its scale.
func TestFloorScalerReturnsToSpecScale(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	hogEnds := clock.t.Add(150 * time.Second)
	var probes []time.Time
	probe := func(_ context.Context, s *deploy.Spec) (float64, error) {
		probes = append(probes, clock.t)
		if s.Emulator.TimeScale != 0.25 {
			t.Errorf("the probe got time scale %g, want the spec's 0.25", s.Emulator.TimeScale)
		}
		if clock.t.Before(hogEnds) {
			return 100, nil // 100 ms / 2 = 50 model ms = 2.5% of the 2000 ms SLO: scale 2
		}
		return 4, nil // 4 / 0.25 = 16 model ms: the spec's 0.25 suffices
	}
	inner := &clockedEvaluator{clock: clock, per: 100 * time.Second}
	var log bytes.Buffer
	ev := &FloorScaler{Inner: inner, Probe: probe, TTFTSLOMs: slo.Default.TTFTMillis, Log: &log}
	base := baseSpec()
	base.Emulator.TimeScale = 0.25
	lg, err := Live(context.Background(), LiveOptions{Base: base, Evaluator: ev, Budget: 6, Runs: 3, SLO: slo.Default,
		LogPath: filepath.Join(t.TempDir(), "log.json"), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	// Trial 1 begins at 0 s (hog): 2, 200 s; trial 2 at 200 s: the hog
	// has stopped, 0.25 from then on.
	want := []float64{2, 0.25, 0.25, 0.25, 0.25, 0.25}[:len(lg.Trials)]
	var got []float64
	for _, tr := range lg.Trials {
		got = append(got, tr.TimeScale)
		if tr.Spec.Emulator.TimeScale != 0.25 {
			t.Errorf("trial %d's spec is at time scale %g: the loop's specs keep the spec's", tr.N, tr.Spec.Emulator.TimeScale)
		}
		if tr.Floor == nil || tr.Floor.TimeScale != tr.TimeScale || tr.Floor.SpecTimeScale != 0.25 {
			t.Errorf("trial %d's floor reading %+v", tr.N, tr.Floor)
		}
	}
	if len(lg.Trials) < 4 || fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(inner.scales) != fmt.Sprint(want) {
		t.Errorf("trials at time scales %v (measured at %v), want %v", got, inner.scales, want)
	}
	// Under the hog the first probe asks for more than the spec's scale,
	// and a second confirms it; after, one probe.
	if len(probes) != len(lg.Trials)+1 || lg.Trials[0].Floor.Probes != 2 || lg.Trials[1].Floor.Probes != 0 {
		t.Errorf("%d floor probes for %d trials (trial 1: %d): want two before the first, one before each other", len(probes), len(lg.Trials), lg.Trials[0].Floor.Probes)
	}
	if f := lg.Trials[0].Floor; f.P99RealMs != 100 || f.FloorModelMs != 50 {
		t.Errorf("trial 1's floor %+v, want p99 100 ms real, 50 model ms", f)
	}
	if !strings.Contains(log.String(), "host floor now p99 4.00 ms real: trial at time scale 0.25 (spec 0.25)") {
		t.Errorf("log:\n%s", log.String())
	}
}

// A failed probe keeps the scale the last good one chose.
func TestFloorScalerProbeFails(t *testing.T) {
	clock := &fakeClock{}
	inner := &clockedEvaluator{clock: clock, per: time.Second}
	readings := []error{nil, nil, fmt.Errorf("deploy: planted")} // the first trial probes twice (100 ms asks for more)
	ev := &FloorScaler{Inner: inner, TTFTSLOMs: 2000, Probe: func(context.Context, *deploy.Spec) (float64, error) {
		err := readings[0]
		readings = readings[1:]
		return 100, err
	}}
	s := baseSpec()
	s.Emulator.TimeScale = 0.25
	a := ev.Evaluate(context.Background(), s, "1")
	b := ev.Evaluate(context.Background(), s, "2")
	if a.TimeScale != 2 || b.TimeScale != 2 || b.Floor.Error != "deploy: planted" {
		t.Errorf("scales %g, %g (floor %+v), want 2 and 2 with the probe's error", a.TimeScale, b.TimeScale, b.Floor)
	}
}

// --max-time-scale caps the scale a busy floor chooses: a probe that asks
// for 2 (100 ms real against a 2000 ms SLO) runs the trial at the cap, 1,
// and the log line and the trial's floor reading say that the cap bound
// and that the floor is then over the rule's bound (100 model ms against
// 2.5% of 2000). A floor within the cap is not marked.
func TestFloorScalerCappedByMaxScale(t *testing.T) {
	p99 := 100.0
	var scales []float64
	inner := evaluatorFunc(func(_ context.Context, s *deploy.Spec, _ string) Trial {
		scales = append(scales, s.Emulator.TimeScale)
		return Trial{}
	})
	var log bytes.Buffer
	ev := &FloorScaler{Inner: inner, TTFTSLOMs: 2000, MaxScale: 1, Log: &log,
		Probe: func(context.Context, *deploy.Spec) (float64, error) { return p99, nil }}
	s := baseSpec()
	s.Emulator.TimeScale = 0.25
	tr := ev.Evaluate(context.Background(), s, "1")
	f := tr.Floor
	if fmt.Sprint(scales) != "[1]" || tr.TimeScale != 1 || f.TimeScale != 1 || f.CappedFrom != 2 || f.FloorModelMs != 100 {
		t.Fatalf("measured at %v, trial at %g, floor %+v: want 1, capped from 2, 100 model ms", scales, tr.TimeScale, f)
	}
	want := "the floor asks for time scale 2, above --max-time-scale 1: the trial runs at 1, where the p99 floor of 100.0 model ms is over the rule's 50.0 ms " +
		"(2.5% of the TTFT SLO); its levels get their verdicts as usual"
	if f.Note != want || !strings.Contains(log.String(), "trial at time scale 1 (spec 0.25), floor 100.0 model ms: "+want) {
		t.Errorf("note %q\nlog:\n%s\nwant %q", f.Note, log.String(), want)
	}
	p99, scales = 20, nil // 20 ms / 0.5 = 40 model ms: 0.5, within the cap
	tr = ev.Evaluate(context.Background(), s, "2")
	if fmt.Sprint(scales) != "[0.5]" || tr.Floor.CappedFrom != 0 || tr.Floor.Note != "" {
		t.Errorf("measured at %v, floor %+v: want 0.5, not capped", scales, tr.Floor)
	}
	// The floor measured before the first trial is capped alike.
	hf := &HostFloor{P99RealMs: 100, SpecTimeScale: 0.25, sloMs: 2000, ChosenTimeScale: ChooseTimeScale(100, 0.25, 2000)}
	hf.CapScale(1)
	if hf.ChosenTimeScale != 1 || hf.FloorModelMs != 100 ||
		!strings.HasSuffix(hf.Note, "; the floor asks for time scale 2, above --max-time-scale 1: trials run at 1 at most") {
		t.Errorf("host floor %+v: want 1, capped from 2", hf)
	}
	// A spec above the cap keeps its own scale: the cap never lowers it.
	p99, scales = 100, nil
	s.Emulator.TimeScale = 2
	ev.MaxScale = 1
	tr = ev.Evaluate(context.Background(), s, "3")
	if fmt.Sprint(scales) != "[2]" || tr.Floor.CappedFrom != 0 {
		t.Errorf("measured at %v, floor %+v: want the spec's 2", scales, tr.Floor)
	}
}

// One stall in a probe does not lengthen a trial: a first probe that asks
// for more than the spec's scale is taken again, and the lower decides.
func TestFloorScalerSecondProbe(t *testing.T) {
	readings := []float64{73.7, 9.2} // a busy moment, then the host's usual
	var scales []float64
	inner := evaluatorFunc(func(_ context.Context, s *deploy.Spec, _ string) Trial {
		scales = append(scales, s.Emulator.TimeScale)
		return Trial{}
	})
	ev := &FloorScaler{Inner: inner, TTFTSLOMs: 2000, Probe: func(context.Context, *deploy.Spec) (float64, error) {
		p := readings[0]
		readings = readings[1:]
		return p, nil
	}}
	s := baseSpec()
	s.Emulator.TimeScale = 0.25
	tr := ev.Evaluate(context.Background(), s, "1")
	if fmt.Sprint(scales) != "[0.25]" || tr.Floor.P99RealMs != 9.2 || tr.Floor.Probes != 2 || len(readings) != 0 {
		t.Errorf("measured at %v, floor %+v: want 0.25 from the lower of two probes", scales, tr.Floor)
	}
}

// TestTimeBudget: with a time budget the loop plans its trials to fit:
// here 450 s where a trial takes 100 s leaves room for 4 of the --budget's
// 8: the baseline, one proposal, the interaction's missing cell (before
// the ablations, which it lists as not measured) and the re-run; it
// states what it could not measure, and ends every trial's context
// TeardownMargin before the deadline (the cut trial's record and teardown
// fit in it).
func TestTimeBudget(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	deadline := clock.t.Add(450 * time.Second)
	ev := &clockedEvaluator{clock: clock, per: 100 * time.Second}
	var progress bytes.Buffer
	lg, err := Live(context.Background(), LiveOptions{Base: baseSpec(), Evaluator: ev, Budget: 8, Runs: 3, SLO: slo.Default,
		LogPath: filepath.Join(t.TempDir(), "log.json"), Progress: &progress,
		Deadline: deadline, TimeBudget: 450 * time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, tr := range lg.Trials {
		roles = append(roles, tr.Role)
	}
	if fmt.Sprint(roles) != "[baseline proposal interaction verify]" || !lg.Verified || lg.Selected != 2 {
		t.Errorf("roles %v, selected %d verified %v; want baseline, proposal, interaction, verify, trial 2 verified\n%s", roles, lg.Selected, lg.Verified, progress.String())
	}
	if clock.t.After(deadline) {
		t.Errorf("the loop ended at %s, after its deadline %s", clock.t, deadline)
	}
	for i, dl := range ev.deadlines {
		if !dl.Equal(deadline.Add(-TeardownMargin)) {
			t.Errorf("trial %d's context ends at %v, want %s before the deadline %v", i+1, dl, TeardownMargin, deadline)
		}
	}
	text := strings.Join(lg.NotMeasured, "\n")
	for _, w := range []string{
		"4 exploration trial(s) the --budget allowed (the time budget leaves 3m50s; a trial takes about 1m40s)",
		"ablation disagg-1p1d-nocache-sessionaffinity: ablation: prefix caching off (the time budget leaves 3m50s; a trial takes about 1m40s)",
		"ablation disagg-1p1d-cache-sessionaffinity-eager",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("not measured:\n%s\nwant a line with %q", text, w)
		}
	}
	if lg.TimeBudgetSeconds != 450 || !strings.Contains(progress.String(), "optimize: not measured: ") {
		t.Errorf("time budget %g s in the log; progress:\n%s", lg.TimeBudgetSeconds, progress.String())
	}
}

// With a time budget that leaves no room for the re-run, the selection is
// not verified, and the log says the re-run was not measured.
func TestTimeBudgetNoReRun(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ev := &clockedEvaluator{clock: clock, per: 100 * time.Second}
	lg, err := Live(context.Background(), LiveOptions{Base: baseSpec(), Evaluator: ev, Budget: 8, Runs: 3, SLO: slo.Default,
		Deadline: clock.t.Add(150 * time.Second), TimeBudget: 150 * time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if len(lg.Trials) != 1 || lg.Verified || lg.Selected != 0 {
		t.Errorf("%d trials, selected %d, verified %v: want the baseline alone, unverified", len(lg.Trials), lg.Selected, lg.Verified)
	}
	if n := len(lg.NotMeasured); n == 0 || !strings.Contains(lg.NotMeasured[n-1], "the re-run of trial 1 (coloc-r2-tp1-cache-sessionaffinity)") {
		t.Errorf("not measured: %q", lg.NotMeasured)
	}
	if d := strings.Join(lg.Decision, "\n"); !strings.Contains(d, "trial 1 is not verified: the time budget left no room for its re-run") {
		t.Errorf("decisions:\n%s", d)
	}
}

// The Rescaler measures again only when the time budget leaves room for a
// measurement at the next step (its scale's share of the first's time).
func TestRescalerNoTime(t *testing.T) {
	clock := &fakeClock{t: time.Now()} // the context's deadline is real
	ev := &hostBoundEvaluator{t: t, dir: t.TempDir(), need: 0.9, code: schema.ReasonEmulatorBound, seconds: 60}
	r := &Rescaler{Inner: ev, MaxScale: 4, Now: clock.Now}
	ctx, cancel := context.WithDeadline(context.Background(), clock.t.Add(100*time.Second))
	defer cancel()
	tr := r.Evaluate(ctx, rescaleSpec(t, 0.5), "01")
	if fmt.Sprint(ev.scales) != "[0.5]" || tr.Rescaled == nil || tr.Rescaled.Measured ||
		tr.Rescaled.NoTime != "the time budget leaves 1m40s, about 2m0s needed" {
		t.Fatalf("measured at %v, rescaled %+v", ev.scales, tr.Rescaled)
	}
	if s := tr.Rescaled.String(); !strings.Contains(s, "not measured again at 1: the time budget leaves 1m40s") {
		t.Errorf("reason %q", s)
	}
}

// A config's next trial starts as many ladder steps above where it begins
// as its last needed, not at that scale: a trial that begins lower (the
// host went quiet) starts lower too.
func TestRescalerStepsFollowTheFloor(t *testing.T) {
	ev := &hostBoundEvaluator{t: t, dir: t.TempDir(), need: 0.9, code: schema.ReasonEmulatorBound}
	r := &Rescaler{Inner: ev, MaxScale: 4}
	r.Evaluate(context.Background(), rescaleSpec(t, 0.5), "01") // 0.5, then 1: one step
	ev.scales = nil
	ev.need = 0.5
	tr := r.Evaluate(context.Background(), rescaleSpec(t, 0.25), "02")
	if fmt.Sprint(ev.scales) != "[0.5]" || tr.Rescaled == nil || !tr.Rescaled.Measured || tr.Rescaled.ToScale != 0.5 {
		t.Errorf("measured at %v, rescaled %+v; want 0.5, one step above 0.25", ev.scales, tr.Rescaled)
	}
}

// syncBuffer is a bytes.Buffer for one writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The meter's line says the phase, the run and probe or level, the
// requests done and the time against the time expected.
func TestMeterLine(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := &meter{what: "trial 03-coloc", now: clock.Now, start: clock.t, expected: 5 * time.Minute, phase: "deploying"}
	clock.t = clock.t.Add(4 * time.Second)
	for _, c := range []struct {
		do   func()
		want string
	}{
		{func() {}, "optimize:   trial 03-coloc: deploying; 4s elapsed of ~5m0s expected"},
		{func() { m.setProbe(2, 3, 4) }, "optimize:   trial 03-coloc: run 2/3, probe 4: replaying; 4s elapsed of ~5m0s expected"},
		{func() {
			m.update(replay.Progress{Runs: 1, Levels: 1, QPS: 12.5, Done: 120, Planned: 208, Failed: 1, ETA: 6 * time.Second})
			clock.t = clock.t.Add(91 * time.Second)
		}, "optimize:   trial 03-coloc: run 2/3, probe 4 at 12.5 req/s: 120/208 requests done, 1 failed, level ETA 6s; 1m35s elapsed of ~5m0s expected"},
		{func() {
			m.probe, m.expected = 0, 0
			m.update(replay.Progress{Run: 1, Runs: 3, Level: 2, Levels: 6, QPS: 16, Done: 10, Planned: 120})
		}, "optimize:   trial 03-coloc: run 2/3, level 3/6 at 16 req/s: 10/120 requests done; 1m35s elapsed (no estimate before a trial has finished)"},
	} {
		c.do()
		if got := m.line(); got != c.want {
			t.Errorf("line\n %q, want\n %q", got, c.want)
		}
	}
}

// A started meter writes a line every interval and nothing after Stop.
func TestMeterTicks(t *testing.T) {
	var out syncBuffer
	m := startMeter(&out, 5*time.Millisecond, "trial 01", time.Minute, nil)
	m.setPhase("deploying")
	deadline := time.Now().Add(30 * time.Second) // loose: a busy host may not run the ticker for a while
	for strings.Count(out.String(), "\n") < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	m.Stop()
	got := out.String()
	if strings.Count(got, "\n") < 2 || !strings.HasPrefix(got, "optimize:   trial 01: deploying; ") {
		t.Fatalf("lines:\n%s", got)
	}
	time.Sleep(20 * time.Millisecond)
	if out.String() != got {
		t.Errorf("the meter wrote after Stop")
	}
	var nilMeter *meter
	nilMeter.setPhase("x") // no progress output: every method is a no-op
	nilMeter.Stop()
}

// queueProber is a capacity probe of a FIFO server (serviceMs per request,
// one at a time), written as the replay would write it; from probe block
// on, it waits for its context to end and returns why, as a replay that
// the deadline interrupted.
type queueProber struct {
	serviceMs float64
	block     int // 1-based; 0: never
	calls     int
}

func (q *queueProber) new(_ replay.Options, kept func(*schema.Record)) capacity.Prober {
	return func(ctx context.Context, p capacity.Plan) (*schema.LevelRecord, error) {
		q.calls++
		if q.block > 0 && q.calls >= q.block {
			<-ctx.Done()
			return nil, fmt.Errorf("interrupted during run 0: %w", context.Cause(ctx))
		}
		lr := schema.LevelRecord{Level: slo.Level{OfferedQPS: p.Load}, Complete: true, Verdict: schema.Verdict{Valid: true}, Planned: p.Requests}
		free := 0.0
		for id := 0; id < p.Requests; id++ {
			at := float64(id) * 2000
			if id >= replay.Sessions {
				at = replay.MeasureStartMillis + float64(id-replay.Sessions)/p.Load*1000
			}
			first := math.Max(at, free) + q.serviceMs
			free = first
			finish, ttft, tpot := first+70, first-at, 10.0
			lr.Requests = append(lr.Requests, schema.RequestRecord{ID: id, ScheduledMs: at, Outcome: schema.OutcomeOK, Valid: true,
				FirstMs: &first, FinishMs: &finish, TTFTMs: &ttft, TPOTMs: &tpot, OutputTokens: 8})
		}
		kept(&schema.Record{Kind: schema.KindEmulated, Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{lr}}}})
		return &lr, nil
	}
}

// A capacity trial that the time budget ends during its third run keeps
// its two whole runs, and says so: its figures are theirs, not a failure.
func TestBudgetCutKeepsWholeRuns(t *testing.T) {
	co := capacity.Options{Mode: capacity.Open, SLO: slo.SLO{TTFTMillis: 500, TPOTMillis: 50}, Precision: 0.1, Start: 4}
	whole := &queueProber{serviceMs: 50}
	e := &DeployEvaluator{Runs: 3, SLO: co.SLO, Capacity: &co, prober: whole.new}
	_, caps, err := e.searchRuns(context.Background(), replay.Options{}, nil)
	if err != nil || len(caps) != 3 {
		t.Fatalf("uninterrupted: %d runs, %v", len(caps), err)
	}
	cut := &queueProber{serviceMs: 50, block: len(caps[0].Probes) + len(caps[1].Probes) + 1} // run 3's first probe
	e.prober = cut.new
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	rec, got, err := e.searchRuns(ctx, replay.Options{}, nil)
	var bc *budgetCut
	if !errors.As(err, &bc) || bc.runs != 2 || len(got) != 2 || len(rec.Runs) != 2 || rec.Incomplete {
		t.Fatalf("cut: err %v, %d results, %d record runs (incomplete %v); want a cut after 2 whole runs", err, len(got), len(rec.Runs), rec.Incomplete)
	}
	tr := Trial{Cut: bc.Error()}
	summarizeRecord(&tr, rec)
	applyCapacity(&tr, rec, got, 1, 0)
	judge(&tr, co.SLO)
	if !tr.Eligible || len(tr.Objectives) != 2 || tr.Objective != caps[0].Value ||
		!strings.Contains(tr.Reason, "the time budget ended during run 3 of 3: the 2 run(s) before it are kept") {
		t.Errorf("trial: eligible %v, objectives %v (uninterrupted %g), reason %q", tr.Eligible, tr.Objectives, caps[0].Value, tr.Reason)
	}
}

// A levels trial (--measure levels) that the time budget ends during its
// third run keeps its two whole runs, as a capacity trial does: its
// figures are theirs (exact: the prediction's), not a failure, and the
// loop lists the cut among what it could not measure.
func TestBudgetCutKeepsWholeRunsLevels(t *testing.T) {
	prof, err := emulator.LookupProfile("qwen2.5-coder-0.5b-l4")
	if err != nil {
		t.Fatal(err)
	}
	spec := rescaleSpec(t, 1)
	one, err := predict.Run(spec, predict.Options{Profile: prof, Workload: rescaleWorkload, QPS: rescaleQPS, SLO: rescaleSLO, KeepRequests: true})
	if err != nil {
		t.Fatal(err)
	}
	// As replay.Run leaves it at the deadline: run 3's first level whole,
	// its second cut, the record incomplete.
	replayer := func(_ context.Context, o replay.Options) (*schema.Record, error) {
		rec := *one
		rec.Runs = nil
		for i := range 3 {
			r := one.Runs[0]
			r.Run, r.Levels = i, slices.Clone(r.Levels)
			if i == 2 {
				r.Levels[1].Complete = false
			}
			rec.Runs = append(rec.Runs, r)
		}
		err := fmt.Errorf("interrupted during run 2: %w", context.DeadlineExceeded)
		rec.Incomplete, rec.Error = true, err.Error()
		replay.Judge(&rec)
		return &rec, err
	}
	e := &DeployEvaluator{Runs: 3, SLO: rescaleSLO, replayer: replayer}
	rec, err := e.scanRuns(context.Background(), replay.Options{})
	var bc *budgetCut
	if !errors.As(err, &bc) || bc.runs != 2 || len(rec.Runs) != 2 || rec.Incomplete || !rec.Verdict.Valid {
		t.Fatalf("cut: err %v, %d record runs (incomplete %v, verdict %v); want a cut after 2 whole runs", err, len(rec.Runs), rec.Incomplete, rec.Verdict)
	}
	tr := Trial{Cut: bc.Error()}
	summarizeRecord(&tr, rec)
	judge(&tr, rescaleSLO)
	want := one.Runs[0].Objective
	if tr.Error != "" || !tr.Eligible || fmt.Sprint(tr.Objectives) != fmt.Sprint([]float64{want, want}) || tr.Requests != 2*2*16 ||
		!strings.Contains(tr.Reason, "the time budget ended during run 3 of 3: the 2 run(s) before it are kept") {
		t.Errorf("trial: error %q, eligible %v, objectives %v (want two of %g), %d requests, reason %q", tr.Error, tr.Eligible, tr.Objectives, want, tr.Requests, tr.Reason)
	}
	// Cut during its second run, the one run kept is measured but decides
	// nothing: fewer than MinValidRuns of the 3 planned.
	e.replayer = func(ctx context.Context, o replay.Options) (*schema.Record, error) {
		rec, err := replayer(ctx, o)
		rec.Runs = rec.Runs[:2]
		rec.Runs[1].Levels[1].Complete = false
		return rec, err
	}
	rec, err = e.scanRuns(context.Background(), replay.Options{})
	if !errors.As(err, &bc) || bc.runs != 1 || len(rec.Runs) != 1 {
		t.Fatalf("cut in run 2: err %v, %d record runs", err, len(rec.Runs))
	}
	tr = Trial{Cut: bc.Error()}
	summarizeRecord(&tr, rec)
	judge(&tr, rescaleSLO)
	if tr.Eligible || len(tr.Objectives) != 1 || !strings.HasPrefix(tr.Reason, "1 valid run(s) before the time budget's cut: fewer than 2 decide nothing; the time budget ended during run 2 of 3") {
		t.Errorf("one run kept: eligible %v, objectives %v, reason %q", tr.Eligible, tr.Objectives, tr.Reason)
	}
	// Cut during its first run, a trial has nothing to keep: it fails.
	e.replayer = func(ctx context.Context, o replay.Options) (*schema.Record, error) {
		rec, err := replayer(ctx, o)
		rec.Runs[0].Levels[1].Complete = false
		return rec, err
	}
	if _, err := e.scanRuns(context.Background(), replay.Options{}); errors.As(err, &bc) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cut in run 1: %v, want the deadline's error", err)
	}
	// The loop lists a cut trial among what it could not measure.
	sim := &simEvaluator{}
	cutFirst := evaluatorFunc(func(ctx context.Context, s *deploy.Spec, tag string) Trial {
		t := sim.Evaluate(ctx, s, tag)
		if len(sim.calls) == 1 {
			t.Cut = bc.Error()
		}
		return t
	})
	lg, err := Live(context.Background(), LiveOptions{Base: baseSpec(), Evaluator: cutFirst, Budget: 4, Runs: 3, SLO: slo.Default,
		LogPath: filepath.Join(t.TempDir(), "log.json")})
	if err != nil {
		t.Fatal(err)
	}
	if w := "trial 1 (" + lg.Trials[0].Key + "): the time budget ended during run 2 of 3"; len(lg.NotMeasured) != 1 || !strings.HasPrefix(lg.NotMeasured[0], w) {
		t.Errorf("not measured %q, want one line starting %q", lg.NotMeasured, w)
	}
}

// A search that starts at the capacity (an exact prediction, an earlier
// run's) brackets it in two probes: the start passes, the load p above it
// fails. Each of three runs takes exactly two.
func TestGoodStartBracketsInTwoProbes(t *testing.T) {
	co := capacity.Options{Mode: capacity.Open, SLO: slo.SLO{TTFTMillis: 500, TPOTMillis: 50}, Precision: 0.1, Start: 4}
	q := &queueProber{serviceMs: 50}
	e := &DeployEvaluator{Runs: 1, SLO: co.SLO, Capacity: &co, prober: q.new}
	_, first, err := e.searchRuns(context.Background(), replay.Options{}, nil)
	if err != nil || len(first) != 1 || !first[0].Bounded {
		t.Fatalf("uninformed search: %v, %v", first, err)
	}
	c := first[0].Value
	e.Runs = 3
	_, got, err := e.searchRuns(capacity.WithStart(context.Background(), c), replay.Options{}, nil)
	if err != nil || len(got) != 3 {
		t.Fatalf("%d runs, %v", len(got), err)
	}
	for i, r := range got {
		if len(r.Probes) != 2 || r.Value != c || r.Upper != c*1.1 || !r.Bounded {
			t.Errorf("run %d: %d probes, capacity %g (upper %g, bounded %v); want 2 probes, %g, upper %g", i+1, len(r.Probes), r.Value, r.Upper, r.Bounded, c, c*1.1)
		}
	}
}
