package predict

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// edgeRecord is a one-run record of levels (offered QPS, p99 TTFT, p99
// TPOT), each passing where it meets target, complete and valid; effective
// QPS is the offered.
func edgeRecord(target slo.SLO, levels ...[3]float64) *schema.Record {
	run := schema.RunRecord{}
	for _, l := range levels {
		lr := schema.LevelRecord{Level: slo.Level{OfferedQPS: l[0], P99TTFTMs: l[1], P99TPOTMs: l[2], EffectiveQPS: l[0]}, Complete: true}
		lr.Passed = target.Met(l[1], l[2])
		run.Levels = append(run.Levels, lr)
	}
	return &schema.Record{Runs: []schema.RunRecord{run}}
}

func TestEdge(t *testing.T) {
	target := slo.SLO{TTFTMillis: 500, TPOTMillis: 30}
	for _, c := range []struct {
		name   string
		rec    *schema.Record
		want   []string // substrings; none: not an edge
		mutate func(*schema.Record)
	}{
		{name: "clear pass then clear fail", rec: edgeRecord(target, [3]float64{8, 300, 20}, [3]float64{16, 700, 20})},
		{name: "pass 2.2% under is not within it", rec: edgeRecord(target, [3]float64{8, 489, 29.3}, [3]float64{16, 700, 20})},
		{name: "pass just under TTFT", rec: edgeRecord(target, [3]float64{8, 300, 20}, [3]float64{16, 496.5, 20}, [3]float64{32, 900, 20}),
			want: []string{"p99 TTFT 496.5 ms at 16 req/s passes within 2% under the 500 ms limit"}},
		{name: "pass just under TPOT", rec: edgeRecord(target, [3]float64{8, 100, 29.5}),
			want: []string{"p99 TPOT 29.5 ms at 8 req/s passes within 2% under the 30 ms limit"}},
		{name: "fail just over above the objective", rec: edgeRecord(target, [3]float64{8, 300, 20}, [3]float64{16, 509, 20}),
			want: []string{"p99 TTFT 509.0 ms at 16 req/s fails within 2% over the limit"}},
		{name: "fail over both, one far", rec: edgeRecord(target, [3]float64{8, 300, 20}, [3]float64{16, 505, 40})},
		{name: "fail over both, both near", rec: edgeRecord(target, [3]float64{8, 300, 20}, [3]float64{16, 505, 30.2}),
			want: []string{"p99 TTFT 505.0 ms and p99 TPOT 30.2 ms at 16 req/s fails within 2% over the limit"}},
		{name: "near miss below the objective decides nothing", rec: edgeRecord(target, [3]float64{4, 505, 20}, [3]float64{8, 300, 20})},
		{name: "nothing passes, the first level near", rec: edgeRecord(target, [3]float64{4, 502, 20}, [3]float64{8, 900, 20}),
			want: []string{"at 4 req/s fails within"}},
		{name: "an incomplete level is not a near miss", rec: edgeRecord(target, [3]float64{8, 300, 20}, [3]float64{16, 505, 20}),
			mutate: func(r *schema.Record) { r.Runs[0].Levels[1].Complete = false }},
		{name: "no runs", rec: &schema.Record{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.mutate != nil {
				c.mutate(c.rec)
			}
			got := Edge(c.rec, target, EdgeMargin)
			if len(c.want) == 0 && got != "" {
				t.Fatalf("edge %q, want none", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("edge %q, want it to say %q", got, w)
				}
			}
		})
	}
}

// TestEdgeOfRegretMiss: the one config of the 4-GPU regret grid whose
// measurement missed its prediction by more than 1% (colocated DP3
// without a cache, round robin: predicted 8.438 req/s, measured 6.258,
// p99 TTFT ~501 ms at 16 req/s) is predicted too close to call, and the
// grid's predicted best is not.
func TestEdgeOfRegretMiss(t *testing.T) {
	w := schema.Workload{Seed: 1, Requests: 40, InputTokens: 8192, UncachedTokens: 1024, OutputTokens: 128}
	opts := Options{Workload: w, QPS: []float64{4, 8, 16, 32}, SLO: slo.SLO{TTFTMillis: 500, TPOTMillis: 30}}
	spec := func(replicas, tp int, cache bool) *deploy.Spec {
		s, err := deploy.ParseSpec([]byte(fmt.Sprintf(`name: t
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: 4}
topology: {kind: colocated, replicas: %d, tp: %d}
knobs: {prefix_caching: %t}
routing: {policy: round_robin}
network: {proxy_port: 18400, worker_port: 18410}
emulator: {profile: qwen2.5-coder-0.5b-l4, time_scale: 1}
`, replicas, tp, cache)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	miss := PointOf(spec(3, 1, false), opts)
	if miss.Err != "" {
		t.Fatal(miss.Err)
	}
	if !strings.Contains(miss.Edge, "p99 TTFT 496.5 ms at 16 req/s passes within 2% under the 500 ms limit") {
		t.Errorf("DP3 without cache: objective %.3f, edge %q; want the 16 req/s level's 496.5 ms named", miss.Objective, miss.Edge)
	}
	best := PointOf(spec(2, 2, true), opts)
	if best.Err != "" || best.Edge != "" {
		t.Errorf("DP2 TP2 with cache: objective %.3f, edge %q (%s); want a clear call", best.Objective, best.Edge, best.Err)
	}
}
