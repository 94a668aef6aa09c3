// Package capacity finds a deployment's capacity: the largest sustained
// load that meets an SLO, by bracketing and bisection of the offered rate
// (open loop) or the clients in flight (closed loop), each load measured
// long enough to reach steady state. It decides nothing about engines:
// a Prober measures one load (predict in virtual time, replay against a
// live endpoint) and returns the level's per-request records; this package
// plans the measurement window, judges the probe and steers the search.
//
// The rules, plainly (Rule states them for records and reports):
//
//   - Window. A probe at offered rate λ runs for T = max(TTFT SLO / p,
//     MinMeasured / λ, MinWindowS) of model time after its warm-up, p being
//     the search's relative precision. At a rate a fraction p above what
//     the deployment serves, the queue then grows by p·T seconds of work
//     over the window, so its last requests wait at least the TTFT SLO: a
//     load more than p above capacity cannot pass by being measured too
//     briefly. A closed loop has no backlog to grow; its window is
//     MinMeasured requests or ClosedRounds per client, whichever is more.
//   - Warm-up. The eight session warm-ups (ids 0-7) and the measured
//     requests scheduled in the first WarmupFraction of the window, or in
//     the first WarmupLatencies median end-to-end latencies of the longest
//     seen in the search so far (the batch fills over about one), are left
//     out: the queues start empty, and those requests would flatter the
//     tail.
//   - Tail. p99 TTFT and p99 TPOT (nearest rank) over the window's
//     requests; with fewer than MinMeasured the p99 is reported as the
//     "max of n" it is.
//   - Steady state. The departure rate — requests completed between the
//     window's first arrival and the last arrival, over that span — must
//     reach the offered rate within SteadyTolerance: after the warm-up a
//     deployment that keeps up completes requests as fast as they arrive
//     (closed loop: window completions over their own span). A probe that meets the
//     SLO below that rate is flagged "not at steady state" and measured
//     again with a window twice as long; if it still falls short it
//     counts as failing. It is never shown as saturation at an SLO-meeting
//     latency.
//   - Search. Start at Start (a prediction, or 1); step up (down) by a
//     factor (2, or less from a good start; squared at each further step,
//     up to 16)
//     until a probe fails (passes); then bisect — geometrically for rates,
//     integers for clients — between the highest passing and lowest
//     failing probe until they are within p (rates) or one client. The
//     capacity is the highest passing load with a failing one within the
//     precision above it. A pass above a fail (noise near the boundary)
//     moves the bracket as measured: the result is always a load that was
//     measured to pass.
package capacity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// Modes and units.
const (
	Open   = "open"
	Closed = "closed"

	UnitRate    = "req/s"
	UnitClients = "concurrency"
)

// Defaults of the search and the window rule.
const (
	DefaultPrecision = 0.05
	// MinMeasured is the fewest window requests a p99 is estimated from:
	// below it the p99 is the largest or second largest request.
	MinMeasured = 200
	// MinWindowS is the shortest measurement window, model seconds.
	MinWindowS = 10.0
	// WarmupFraction of the window's requests (by schedule) precede it,
	// or WarmupLatencies median end-to-end latencies (the batch fills
	// over about one), whichever is longer.
	WarmupFraction  = 0.1
	WarmupLatencies = 2
	// SteadyTolerance is how far the departure rate may fall below the
	// offered rate at steady state.
	SteadyTolerance = replay.SteadyTolerance
	// ClosedRounds is how many requests each closed-loop client sends in
	// the window at least.
	ClosedRounds = 20
	// MinRate is the lowest rate an open-loop search probes.
	MinRate = 0.01
	// MaxProbes bounds a search.
	MaxProbes = 24
)

// Rule states the search for records, help texts and reports.
const Rule = "Capacity is the largest load that meets the SLO at steady state, found by bracketing (stepping up or down from a start, the step squared each time) " +
	"and bisection (geometric for rates, integers for clients) to a stated precision p. A rate is measured for " +
	"T = max(TTFT SLO / p, 200 requests, 10 s) of model time after a warm-up (the 8 session warm-ups, then 10% of the window or two median latencies, whichever is longer), " +
	"so a rate more than p above what the deployment serves queues past the TTFT SLO within the window; p99 TTFT and TPOT are over the " +
	"window's requests (\"max of n\" under 200); a rate whose departure rate (completions while requests arrive) falls more than 5% short of it while meeting the SLO is not at " +
	"steady state: measured again with twice the window, and failing if still short. The capacity is the highest passing load with a failing " +
	"load within p above it."

// Plan is one probe's measurement: how many requests to send (the eight
// session warm-ups included) and which of them the window excludes.
type Plan struct {
	Load     float64 `json:"load"` // offered req/s (open) or clients (closed)
	Requests int     `json:"requests"`
	// WarmupMs: measured requests scheduled earlier than this after the
	// first measured one are warm-up (open loop); WarmupRequests: the
	// first this many measured requests by schedule are (closed loop).
	WarmupMs       float64 `json:"warmup_ms,omitempty"`
	WarmupRequests int     `json:"warmup_requests,omitempty"`
	WindowS        float64 `json:"window_s,omitempty"`
}

// Options configure a search.
type Options struct {
	Mode      string
	SLO       slo.SLO
	Precision float64 // relative, for rates; 0: DefaultPrecision
	// Start is the first load probed (a prediction, say); 0: 1.
	Start float64
	// Step is the first bracketing factor (0: 2); 1+p suits a start
	// that is a good estimate (an earlier run's capacity).
	Step float64
	// Max bounds the load searched (0: 4096 req/s or clients): a load
	// that passes at Max reports Max as a lower bound.
	Max float64
	// E2EMs is a first estimate of the median end-to-end latency near
	// capacity (a prediction's), for the warm-up; 0: learnt from the probes.
	E2EMs float64
	// MinRequests raises every probe's measured requests (a user's
	// --requests); the window rule may ask for more.
	MinRequests int
	MaxProbes   int // 0: MaxProbes
	// Progress, when set, hears of each probe as it ends.
	Progress func(Probe)
}

// Probe is one measured load and its verdict.
type Probe struct {
	Load     float64 `json:"load"`
	Plan     Plan    `json:"plan"`
	Measured int     `json:"measured"` // window requests that completed
	Failed   int     `json:"failed"`   // window requests that did not
	// P99TTFTMs and P99TPOTMs are over the window's requests; Tail says
	// how to read them: "p99 of n" or "max of n".
	P99TTFTMs float64 `json:"p99_ttft_ms"`
	P99TPOTMs float64 `json:"p99_tpot_ms"`
	P50TTFTMs float64 `json:"p50_ttft_ms"`
	P50TPOTMs float64 `json:"p50_tpot_ms"`
	Tail      string  `json:"tail"`
	// DepartureQPS is window completions over their span; open loop:
	// Steady when it reaches the offered rate within SteadyTolerance.
	DepartureQPS float64 `json:"departure_qps"`
	// E2EP50Ms is the window's median end-to-end latency: later probes'
	// warm-ups last WarmupLatencies of the longest seen.
	E2EP50Ms float64 `json:"e2e_p50_ms"`
	Steady   bool    `json:"steady"`
	SLOMet   bool    `json:"slo_met"`
	Pass     bool    `json:"pass"`
	// Valid is the level's own verdict (replay.Verdict): a probe the host
	// distorted decides nothing and ends the search.
	Valid bool   `json:"valid"`
	Note  string `json:"note,omitempty"`
	// Retried: an earlier probe of this load met the SLO short of steady
	// state and this one measured it with twice the window.
	Retried bool `json:"retried,omitempty"`
}

// Result is a search's outcome, the JSON shape of --capacity.
type Result struct {
	Mode      string  `json:"mode"`
	Value     float64 `json:"value"`
	Unit      string  `json:"unit"`
	Precision float64 `json:"precision"`
	// Upper is the lowest load measured to fail (0: none failed, Value
	// is a lower bound at Max).
	Upper  float64 `json:"upper"`
	SLO    slo.SLO `json:"slo"`
	Probes []Probe `json:"probes"`
	// Bounded: Value passed and Upper failed within the precision.
	Bounded bool `json:"bounded"`
	// Outcome is how the search ended: OutcomeBounded, OutcomeAtMax (Value
	// is a lower bound), OutcomeNonePass (Value 0: even the smallest load
	// failed, at Upper) or OutcomeUnfinished (interrupted, or ended by a
	// probe the host distorted: Value and Upper, when set, are a bracket
	// wider than the precision asked).
	Outcome string `json:"outcome"`
	Note    string `json:"note,omitempty"`
	Rule    string `json:"rule"`
}

// How a search ended (Result.Outcome).
const (
	OutcomeBounded    = "bounded"
	OutcomeAtMax      = "at_max"
	OutcomeNonePass   = "none_pass"
	OutcomeUnfinished = "unfinished"
)

// Finished reports whether the search ended by its own rule, so that its
// Value and Upper bracket the capacity as the rule says: bounded within
// the precision, a lower bound at the largest load searched, or nothing
// passing. Results from before Outcome was recorded count as finished
// when Bounded.
func (r *Result) Finished() bool {
	switch r.Outcome {
	case OutcomeBounded, OutcomeAtMax, OutcomeNonePass:
		return true
	case "":
		return r.Bounded
	}
	return false
}

// Record is a search's result as hone writes it (--capacity's -o json and
// --out file): what kind of figure it is, where it was measured, the
// first probe's record without its runs (Header: deployment, workload,
// SLO, time scale and cache procedure, what hone gate compares), and the
// result.
type Record struct {
	Kind     schema.Kind    `json:"kind"`
	Source   string         `json:"source"` // profile or endpoint
	Header   *schema.Record `json:"record,omitempty"`
	Capacity *Result        `json:"capacity"`
}

// HeaderOf is rec without what differs from probe to probe: its runs,
// outcomes, verdict, the probe's load and request count, and its clock.
func HeaderOf(rec *schema.Record) *schema.Record {
	if rec == nil {
		return nil
	}
	h := *rec
	h.Runs, h.Outcomes, h.Validation, h.Verdict, h.Attribution, h.Shard = nil, nil, schema.Validation{}, schema.Verdict{}, nil, nil
	h.Workload.QPS, h.Workload.Concurrency, h.Workload.Requests = nil, nil, 0
	h.Clock, h.StartedAt, h.FinishedAt = schema.Stamp{}, time.Time{}, time.Time{}
	return &h
}

// Prober measures one load as planned and returns its level record with
// per-request detail (Requests), or an error that ends the search.
type Prober func(ctx context.Context, p Plan) (*schema.LevelRecord, error)

type startKey struct{}

// WithStart returns ctx carrying a first load for the searches run under
// it (a prediction), which an evaluator that searches may use.
func WithStart(ctx context.Context, load float64) context.Context {
	return context.WithValue(ctx, startKey{}, load)
}

// StartFrom is the load WithStart put in ctx, 0 when none.
func StartFrom(ctx context.Context) float64 {
	v, _ := ctx.Value(startKey{}).(float64)
	return v
}

// ErrInvalid is wrapped by a search a host-distorted probe ended.
var ErrInvalid = errors.New("a probe's measurement is invalid")

// PlanFor is the window rule for load x (see the package comment), given
// the longest median end-to-end latency seen so far (0: none yet).
func PlanFor(mode string, x float64, o Options, e2eMs float64) Plan {
	prec := o.precision()
	minN := max(MinMeasured, o.MinRequests)
	if mode == Closed {
		c := int(x)
		n := max(minN, ClosedRounds*c)
		warm := max(int(math.Ceil(WarmupFraction*float64(n))), WarmupLatencies*c)
		return Plan{Load: x, Requests: replay.Sessions + warm + n, WarmupRequests: warm}
	}
	t := max(o.SLO.TTFTMillis/1000/prec, float64(minN)/x, MinWindowS)
	return planOpen(x, t, e2eMs)
}

// planOpen is an open-loop probe at x req/s with a window of windowS
// model seconds after a warm-up of WarmupFraction of it or WarmupLatencies
// median latencies, whichever is longer.
func planOpen(x, windowS, e2eMs float64) Plan {
	n := int(math.Ceil(x * windowS))
	warmMs := max(WarmupFraction*windowS*1000, WarmupLatencies*e2eMs)
	warm := int(math.Ceil(warmMs / 1000 * x))
	return Plan{Load: x, Requests: replay.Sessions + warm + n, WarmupMs: float64(warm) / x * 1000, WindowS: windowS}
}

func (o Options) precision() float64 {
	if o.Precision > 0 {
		return o.Precision
	}
	return DefaultPrecision
}

// Judge reads a probe's level record by the window rule.
func Judge(mode string, p Plan, lr *schema.LevelRecord, target slo.SLO) Probe {
	pr := Probe{Load: p.Load, Plan: p, Valid: lr.Verdict.Valid}
	if !pr.Valid {
		var why []string
		for _, r := range lr.Verdict.Reasons {
			why = append(why, r.String())
		}
		pr.Note = fmt.Sprint("invalid: ", why)
	}
	var meas []schema.RequestRecord
	first := math.Inf(1)
	for _, q := range lr.Requests {
		if q.ID >= replay.Sessions {
			meas = append(meas, q)
			first = math.Min(first, q.ScheduledMs)
		}
	}
	sort.SliceStable(meas, func(i, j int) bool { return meas[i].ScheduledMs < meas[j].ScheduledMs })
	var ttft, tpot, e2e []float64
	winStart := math.Inf(1)
	for i, q := range meas {
		if mode == Closed && i < p.WarmupRequests || mode != Closed && q.ScheduledMs-first < p.WarmupMs-1e-6 { // the tolerance: schedules are sums of floats
			continue
		}
		winStart = math.Min(winStart, q.ScheduledMs)
		if q.Outcome != schema.OutcomeOK || !q.Valid || q.TTFTMs == nil || q.FinishMs == nil {
			pr.Failed++
			continue
		}
		ttft = append(ttft, *q.TTFTMs)
		if q.TPOTMs != nil && q.OutputTokens >= 2 {
			tpot = append(tpot, *q.TPOTMs)
		}
		e2e = append(e2e, *q.FinishMs-q.ScheduledMs)
	}
	pr.Measured = len(ttft)
	if pr.Measured == 0 {
		pr.Note = join(pr.Note, "no window request completed")
		return pr
	}
	pr.P99TTFTMs, pr.P50TTFTMs = slo.NearestRank(ttft, 99), slo.NearestRank(ttft, 50)
	if len(tpot) > 0 {
		pr.P99TPOTMs, pr.P50TPOTMs = slo.NearestRank(tpot, 99), slo.NearestRank(tpot, 50)
	}
	pr.Tail = "p99 of " + strconv.Itoa(pr.Measured)
	if pr.Measured < MinMeasured {
		pr.Tail = "max of " + strconv.Itoa(pr.Measured)
	}
	pr.DepartureQPS = departures(mode, meas, winStart)
	pr.E2EP50Ms = slo.Median(e2e)
	pr.SLOMet = target.Met(pr.P99TTFTMs, pr.P99TPOTMs)
	pr.Steady = mode == Closed || pr.DepartureQPS >= (1-SteadyTolerance)*p.Load
	switch {
	case pr.Failed > 0:
		pr.Note = join(pr.Note, fmt.Sprintf("%d window requests failed", pr.Failed))
	case pr.SLOMet && !pr.Steady:
		pr.Note = join(pr.Note, fmt.Sprintf("not at steady state: departures %.3g req/s of %.3g offered while the SLO was met", pr.DepartureQPS, p.Load))
	}
	pr.Pass = pr.Valid && pr.Failed == 0 && pr.SLOMet && pr.Steady
	return pr
}

// departures is the rate at which the deployment completed requests while
// they kept arriving. Open loop: measured requests (any) completing between
// the window's first arrival and the last arrival, over that span — after
// the warm-up the deployment is at steady state, and one that keeps up
// completes requests as fast as they arrive; one that does not, at its own
// pace. Closed loop: the window requests' completions over their span.
func departures(mode string, meas []schema.RequestRecord, winStart float64) float64 {
	lastArrival := math.Inf(-1)
	var fin []float64
	for _, q := range meas {
		lastArrival = math.Max(lastArrival, q.ScheduledMs)
		if q.FinishMs != nil && q.ScheduledMs >= winStart {
			fin = append(fin, *q.FinishMs)
		}
	}
	if mode != Closed {
		if lastArrival <= winStart {
			return 0
		}
		n := 0
		for _, q := range meas {
			if q.FinishMs != nil && *q.FinishMs >= winStart && *q.FinishMs <= lastArrival {
				n++
			}
		}
		return float64(n) / ((lastArrival - winStart) / 1000)
	}
	sort.Float64s(fin)
	if len(fin) < 2 || fin[len(fin)-1] <= fin[0] {
		return 0
	}
	return float64(len(fin)-1) / ((fin[len(fin)-1] - fin[0]) / 1000)
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Search finds the capacity by Options' mode. An invalid probe ends it
// with ErrInvalid (the partial result comes back with it).
func Search(ctx context.Context, probe Prober, o Options) (*Result, error) {
	s, err := newSearch(ctx, probe, o)
	if err != nil {
		return nil, err
	}
	lo, hi, done, err := s.bracket()
	if done || err != nil {
		return s.res, err
	}
	return s.bisect(lo, hi)
}

// search is one capacity search: its settings, the result so far, and the
// largest median E2E latency seen (which sizes the next probe's plan).
type search struct {
	ctx     context.Context
	probe   Prober
	o       Options
	mode    string
	prec    float64
	maxLoad float64
	limit   int // most probes
	e2e     float64
	res     *Result
}

// newSearch checks o and fills in its defaults.
func newSearch(ctx context.Context, probe Prober, o Options) (*search, error) {
	mode := o.Mode
	if mode == "" {
		mode = Open
	}
	if mode != Open && mode != Closed {
		return nil, fmt.Errorf("capacity mode %q: want %s or %s", mode, Open, Closed)
	}
	prec := o.precision()
	if !(prec > 0 && prec < 1) {
		return nil, fmt.Errorf("capacity precision %v: want a fraction in (0, 1)", prec)
	}
	maxLoad := o.Max
	if maxLoad <= 0 {
		maxLoad = 4096
	}
	limit := o.MaxProbes
	if limit <= 0 {
		limit = MaxProbes
	}
	res := &Result{Mode: mode, Unit: UnitRate, Precision: prec, SLO: o.SLO, Rule: Rule, Outcome: OutcomeUnfinished}
	if mode == Closed {
		res.Unit = UnitClients
	}
	return &search{ctx: ctx, probe: probe, o: o, mode: mode, prec: prec, maxLoad: maxLoad, limit: limit, e2e: o.E2EMs, res: res}, nil
}

// norm caps a load at the largest searched; closed loop, to a whole number
// of clients, at least one.
func (s *search) norm(x float64) float64 {
	x = math.Min(x, s.maxLoad)
	if s.mode == Closed {
		return math.Max(1, math.Round(x))
	}
	return x
}

// measure probes load x and judges it. An open-loop probe that met the SLO
// without keeping up is probed again over a window twice as long.
func (s *search) measure(x float64) (Probe, error) {
	o, mode, res := s.o, s.mode, s.res
	if len(res.Probes) >= s.limit {
		return Probe{}, fmt.Errorf("capacity search: %d probes without a bracket within the precision", s.limit)
	}
	p := PlanFor(mode, x, o, s.e2e)
	lr, err := s.probe(s.ctx, p)
	if err != nil {
		return Probe{}, err
	}
	pr := Judge(mode, p, lr, o.SLO)
	if mode == Open && pr.Valid && pr.SLOMet && !pr.Steady && pr.Failed == 0 {
		s.record(pr)
		p2 := planOpen(x, 2*p.WindowS, s.e2e)
		if lr, err = s.probe(s.ctx, p2); err != nil {
			return Probe{}, err
		}
		pr = Judge(mode, p2, lr, o.SLO)
		pr.Retried = true
	}
	s.record(pr)
	if !pr.Valid {
		return pr, fmt.Errorf("%w: %s at %g %s: %s", ErrInvalid, mode, x, res.Unit, pr.Note)
	}
	return pr, nil
}

// record reports a probe, keeps it, and raises the E2E latency seen.
func (s *search) record(pr Probe) {
	if s.o.Progress != nil {
		s.o.Progress(pr)
	}
	s.res.Probes = append(s.res.Probes, pr)
	s.e2e = max(s.e2e, pr.E2EP50Ms)
}

// bracket finds lo, the highest passing load, and hi, the lowest failing:
// it steps by the factor, which squares while the probes keep passing
// (failing), so a good start brackets in two probes and a poor one in a
// few more. done is true when the search ended without a bracket (the
// largest load passed, or none does).
func (s *search) bracket() (lo, hi float64, done bool, err error) {
	res, mode := s.res, s.mode
	x := s.norm(s.o.Start)
	if s.o.Start <= 0 {
		x = 1
	}
	step := s.o.Step
	if !(step > 1) {
		step = 2
	}
	for {
		pr, err := s.measure(x)
		if err != nil {
			return lo, hi, true, err
		}
		if pr.Pass {
			lo = x
			if x >= s.maxLoad {
				res.Value, res.Note, res.Outcome = x, fmt.Sprintf("the largest load searched (%g %s) passed: a lower bound", s.maxLoad, res.Unit), OutcomeAtMax
				return lo, hi, true, nil
			}
			if hi > 0 {
				return lo, hi, false, nil
			}
			next := x * step
			if mode == Closed {
				next = math.Max(next, x+1)
			}
			x, step = s.norm(next), min(step*step, 16)
			continue
		}
		hi = x
		if lo > 0 {
			return lo, hi, false, nil
		}
		next := x / step
		if mode == Closed {
			if x <= 1 {
				res.Upper, res.Note, res.Outcome = x, "no load meets the SLO: one client fails it", OutcomeNonePass
				return lo, hi, true, nil
			}
			next = math.Min(math.Floor(next), x-1)
		} else if next < MinRate {
			res.Upper, res.Note, res.Outcome = x, fmt.Sprintf("no load meets the SLO down to %g req/s", x), OutcomeNonePass
			return lo, hi, true, nil
		}
		x, step = s.norm(next), min(step*step, 16)
	}
}

// bisect narrows the bracket [lo, hi] to the precision.
func (s *search) bisect(lo, hi float64) (*Result, error) {
	res, mode := s.res, s.mode
	for !within(mode, lo, hi, s.prec) {
		x := math.Sqrt(lo * hi)
		if mode == Closed {
			x = math.Floor((lo + hi) / 2)
		}
		pr, err := s.measure(x)
		if err != nil {
			res.Value, res.Upper = lo, hi
			return res, err
		}
		if pr.Pass {
			lo = x
		} else {
			hi = x
		}
	}
	res.Value, res.Upper, res.Bounded, res.Outcome = lo, hi, true, OutcomeBounded
	return res, nil
}

func within(mode string, lo, hi, prec float64) bool {
	if mode == Closed {
		return hi-lo <= max(1, math.Floor(prec*lo))
	}
	return hi <= lo*(1+prec)
}

// ReplayProber is a Prober that measures each probe as a one-run, one-level
// replay (replay.Run) with o's endpoint, workload shape and settings, open
// loop at the planned rate or closed loop of the planned clients (mode).
// kept, when set, receives every probe's record, whatever its outcome.
func ReplayProber(o replay.Options, mode string, kept func(*schema.Record)) Prober {
	return func(ctx context.Context, p Plan) (*schema.LevelRecord, error) {
		po := o
		po.Runs, po.QPS, po.Concurrency = 1, []float64{p.Load}, nil
		if mode == Closed {
			po.QPS, po.Concurrency = nil, []int{int(p.Load)}
		}
		po.Workload.Requests = p.Requests
		rec, err := replay.Run(ctx, po)
		if rec != nil && kept != nil {
			kept(rec)
		}
		if rec == nil || len(rec.Runs) != 1 || len(rec.Runs[0].Levels) != 1 {
			if err == nil {
				err = fmt.Errorf("capacity probe at %g: the replay returned no level", p.Load)
			}
			return nil, err
		}
		return &rec.Runs[0].Levels[0], err
	}
}
