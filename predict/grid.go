package predict

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
)

// Axes are the values a grid tries for each engine knob, on every topology.
// A nil list keeps the base spec's value. In MaxNumSeqs,
// MaxNumBatchedTokens and GPUMemoryUtilization, 0 means the engine's own
// default (the knob left unset).
type Axes struct {
	// TP is the tensor-parallel sizes a pool may use; nil: every power of
	// two within the budget (a model's attention heads divide by those,
	// and seldom by 3 or 5).
	TP                   []int     `json:"tp"`
	MaxNumSeqs           []int     `json:"max_num_seqs"`
	MaxNumBatchedTokens  []int     `json:"max_num_batched_tokens"`
	PrefixCaching        []bool    `json:"prefix_caching"`
	Routing              []string  `json:"routing"`       // deploy.SessionAffinity, deploy.RoundRobin
	EnforceEager         []bool    `json:"enforce_eager"` // false: CUDA graphs; true: eager
	GPUMemoryUtilization []float64 `json:"gpu_memory_utilization"`
}

// DefaultAxes is the grid hone predict --grid searches by default: two
// batch sizes, two chunk sizes, prefix caching on and off, both routing
// policies, CUDA graphs and eager mode, at vLLM's default memory fraction.
func DefaultAxes() Axes {
	return Axes{
		MaxNumSeqs:           []int{64, 256},
		MaxNumBatchedTokens:  []int{2048, 8192},
		PrefixCaching:        []bool{true, false},
		Routing:              []string{deploy.SessionAffinity, deploy.RoundRobin},
		EnforceEager:         []bool{false, true},
		GPUMemoryUtilization: []float64{0.9},
	}
}

// MaxGridSpecs bounds a grid: a larger one is refused before a spec is
// built, with the count, so the axes can be narrowed.
const MaxGridSpecs = 100_000

// AxisFlags are the axes as comma-separated lists, the way the command
// line spells them; an empty string keeps DefaultAxes' list (TP: every
// power of two within the budget).
type AxisFlags struct {
	TP                   string
	MaxNumSeqs           string
	MaxNumBatchedTokens  string
	PrefixCaching        string // true,false (also on,off)
	Routing              string // session_affinity,round_robin
	EnforceEager         string // false,true
	GPUMemoryUtilization string
}

// Axes parses the lists. An error is a *replay.ParamError whose Field is the axis, named as the --grid-AXIS flag spells it ("max-num-seqs").
func (f AxisFlags) Axes() (Axes, error) {
	a := DefaultAxes()
	var err error
	set := func(do func() error) {
		if err == nil {
			err = do()
		}
	}
	set(func() (e error) { a.TP, e = parseList(f.TP, "tp", a.TP, parseTP); return })
	set(func() (e error) {
		a.MaxNumSeqs, e = parseList(f.MaxNumSeqs, "max-num-seqs", a.MaxNumSeqs, parseCount)
		return
	})
	set(func() (e error) {
		a.MaxNumBatchedTokens, e = parseList(f.MaxNumBatchedTokens, "max-num-batched-tokens", a.MaxNumBatchedTokens, parseCount)
		return
	})
	set(func() (e error) {
		a.PrefixCaching, e = parseList(f.PrefixCaching, "prefix-caching", a.PrefixCaching, parseSwitch)
		return
	})
	set(func() (e error) { a.Routing, e = parseList(f.Routing, "routing", a.Routing, parseRouting); return })
	set(func() (e error) {
		a.EnforceEager, e = parseList(f.EnforceEager, "enforce-eager", a.EnforceEager, parseSwitch)
		return
	})
	set(func() (e error) {
		a.GPUMemoryUtilization, e = parseList(f.GPUMemoryUtilization, "gpu-memory-utilization", a.GPUMemoryUtilization, parseFraction)
		return
	})
	if err != nil {
		return Axes{}, err
	}
	return a, nil
}

// parseList parses a comma-separated list with parse (which returns the
// wanted form on error); empty keeps def. Duplicates are refused: they
// would make equal specs.
func parseList[T comparable](s, axis string, def []T, parse func(string) (T, string)) ([]T, error) {
	if strings.TrimSpace(s) == "" {
		return def, nil
	}
	var out []T
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, want := parse(f)
		if want != "" {
			return nil, &replay.ParamError{Field: axis, Value: f, Want: want}
		}
		if slices.Contains(out, v) {
			return nil, &replay.ParamError{Field: axis, Value: f, Want: "each value once"}
		}
		out = append(out, v)
	}
	return out, nil
}

func parseTP(s string) (int, string) {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > deploy.MaxGPUBudget {
		return 0, fmt.Sprintf("a tensor-parallel size in 1..%d", deploy.MaxGPUBudget)
	}
	return v, ""
}

func parseCount(s string) (int, string) {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > 1<<30 {
		return 0, "a whole number >= 1 (0: the engine's default)"
	}
	return v, ""
}

func parseFraction(s string) (float64, string) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return 0, "a fraction in (0, 1] (0: the engine's default)"
	}
	return v, ""
}

func parseSwitch(s string) (bool, string) {
	switch strings.ToLower(s) {
	case "true", "on":
		return true, ""
	case "false", "off":
		return false, ""
	}
	return false, "true or false"
}

func parseRouting(s string) (string, string) {
	if s == deploy.SessionAffinity || s == deploy.RoundRobin {
		return s, ""
	}
	return "", deploy.SessionAffinity + " or " + deploy.RoundRobin
}

// validate checks axes built in code the way AxisFlags checks the flags.
func (a Axes) validate() error {
	check := func(axis string, n int, val func(i int) (string, string)) error {
		seen := map[string]bool{}
		for i := range n {
			v, want := val(i)
			if want != "" {
				return &replay.ParamError{Field: axis, Value: v, Want: want}
			}
			if seen[v] {
				return &replay.ParamError{Field: axis, Value: v, Want: "each value once"}
			}
			seen[v] = true
		}
		return nil
	}
	ints := func(axis string, vs []int, parse func(string) (int, string)) error {
		return check(axis, len(vs), func(i int) (string, string) {
			s := strconv.Itoa(vs[i])
			_, want := parse(s)
			return s, want
		})
	}
	for _, err := range []error{
		ints("tp", a.TP, parseTP),
		ints("max-num-seqs", a.MaxNumSeqs, parseCount),
		ints("max-num-batched-tokens", a.MaxNumBatchedTokens, parseCount),
		check("prefix-caching", len(a.PrefixCaching), func(i int) (string, string) { return strconv.FormatBool(a.PrefixCaching[i]), "" }),
		check("routing", len(a.Routing), func(i int) (string, string) { _, w := parseRouting(a.Routing[i]); return a.Routing[i], w }),
		check("enforce-eager", len(a.EnforceEager), func(i int) (string, string) { return strconv.FormatBool(a.EnforceEager[i]), "" }),
		check("gpu-memory-utilization", len(a.GPUMemoryUtilization), func(i int) (string, string) {
			s := strconv.FormatFloat(a.GPUMemoryUtilization[i], 'g', -1, 64)
			_, w := parseFraction(s)
			return s, w
		}),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// shape is one topology: colocated replicas × tp in pool, or
// disaggregated prefill and decode pools.
type shape struct {
	disaggregated   bool
	pool            deploy.Pool // colocated
	prefill, decode deploy.Pool
}

func (s shape) gpus() int {
	if s.disaggregated {
		return s.prefill.Replicas*s.prefill.TP + s.decode.Replicas*s.decode.TP
	}
	return s.pool.Replicas * s.pool.TP
}

// multiWorker reports whether a pool has more than one worker, the only
// case in which routing chooses anything.
func (s shape) multiWorker() bool {
	if s.disaggregated {
		return s.prefill.Replicas > 1 || s.decode.Replicas > 1
	}
	return s.pool.Replicas > 1
}

// shapes yields every topology within budget: colocated replicas × tp by
// tp then replicas, then disaggregated pools by the prefill pool's tp and
// replicas, then the decode pool's. Every pool's workers use one TP from
// tps. A P2pNcclConnector base pairs ranks one to one, so its pools share
// a TP.
func shapes(budget int, tps []int, p2p bool) iter.Seq[shape] {
	return func(yield func(shape) bool) {
		for _, tp := range tps {
			for r := 1; r*tp <= budget; r++ {
				if !yield(shape{pool: deploy.Pool{Replicas: r, TP: tp}}) {
					return
				}
			}
		}
		var pools []deploy.Pool // every pool that leaves at least one GPU for the other
		for _, tp := range tps {
			for r := 1; r*tp <= budget-1; r++ {
				pools = append(pools, deploy.Pool{Replicas: r, TP: tp})
			}
		}
		for _, p := range pools {
			for _, d := range pools {
				if p.Replicas*p.TP+d.Replicas*d.TP > budget || p2p && p.TP != d.TP {
					continue
				}
				if !yield(shape{disaggregated: true, prefill: p, decode: d}) {
					return
				}
			}
		}
	}
}

// knobPoint is one choice on every knob axis.
type knobPoint struct {
	seqs, batched int
	caching       *bool
	routing       string
	eager         bool
	mem           float64
}

// knobPoints lists the knob choices for base in axis order, the last axis
// varying fastest. Routing varies only where multi is true; a pair with
// max_num_batched_tokens below max_num_seqs is left out (vLLM refuses it:
// a step must fit one token of every sequence).
func knobPoints(base *deploy.Spec, a Axes, multi bool) []knobPoint {
	k := base.Knobs
	seqs := orBase(a.MaxNumSeqs, k.MaxNumSeqs)
	batched := orBase(a.MaxNumBatchedTokens, k.MaxNumBatchedTokens)
	var caching []*bool
	if a.PrefixCaching == nil {
		caching = []*bool{k.PrefixCaching}
	}
	for _, c := range a.PrefixCaching {
		caching = append(caching, &c)
	}
	routing := orBase(a.Routing, base.Routing.Policy)
	if !multi {
		routing = []string{base.Routing.Policy}
	}
	eager := orBase(a.EnforceEager, k.EnforceEager)
	mem := orBase(a.GPUMemoryUtilization, k.GPUMemoryUtilization)
	var out []knobPoint
	for _, s := range seqs {
		for _, b := range batched {
			if s > 0 && b > 0 && b < s {
				continue
			}
			for _, c := range caching {
				for _, r := range routing {
					for _, e := range eager {
						for _, m := range mem {
							out = append(out, knobPoint{seqs: s, batched: b, caching: c, routing: r, eager: e, mem: m})
						}
					}
				}
			}
		}
	}
	return out
}

func orBase[T any](axis []T, base T) []T {
	if axis == nil {
		return []T{base}
	}
	return axis
}

// Grid enumerates every deployment of base's model within base's GPU
// budget: colocated data-parallel replicas × TP, and disaggregated prefill
// and decode pools (at least one worker each) with a TP per pool, each
// using the whole budget or less; and on each, every point of axes' knob
// lists. Routing is varied only where a pool has more than one worker.
//
// Each spec is a deep copy of base with only the varied fields changed, a
// Name describing the point ("colo-dp2-tp1-seqs256-bt2048-cache-aff-graphs-mem0.9",
// "pd-p1tp1-d2tp1-…"; a knob at the engine's default is left out), and
// validates. Its gpus.budget is the GPUs its workers use, and gpus.ids the
// first that many of base's ids, in order, so cost and deployment both see
// what the topology holds. A disaggregated spec keeps a disaggregated
// base's KV connector, or gets NixlConnector; its first side-channel (or
// kv) port moves past the workers' ports where they would collide. Setting
// enforce_eager clears a cudagraph_mode that contradicts it. A grid
// searches healthy deployments: emulator.faults are dropped.
//
// The order is deterministic: topologies (colocated by tp then replicas,
// then disaggregated by the prefill pool's tp and replicas, then the
// decode pool's), and within each the knob axes in Axes' field order, the
// last fastest.
func Grid(base *deploy.Spec, axes Axes) ([]*deploy.Spec, error) {
	if err := base.Validate(); err != nil {
		return nil, fmt.Errorf("base spec: %w", err)
	}
	if err := axes.validate(); err != nil {
		return nil, err
	}
	budget := base.GPUs.Budget
	tps := axes.TP
	if tps == nil {
		for tp := 1; tp <= budget; tp *= 2 {
			tps = append(tps, tp)
		}
	}
	p2p := base.Topology.Kind == deploy.Disaggregated && base.KV.Name == deploy.P2pNcclConnector
	single, multi := knobPoints(base, axes, false), knobPoints(base, axes, true)
	if len(multi) == 0 {
		return nil, fmt.Errorf("grid: no point: every max_num_batched_tokens is below every max_num_seqs (vLLM refuses those)")
	}
	total := 0
	for t := range shapes(budget, tps, p2p) {
		if t.multiWorker() {
			total += len(multi)
		} else {
			total += len(single)
		}
		if total > MaxGridSpecs {
			return nil, fmt.Errorf("grid: over %d specs within a budget of %d GPUs; narrow the axes", MaxGridSpecs, budget)
		}
	}
	out := make([]*deploy.Spec, 0, total)
	names := make(map[string]bool, total)
	for t := range shapes(budget, tps, p2p) {
		ks := single
		if t.multiWorker() {
			ks = multi
		}
		for _, k := range ks {
			s := point(base, t, k)
			if err := s.Validate(); err != nil {
				return nil, fmt.Errorf("grid point %s: %w", s.Name, err)
			}
			if names[s.Name] {
				return nil, fmt.Errorf("grid point %s: name given twice", s.Name)
			}
			names[s.Name] = true
			out = append(out, s)
		}
	}
	return out, nil
}

// point builds one grid spec.
func point(base *deploy.Spec, t shape, k knobPoint) *deploy.Spec {
	s := cloneSpec(base)
	n := t.gpus()
	s.GPUs = deploy.GPUs{Budget: n, IDs: slices.Clone(base.GPUs.IDs[:n])}
	if !t.disaggregated {
		s.Topology = deploy.Topology{Kind: deploy.Colocated, Replicas: t.pool.Replicas, TP: t.pool.TP}
		s.KV = deploy.KVConnector{}
	} else {
		p, d := t.prefill, t.decode
		s.Topology = deploy.Topology{Kind: deploy.Disaggregated, Prefill: &p, Decode: &d}
		if base.Topology.Kind != deploy.Disaggregated {
			s.KV = deploy.KVConnector{Name: deploy.NixlConnector, SideChannelPort: deploy.DefaultSideChannelPort}
		}
		placeKVPorts(s)
	}
	s.Knobs.MaxNumSeqs = k.seqs
	s.Knobs.MaxNumBatchedTokens = k.batched
	s.Knobs.PrefixCaching = nil
	if k.caching != nil {
		c := *k.caching
		s.Knobs.PrefixCaching = &c
	}
	s.Routing.Policy = k.routing
	s.Knobs.EnforceEager = k.eager
	if m := s.Knobs.CUDAGraphMode; k.eager && m != "NONE" || !k.eager && m == "NONE" {
		s.Knobs.CUDAGraphMode = ""
	}
	s.Knobs.GPUMemoryUtilization = k.mem
	s.Emulator.Faults = nil // a grid searches healthy deployments (and a prediction refuses faults)
	s.Name = pointName(t, k)
	return s
}

// placeKVPorts moves a disaggregated spec's first KV port past the proxy's
// and workers' ports when its range (one port per tensor-parallel rank)
// would overlap them.
func placeKVPorts(s *deploy.Spec) {
	port := &s.KV.SideChannelPort
	if s.KV.Name == deploy.P2pNcclConnector {
		port = &s.KV.KVPort
	}
	n := s.Network
	workers := s.Topology.Prefill.Replicas + s.Topology.Decode.Replicas
	ranks := s.GPUsNeeded()
	for range 3 {
		lo, hi := *port, *port+ranks-1
		switch {
		case lo <= n.WorkerPort+workers-1 && n.WorkerPort <= hi:
			*port = n.WorkerPort + workers
		case n.ProxyPort >= lo && n.ProxyPort <= hi:
			*port = n.ProxyPort + 1
		case s.KV.DiscoveryPort >= lo && s.KV.DiscoveryPort <= hi:
			*port = s.KV.DiscoveryPort + 1
		default:
			return
		}
	}
}

// pointName spells a grid point: topology, then each knob that is not at
// the engine's default. Routing is named only where it chooses anything.
func pointName(t shape, k knobPoint) string {
	var b strings.Builder
	if !t.disaggregated {
		fmt.Fprintf(&b, "colo-dp%d-tp%d", t.pool.Replicas, t.pool.TP)
	} else {
		fmt.Fprintf(&b, "pd-p%dtp%d-d%dtp%d", t.prefill.Replicas, t.prefill.TP, t.decode.Replicas, t.decode.TP)
	}
	if k.seqs > 0 {
		fmt.Fprintf(&b, "-seqs%d", k.seqs)
	}
	if k.batched > 0 {
		fmt.Fprintf(&b, "-bt%d", k.batched)
	}
	if k.caching == nil || *k.caching {
		b.WriteString("-cache")
	} else {
		b.WriteString("-nocache")
	}
	if t.multiWorker() {
		if k.routing == deploy.RoundRobin {
			b.WriteString("-rr")
		} else {
			b.WriteString("-aff")
		}
	}
	if k.eager {
		b.WriteString("-eager")
	} else {
		b.WriteString("-graphs")
	}
	if k.mem > 0 {
		b.WriteString("-mem" + strconv.FormatFloat(k.mem, 'g', -1, 64))
	}
	return b.String()
}

// cloneSpec deep-copies a spec through its JSON form, which carries every
// field.
func cloneSpec(s *deploy.Spec) *deploy.Spec {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("predict: spec is not JSON: %v", err))
	}
	var out deploy.Spec
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("predict: spec round trip: %v", err))
	}
	return &out
}

// Evaluate predicts every spec under opts, without per-request records,
// on all CPUs, and returns one Point per spec in specs' order. A spec that
// cannot be predicted gets a Point with Err set and objective 0; once ctx
// is done, the specs not yet started get ctx's error. progress, when not
// nil, is called after each prediction with the count done, from one
// goroutine at a time.
//
// With opts.Capacity and no start of its own, the first spec's capacity is
// searched first and every other search starts there with a step of
// GridStep: a grid's configs are variations of one deployment, and a search
// that starts near its answer brackets it in a few probes instead of
// climbing from 1 req/s through loads far beyond it, whose queues are
// costly to simulate.
func Evaluate(ctx context.Context, specs []*deploy.Spec, opts Options, progress func(done, total int)) []Point {
	opts.KeepRequests = false
	out := make([]Point, len(specs))
	if c := opts.Capacity; c != nil && c.Start <= 0 && len(specs) > 0 {
		first := PointOf(specs[0], opts)
		co := *c
		if first.Objective > 0 {
			co.Start, co.Step = first.Objective, GridStep
		}
		opts.Capacity = &co
	}
	next := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
	)
	for range min(runtime.GOMAXPROCS(0), len(specs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = PointOf(specs[i], opts)
				if progress != nil {
					mu.Lock()
					done++
					progress(done, len(specs))
					mu.Unlock()
				}
			}
		}()
	}
	i := 0
feed:
	for ; i < len(specs) && ctx.Err() == nil; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	for ; i < len(specs); i++ {
		out[i] = Point{Spec: specs[i], GPUs: specs[i].GPUsNeeded(), Err: "not predicted: " + ctx.Err().Error()}
	}
	return out
}

// GridStep is the bracketing step of a grid's capacity searches that
// start at the first spec's capacity.
const GridStep = 1.5

// PointOf predicts one spec as a grid point: its record, objective, cost
// and edge, or why it could not be predicted.
func PointOf(s *deploy.Spec, opts Options) Point {
	p := Point{Spec: s, GPUs: s.GPUsNeeded()}
	if opts.Capacity != nil {
		co := *opts.Capacity
		co.SLO, co.Progress = opts.SLO, nil
		res, err := Capacity(context.Background(), s, opts, co)
		if err != nil {
			p.Err = err.Error()
			return p
		}
		p.Capacity, p.Objective = res, res.Value
		if res.Value > 0 {
			c := float64(p.GPUs) / res.Value // GPU-seconds per request served at capacity
			p.CostGPUSecPerReq = &c
		}
		return p
	}
	rec, err := Run(s, opts)
	if err != nil {
		p.Err = err.Error()
		return p
	}
	p.Record = rec
	if len(rec.Runs) > 0 {
		p.Objective = rec.Runs[0].Objective
		p.CostGPUSecPerReq = rec.Runs[0].GPUSecondsPerRequest
	}
	p.Edge = Edge(rec, opts.SLO, EdgeMargin)
	return p
}
