package optimizer

import (
	"context"
	"strings"
	"testing"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

func oneGPUSpec() *deploy.Spec {
	s := CloneSpec(baseSpec())
	s.Topology.Replicas, s.GPUs.Budget, s.GPUs.IDs = 1, 1, []int{0}
	return s
}

// TestCheapestSelection: asked for the cheapest config serving 15 req/s,
// a 1-GPU trial that reaches it in every run is selected over the 2-GPU
// baseline with more capacity; asked for capacity, the baseline stays.
func TestCheapestSelection(t *testing.T) {
	base := &Trial{N: 1, Role: "baseline", Eligible: true, Spec: baseSpec(), Objectives: []float64{40, 41, 39.5}, Objective: 40}
	one := Trial{N: 2, Role: "proposal", Eligible: true, Spec: oneGPUSpec(), Objectives: []float64{21, 20.5, 21.4}, Objective: 21}
	cheapest := predict.Goal{Goal: deploy.GoalCheapest, TargetQPS: 15}
	if order := rankTrialsFor([]Trial{*base, one}, base, cheapest); order[0].N != 2 {
		t.Errorf("cheapest at 15 req/s: selected trial %d", order[0].N)
	}
	if order := rankTrialsFor([]Trial{*base, one}, base, predict.Goal{}); order[0].N != 1 {
		t.Errorf("most capacity: selected trial %d", order[0].N)
	}
	// One run short of the target: the 1-GPU config does not meet it.
	short := one
	short.Objectives = []float64{21, 14.2, 21.4}
	if order := rankTrialsFor([]Trial{*base, short}, base, cheapest); order[0].N != 1 {
		t.Errorf("a config missing the target in one run was selected as cheapest")
	}
	if !BeatsFor(cheapest, &one, base) || BeatsFor(cheapest, base, &one) || BeatsFor(cheapest, &short, base) {
		t.Error("BeatsFor cheapest")
	}
	// Per GPU: every run of the 1-GPU trial (20.8 at least) above every
	// run of the baseline's per GPU (20.5 at most), median 21 >= 1.02 × 20.
	perGPU := predict.Goal{Goal: deploy.GoalPerGPU}
	dense := one
	dense.Objectives = []float64{21, 20.8, 21.4}
	if !BeatsFor(perGPU, &dense, base) || BeatsFor(perGPU, &one, base) {
		t.Error("BeatsFor capacity_per_gpu")
	}
	if reason := liveRegressedFor(cheapest, &one, &short, base); reason == "" {
		t.Error("a re-run short of the target was not rejected")
	}
}

func TestPromising(t *testing.T) {
	best := &Trial{Spec: baseSpec(), Objectives: []float64{40, 41, 39}, Objective: 40}
	cheapest := predict.Goal{Goal: deploy.GoalCheapest, TargetQPS: 15}
	if !promising(cheapest, predict.Point{Objective: 20, GPUs: 1}, best, 0.02) {
		t.Error("a 1-GPU config predicted to meet the target is not worth measuring")
	}
	if promising(cheapest, predict.Point{Objective: 12, GPUs: 1}, best, 0.02) {
		t.Error("a config predicted to miss the target is worth measuring")
	}
	if promising(predict.Goal{}, predict.Point{Objective: 40.5, GPUs: 2}, best, 0.02) {
		t.Error("a win inside the noise band is worth measuring")
	}
}

// TestApplyCapacity: a trial's objectives are its valid runs' capacities;
// failures count at passing probes and the reference, not beyond capacity.
func TestApplyCapacity(t *testing.T) {
	lvl := func(q float64, valid bool, failed int) schema.LevelRecord {
		l := schema.LevelRecord{Verdict: schema.Verdict{Valid: valid}, Failures: map[string]int{}}
		l.OfferedQPS = q
		if failed > 0 {
			l.Failures["timeout"] = failed
		}
		return l
	}
	rec := &schema.Record{Runs: []schema.RunRecord{
		{Verdict: schema.Verdict{Valid: true}, Levels: []schema.LevelRecord{lvl(8, true, 0), lvl(16, true, 3), lvl(10, true, 0)}},
		{Verdict: schema.Verdict{Valid: false}, Levels: []schema.LevelRecord{lvl(8, false, 0)}},
		// A probe beyond the bracket that diagnosis found client-bound
		// (32) decides nothing about this run's capacity.
		{Verdict: schema.Verdict{Valid: false}, Levels: []schema.LevelRecord{lvl(32, false, 0), lvl(9, true, 0), lvl(9.4, true, 0), lvl(10, true, 1)}},
		// The failing load that decides the bracket is client-bound: the
		// capacity might be higher.
		{Verdict: schema.Verdict{Valid: false}, Levels: []schema.LevelRecord{lvl(9, true, 0), lvl(9.4, false, 0)}},
	}}
	caps := []capacity.Result{
		{Value: 8, Upper: 16, Probes: []capacity.Probe{{Load: 8, Pass: true, Valid: true}, {Load: 16, Valid: true}}},
		{Probes: []capacity.Probe{{Load: 8, Valid: false}}},
		{Value: 9, Upper: 9.4, Probes: []capacity.Probe{{Load: 32, Valid: true}, {Load: 9, Pass: true, Valid: true}, {Load: 9.4, Valid: true}}},
		{Value: 9, Upper: 9.4, Probes: []capacity.Probe{{Load: 9, Pass: true, Valid: true}, {Load: 9.4, Valid: true}}},
	}
	tr := Trial{Levels: []LevelSummary{{OfferedQPS: 8}, {OfferedQPS: 10}, {OfferedQPS: 16}}}
	applyCapacity(&tr, rec, caps, 2, 10)
	if len(tr.Objectives) != 2 || tr.Objective != 8.5 || tr.InvalidRuns != 2 || tr.Failed != 1 || *tr.CostGPUSec != 2/8.5 ||
		len(tr.Levels) != 1 || tr.Levels[0].OfferedQPS != 10 || tr.ReferenceQPS != 10 {
		t.Errorf("trial: objectives %v (%v), invalid %d, failed %d, levels %+v", tr.Objectives, tr.Objective, tr.InvalidRuns, tr.Failed, tr.Levels)
	}
}

// capacityStandIn "measures" a spec's capacity by predicting it (three
// runs spread ±1%), as a capacity-measuring evaluator reports it.
type capacityStandIn struct {
	w     schema.Workload
	slo   slo.SLO
	specs []string
}

func (e *capacityStandIn) Evaluate(ctx context.Context, spec *deploy.Spec, tag string) Trial {
	e.specs = append(e.specs, SpecKey(spec))
	t := Trial{Kind: schema.KindPredicted}
	res, err := predict.Capacity(ctx, spec, predict.Options{Workload: e.w, SLO: e.slo}, capacity.Options{SLO: e.slo, Start: 10})
	if err != nil {
		t.Error = err.Error()
		return t
	}
	for _, f := range []float64{0.99, 1, 1.01} {
		r := *res
		r.Value *= f
		t.Capacity = append(t.Capacity, r)
		t.Objectives = append(t.Objectives, r.Value)
	}
	t.Objective = res.Value
	c := float64(spec.GPUsNeeded()) / res.Value
	t.CostGPUSec = &c
	return t
}

// TestCheapestLoop: asked for the cheapest deployment serving 12 req/s,
// the predict-then-measure loop measures a 1-GPU config (on the predicted
// front with fewer GPUs than the baseline) and selects it over the 2-GPU
// baseline, which has more capacity.
func TestCheapestLoop(t *testing.T) {
	base, err := deploy.LoadSpec("../examples/emulator-l4-cheapest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	target := slo.SLO{TTFTMillis: 2000, TPOTMillis: 12}
	w := replay.DefaultWorkload()
	w.Requests = 48
	prof, err := emulator.LookupProfile(base.Emulator.Profile)
	if err != nil {
		t.Fatal(err)
	}
	ev := &capacityStandIn{w: w, slo: target}
	axes := predict.Axes{TP: []int{1}, MaxNumSeqs: []int{0}, MaxNumBatchedTokens: []int{0}, PrefixCaching: []bool{true, false},
		Routing: []string{deploy.SessionAffinity}, EnforceEager: []bool{false}, GPUMemoryUtilization: []float64{0}}
	co := capacity.Options{SLO: target}
	lg, err := Live(context.Background(), LiveOptions{Base: base, Evaluator: ev, Budget: 7, Workload: w, Runs: 3, SLO: target,
		Predictor: &Predictor{Profile: prof, Axes: axes}, Capacity: &co, Goal: predict.Goal(base.Objective)})
	if err != nil {
		t.Fatal(err)
	}
	if lg.Selected == 0 || !lg.Verified {
		t.Fatalf("nothing selected; decisions:\n%s", strings.Join(lg.Decision, "\n"))
	}
	sel := lg.Trials[lg.Selected-1]
	if sel.Spec.GPUsNeeded() != 1 || !meetsTarget(lg.Goal, &sel) || lg.Measure != "capacity" || lg.Goal.Goal != deploy.GoalCheapest {
		t.Errorf("selected trial %d %s (%d GPUs, runs %v); measured %v; decisions:\n%s", sel.N, sel.Key, sel.Spec.GPUsNeeded(), sel.Objectives,
			ev.specs, strings.Join(lg.Decision, "\n"))
	}
	if r := lg.SelectionRule; strings.Contains(r, "largest effective QPS") || strings.Contains(r, "every level has a valid") ||
		!strings.Contains(r, "the run's capacity") || !strings.Contains(r, "Goal cheapest at 12 req/s") {
		t.Errorf("a capacity log's selection rule: %s", r)
	}
	// One GPU has no other topology: the interaction sets the selection's
	// single replica against the baseline's two, with the cache on and off.
	if in := lg.Interaction; in == nil || len(in.Unmeasured) > 0 || !strings.Contains(in.Factors[0], "coloc-r2") || in.Cells[2] != lg.BaselineN {
		t.Errorf("interaction %+v; decisions:\n%s", in, strings.Join(lg.Decision, "\n"))
	}
	if base := lg.Trials[lg.BaselineN-1]; base.Objective <= sel.Objective {
		t.Errorf("the test needs the baseline to have more capacity: %v vs %v", base.Objective, sel.Objective)
	}
}
