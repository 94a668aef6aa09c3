// Package predict evaluates a deployment spec without deploying it: the
// emulator's engine (its V1-style scheduler, prefix-cached KV blocks,
// preemption, cost profile and P/D handoff) runs as a discrete-event
// simulation in virtual time (emulator.Simulate), behind the proxy's own
// routing, driven by the replay workload. The result is a replay.Record of
// kind "predicted" whose levels are summarised by the same code a replay's
// are, so every consumer of records (optimizer, report, calibrate) reads a
// prediction and a measurement alike, and never confuses them: the kind
// and the profile travel with every figure.
//
// Command carries out hone predict (one spec, a trace, a capacity search
// or a --grid of specs ranked) and prints its table or JSON; cmd/hone
// only turns the flags into CommandOptions.
package predict

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// Kind is the replay.Record kind of a prediction.
const Kind = schema.KindPredicted

// Options are what a prediction depends on besides the spec.
type Options struct {
	// Profile is the cost model; nil: the spec's emulator.profile, or
	// emulator.DefaultProfile when it names none.
	Profile  *emulator.Profile
	Workload schema.Workload
	// QPS are the open-loop levels' offered rates; Concurrency, instead,
	// the closed-loop levels' clients (replay.GenerateClosed): one of the
	// two is given.
	QPS         []float64
	Concurrency []int
	// ClosedGapMs, for a closed loop, is from a request's last token at
	// the engine to the arrival of the request it releases (the client's
	// receipt, its send and both HTTP hops); 0: at once. The agreement
	// check with a live closed loop sets it from the run it compares with.
	ClosedGapMs float64
	SLO         slo.SLO
	// KeepRequests keeps every request's record in the result (grids drop
	// them to save memory; calibration needs them).
	KeepRequests bool
	// Capacity, when set, makes a grid point's objective its capacity
	// (Capacity: the largest load meeting SLO at steady state, searched
	// with these settings and SLO) instead of the largest effective QPS
	// among QPS's levels.
	Capacity *capacity.Options
	// Hops, when set, gives each request's delays that a live run had and
	// a prediction otherwise leaves out. The agreement check with the
	// live emulator and calibration set it from the run they compare
	// with; a prediction for a config not yet deployed leaves it nil.
	Hops func(qps float64, id int) Hop
}

// Hop is what one request's live run added to its schedule, in model ms
// of the level's clock.
type Hop struct {
	// ArriveMs: from the scheduled send to the first worker's receipt
	// (the client's lateness and the HTTP hops through the proxy).
	ArriveMs float64
	// DecodeHopMs: disaggregated, from the prefill leg's end to the decode
	// worker's receipt (the proxy's hop between the legs).
	DecodeHopMs float64
	// DecodeAtMs, when later than the prefill's end plus DecodeHopMs, is
	// the decode worker's measured receipt.
	DecodeAtMs float64
	// BackMs: from the engine's sampling of a token to the client's
	// receipt of it (the hop back through the proxy), added to the first
	// and the last token's times.
	BackMs float64
}

// Run predicts spec under opts: one run over every level, each level
// starting cold as a replay's does, as a record of kind "predicted".
func Run(spec *deploy.Spec, opts Options) (*schema.Record, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	prof, err := profileFor(spec, opts)
	if err != nil {
		return nil, err
	}
	levels, err := loadLevels(opts)
	if err != nil {
		return nil, err
	}
	w := opts.Workload
	if err := replay.ParamsOf(w, 1).Validate(); err != nil {
		return nil, err
	}
	cl, err := clusterOf(spec, prof)
	if err != nil {
		return nil, err
	}
	prompts, err := promptsFor(w)
	if err != nil {
		return nil, err
	}
	gpus := spec.GPUsNeeded()
	rec := header(spec, prof, opts, prompts)
	rr := schema.RunRecord{Run: 0}
	var bufs []promptBuf // each request's prompt and output tokens, reused level to level
	for _, l := range levels {
		lr, err := cl.level(prompts, l, opts, gpus, &bufs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", replay.LevelOf(l).Name(), err)
		}
		for _, r := range lr.Requests {
			rec.Outcomes[r.Outcome]++
			rec.Validation.Valid++
		}
		if !opts.KeepRequests {
			lr.Requests = nil
		}
		rr.Levels = append(rr.Levels, lr)
	}
	rec.Runs = []schema.RunRecord{rr}
	replay.Judge(rec)
	return rec, nil
}

// header is a predicted record of spec without runs: what a prediction
// states about itself, the deployment, the workload and the procedure.
func header(spec *deploy.Spec, prof *emulator.Profile, opts Options, prompts *replay.Prompts) *schema.Record {
	w := opts.Workload
	gpus := spec.GPUsNeeded()
	rec := &schema.Record{
		SchemaVersion: schema.SchemaVersion, Kind: Kind, VerdictRule: schema.VerdictRule,
		Backend: "predict: emulator engine in virtual time, profile " + prof.Name,
		Engine:  schema.EngineInfo{Endpoint: "virtual"},
		Model:   schema.Model{ID: spec.ServedName()}, Config: specConfig(spec),
		Hardware: map[string]any{"profile": prof.Name, "profile_source": prof.SourceKind(), "gpu": prof.GPU.Name},
		GPUs:     gpus, TimeScale: 1, SLO: opts.SLO,
		Workload: schema.WorkloadRecord{Workload: w, QPS: opts.QPS, Load: schema.LoadOpen, Runs: 1, Generator: replay.PrefixGenerator,
			PrewarmPolicy: "every level starts cold (fresh engines), then the schedule's 8 warm-up requests (ids 0-7), one per session, open it"},
		Cache: schema.CacheState{Procedure: schema.CacheReset,
			Detail: "virtual engines start every level empty: the prefix cache holds nothing, as after POST /reset_prefix_cache"},
		RequestTimeoutMs: float64(replay.DefaultRequestTimeout) / 1e6,
		CachedTokensRule: replay.CachedTokensAsReported,
		Outcomes:         map[string]int{}, Validation: schema.Validation{Reasons: map[string]int{}},
		StartedAt: time.Unix(0, 0).UTC(), FinishedAt: time.Unix(0, 0).UTC(),
	}
	if len(opts.Concurrency) > 0 {
		rec.Workload.QPS, rec.Workload.Load, rec.Workload.Concurrency = []float64{}, schema.LoadClosed, opts.Concurrency
	}
	rec.Workload.Sessions = prompts.Prefixes
	rec.Workload.SuffixVocab = prompts.VocabSize()
	return rec
}

// profileFor is opts.Profile, else the spec's emulator.profile, else
// emulator.DefaultProfile.
func profileFor(spec *deploy.Spec, opts Options) (*emulator.Profile, error) {
	if opts.Profile != nil {
		return opts.Profile, nil
	}
	name := spec.Emulator.Profile
	if name == "" {
		name = emulator.DefaultProfile
	}
	prof, err := emulator.LookupProfile(name)
	if err != nil {
		return nil, fmt.Errorf("emulator.profile: %w", err)
	}
	return prof, nil
}

// cluster is a spec's workers as emulator configs, with the proxy's
// routing.
type cluster struct {
	workers []emulator.Config
	names   []string
	// colocated, prefill and decode workers, by index into workers
	colo, pre, dec []int
	routing        string
	affinityTokens int
}

// clusterOf maps spec to engines the way `hone deploy up` starts emulated
// workers (deploy.Render, renderEmulator): the same names, roles, tensor
// parallelism and knobs, with the cost model prof. Knobs the engine has no
// term for are refused, naming the spec field.
func clusterOf(s *deploy.Spec, prof *emulator.Profile) (*cluster, error) {
	k := s.Knobs
	switch {
	case k.SpeculativeNgram != nil:
		return nil, fmt.Errorf("knobs.speculative_ngram: the engine model decodes one token per step")
	case len(k.ExtraArgs) > 0:
		return nil, fmt.Errorf("knobs.extra_args %q: the engine model reads no other engine arguments", k.ExtraArgs)
	case len(s.Emulator.Faults) > 0:
		return nil, fmt.Errorf("emulator.faults: a prediction models a healthy deployment")
	case k.CUDAGraphMode != "" && k.CUDAGraphMode != "NONE" && k.CUDAGraphMode != "FULL_AND_PIECEWISE" && k.CUDAGraphMode != "PIECEWISE":
		return nil, fmt.Errorf("knobs.cudagraph_mode %q: the engine model knows NONE (eager), PIECEWISE and FULL_AND_PIECEWISE", k.CUDAGraphMode)
	}
	c := &cluster{routing: s.Routing.Policy, affinityTokens: s.Routing.AffinityTokens}
	if c.affinityTokens <= 0 {
		c.affinityTokens = proxy.DefaultAffinityTokens
	}
	add := func(name string, role emulator.Role, tp int) *[]int {
		cfg := emulator.Config{Role: role, TensorParallelSize: max(tp, 1), MaxNumSeqs: k.MaxNumSeqs,
			MaxNumBatchedTokens: k.MaxNumBatchedTokens, MaxModelLen: k.MaxModelLen, BlockSize: k.BlockSize,
			GPUMemoryUtilization: k.GPUMemoryUtilization, DisablePrefixCaching: k.PrefixCaching != nil && !*k.PrefixCaching,
			EnforceEager: k.EnforceEager || k.CUDAGraphMode == "NONE", KVLoadFailurePolicy: s.KV.LoadFailurePolicy,
			ProfileValue: prof, Model: s.ServedName(), KVCacheDType: s.Precision.KVCacheDType}
		c.workers = append(c.workers, cfg)
		c.names = append(c.names, name)
		i := len(c.workers) - 1
		switch role {
		case emulator.RoleColocated:
			c.colo = append(c.colo, i)
		case emulator.RolePrefill:
			c.pre = append(c.pre, i)
		default:
			c.dec = append(c.dec, i)
		}
		return nil
	}
	t := s.Topology
	if t.Kind == deploy.Colocated {
		for i := range t.Replicas {
			add(fmt.Sprintf("replica-%d", i), emulator.RoleColocated, t.TP)
		}
	} else {
		for i := range t.Prefill.Replicas {
			add(fmt.Sprintf("prefill-%d", i), emulator.RolePrefill, t.Prefill.TP)
		}
		for i := range t.Decode.Replicas {
			add(fmt.Sprintf("decode-%d", i), emulator.RoleDecode, t.Decode.TP)
		}
	}
	return c, nil
}

// promptsFor builds the workload's session prefixes with the emulator's
// tokenizer, which is what a replay against the emulator tokenizes with.
// Built prompts are kept per workload: a grid predicts many specs on one.
func promptsFor(w schema.Workload) (*replay.Prompts, error) {
	if p, ok := promptCache.Load(w); ok {
		return p.(*replay.Prompts), nil
	}
	tok := emulator.NewTokenizer()
	p, err := replay.BuildPrompts(context.Background(), w, func(_ context.Context, text string) ([]int, error) {
		ids, _ := tok.Tokenize(text)
		return ids, nil
	})
	if err != nil {
		return nil, err
	}
	if promptCacheLen.Add(1) <= 64 {
		promptCache.Store(w, p)
	}
	return p, nil
}

var (
	promptCache    sync.Map // replay.Workload → *replay.Prompts
	promptCacheLen atomic.Int64
)

// promptBuf is one request's token buffer, reused level to level, and the
// session whose prefix it begins with (-1: none yet).
type promptBuf struct {
	ids     []int
	session int
}

// level runs one load level on fresh engines and summarises it.
func (c *cluster) level(prompts *replay.Prompts, qps float64, opts Options, gpus int, bufs *[]promptBuf) (schema.LevelRecord, error) {
	w, target, keep := prompts.Workload, opts.SLO, opts.KeepRequests
	clients := replay.ClosedClients(qps)
	reqs, err := replay.GenerateLevel(w, qps)
	if err != nil {
		return schema.LevelRecord{}, err
	}
	vr := make([]emulator.VirtualRequest, len(reqs))
	router := newRouter(c)
	var back []float64 // Hop.BackMs by request, when hops are given
	if opts.Hops != nil {
		back = make([]float64, len(reqs))
	}
	for i, q := range reqs {
		// The simulation writes each request's output after its prompt
		// (VirtualRequest.Prompt); a level's buffers are free again once
		// it returns, so the next level reuses them.
		if i == len(*bufs) {
			*bufs = append(*bufs, promptBuf{session: -1})
		}
		b := &(*bufs)[i]
		if need := q.InputTokens + q.OutputTokens; cap(b.ids) < need {
			*b = promptBuf{ids: make([]int, 0, need), session: -1}
		}
		// The session's prefix is still in the buffer from the last level
		// (the simulation writes only after the prompt): write the rest.
		var ids []int
		if n := prompts.PrefixLen(q.Session); b.session == q.Session && n <= q.InputTokens && n <= len(b.ids) {
			ids = prompts.AppendSuffix(b.ids[:n], 0, qps, q)
		} else {
			ids = prompts.AppendPrompt(b.ids[:0], 0, qps, q)
		}
		b.ids, b.session = ids, q.Session
		id := fmt.Sprintf("predict-%g-%d", qps, q.ID)
		vr[i] = emulator.VirtualRequest{ID: id, Prompt: ids, MaxTokens: q.OutputTokens, ArrivalMs: q.ArrivalMs, Decode: -1,
			Shared: sessionNames[q.Session%len(sessionNames)], SharedLen: min(w.CachedTokens(), len(ids))}
		if opts.Hops != nil {
			h := opts.Hops(qps, q.ID)
			vr[i].ArrivalMs += max(h.ArriveMs, 0)
			vr[i].DecodeHopMs, vr[i].DecodeAtMs = h.DecodeHopMs, h.DecodeAtMs
			back[i] = max(h.BackMs, 0)
		}
		router.route(&vr[i])
	}
	load := emulator.ClosedLoop{From: len(vr)}
	if clients > 0 {
		load = emulator.ClosedLoop{From: min(replay.Sessions, len(vr)), Concurrency: clients, GapMs: opts.ClosedGapMs}
	}
	outs, err := emulator.SimulateLoad(c.workers, vr, load)
	if err != nil {
		return schema.LevelRecord{}, err
	}
	if clients > 0 {
		// A closed loop's requests were sent when an earlier one ended.
		for i := load.From; i < len(reqs); i++ {
			reqs[i].ArrivalMs = outs[i].ArrivalMs
		}
	}
	for i, b := range back {
		outs[i].FirstMs += b
		outs[i].FinishMs += b
	}
	lr := schema.LevelRecord{Level: replay.LevelOf(qps), Planned: len(reqs), Sent: len(reqs), Complete: true,
		Outcomes: map[string]int{}, Failures: map[string]int{}, PrefixSeed: w.Seed,
		Verdict: schema.Verdict{Valid: true, Reasons: []schema.Reason{}}}
	lr.Requests = make([]schema.RequestRecord, len(reqs))
	var all hash.Hash
	if keep {
		all = sha256.New()
	}
	for i, q := range reqs {
		lr.Requests[i] = requestRecord(q, vr[i], &outs[i], keep)
		if keep { // a record that is kept is a full record: what the prompts were
			lr.Requests[i].PromptSHA256 = replay.HashTokens(vr[i].Prompt[:q.InputTokens])
			all.Write([]byte(lr.Requests[i].PromptSHA256))
		}
	}
	if keep {
		lr.PromptsSHA256 = hex.EncodeToString(all.Sum(nil))
	}
	replay.SummarizeLevel(&lr, reqs, target, gpus)
	return lr, nil
}

// requestRecord is one request as a replay would have recorded it from a
// client with no delay of its own.
func requestRecord(q replay.Request, vr emulator.VirtualRequest, o *emulator.VirtualOutcome, metrics bool) schema.RequestRecord {
	res := o.Result
	rr := schema.RequestRecord{ID: q.ID, Session: q.Session, RequestID: vr.ID, InputTokens: q.InputTokens,
		ScheduledMs: q.ArrivalMs, SentMs: vr.ArrivalMs, DispatchLagMs: vr.ArrivalMs - q.ArrivalMs, Outcome: schema.OutcomeOK, Valid: true, Status: 200,
		OutputTokens: res.OutputTokens, FinishReason: res.FinishReason}
	if metrics {
		rr.EngineMetrics, _ = json.Marshal(o.RequestMetrics())
	}
	if res.FinishReason != "length" && res.FinishReason != "stop" {
		rr.Outcome, rr.Valid = schema.OutcomeHTTPError, false
		rr.Invalid = "outcome: " + res.FinishReason
		if res.Err != nil {
			rr.Error = res.Err.Error()
		}
		return rr
	}
	first, finish := o.FirstMs, o.FinishMs
	ttft := first - q.ArrivalMs
	tpot := 0.0
	if res.OutputTokens > 1 {
		tpot = (finish - first) / float64(res.OutputTokens-1)
	}
	prompt, cached := res.PromptTokens, res.CachedTokens
	fromSent := first - vr.ArrivalMs
	rr.FirstMs, rr.FinishMs, rr.TTFTMs, rr.TTFTFromSentMs, rr.TPOTMs = &first, &finish, &ttft, &fromSent, &tpot
	rr.PromptTokens, rr.CachedTokens = &prompt, &cached
	return rr
}

// router routes requests as the proxy does (deploy/proxy): session
// affinity by rendezvous hashing of the prompt's leading tokens, or round
// robin per pool in the order requests reach it; disaggregated, the decode
// worker is picked first, then the prefill worker, with the same key.
type router struct {
	c         *cluster
	colo, pre *proxy.Router
	dec       *proxy.Router
	affinity  bool
	keys      map[string]routeKey // by shared prefix
}

type routeKey struct {
	key  uint64
	have bool
}

func newRouter(c *cluster) *router {
	names := func(idx []int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, c.names[i])
		}
		return out
	}
	return &router{c: c, colo: proxy.NewRouter(names(c.colo)), pre: proxy.NewRouter(names(c.pre)),
		dec: proxy.NewRouter(names(c.dec)), affinity: c.routing != deploy.RoundRobin, keys: map[string]routeKey{}}
}

func (r *router) route(vr *emulator.VirtualRequest) {
	var key uint64
	have := false
	if r.affinity {
		// The key reads the first affinityTokens+1 ids at most: when the
		// shared prefix covers them, it is the session's.
		if vr.Shared != "" && vr.SharedLen > r.c.affinityTokens {
			k, ok := r.keys[vr.Shared]
			if !ok {
				k.key, k.have = proxy.PromptKey(vr.Prompt, r.c.affinityTokens)
				r.keys[vr.Shared] = k
			}
			key, have = k.key, k.have
		} else {
			key, have = proxy.PromptKey(vr.Prompt, r.c.affinityTokens)
		}
	}
	if len(r.c.colo) > 0 {
		vr.Worker = r.c.colo[r.colo.Pick(key, have)]
		return
	}
	vr.Decode = r.c.dec[r.dec.Pick(key, have)]
	vr.Worker = r.c.pre[r.pre.Pick(key, have)]
}

// specConfig is the spec as the record's config, the way the optimizer
// records it.
func specConfig(s *deploy.Spec) map[string]any {
	b, err := json.Marshal(s)
	if err != nil {
		return map[string]any{"name": s.Name}
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return map[string]any{"name": s.Name}
	}
	return m
}

// sessionNames name the sessions' shared prefixes for the simulation's
// hash memo.
var sessionNames = func() []string {
	out := make([]string, replay.Sessions)
	for i := range out {
		out[i] = "session-" + strconv.Itoa(i)
	}
	return out
}()

// loadLevels are the keys of opts' levels (replay.LevelKeys), open or
// closed, checked.
func loadLevels(opts Options) ([]float64, error) {
	switch {
	case len(opts.QPS) > 0 && len(opts.Concurrency) > 0:
		return nil, &replay.ParamError{Field: "concurrency", Value: opts.Concurrency, Want: "either offered rates (qps, open loop) or clients (concurrency, closed loop), not both"}
	case len(opts.Concurrency) > 0:
		if opts.Hops != nil {
			return nil, fmt.Errorf("a closed loop's sends depend on its own ends: live hops cannot be replayed into it")
		}
		for _, n := range opts.Concurrency {
			if n < 1 {
				return nil, &replay.ParamError{Field: "concurrency", Value: n, Want: "at least 1 client"}
			}
		}
	case len(opts.QPS) > 0:
		for _, q := range opts.QPS {
			if err := (replay.Params{Requests: replay.Sessions + 1, InputTokens: 1, UncachedTokens: 1, OutputTokens: 1, OfferedQPS: q}).Validate(); err != nil {
				return nil, err
			}
		}
	default:
		return nil, &replay.ParamError{Field: "qps", Value: "[]", Want: "at least one offered rate (or concurrency: at least one number of clients)"}
	}
	return replay.LevelKeys(opts.QPS, opts.Concurrency), nil
}
