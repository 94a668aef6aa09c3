package optimizer

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/slo"
)

// The live loop end to end on the exact model: every choice is the
// model's, so each is asserted exactly. The colocated baseline is
// queueing-bound, so the loop disaggregates; 1P1D is decode-queue-bound
// and no proposal is left; the ablations turn the cache off (measured) and
// CUDA graphs off (refused: the model has no term for it, a failed trial);
// the interaction cell is colocated without the cache; the re-run confirms
// 1P1D.
func TestLiveOnModel(t *testing.T) {
	wl := replay.DefaultWorkload()
	qps := []float64{1, 2, 4, 8, 16, 32}
	ev := &ModelEvaluator{Workload: wl, QPS: qps, Runs: 3, SLO: slo.Default}
	path := filepath.Join(t.TempDir(), "log.json")
	lg, err := Live(context.Background(), LiveOptions{Base: baseSpec(), Evaluator: ev, Budget: 8, Runs: 3,
		Workload: wl, QPS: qps, SLO: slo.Default, LogPath: path})
	if err != nil {
		t.Fatal(err)
	}
	// The public instance's figures (exercise/README.md), as float64.
	coloc, disagg, disaggNoCache := 8.01670146137787, 15.91670258978015, 0.9994128449535898
	want := []struct {
		role, key  string
		objective  float64
		eligible   bool
		bottleneck string
		err        string
	}{
		{"baseline", "coloc-r2-tp1-cache-sessionaffinity", coloc, true, diagnose.Queueing, ""},
		{"proposal", "disagg-1p1d-cache-sessionaffinity", disagg, true, diagnose.DecodeQ, ""},
		{"ablation", "disagg-1p1d-nocache-sessionaffinity", disaggNoCache, true, diagnose.Queueing, ""},
		{"ablation", "disagg-1p1d-cache-sessionaffinity-eager", 0, false, "", "the exact model cannot express knobs.enforce_eager: "},
		{"interaction", "coloc-r2-tp1-nocache-sessionaffinity", 0, false, diagnose.Queueing, ""},
		{"verify", "disagg-1p1d-cache-sessionaffinity", disagg, true, diagnose.DecodeQ, ""},
	}
	if len(lg.Trials) != len(want) {
		t.Fatalf("%d trials, want %d; decisions:\n%s", len(lg.Trials), len(want), strings.Join(lg.Decision, "\n"))
	}
	for i, w := range want {
		tr := lg.Trials[i]
		if tr.Role != w.role || tr.Key != w.key || tr.Objective != w.objective || tr.Eligible != w.eligible ||
			tr.Bottleneck != w.bottleneck || !strings.HasPrefix(tr.Error, w.err) || (w.err == "") != (tr.Error == "") {
			t.Errorf("trial %d: %s %s objective %v eligible %v bottleneck %q error %q; want %+v",
				tr.N, tr.Role, tr.Key, tr.Objective, tr.Eligible, tr.Bottleneck, tr.Error, w)
		}
		if tr.Kind != sim.Kind {
			t.Errorf("trial %d: kind %q, want %q", tr.N, tr.Kind, sim.Kind)
		}
		if w.err != "" {
			continue
		}
		if len(tr.Objectives) != 3 || tr.Objectives[0] != w.objective || tr.Objectives[2] != w.objective {
			t.Errorf("trial %d: objectives %v, want 3 runs of %v", tr.N, tr.Objectives, w.objective)
		}
		if len(tr.Levels) != len(qps) || tr.Levels[0].Runs != 3 || tr.Levels[0].Measured != wl.Requests-replay.Sessions || tr.CostGPUSec != nil {
			t.Errorf("trial %d: %d levels, %d runs, %d measured, cost %v", tr.N, len(tr.Levels), tr.Levels[0].Runs, tr.Levels[0].Measured, tr.CostGPUSec)
		}
		if len(tr.Breakdown) != len(qps) {
			t.Errorf("trial %d: breakdown of %d levels", tr.N, len(tr.Breakdown))
		}
	}
	// 31/32 of every measured prompt is its session's prefix.
	if h := lg.Trials[0].HitRate; h == nil || *h != 0.96875 {
		t.Errorf("baseline hit rate %v, want 0.96875", h)
	}
	if lg.Kind != sim.Kind || lg.Selected != 2 || !lg.Verified {
		t.Errorf("kind %q selected %d verified %v", lg.Kind, lg.Selected, lg.Verified)
	}
	if in := lg.Interaction; in == nil || in.Cells != [4]int{2, 3, 1, 5} || in.Effect != (disagg-disaggNoCache)-(coloc-0) {
		t.Errorf("interaction %+v", in)
	}
	back, err := ReadLog(path)
	if err != nil || len(back.Trials) != len(lg.Trials) || !back.Done {
		t.Errorf("log on disk: %v", err)
	}
}

// What the exact model cannot express is a failed trial naming the field.
func TestModelRefuses(t *testing.T) {
	disagg, _ := Disaggregate(baseSpec())
	for _, tc := range []struct {
		edit  func(s *deploy.Spec) *deploy.Spec
		field string
	}{
		{func(s *deploy.Spec) *deploy.Spec { s.Topology.TP = 2; return s }, "topology.tp"},
		{func(s *deploy.Spec) *deploy.Spec { s.Routing.Policy = deploy.RoundRobin; return s }, "routing.policy"},
		{func(*deploy.Spec) *deploy.Spec { s := CloneSpec(disagg); s.Topology.Prefill.Replicas = 2; return s }, "topology.prefill.replicas"},
		{func(*deploy.Spec) *deploy.Spec { s := CloneSpec(disagg); s.Topology.Decode.TP = 2; return s }, "topology.decode.tp"},
		{func(s *deploy.Spec) *deploy.Spec { s.Knobs.EnforceEager = true; return s }, "knobs.enforce_eager"},
		{func(s *deploy.Spec) *deploy.Spec { s.Knobs.MaxNumSeqs = 64; return s }, "knobs.max_num_seqs"},
		{func(s *deploy.Spec) *deploy.Spec { s.Topology.Kind = "pipelined"; return s }, "topology.kind"},
	} {
		ev := &ModelEvaluator{Workload: replay.DefaultWorkload(), QPS: []float64{1}, Runs: 3, SLO: slo.Default}
		tr := ev.Evaluate(context.Background(), tc.edit(baseSpec()), "x")
		if !strings.HasPrefix(tr.Error, "the exact model cannot express "+tc.field+": ") || tr.Kind != sim.Kind || len(tr.Objectives) != 0 {
			t.Errorf("%s: kind %q error %q", tc.field, tr.Kind, tr.Error)
		}
	}
	// One colocated replica with round-robin routing has nothing to route.
	one := baseSpec()
	one.Topology.Replicas, one.Routing.Policy = 1, deploy.RoundRobin
	if _, err := modelConfig(one); err != nil {
		t.Errorf("one replica, round robin: %v", err)
	}
}
