package optimizer

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// TestDeployEvaluator measures one emulated config for real: deploy up,
// replay through the proxy, attribution, the record, deploy down. The
// trial is what the record says, the kind is what the endpoint proved,
// every level started cold through the proxy's reset fan-out, and the
// proxy's outcome for every request agrees with the client's.
func TestDeployEvaluator(t *testing.T) {
	hone := honetest.Binary(t)
	base := honetest.FreePorts(t, 2)
	s, err := deploy.ParseSpec(fmt.Appendf(nil, `
name: eval
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct}
gpus: {budget: 1}
topology: {kind: colocated, replicas: 1, tp: 1}
routing: {policy: session_affinity}
network: {proxy_port: %d, worker_port: %d}
emulator: {profile: exercise, time_scale: 0.25}
`, base, base+1))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var progress syncBuffer
	ev := &DeployEvaluator{Up: deploy.UpOptions{Hone: hone, StateDir: filepath.Join(out, "state")},
		// The exercise profile prefills 4096 tokens/s: 512 uncached tokens
		// are 125 model ms, so the host's few ms of overhead stay small
		// beside the engine and the levels are valid.
		Workload: schema.Workload{Seed: 3, Requests: 16, InputTokens: 1024, UncachedTokens: 512, OutputTokens: 8},
		QPS:      []float64{2, 4}, Runs: 1, SLO: slo.Default, OutDir: out, Hone: schema.Build{Version: "test", Commit: "t"},
		// Progress lines every 200 ms (10 s in hone optimize): the trial
		// takes seconds.
		Log: &progress, ProgressEvery: 200 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr := ev.Evaluate(withExpected(ctx, time.Minute), s, "01-eval") // a minute per unit of scale: 15 s at 0.25
	if tr.Error != "" {
		t.Fatalf("trial error: %s", tr.Error)
	}
	if lines := progress.String(); !strings.Contains(lines, "optimize:   trial 01-eval: ") || !strings.Contains(lines, " elapsed of ~15s expected") {
		t.Errorf("progress lines:\n%s", lines)
	}
	if tr.TimeScale != 0.25 {
		t.Errorf("trial time scale %g, want the spec's 0.25", tr.TimeScale)
	}
	rec, err := replay.ReadRecord(tr.Record)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Kind != schema.KindEmulated || rec.Kind != schema.KindEmulated || rec.TimeScale != 0.25 || rec.Cache.Procedure != schema.CacheReset {
		t.Errorf("trial kind %q, record kind %q, scale %g, cache %q; want emulated, 0.25 adopted, reset through the proxy",
			tr.Kind, rec.Kind, rec.TimeScale, rec.Cache.Procedure)
	}
	if tr.Requests != 32 || len(tr.Levels) != 2 {
		t.Errorf("trial: %d requests, %d levels", tr.Requests, len(tr.Levels))
	}
	// Whether the run is valid is the host's to decide (a stalled client
	// on a loaded machine is client-bound, correctly): only a client-bound
	// run may be left out, and a valid run is the trial's objective.
	switch {
	case rec.Runs[0].Verdict.Valid && (len(tr.Objectives) != 1 || tr.Objective != rec.Runs[0].Objective):
		t.Errorf("a valid run: objectives %v, record %g", tr.Objectives, rec.Runs[0].Objective)
	case !rec.Runs[0].Verdict.Valid && (len(tr.Objectives) != 0 || !onlyClientBound(rec.Runs[0].Verdict)):
		t.Errorf("an invalid run (%v) counted, or invalid for more than the host: objectives %v", rec.Runs[0].Verdict, tr.Objectives)
	case !rec.Runs[0].Verdict.Valid:
		t.Logf("the host made the run client-bound: %v", tr.InvalidLevels)
	}
	for _, l := range rec.Runs[0].Levels {
		if l.WarmupHitRate == nil || *l.WarmupHitRate > 0.05 {
			t.Errorf("%g req/s: warm-up hit rate %v, want ~0 (every level cold)", l.OfferedQPS, l.WarmupHitRate)
		}
	}
	// The proxy's timeline file (kept in the state directory) against the
	// client's outcomes: every request the client finished ok is a success
	// in the proxy too, though the client closes right after [DONE].
	f, err := os.Open(filepath.Join(out, "state", "hone-01-eval", "timelines.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	proxyOutcome := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var tl proxy.Timeline
		if err := json.Unmarshal(sc.Bytes(), &tl); err != nil {
			t.Fatal(err)
		}
		proxyOutcome[tl.RequestID] = tl.Outcome
	}
	for _, l := range rec.Runs[0].Levels {
		for _, q := range l.Requests {
			if q.Outcome == schema.OutcomeOK && proxyOutcome[q.RequestID] != proxy.OutcomeSuccess {
				t.Errorf("%s: client ok, proxy %q", q.RequestID, proxyOutcome[q.RequestID])
			}
		}
	}
	if len(proxyOutcome) != 32 {
		t.Errorf("proxy timelines for %d requests, want 32", len(proxyOutcome))
	}
}

// TestProbeFloor: the floor's re-measurement between trials deploys the
// zero-cost engine and replays FloorProbeRequests at the highest level,
// and returns its p99 in real ms. It is cheap: seconds (bounded loosely
// here, for a busy host; the 2-core host took 5 to 7 s).
func TestProbeFloor(t *testing.T) {
	hone := honetest.Binary(t)
	base := honetest.FreePorts(t, 2)
	s, err := deploy.ParseSpec(fmt.Appendf(nil, `
name: floor
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct}
gpus: {budget: 1}
topology: {kind: colocated, replicas: 1, tp: 1}
network: {proxy_port: %d, worker_port: %d}
emulator: {profile: exercise, time_scale: 0.25}
`, base, base+1))
	if err != nil {
		t.Fatal(err)
	}
	ev := &DeployEvaluator{Up: deploy.UpOptions{Hone: hone, StateDir: t.TempDir()},
		Workload: schema.Workload{Seed: 3, Requests: 500, InputTokens: 1024, UncachedTokens: 128, OutputTokens: 8},
		QPS:      []float64{2, 32}, Runs: 3, SLO: slo.Default}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	p99, err := ev.ProbeFloor(ctx, s)
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("floor probe: p99 %.2f ms real in %s", p99, took)
	if !(p99 > 0) {
		t.Errorf("p99 %g ms, want > 0", p99)
	}
	if took > time.Minute {
		t.Errorf("the probe took %s: it must stay seconds", took)
	}
	if s.Emulator.Profile != "exercise" || s.Emulator.TimeScale != 0.25 {
		t.Errorf("the probe changed the caller's spec: %+v", s.Emulator)
	}
}

// onlyClientBound reports whether every reason of a run's verdict, one per
// invalid level (both levels may be client-bound), is the host's
// (replay.HostReason).
func onlyClientBound(v schema.Verdict) bool {
	for _, r := range v.Reasons {
		if !schema.HostReason(r.Code) {
			return false
		}
	}
	return true
}

var floorHog = flag.Bool("floor-hog", false, "run TestFloorScalerUnderARealHog: CPU hogs on this host for about a minute (not under make test-loaded: its quiet half needs a quiet host)")

// TestFloorScalerUnderARealHog is TestFloorScalerReturnsToSpecScale on
// the host itself (-floor-hog): trials begun while six busy loops hog the
// CPUs run above the spec's time scale 1; after the hogs stop, the next
// trial runs at 1 again. Only the trials are stand-ins (they record their
// scale); the floor probes are real. On the 2-core host the hogged probes
// read 185–401 ms real (scale 4), the quiet ones 5–12 ms (the spec's
// scale needs under 50 ms).
func TestFloorScalerUnderARealHog(t *testing.T) {
	if !*floorHog {
		t.Skip("run with -floor-hog: it hogs the host's CPUs")
	}
	hone := honetest.Binary(t)
	ports := honetest.FreePorts(t, 2)
	s, err := deploy.ParseSpec(fmt.Appendf(nil, `
name: hog
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct}
gpus: {budget: 1}
topology: {kind: colocated, replicas: 1, tp: 1}
network: {proxy_port: %d, worker_port: %d}
emulator: {profile: exercise, time_scale: 1}
`, ports, ports+1))
	if err != nil {
		t.Fatal(err)
	}
	dev := &DeployEvaluator{Up: deploy.UpOptions{Hone: hone, StateDir: t.TempDir()},
		Workload: schema.Workload{Seed: 3, Requests: 208, InputTokens: 4096, UncachedTokens: 128, OutputTokens: 128},
		QPS:      []float64{2, 24}, Runs: 3, SLO: slo.Default}
	var scales []float64
	inner := evaluatorFunc(func(_ context.Context, spec *deploy.Spec, _ string) Trial {
		scales = append(scales, spec.Emulator.TimeScale)
		return Trial{}
	})
	fs := &FloorScaler{Inner: inner, Probe: dev.ProbeFloor, TTFTSLOMs: slo.Default.TTFTMillis, Log: os.Stderr}
	var hogs []*exec.Cmd
	stop := func() {
		for _, c := range hogs {
			c.Process.Kill()
			c.Wait()
		}
		hogs = nil
	}
	defer stop()
	for range 6 {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fs.Evaluate(ctx, s, "01")
	stop()
	fs.Evaluate(ctx, s, "02")
	if len(scales) != 2 || !(scales[0] > 1) || scales[1] != 1 {
		t.Errorf("trials at time scales %v: want above 1 under the hogs, then the spec's 1", scales)
	}
}

// evaluatorFunc is an Evaluator of a function.
type evaluatorFunc func(context.Context, *deploy.Spec, string) Trial

func (f evaluatorFunc) Evaluate(ctx context.Context, s *deploy.Spec, tag string) Trial {
	return f(ctx, s, tag)
}

// A trial whose bottleneck is queueing on an engine that streamed
// max-num-seqs requests at once is told to raise max-num-seqs first: the
// trial's diagnosis reads the knobs its record's config states
// (diagnose.RecordKnobs). Exact: the prediction of a colocated engine with
// 2 seats at 16 req/s, 64 output tokens each.
func TestDiagnoseTrialProposesMaxNumSeqs(t *testing.T) {
	prof, err := emulator.LookupProfile("qwen2.5-coder-0.5b-l4")
	if err != nil {
		t.Fatal(err)
	}
	s, err := deploy.ParseSpec([]byte(`name: seats
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: 1}
topology: {kind: colocated, replicas: 1, tp: 1}
knobs: {prefix_caching: true, max_num_seqs: 2}
network: {proxy_port: 18400, worker_port: 18401}
emulator: {profile: qwen2.5-coder-0.5b-l4, time_scale: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	w := schema.Workload{Seed: 1, Requests: 48, InputTokens: 1024, UncachedTokens: 128, OutputTokens: 64}
	rec, err := predict.Run(s, predict.Options{Profile: prof, Workload: w, QPS: []float64{1, 16}, SLO: slo.Default, KeepRequests: true})
	if err != nil {
		t.Fatal(err)
	}
	atts, err := diagnose.Attribute(rec, diagnose.Evidence{})
	if err != nil {
		t.Fatal(err)
	}
	var tr Trial
	d := diagnoseTrial(&tr, rec, atts)
	want := "raise max-num-seqs (now 2; up to 2 requests streamed at once: the queue waits for a seat)"
	if tr.Bottleneck != diagnose.Queueing || d.MaxNumSeqs != 2 || len(tr.Proposals) == 0 || tr.Proposals[0] != want {
		t.Errorf("bottleneck %q, max-num-seqs %d, proposals %q; want queueing and %q first", tr.Bottleneck, d.MaxNumSeqs, tr.Proposals, want)
	}
}
