package predict

import (
	"cmp"
	"slices"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/schema"
)

// Point is one predicted spec of a grid.
type Point struct {
	Spec   *deploy.Spec   `json:"spec"`
	Record *schema.Record `json:"record,omitempty"`
	// Objective is the largest effective QPS among passing levels, 0 when
	// none passed.
	Objective float64 `json:"objective"`
	// CostGPUSecPerReq is the GPU-seconds per request at the objective's
	// level; nil when no level passed.
	CostGPUSecPerReq *float64 `json:"gpu_seconds_per_request"`
	GPUs             int      `json:"gpus"`            // GPUs the spec's workers use
	Err              string   `json:"error,omitempty"` // why the spec could not be predicted
	// Edge says why the objective is too close to call (see Edge): a
	// deciding level's p99 within EdgeMargin of an SLO limit. "" when not.
	Edge string `json:"edge,omitempty"`
	// Capacity, with Options.Capacity, is the search whose value is the
	// objective (cost: GPUs / capacity, GPU-seconds per request served at
	// capacity).
	Capacity *capacity.Result `json:"capacity,omitempty"`
}

// Goal is what a ranking optimises (deploy.Objective): the most
// capacity within the budget (deploy.GoalCapacity, the default); the
// fewest GPUs whose capacity meets the target rate — the cheapest per
// GPU-hour, and per request at that rate — then the most capacity
// (deploy.GoalCheapest); or the most capacity per GPU (deploy.GoalPerGPU).
type Goal deploy.Objective

// Meets reports whether an objective (a capacity) serves g's target rate.
func (g Goal) Meets(objective float64) bool { return objective > 0 && objective >= g.TargetQPS }

// Compare orders two (objective, GPUs) by g, best first (negative: a
// before b), the objective last; ties are 0.
func (g Goal) Compare(aObj float64, aGPUs int, bObj float64, bGPUs int) int {
	if c := g.CompareBy(g.Meets(aObj), aObj, aGPUs, g.Meets(bObj), bObj, bGPUs); c != 0 {
		return c
	}
	return cmp.Compare(bObj, aObj)
}

// CompareBy orders a before b (negative) by what g adds to the objective:
// cheapest, meeting the target (am, bm: as the caller judges it, e.g. in
// every run) then fewer GPUs; per GPU, objective per GPU. 0: g does not
// tell them apart.
func (g Goal) CompareBy(am bool, aObj float64, aGPUs int, bm bool, bObj float64, bGPUs int) int {
	switch g.Goal {
	case deploy.GoalCheapest:
		switch {
		case am && !bm:
			return -1
		case bm && !am:
			return 1
		case am && bm:
			return cmp.Compare(aGPUs, bGPUs)
		}
	case deploy.GoalPerGPU:
		if aGPUs > 0 && bGPUs > 0 {
			return cmp.Compare(bObj/float64(bGPUs), aObj/float64(aGPUs))
		}
	}
	return 0
}

// RankGoal orders points best first by g, then as Rank does.
func RankGoal(points []Point, g Goal) []Point {
	out := Rank(points)
	slices.SortStableFunc(out, func(a, b Point) int { return g.Compare(a.Objective, a.GPUs, b.Objective, b.GPUs) })
	return out
}

// Name is the point's spec name, "" without a spec.
func (p Point) Name() string {
	if p.Spec == nil {
		return ""
	}
	return p.Spec.Name
}

// Rank orders points best first: higher objective, then lower cost (a
// point without a cost after every point with one), then fewer GPUs, then
// name. It returns a new slice.
func Rank(points []Point) []Point {
	out := slices.Clone(points)
	slices.SortStableFunc(out, func(a, b Point) int {
		if c := cmp.Compare(b.Objective, a.Objective); c != 0 {
			return c
		}
		if c := compareCost(a.CostGPUSecPerReq, b.CostGPUSecPerReq); c != 0 {
			return c
		}
		if c := cmp.Compare(a.GPUs, b.GPUs); c != 0 {
			return c
		}
		return cmp.Compare(a.Name(), b.Name())
	})
	return out
}

// compareCost orders costs ascending, nil last.
func compareCost(a, b *float64) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return cmp.Compare(*a, *b)
}

// ParetoFront is the points no other point beats on both objective
// (higher is better) and cost (GPU-seconds per request at the objective's
// level, lower is better): a point is dropped when another has an
// objective at least as high and a cost at least as low, and is strictly
// better in one. Points with no cost or an objective of 0 are never on the
// front. The front is ordered by cost ascending (so objective ascending),
// ties by Rank's order.
func ParetoFront(points []Point) []Point {
	var cands []Point
	for _, p := range points {
		if p.CostGPUSecPerReq != nil && p.Objective > 0 {
			cands = append(cands, p)
		}
	}
	var front []Point
	for _, p := range cands {
		if !slices.ContainsFunc(cands, func(q Point) bool { return dominates(q, p) }) {
			front = append(front, p)
		}
	}
	front = Rank(front)
	slices.SortStableFunc(front, func(a, b Point) int { return cmp.Compare(*a.CostGPUSecPerReq, *b.CostGPUSecPerReq) })
	return front
}

// dominates reports whether q beats p: no worse on both, better on one.
func dominates(q, p Point) bool {
	qc, pc := *q.CostGPUSecPerReq, *p.CostGPUSecPerReq
	return q.Objective >= p.Objective && qc <= pc && (q.Objective > p.Objective || qc < pc)
}
