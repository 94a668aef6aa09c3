package predict

import (
	"slices"
	"testing"

	"github.com/hone-llm/hone/deploy"
)

func pt(name string, objective float64, cost float64, gpus int) Point {
	p := Point{Spec: &deploy.Spec{Name: name}, Objective: objective, GPUs: gpus}
	if cost >= 0 {
		p.CostGPUSecPerReq = &cost
	}
	return p
}

func names(points []Point) []string {
	var out []string
	for _, p := range points {
		out = append(out, p.Name())
	}
	return out
}

func TestRank(t *testing.T) {
	in := []Point{
		pt("none-b", 0, -1, 1),
		pt("cheap", 8, 0.5, 2),
		pt("best", 12, 0.9, 4),
		pt("dear", 8, 0.7, 2),
		pt("nocost", 8, -1, 1),
		pt("same-cost-fewer-gpus", 8, 0.5, 1),
		pt("none-a", 0, -1, 1),
		pt("tie-b", 8, 0.5, 2),
		{Spec: &deploy.Spec{Name: "failed"}, Err: "boom", GPUs: 1},
	}
	orig := slices.Clone(in)
	got := names(Rank(in))
	want := []string{"best", "same-cost-fewer-gpus", "cheap", "tie-b", "dear", "nocost", "failed", "none-a", "none-b"}
	if !slices.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if !slices.Equal(names(in), names(orig)) {
		t.Error("Rank reordered its argument")
	}
}

func TestParetoFront(t *testing.T) {
	in := []Point{
		pt("a", 4, 0.25, 1),  // cheapest: on
		pt("b", 8, 0.5, 2),   // on
		pt("c", 8, 0.6, 2),   // b is as good and cheaper: off
		pt("d", 6, 0.5, 2),   // b is better at the same cost: off
		pt("e", 16, 1.0, 4),  // best: on
		pt("f", 12, 1.2, 4),  // e beats it on both: off
		pt("g", 8, 0.5, 1),   // ties b exactly: on, as b is
		pt("h", 0, 0.1, 1),   // objective 0: never on
		pt("i", 20, -1, 8),   // no cost: never on
		pt("j", 10, 0.75, 2), // between b and e: on
	}
	got := names(ParetoFront(in))
	want := []string{"a", "g", "b", "j", "e"}
	if !slices.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if f := ParetoFront([]Point{pt("x", 0, 1, 1), pt("y", 3, -1, 1)}); len(f) != 0 {
		t.Errorf("front of points without a cost or an objective: %v", names(f))
	}
	if f := ParetoFront(nil); len(f) != 0 {
		t.Errorf("front of nothing: %v", names(f))
	}
}
