package optimizer

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// hostBoundEvaluator "measures" a spec by predicting it (three identical
// runs) and, below the time scale need, marks its highest level of every
// run invalid for a host reason whose estimate is exactly what clears it
// (need / scale); with other set, that reason is not the host's. It logs
// the time scale of every call.
type hostBoundEvaluator struct {
	t      *testing.T
	dir    string
	need   float64
	code   schema.Code
	scales []float64
	// noEstimate plants the reason without a Scale; failAfter fails every
	// call after that many; failed counts failed requests in every trial.
	noEstimate bool
	// over multiplies the planted estimate (0: 1): above 1 it asks for
	// more than clears the level, as client_bound's can.
	over      float64
	failAfter int
	failed    int
	seconds   float64 // every trial's Seconds
}

func (e *hostBoundEvaluator) Evaluate(_ context.Context, spec *deploy.Spec, tag string) (t Trial) {
	prof, err := emulator.LookupProfile("qwen2.5-coder-0.5b-l4")
	if err != nil {
		e.t.Fatal(err)
	}
	s := spec.Emulator.TimeScale
	e.scales = append(e.scales, s)
	t = Trial{Kind: schema.KindEmulated}
	if e.failAfter > 0 && len(e.scales) > e.failAfter {
		t.Error = "deploy: planted failure"
		return t
	}
	rec, err := predict.Run(spec, predict.Options{Profile: prof, Workload: rescaleWorkload, QPS: rescaleQPS, SLO: rescaleSLO, KeepRequests: true})
	if err != nil {
		e.t.Fatal(err)
	}
	r0 := rec.Runs[0]
	rec.Runs = rec.Runs[:0]
	for i := range 3 {
		r := r0
		r.Run = i
		r.Levels = append([]schema.LevelRecord(nil), r0.Levels...)
		if s < e.need {
			l := &r.Levels[len(r.Levels)-1]
			k := e.need / s * cmp.Or(e.over, 1)
			if e.noEstimate {
				k = 0
			}
			l.Verdict = schema.Verdict{Reasons: []schema.Reason{{Code: e.code, Detail: "planted", Scale: k}}}
		}
		rec.Runs = append(rec.Runs, r)
	}
	replay.Judge(rec)
	t.Record = filepath.Join(e.dir, tag+".json")
	if err := replay.WriteRecord(t.Record, rec); err != nil {
		e.t.Fatal(err)
	}
	summarizeRecord(&t, rec)
	t.Failed, t.Seconds = e.failed, e.seconds
	judge(&t, rescaleSLO)
	return t
}

var (
	rescaleWorkload = schema.Workload{Seed: 1, Requests: 16, InputTokens: 1024, UncachedTokens: 128, OutputTokens: 8}
	rescaleQPS      = []float64{2, 8}
	rescaleSLO      = slo.SLO{TTFTMillis: 1000, TPOTMillis: 100}
)

func rescaleSpec(t *testing.T, scale float64) *deploy.Spec {
	t.Helper()
	s, err := deploy.ParseSpec([]byte(`name: pd
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: 2}
topology: {kind: disaggregated, prefill: {replicas: 1, tp: 1}, decode: {replicas: 1, tp: 1}}
kv_connector: {name: NixlConnector, side_channel_port: 18420}
knobs: {prefix_caching: true}
network: {proxy_port: 18400, worker_port: 18401}
emulator: {profile: qwen2.5-coder-0.5b-l4, time_scale: ` + fmt.Sprint(scale) + `}
`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRescaler: a trial whose runs the host made invalid, and nothing
// else, is measured again one step up the ladder (never a jump: 0.5 goes
// to 1 even where the estimate asks for more) and reports that
// measurement, keeping the first record; its config's next trial starts
// as many steps up. A trial invalid for a reason that is not the host's,
// or with failed requests, is measured once; one whose estimate needs more
// than the largest scale allowed, or whose second measurement fails, keeps
// its first and says why. A reason without an estimate steps too.
func TestRescaler(t *testing.T) {
	ctx := context.Background()
	type tc struct {
		need, start, max float64
		code             schema.Code
		noEstimate       bool
		over             float64
		failAfter        int
		failed           int
		scales           []float64 // the time scales measured at
		to               float64   // the reported trial's scale (0: the first measurement's)
		refused          float64   // the scale a refusal names (0: none)
		eligible         bool
		reason           string
	}
	for name, c := range map[string]tc{
		"emulator-bound, cleared": {need: 0.9, start: 0.5, max: 4, code: schema.ReasonEmulatorBound, scales: []float64{0.5, 1}, to: 1, eligible: true,
			reason: "measured at time scale 1: at 0.5, 3 of 3 runs invalid: emulator_bound"},
		"client-bound, cleared": {need: 0.9, start: 0.5, max: 4, code: schema.ReasonClientBound, scales: []float64{0.5, 1}, to: 1, eligible: true},
		// client_bound's estimate is an upper bound (a generator that fell
		// behind lags by a queue, which a slower send shrinks faster than
		// the estimate assumes): ×7.2 asks for 4, above the largest 1, but
		// one step, to 1, clears it. The step is taken.
		"client-bound, estimate above the largest": {need: 0.9, start: 0.5, max: 1, over: 4, code: schema.ReasonClientBound, scales: []float64{0.5, 1}, to: 1, eligible: true},
		// Above the largest by its one step, client_bound is refused still.
		"client-bound, the step above the largest": {need: 0.9, start: 0.5, max: 0.5, code: schema.ReasonClientBound, scales: []float64{0.5}, refused: 1,
			reason: "at time scale 0.5 the host decided it (3 of 3 runs invalid: client_bound; no estimate): it needs time scale 1, above the largest allowed 0.5"},
		"no estimate, one step": {need: 0.9, start: 0.5, max: 4, code: schema.ReasonEmulatorBound, noEstimate: true, scales: []float64{0.5, 1}, to: 1, eligible: true},
		"valid at once":         {need: 0.5, start: 0.5, max: 4, code: schema.ReasonEmulatorBound, scales: []float64{0.5}, eligible: true},
		"not the host's":        {need: 0.9, start: 0.5, max: 4, code: schema.ReasonWarmStart, scales: []float64{0.5}, reason: "warm_start"},
		"failed requests":       {need: 0.9, start: 0.5, max: 4, code: schema.ReasonEmulatorBound, failed: 2, scales: []float64{0.5}},
		// 0.5·3 = 1.5 is above the limit 1: the ladder's 2.
		"above the largest": {need: 1.5, start: 0.5, max: 1, code: schema.ReasonEmulatorBound, scales: []float64{0.5}, refused: 2,
			reason: "at time scale 0.5 the host decided it (3 of 3 runs invalid: emulator_bound; estimate ×3): it needs time scale 2, above the largest allowed 1"},
		"the limit's step": {need: 0.9, start: 0.5, max: 1, code: schema.ReasonEmulatorBound, scales: []float64{0.5, 1}, to: 1, eligible: true},
		"second measurement fails": {need: 0.9, start: 0.5, max: 4, code: schema.ReasonEmulatorBound, failAfter: 1, scales: []float64{0.5, 1}, refused: 1,
			reason: "measuring it again at 1 failed: deploy: planted failure"},
		// The case: 0.25 whose estimate asks for 2 goes to 0.5,
		// not 2; still invalid there, it reports the second measurement.
		"one step, not a jump": {need: 2, start: 0.25, max: 4, code: schema.ReasonEmulatorBound, scales: []float64{0.25, 0.5}, to: 0.5,
			reason: "measured at time scale 0.5: at 0.25"},
		// Beyond the ladder the steps double: 4 → 8.
		"beyond the ladder": {need: 5, start: 4, max: 100, code: schema.ReasonEmulatorBound, scales: []float64{4, 8}, to: 8, eligible: true},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ev := &hostBoundEvaluator{t: t, dir: dir, need: c.need, code: c.code, noEstimate: c.noEstimate, over: c.over, failAfter: c.failAfter, failed: c.failed}
			r := &Rescaler{Inner: ev, MaxScale: c.max}
			spec := rescaleSpec(t, c.start)
			tr := r.Evaluate(ctx, spec, "01")
			judge(&tr, rescaleSLO)
			if fmt.Sprint(ev.scales) != fmt.Sprint(c.scales) {
				t.Fatalf("measured at time scales %v, want %v", ev.scales, c.scales)
			}
			if tr.Eligible != c.eligible || !strings.Contains(tr.Reason, c.reason) {
				t.Errorf("eligible %v (%s), want %v and a reason with %q", tr.Eligible, tr.Reason, c.eligible, c.reason)
			}
			if spec.Emulator.TimeScale != c.start {
				t.Errorf("the caller's spec moved to time scale %g", spec.Emulator.TimeScale)
			}
			first := filepath.Join(dir, "01.json")
			rs := tr.Rescaled
			switch {
			case c.refused > 0:
				if rs == nil || rs.Measured || rs.ToScale != c.refused || rs.Record != first || tr.Record != first {
					t.Errorf("rescaled %+v, record %s: want a refusal naming %g and the first measurement kept", rs, tr.Record, c.refused)
				}
				return
			case c.to == 0:
				if rs != nil {
					t.Errorf("rescaled %+v, want none", rs)
				}
				return
			}
			want := c.need / c.start
			if c.noEstimate || c.code == schema.ReasonClientBound { // client_bound's is not read
				want = 0
			}
			if rs == nil || !rs.Measured || rs.FromScale != c.start || rs.ToScale != c.to || rs.Record != first ||
				math.Abs(rs.Estimate-want) > 1e-12 || !strings.Contains(rs.Reason, "3 of 3 runs invalid: "+string(c.code)) {
				t.Fatalf("rescaled %+v", rs)
			}
			if _, err := os.Stat(rs.Record); err != nil {
				t.Errorf("the first measurement's record: %v", err)
			}
			if tr.Record != filepath.Join(dir, fmt.Sprintf("01-ts%g.json", c.to)) {
				t.Errorf("record %s", tr.Record)
			}
			if !c.eligible {
				return
			}
			// The config's next trial (the verification re-run) starts
			// where this one ended.
			ev.scales = nil
			again := r.Evaluate(ctx, spec, "02")
			judge(&again, rescaleSLO)
			if fmt.Sprint(ev.scales) != fmt.Sprint([]float64{c.to}) || !again.Eligible || again.Rescaled == nil ||
				again.Rescaled.ToScale != c.to || again.Rescaled.Record != "" {
				t.Errorf("re-run measured at %v: eligible %v, rescaled %+v", ev.scales, again.Eligible, again.Rescaled)
			}
		})
	}
}
