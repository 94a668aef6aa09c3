package predict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// GridRow is one ranked point as hone predict --grid's table and -o json
// show it.
type GridRow struct {
	Rank      int          `json:"rank"`
	Name      string       `json:"name"`
	GPUs      int          `json:"gpus"`
	Objective float64      `json:"objective"`
	Cost      *float64     `json:"gpu_seconds_per_request"`
	P99TTFTMs *float64     `json:"p99_ttft_ms"` // at the objective's level
	P99TPOTMs *float64     `json:"p99_tpot_ms"`
	Pareto    bool         `json:"pareto"`
	Edge      string       `json:"edge,omitempty"` // why the objective is too close to call
	Error     string       `json:"error,omitempty"`
	Spec      *deploy.Spec `json:"spec"`
}

// GridResult is hone predict --grid's -o json (Ranked cut to --top) and
// --out (Points: every point, ranked, with its record's levels).
type GridResult struct {
	Kind      schema.Kind     `json:"kind"`
	Profile   string          `json:"profile"`
	Base      string          `json:"base"`
	Budget    int             `json:"budget"`
	Specs     int             `json:"specs"`
	Failed    int             `json:"failed"`
	SLO       slo.SLO         `json:"slo"`
	QPS       []float64       `json:"qps"`
	Workload  schema.Workload `json:"workload"`
	Axes      Axes            `json:"axes"`
	Ranked    []GridRow       `json:"ranked,omitempty"`
	Pareto    []GridRow       `json:"pareto"`
	Points    []Point         `json:"points,omitempty"`
	Rule      string          `json:"rule"`
	Predicted string          `json:"predicted"`
}

const gridRule = "ranked by objective (largest effective QPS among passing levels) descending, then GPU-seconds per request at that level, then GPUs, then name; the Pareto front holds the specs with an objective above 0 that no other spec matches or beats on both objective and cost while beating on one"

// gridCapacityRule states --grid --capacity's order for the spec's
// objective.
func gridCapacityRule(o deploy.Objective) string {
	what := "capacity (the largest load meeting the SLO at steady state) descending"
	switch o.Goal {
	case deploy.GoalCheapest:
		what = fmt.Sprintf("spec.objective cheapest at %g req/s: the specs whose capacity reaches %g req/s first, fewest GPUs first, then capacity descending", o.TargetQPS, o.TargetQPS)
	case deploy.GoalPerGPU:
		what = "capacity per GPU descending, then capacity"
	}
	return "ranked by " + what + ", then GPU-seconds per request at capacity (GPUs / capacity), then GPUs, then name; the Pareto front holds the specs no other matches or beats on both capacity and cost while beating on one"
}

// grid is hone predict --grid: every spec of o.Spec's grid on o.Axes,
// predicted, ranked and printed.
func (o CommandOptions) grid(ctx context.Context) error {
	specs, err := Grid(o.Spec, o.Axes)
	if err != nil {
		var ae *replay.ParamError
		if errors.As(err, &ae) {
			return AxisUsage(ae)
		}
		return usage.Errorf("--grid: %v", err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	pp := &gridProgress{w: o.Log, tty: term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("CI") == "", start: time.Now()}
	points := Evaluate(ctx, specs, o.Options, pp.update)
	pp.close(len(specs))

	res, ranked, failed, row := o.gridResult(points, len(specs))
	if o.OutPath != "" {
		all := res
		all.Points = ranked
		b, err := json.MarshalIndent(all, "", "  ")
		if err != nil {
			return fmt.Errorf("encode grid: %w", err)
		}
		if err := atomicfile.Write(o.OutPath, append(b, '\n')); err != nil {
			return fmt.Errorf("write grid %s: %w", o.OutPath, err)
		}
	}
	for _, p := range ranked[:min(o.Top, len(ranked))] {
		res.Ranked = append(res.Ranked, row(p))
	}
	if o.Format == "json" {
		if err := jsonout.Write(o.Out, res); err != nil {
			return err
		}
	} else {
		writeGridTable(o.Out, res, o.Options.Profile, failed, o.OutPath)
	}
	switch {
	case ctx.Err() != nil:
		return usage.Failed{Msg: fmt.Sprintf("interrupted: the specs not predicted are marked (%d of %d failed or skipped)", len(failed), len(specs))}
	case len(failed) == len(specs):
		return usage.Failed{Msg: fmt.Sprintf("no spec of the grid could be predicted: %s: %s", failed[0].Name(), failed[0].Err)}
	}
	return nil
}

// gridResult ranks the grid's points: the result without its Ranked rows
// (Pareto set), the points ranked, those that failed, and the row of a
// point.
func (o CommandOptions) gridResult(points []Point, specs int) (res GridResult, ranked, failed []Point, row func(Point) GridRow) {
	ranked = Rank(points)
	rule := gridRule
	if o.Options.Capacity != nil {
		ranked = RankGoal(points, Goal(o.Spec.Objective))
		rule = gridCapacityRule(o.Spec.Objective)
	}
	front := ParetoFront(points)
	onFront := map[string]bool{}
	for _, p := range front {
		onFront[p.Name()] = true
	}
	res = GridResult{Kind: Kind, Profile: o.Options.Profile.Name, Base: o.Spec.Name, Budget: o.Spec.GPUs.Budget, Specs: specs,
		SLO: o.Options.SLO, QPS: o.Options.QPS, Workload: o.Options.Workload, Axes: o.Axes, Rule: rule, Predicted: Note}
	for _, p := range ranked {
		if p.Err != "" {
			failed = append(failed, p)
		}
	}
	res.Failed = len(failed)
	rank := map[string]int{}
	for i, p := range ranked {
		rank[p.Name()] = i + 1
	}
	row = func(p Point) GridRow {
		r := GridRow{Rank: rank[p.Name()], Name: p.Name(), GPUs: p.GPUs, Objective: p.Objective, Cost: p.CostGPUSecPerReq,
			Pareto: onFront[p.Name()], Edge: p.Edge, Error: p.Err, Spec: p.Spec}
		if l := objectiveLevel(p); l != nil {
			r.P99TTFTMs, r.P99TPOTMs = &l.P99TTFTMs, &l.P99TPOTMs
		}
		return r
	}
	for _, p := range front {
		res.Pareto = append(res.Pareto, row(p))
	}
	return res, ranked, failed, row
}

// objectiveLevel is the level a point's objective comes from: the passing
// level with the largest effective QPS; nil when none passed.
func objectiveLevel(p Point) *schema.LevelRecord {
	if c := p.Capacity; c != nil {
		for _, pr := range c.Probes {
			if pr.Pass && pr.Load == c.Value {
				l := &schema.LevelRecord{}
				l.P99TTFTMs, l.P99TPOTMs = pr.P99TTFTMs, pr.P99TPOTMs
				return l
			}
		}
		return nil
	}
	if p.Record == nil || len(p.Record.Runs) == 0 {
		return nil
	}
	var best *schema.LevelRecord
	levels := p.Record.Runs[0].Levels
	for i := range levels {
		if l := &levels[i]; l.Passed && (best == nil || l.EffectiveQPS > best.EffectiveQPS) {
			best = l
		}
	}
	return best
}

// gridProgress shows a grid's progress on stderr: on a terminal a line
// redrawn in place with the rate and ETA; elsewhere a line every 10 s; and
// a summary line at the end.
type gridProgress struct {
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time
	drawn bool
}

func (p *gridProgress) update(done, total int) {
	el := time.Since(p.start)
	rate := float64(done) / max(el.Seconds(), 1e-9)
	eta := time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second)
	line := fmt.Sprintf("predict: %d/%d specs  %.0f specs/s  ETA %s", done, total, rate, eta)
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K"+line)
		p.drawn = true
		return
	}
	if time.Since(p.last) >= 10*time.Second && done < total {
		if !p.last.IsZero() {
			fmt.Fprintln(p.w, line)
		}
		p.last = time.Now()
	}
}

func (p *gridProgress) close(total int) {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintf(p.w, "predict: %d specs in %s\n", total, time.Since(p.start).Round(time.Millisecond))
}

// AxisUsage is a rejected grid axis as hone's commands report it: a
// usage.Error naming its --grid-* flag, the value and what it wants.
func AxisUsage(ae *replay.ParamError) error {
	return usage.Errorf("--grid-%s: %q is invalid: want %s", ae.Field, ae.Value, ae.Want)
}
