package predict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/slo"
)

// baseSpec is an emulated colocated spec on budget GPUs with the given ids.
func baseSpec(t *testing.T, budget int, ids string) *deploy.Spec {
	t.Helper()
	s, err := deploy.ParseSpec(fmt.Appendf(nil, `
name: base
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: %d, ids: %s}
topology: {kind: colocated, replicas: 1, tp: 1}
knobs: {prefix_caching: true, max_model_len: 8192}
routing: {policy: session_affinity}
network: {proxy_port: 18400, worker_port: 18410}
emulator: {profile: qwen2.5-coder-0.5b-l4, time_scale: 0.25}
`, budget, ids))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// topologyOf is the topology part of a grid name ("colo-dp2-tp1", "pd-p1tp1-d2tp1").
func topologyOf(name string) string {
	return strings.Join(strings.Split(name, "-")[:3], "-")
}

// TestGridCounts checks the grid against counts made by hand. DefaultAxes
// has 2 max_num_seqs × 2 max_num_batched_tokens × 2 prefix caching × 2
// eager × 1 memory = 16 knob points, × 2 routing policies where a pool
// has more than one worker: 16 per single-worker topology, 32 per other.
//
// Budget 2, TP in {1, 2}: colocated dp1-tp1, dp2-tp1 (2 workers), dp1-tp2;
// disaggregated p1tp1-d1tp1. 3 single + 1 multi: 3×16 + 32 = 80.
//
// Budget 4, TP in {1, 2, 4}: colocated dp1..4-tp1, dp1..2-tp2, dp1-tp4 = 7
// (multi: dp2-tp1, dp3-tp1, dp4-tp1, dp2-tp2 = 4). Disaggregated pools of
// at most 3 GPUs: 1x1, 2x1, 3x1, 1x2 (replicas x tp); pairs within 4 GPUs:
// prefill 1x1 with any of the 4; 2x1 and 1x2 each with 1x1, 2x1, 1x2; 3x1
// with 1x1: 4+3+3+1 = 11 (single-worker: 1x1|1x2 with 1x1|1x2 = 4; multi
// 7). 7 single + 11 multi: 7×16 + 11×32 = 464.
func TestGridCounts(t *testing.T) {
	for _, tc := range []struct {
		budget     int
		ids        string
		want       int
		topologies []string
	}{
		{2, "[0, 1]", 80, []string{"colo-dp1-tp1", "colo-dp2-tp1", "colo-dp1-tp2", "pd-p1tp1-d1tp1"}},
		{4, "[0, 1, 2, 3]", 464, []string{
			"colo-dp1-tp1", "colo-dp2-tp1", "colo-dp3-tp1", "colo-dp4-tp1", "colo-dp1-tp2", "colo-dp2-tp2", "colo-dp1-tp4",
			"pd-p1tp1-d1tp1", "pd-p1tp1-d2tp1", "pd-p1tp1-d3tp1", "pd-p1tp1-d1tp2",
			"pd-p2tp1-d1tp1", "pd-p2tp1-d2tp1", "pd-p2tp1-d1tp2",
			"pd-p3tp1-d1tp1",
			"pd-p1tp2-d1tp1", "pd-p1tp2-d2tp1", "pd-p1tp2-d1tp2",
		}},
	} {
		t.Run(fmt.Sprint(tc.budget), func(t *testing.T) {
			specs, err := Grid(baseSpec(t, tc.budget, tc.ids), DefaultAxes())
			if err != nil {
				t.Fatal(err)
			}
			if len(specs) != tc.want {
				t.Errorf("%d specs, want %d", len(specs), tc.want)
			}
			var topos []string
			per := map[string]int{}
			for _, s := range specs {
				tp := topologyOf(s.Name)
				if !slices.Contains(topos, tp) {
					topos = append(topos, tp)
				}
				per[tp]++
			}
			if !slices.Equal(topos, tc.topologies) {
				t.Errorf("topologies in order:\n got %v\nwant %v", topos, tc.topologies)
			}
			for _, tp := range topos {
				s := specs[slices.IndexFunc(specs, func(s *deploy.Spec) bool { return topologyOf(s.Name) == tp })]
				want := 16
				if multi(s) {
					want = 32
				}
				if per[tp] != want {
					t.Errorf("%s: %d specs, want %d", tp, per[tp], want)
				}
			}
			checkSpecs(t, specs)
		})
	}
}

func multi(s *deploy.Spec) bool {
	t := s.Topology
	if t.Kind == deploy.Colocated {
		return t.Replicas > 1
	}
	return t.Prefill.Replicas > 1 || t.Decode.Replicas > 1
}

// checkSpecs: every spec validates, through its YAML too; names are
// unique; no two specs are equal apart from their names.
func checkSpecs(t *testing.T, specs []*deploy.Spec) {
	t.Helper()
	names := map[string]bool{}
	bodies := map[string]string{}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if _, err := deploy.Render(s, deploy.RenderOptions{}); err != nil {
			t.Errorf("%s: render: %v", s.Name, err)
		}
		if names[s.Name] {
			t.Errorf("name %s given twice", s.Name)
		}
		names[s.Name] = true
		c := cloneSpec(s)
		c.Name = ""
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := bodies[string(b)]; ok {
			t.Errorf("%s and %s are the same spec", other, s.Name)
		}
		bodies[string(b)] = s.Name
		if s.GPUs.Budget != s.GPUsNeeded() {
			t.Errorf("%s: budget %d, want the %d GPUs its workers use", s.Name, s.GPUs.Budget, s.GPUsNeeded())
		}
		if !multi(s) && !strings.Contains(s.Name, "-aff-") && !strings.Contains(s.Name, "-rr-") {
			continue
		}
		if !multi(s) {
			t.Errorf("%s: a single worker per pool names a routing policy", s.Name)
		}
	}
}

func TestGridNamesAndFields(t *testing.T) {
	base := baseSpec(t, 4, "[2, 3, 5, 7]")
	specs, err := Grid(base, DefaultAxes())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*deploy.Spec{}
	for _, s := range specs {
		byName[s.Name] = s
	}
	if got := specs[0].Name; got != "colo-dp1-tp1-seqs64-bt2048-cache-graphs-mem0.9" {
		t.Errorf("first spec %s", got)
	}
	s := byName["colo-dp2-tp1-seqs256-bt8192-nocache-rr-eager-mem0.9"]
	if s == nil {
		t.Fatal("no colo-dp2-tp1-seqs256-bt8192-nocache-rr-eager-mem0.9")
	}
	want := cloneSpec(base)
	want.Name = s.Name
	want.GPUs = deploy.GPUs{Budget: 2, IDs: []int{2, 3}}
	want.Topology.Replicas = 2
	want.Knobs.MaxNumSeqs, want.Knobs.MaxNumBatchedTokens = 256, 8192
	want.Knobs.PrefixCaching = new(false)
	want.Routing.Policy = deploy.RoundRobin
	want.Knobs.EnforceEager = true
	want.Knobs.GPUMemoryUtilization = 0.9
	if !reflect.DeepEqual(s, want) {
		t.Errorf("spec differs from base in more than the varied fields:\n got %+v\nwant %+v", s, want)
	}

	pd := byName["pd-p1tp2-d2tp1-seqs64-bt2048-cache-aff-graphs-mem0.9"]
	if pd == nil {
		t.Fatal("no pd-p1tp2-d2tp1-seqs64-bt2048-cache-aff-graphs-mem0.9")
	}
	if pd.KV.Name != deploy.NixlConnector || pd.KV.SideChannelPort != deploy.DefaultSideChannelPort {
		t.Errorf("kv_connector %+v, want NixlConnector on %d", pd.KV, deploy.DefaultSideChannelPort)
	}
	if *pd.Topology.Prefill != (deploy.Pool{Replicas: 1, TP: 2}) || *pd.Topology.Decode != (deploy.Pool{Replicas: 2, TP: 1}) ||
		!slices.Equal(pd.GPUs.IDs, []int{2, 3, 5, 7}) {
		t.Errorf("topology %+v %+v, ids %v", *pd.Topology.Prefill, *pd.Topology.Decode, pd.GPUs.IDs)
	}
	plan, err := deploy.Render(pd, deploy.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var gpus [][]int
	for _, w := range plan.Workers {
		gpus = append(gpus, w.GPUs)
	}
	if !reflect.DeepEqual(gpus, [][]int{{2, 3}, {5}, {7}}) {
		t.Errorf("workers' GPUs %v", gpus)
	}

	// Deep copies: changing one spec changes neither base nor another.
	*specs[1].Knobs.PrefixCaching = false
	specs[1].GPUs.IDs[0] = 99
	if !*base.Knobs.PrefixCaching || base.GPUs.IDs[0] != 2 || !*specs[0].Knobs.PrefixCaching || specs[0].GPUs.IDs[0] != 2 {
		t.Error("grid specs share memory with base or with each other")
	}

	again, err := Grid(base, DefaultAxes())
	if err != nil {
		t.Fatal(err)
	}
	for i := range again {
		if again[i].Name != specs[i].Name {
			t.Fatalf("order differs at %d: %s then %s", i, specs[i].Name, again[i].Name)
		}
	}
}

// A disaggregated base keeps its connector; side-channel ports move past
// the workers' ports when they would collide; faults and a contradicting
// cudagraph_mode go.
func TestGridDisaggregatedBase(t *testing.T) {
	base, err := deploy.LoadSpec("../deploy/testdata/specs/emulator-disagg-1p2d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base.KV.LoadFailurePolicy = "recompute"
	// Workers on 5597..5599 miss the side channel's 5600..5602; a fourth
	// worker would take 5600.
	base.Network.WorkerPort = 5597
	base.GPUs = deploy.GPUs{Budget: 4, IDs: []int{0, 1, 2, 3}}
	base.Knobs.CUDAGraphMode = "PIECEWISE"
	specs, err := Grid(base, Axes{EnforceEager: []bool{false, true}})
	if err != nil {
		t.Fatal(err)
	}
	checkSpecs(t, specs)
	// The 18 topologies of TestGridCounts' budget 4, eager and not.
	if len(specs) != 2*18 {
		t.Errorf("%d specs, want 36", len(specs))
	}
	for _, s := range specs {
		if len(s.Emulator.Faults) != 0 {
			t.Errorf("%s: faults %v", s.Name, s.Emulator.Faults)
		}
		if s.Knobs.EnforceEager && s.Knobs.CUDAGraphMode != "" || !s.Knobs.EnforceEager && s.Knobs.CUDAGraphMode != "PIECEWISE" {
			t.Errorf("%s: eager %t, cudagraph_mode %q", s.Name, s.Knobs.EnforceEager, s.Knobs.CUDAGraphMode)
		}
		if s.Topology.Kind == deploy.Colocated {
			if s.KV != (deploy.KVConnector{}) {
				t.Errorf("%s: colocated with kv_connector %+v", s.Name, s.KV)
			}
			continue
		}
		if s.KV.LoadFailurePolicy != "recompute" {
			t.Errorf("%s: kv_connector %+v, want the base's", s.Name, s.KV)
		}
		want := 5600
		if workers := s.Topology.Prefill.Replicas + s.Topology.Decode.Replicas; workers > 3 {
			want = 5597 + workers
		}
		if s.KV.SideChannelPort != want {
			t.Errorf("%s: side channel %d, want %d", s.Name, s.KV.SideChannelPort, want)
		}
	}
	// Nil axes keep the base's knobs: the names say so.
	if got := specs[0].Name; got != "colo-dp1-tp1-nocache-graphs" {
		t.Errorf("first spec %s", got)
	}
}

func TestGridSkipsBatchSmallerThanSeqs(t *testing.T) {
	specs, err := Grid(baseSpec(t, 1, "[0]"), Axes{MaxNumSeqs: []int{256, 4096}, MaxNumBatchedTokens: []int{2048, 8192}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	want := []string{"colo-dp1-tp1-seqs256-bt2048-cache-graphs", "colo-dp1-tp1-seqs256-bt8192-cache-graphs",
		"colo-dp1-tp1-seqs4096-bt8192-cache-graphs"}
	if !slices.Equal(names, want) {
		t.Errorf("got %v\nwant %v", names, want)
	}
}

func TestGridRefuses(t *testing.T) {
	if _, err := Grid(baseSpec(t, 1024, "[]"), DefaultAxes()); err == nil || !strings.Contains(err.Error(), "narrow the axes") {
		t.Errorf("budget 1024: %v", err)
	}
	var ae *replay.ParamError
	if _, err := Grid(baseSpec(t, 2, "[0, 1]"), Axes{Routing: []string{"random"}}); !errors.As(err, &ae) || ae.Field != "routing" {
		t.Errorf("bad routing: %v", err)
	}
	if _, err := Grid(baseSpec(t, 2, "[0, 1]"), Axes{MaxNumSeqs: []int{64, 64}}); !errors.As(err, &ae) || ae.Field != "max-num-seqs" {
		t.Errorf("duplicate: %v", err)
	}
	bad := baseSpec(t, 2, "[0, 1]")
	bad.Name = "Bad Name"
	if _, err := Grid(bad, DefaultAxes()); err == nil || !strings.Contains(err.Error(), "spec.name") {
		t.Errorf("invalid base: %v", err)
	}
}

func TestAxisFlags(t *testing.T) {
	a, err := AxisFlags{TP: "1,2", MaxNumSeqs: " 32, 0", PrefixCaching: "on", Routing: "round_robin", EnforceEager: "false,true",
		GPUMemoryUtilization: "0.8,0.95"}.Axes()
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultAxes()
	want.TP, want.MaxNumSeqs, want.PrefixCaching, want.Routing = []int{1, 2}, []int{32, 0}, []bool{true}, []string{deploy.RoundRobin}
	want.GPUMemoryUtilization = []float64{0.8, 0.95}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("got %+v\nwant %+v", a, want)
	}
	if a, err := (AxisFlags{}).Axes(); err != nil || !reflect.DeepEqual(a, DefaultAxes()) {
		t.Errorf("empty flags: %+v %v", a, err)
	}
	for _, tc := range []struct {
		f    AxisFlags
		axis string
	}{
		{AxisFlags{TP: "0"}, "tp"},
		{AxisFlags{TP: "two"}, "tp"},
		{AxisFlags{MaxNumSeqs: "-1"}, "max-num-seqs"},
		{AxisFlags{MaxNumBatchedTokens: "1,,2"}, "max-num-batched-tokens"},
		{AxisFlags{PrefixCaching: "maybe"}, "prefix-caching"},
		{AxisFlags{Routing: "least_loaded"}, "routing"},
		{AxisFlags{EnforceEager: "true,on"}, "enforce-eager"},
		{AxisFlags{GPUMemoryUtilization: "1.5"}, "gpu-memory-utilization"},
		{AxisFlags{GPUMemoryUtilization: "NaN"}, "gpu-memory-utilization"},
	} {
		_, err := tc.f.Axes()
		var ae *replay.ParamError
		if !errors.As(err, &ae) || ae.Field != tc.axis {
			t.Errorf("%+v: %v, want an error on axis %s", tc.f, err, tc.axis)
		}
	}
}

// Evaluate keeps specs' order, reports progress once per spec and drops
// per-request records.
func TestEvaluate(t *testing.T) {
	specs, err := Grid(baseSpec(t, 2, "[0, 1]"), Axes{MaxNumSeqs: []int{256}, MaxNumBatchedTokens: []int{2048}, PrefixCaching: []bool{true},
		Routing: []string{deploy.SessionAffinity}, EnforceEager: []bool{false}})
	if err != nil {
		t.Fatal(err)
	}
	bad := cloneSpec(specs[0])
	bad.Name = "faulty"
	bad.Emulator.Faults = []string{"replica-0=crash-after=1"}
	specs = append(specs, bad)
	w := replay.DefaultWorkload()
	w.Requests = 24
	calls := 0
	points := Evaluate(context.Background(), specs, Options{Workload: w, QPS: []float64{1, 4}, SLO: slo.Default, KeepRequests: true}, func(done, total int) {
		calls++
		if done != calls || total != len(specs) {
			t.Errorf("progress(%d, %d) on call %d", done, total, calls)
		}
	})
	if calls != len(specs) || len(points) != len(specs) {
		t.Fatalf("%d progress calls, %d points, want %d", calls, len(points), len(specs))
	}
	for i, p := range points {
		if p.Spec != specs[i] || p.GPUs != specs[i].GPUsNeeded() {
			t.Errorf("point %d is %s with %d GPUs", i, p.Name(), p.GPUs)
		}
		if p.Spec == bad {
			if p.Err == "" || p.Record != nil || p.Objective != 0 {
				t.Errorf("faulty spec: %+v", p)
			}
			continue
		}
		if p.Err != "" {
			t.Errorf("%s: %s", p.Name(), p.Err)
			continue
		}
		if p.Record.Kind != Kind || len(p.Record.Runs) != 1 || len(p.Record.Runs[0].Levels) != 2 {
			t.Fatalf("%s: record kind %s, %d runs", p.Name(), p.Record.Kind, len(p.Record.Runs))
		}
		for _, l := range p.Record.Runs[0].Levels {
			if l.Requests != nil {
				t.Errorf("%s: %g req/s keeps its requests", p.Name(), l.OfferedQPS)
			}
		}
		if p.Objective != p.Record.Runs[0].Objective || p.CostGPUSecPerReq != p.Record.Runs[0].GPUSecondsPerRequest {
			t.Errorf("%s: objective %v cost %v, not the record's", p.Name(), p.Objective, p.CostGPUSecPerReq)
		}
	}
}

// A done context stops the grid: what is not started is marked, not run.
func TestEvaluateCanceled(t *testing.T) {
	specs, err := Grid(baseSpec(t, 2, "[0, 1]"), DefaultAxes())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	points := Evaluate(ctx, specs, Options{Workload: replay.DefaultWorkload(), QPS: []float64{1}, SLO: slo.Default}, nil)
	if len(points) != len(specs) {
		t.Fatalf("%d points for %d specs", len(points), len(specs))
	}
	skipped := 0
	for i, p := range points {
		if p.Spec != specs[i] {
			t.Fatalf("point %d is %s", i, p.Name())
		}
		if p.Err == "not predicted: context canceled" {
			skipped++
		}
	}
	if skipped != len(specs) {
		t.Errorf("%d of %d specs skipped after cancel", skipped, len(specs))
	}
}
