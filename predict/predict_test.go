package predict

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

func testSpec(t testing.TB, kind string, profile string) *deploy.Spec {
	t.Helper()
	topo := "topology:\n  kind: colocated\n  replicas: 1\n  tp: 1\n"
	kv := ""
	if kind == deploy.Disaggregated {
		topo = "topology:\n  kind: disaggregated\n  prefill: {replicas: 1, tp: 1}\n  decode: {replicas: 1, tp: 1}\n"
		kv = "kv_connector:\n  name: NixlConnector\n  side_channel_port: 18420\n"
	}
	y := fmt.Sprintf(`name: t-%s
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: 2}
%s%sknobs: {max_model_len: 8192}
routing: {policy: session_affinity}
network: {proxy_port: 18400, worker_port: 18410}
emulator: {profile: %s, time_scale: 1}
`, kind, topo, kv, profile)
	s, err := deploy.ParseSpec([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestExerciseEqualsExactModel: with profile exercise (the brief's rates,
// a batch of one) the engine in virtual time gives every request of the
// brief's scan exactly the first and last token instants of the brief's
// equations (package sim), colocated and 1P1D, so hone predict and hone
// sim agree to the bit, level summaries and objective included.
func TestExerciseEqualsExactModel(t *testing.T) {
	for _, c := range []struct {
		kind string
		mode sim.Mode
	}{{deploy.Colocated, sim.Colocated}, {deploy.Disaggregated, sim.Disaggregated}} {
		t.Run(c.kind, func(t *testing.T) {
			sc := sim.DefaultScan(sim.Config{Mode: c.mode, PrefixCache: true})
			want, err := sim.Scan(sc)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := Run(testSpec(t, c.kind, "exercise"), Options{Workload: replay.DefaultWorkload(), QPS: sc.QPS, SLO: slo.Default, KeepRequests: true})
			if err != nil {
				t.Fatal(err)
			}
			if rec.Kind != Kind || !rec.Verdict.Valid {
				t.Fatalf("kind %q, verdict %v", rec.Kind, rec.Verdict)
			}
			got := rec.Runs[0]
			for li, d := range want.Details {
				l := got.Levels[li]
				for i, tl := range d.Timelines {
					q := l.Requests[i]
					if q.ID != tl.ID || *q.FirstMs != tl.FirstMs || *q.FinishMs != tl.FinishMs {
						t.Fatalf("%g req/s, request %d: first %v finish %v, the exact model %v %v",
							d.OfferedQPS, tl.ID, *q.FirstMs, *q.FinishMs, tl.FirstMs, tl.FinishMs)
					}
					if tl.ID >= replay.Sessions && *q.CachedTokens != tl.CachedTokens && c.kind == deploy.Colocated {
						t.Fatalf("request %d: %d cached tokens, the model %d", tl.ID, *q.CachedTokens, tl.CachedTokens)
					}
				}
				if l.P99TTFTMs != d.P99TTFTMs || l.P99TPOTMs != d.P99TPOTMs || l.EffectiveQPS != d.EffectiveQPS || l.Passed != d.Passed {
					t.Errorf("%g req/s: predicted %+v, the exact model %+v", d.OfferedQPS, l.Level, d.Level)
				}
			}
			if got.Objective != want.Objective {
				t.Errorf("objective %v, the exact model %v", got.Objective, want.Objective)
			}
		})
	}
}

// TestRecordIsValid: a kept prediction is a record like any other: it
// passes the record schema and reads back (hone calibrate reads them).
func TestRecordIsValid(t *testing.T) {
	for _, kind := range []string{deploy.Colocated, deploy.Disaggregated} {
		rec, err := Run(testSpec(t, kind, "qwen2.5-coder-0.5b-l4"), Options{Workload: replay.DefaultWorkload(), QPS: []float64{8}, SLO: slo.Default, KeepRequests: true})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "rec.json")
		if err := replay.WriteRecord(path, rec); err != nil {
			t.Fatal(err)
		}
		back, err := replay.ReadRecord(path)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if back.Kind != Kind || len(back.Runs[0].Levels[0].Requests) != replay.DefaultWorkload().Requests {
			t.Errorf("%s: read back kind %q with %d requests", kind, back.Kind, len(back.Runs[0].Levels[0].Requests))
		}
	}
}

// TestDeterministic: a prediction is a pure function of its inputs.
func TestDeterministic(t *testing.T) {
	opts := Options{Workload: replay.DefaultWorkload(), QPS: []float64{4, 32}, SLO: slo.Default, KeepRequests: true}
	for _, kind := range []string{deploy.Colocated, deploy.Disaggregated} {
		a, err := Run(testSpec(t, kind, "qwen2.5-coder-0.5b-l4"), opts)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Run(testSpec(t, kind, "qwen2.5-coder-0.5b-l4"), opts)
		for li := range a.Runs[0].Levels {
			la, lb := a.Runs[0].Levels[li], b.Runs[0].Levels[li]
			for i := range la.Requests {
				if *la.Requests[i].FinishMs != *lb.Requests[i].FinishMs {
					t.Fatalf("%s: request %d finished at %v, then %v", kind, i, *la.Requests[i].FinishMs, *lb.Requests[i].FinishMs)
				}
			}
		}
	}
}

var _ = emulator.DefaultProfile
