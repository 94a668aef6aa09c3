package optimizer

import (
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
	code   string
	scales []float64
}

func (e *hostBoundEvaluator) Evaluate(_ context.Context, spec *deploy.Spec, tag string) (t Trial) {
	prof, err := emulator.LookupProfile("qwen2.5-coder-0.5b-l4")
	if err != nil {
		e.t.Fatal(err)
	}
	s := scaleOf(spec)
	e.scales = append(e.scales, s)
	t = Trial{Kind: replay.KindEmulated}
	rec, err := predict.Run(spec, predict.Options{Profile: prof, Workload: rescaleWorkload, QPS: rescaleQPS, SLO: rescaleSLO, KeepRequests: true})
	if err != nil {
		e.t.Fatal(err)
	}
	r0 := rec.Runs[0]
	rec.Runs = rec.Runs[:0]
	for i := range 3 {
		r := r0
		r.Run = i
		r.Levels = append([]replay.LevelRecord(nil), r0.Levels...)
		if s < e.need {
			l := &r.Levels[len(r.Levels)-1]
			l.Verdict = replay.Verdict{Reasons: []replay.Reason{{Code: e.code, Detail: "planted", Scale: e.need / s}}}
		}
		rec.Runs = append(rec.Runs, r)
	}
	rec.Judge()
	t.Record = filepath.Join(e.dir, tag+".json")
	if err := replay.WriteRecord(t.Record, rec); err != nil {
		e.t.Fatal(err)
	}
	summarizeRecord(&t, rec)
	judge(&t, rescaleSLO)
	return t
}

var (
	rescaleWorkload = replay.Workload{Seed: 1, Requests: 16, InputTokens: 1024, UncachedTokens: 128, OutputTokens: 8}
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
// else, is measured again at the estimate's scale (with the margin, up to
// the ladder's step) and reports that measurement, keeping the first
// record; its re-run starts at the larger scale; a trial invalid for a
// reason that is not the host's, or whose estimate needs more than the
// largest scale allowed, is measured once and says why.
func TestRescaler(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		need, start, max float64
		code             string
		scales           []float64 // the time scales measured at
		to               float64   // the reported trial's scale (0: not rescaled)
		eligible         bool
		reason           string
	}{
		// At 0.5 the estimate is 0.9/0.5 = 1.8; × 1.25 = 2.25 × 0.5 =
		// 1.125, so the ladder's 2.
		"emulator-bound, cleared": {0.9, 0.5, 4, replay.ReasonEmulatorBound, []float64{0.5, 2}, 2, true, "measured at time scale 2: at 0.5, 3 of 3 runs invalid: emulator_bound"},
		"client-bound, cleared":   {0.9, 0.5, 4, replay.ReasonClientBound, []float64{0.5, 2}, 2, true, ""},
		"valid at once":           {0.5, 0.5, 4, replay.ReasonEmulatorBound, []float64{0.5}, 0, true, ""},
		"not the host's":          {0.9, 0.5, 4, replay.ReasonWarmStart, []float64{0.5}, 0, false, "warm_start"},
		"above the largest":       {0.9, 0.5, 1, replay.ReasonEmulatorBound, []float64{0.5}, 0, false, "at time scale 0.5 the host decided it (3 of 3 runs invalid: emulator_bound; estimate ×1.8): it needs time scale 2, above the largest allowed 1"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ev := &hostBoundEvaluator{t: t, dir: dir, need: tc.need, code: tc.code}
			r := &Rescaler{Inner: ev, MaxScale: tc.max}
			spec := rescaleSpec(t, tc.start)
			tr := r.Evaluate(ctx, spec, "01")
			judge(&tr, rescaleSLO)
			if fmt.Sprint(ev.scales) != fmt.Sprint(tc.scales) {
				t.Fatalf("measured at time scales %v, want %v", ev.scales, tc.scales)
			}
			if tr.Eligible != tc.eligible || !strings.Contains(tr.Reason, tc.reason) {
				t.Errorf("eligible %v (%s), want %v and a reason with %q", tr.Eligible, tr.Reason, tc.eligible, tc.reason)
			}
			if spec.Emulator.TimeScale != tc.start {
				t.Errorf("the caller's spec moved to time scale %g", spec.Emulator.TimeScale)
			}
			if tc.to == 0 {
				refused := tc.max < 2 && tc.need > tc.start
				if rs := tr.Rescaled; refused && (rs == nil || rs.Measured || rs.ToScale != 2 || rs.Record != tr.Record) || !refused && rs != nil {
					t.Errorf("rescaled %+v, want refused %v", rs, refused)
				}
				return
			}
			rs := tr.Rescaled
			if rs == nil || !rs.Measured || rs.FromScale != tc.start || rs.ToScale != tc.to || rs.Record != filepath.Join(dir, "01.json") ||
				math.Abs(rs.Estimate-tc.need/tc.start) > 1e-12 || !strings.Contains(rs.Reason, "3 of 3 runs invalid: "+tc.code) {
				t.Fatalf("rescaled %+v", rs)
			}
			if _, err := os.Stat(rs.Record); err != nil {
				t.Errorf("the first attempt's record: %v", err)
			}
			if tr.Record != filepath.Join(dir, fmt.Sprintf("01-ts%g.json", tc.to)) {
				t.Errorf("record %s", tr.Record)
			}
			// The verification re-run starts where the trial ended.
			ev.scales = nil
			again := r.Evaluate(ctx, spec, "02")
			judge(&again, rescaleSLO)
			if fmt.Sprint(ev.scales) != fmt.Sprint([]float64{tc.to}) || !again.Eligible || again.Rescaled == nil ||
				again.Rescaled.ToScale != tc.to || again.Rescaled.Record != "" {
				t.Errorf("re-run measured at %v: eligible %v, rescaled %+v", ev.scales, again.Eligible, again.Rescaled)
			}
		})
	}
}
