package replay

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	engines "github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/finesleep"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// EmulatorVersionPrefix starts the GET /version of hone's engine emulator;
// a device run refuses such an endpoint.
const EmulatorVersionPrefix = engines.EmulatorVersionPrefix

// Options configure a live replay. Zero values take the documented
// defaults; Endpoint, Model, Kind and QPS are required.
type Options struct {
	Endpoint string // base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000
	// TokenizeEndpoint serves POST /tokenize when it is not Endpoint
	// (e.g. a proxy that only forwards /v1). Empty: Endpoint.
	TokenizeEndpoint string
	Model            string // the served model name
	// Kind is what the endpoint must prove it is: KindEmulated,
	// KindDevice or KindUnverified. "": whatever GET /version shows
	// (the emulator's name: emulated; vLLM's version: device; nothing
	// recognisable: unverified). A stated kind the endpoint contradicts
	// is a ParamError.
	Kind schema.Kind
	// Cache is the cold-start procedure: CacheReset, CacheFreshPrefixes,
	// or "" to reset where the endpoint offers it and use fresh prefixes
	// where it does not.
	Cache    string
	Backend  string          // what serves the endpoint, e.g. "vllm", "emulator"; "": from the kind found
	Workload schema.Workload // zero: DefaultWorkload()
	QPS      []float64       // offered rates, one level each, in order
	// Concurrency, instead of QPS, makes every level a closed loop
	// (GenerateClosed): after the warm-ups, N clients each sending its
	// next request when its last one ends (vllm bench serve
	// --max-concurrency). One level per entry.
	Concurrency []int
	Runs        int     // passes over all levels; 0: 1
	SLO         slo.SLO // zero: slo.Default
	// TimeScale compresses the schedule for an engine whose modelled
	// durations are scaled the same way (hone sim serve --time-scale): sends
	// happen at arrival x S and every measured duration is divided by S, so
	// the record is in model time. 0: the scale the engine states in GET
	// /version (hone's emulator does), else 1. A stated scale the engine
	// contradicts is a ParamError.
	TimeScale float64
	// RequestTimeout bounds one request, connect to [DONE], in model time.
	// 0: 10 minutes.
	RequestTimeout time.Duration
	GPUs           int            // GPUs behind the endpoint, for cost; 0: cost not computed
	Config         map[string]any // the deployment spec or whatever the caller compares
	Hardware       map[string]any // GPU names, CPU, ... as the caller knows them
	ModelInfo      schema.Model   // revision, precision, file hashes; ID is set from Model
	Hone           schema.Build
	HTTPClient     *http.Client   // nil: a client tuned for an open loop
	Progress       func(Progress) // called from one goroutine, a few times a second

	// CachedTokensReported says the engine reports cached prompt tokens
	// (vLLM's --enable-prompt-tokens-details, which hone's deployments
	// always render): vLLM writes usage.prompt_tokens_details only when
	// the count is non-zero, so a usage block without it means 0 cached.
	// False: the same is concluded once any request of the replay carried
	// the details (the engine evidently reports them); before that, and on
	// an engine that never does, a missing count stays unknown.
	CachedTokensReported bool

	// PrefixNonce perturbs every level's prefix seed under
	// CacheFreshPrefixes, so that nothing an earlier replay against the
	// same engine cached can hit; 0: a random one (recorded in
	// CacheState.Nonce).
	PrefixNonce uint64

	// Shard, when set, makes this replay one shard of a replay sent by
	// several processes (see Shard); nil: one process sends everything.
	Shard *Shard

	// SpillDir, when set, is where a trace replay (RunTrace) moves every
	// request's packed chunks as the request ends, to a file unlinked at
	// once (see spill): the replay then holds a summary per request, not
	// its chunks, and the record reads them back as it is written. hone
	// replay --trace sets it to the directory of --out. "": the chunks
	// stay in memory.
	SpillDir string

	// beforeSend runs in the dispatch loop before each send (tests plant
	// a starved client with it).
	beforeSend func(run int, qps float64, id int)
}

// Progress reports where a replay is. Done and Failed count this level's
// finished requests; failed ones are included in Done.
type Progress struct {
	Run, Runs     int     // Run is 0-based
	Level, Levels int     // Level is 0-based
	QPS           float64 // the level's offered rate; a closed loop's is -clients (ClosedLevelKey)
	Done, Failed  int
	Planned       int
	TotalDone     int
	TotalPlanned  int
	Elapsed, ETA  time.Duration
	LevelDone     *schema.LevelRecord // set once, when a level has drained
}

func (o *Options) defaults() error {
	if o.Workload == (schema.Workload{}) {
		o.Workload = DefaultWorkload()
	}
	if o.Runs == 0 {
		o.Runs = 1
	}
	if o.SLO == (slo.SLO{}) {
		o.SLO = slo.Default
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if err := o.checkTarget(); err != nil {
		return err
	}
	if err := o.checkLoad(); err != nil {
		return err
	}
	for _, e := range []*string{&o.Endpoint, &o.TokenizeEndpoint} {
		if *e == "" {
			continue
		}
		n, err := normalEndpoint(*e)
		if err != nil {
			return err
		}
		*e = n
	}
	if o.TokenizeEndpoint == "" {
		o.TokenizeEndpoint = o.Endpoint
	}
	return o.checkLevels()
}

// checkTarget checks what the options say about the server: its URL, its
// model, its kind and the cache procedure.
func (o *Options) checkTarget() error {
	switch {
	case o.Endpoint == "":
		return &ParamError{"endpoint", `""`, "the server's base URL, e.g. http://127.0.0.1:8000"}
	case o.Model == "":
		return &ParamError{"model", `""`, "the served model name"}
	case o.Kind != "" && o.Kind != schema.KindEmulated && o.Kind != schema.KindDevice && o.Kind != schema.KindUnverified:
		return &ParamError{"kind", fmt.Sprintf("%q", o.Kind), `"emulated" (hone sim serve), "device" (real vLLM), "unverified", or empty to discover`}
	case o.Cache != "" && o.Cache != schema.CacheReset && o.Cache != schema.CacheFreshPrefixes:
		return &ParamError{"cache", fmt.Sprintf("%q", o.Cache), `"reset_prefix_cache", "fresh_prefixes", or empty to choose`}
	}
	return nil
}

// checkLoad checks what the options say about the load: its levels, runs,
// time scale, timeout, GPUs and objectives.
func (o *Options) checkLoad() error {
	switch {
	case len(o.QPS) > 0 && len(o.Concurrency) > 0:
		return &ParamError{"max-concurrency", o.Concurrency, "either offered rates (qps, open loop) or clients (max-concurrency, closed loop), not both"}
	case len(o.QPS) == 0 && len(o.Concurrency) == 0:
		return &ParamError{"qps", "[]", "at least one offered rate (or max-concurrency: clients of a closed loop)"}
	case len(o.Concurrency) > 0 && o.Shard != nil:
		return &ParamError{"shard", o.Shard.Index, "one process: a closed loop's sends depend on its own requests' ends"}
	case o.Runs < 1:
		return &ParamError{"runs", o.Runs, "at least 1"}
	case o.TimeScale < 0 || math.IsNaN(o.TimeScale) || math.IsInf(o.TimeScale, 0):
		return &ParamError{"time-scale", o.TimeScale, "a positive finite factor, or 0 to adopt the engine's"}
	case o.RequestTimeout < 0:
		return &ParamError{"request-timeout", o.RequestTimeout, "a positive duration"}
	case o.GPUs < 0:
		return &ParamError{"gpus", o.GPUs, "0 or more"}
	case !(o.SLO.TTFTMillis > 0) || !(o.SLO.TPOTMillis > 0):
		return &ParamError{"slo", o.SLO, "positive TTFT and TPOT objectives"}
	}
	return nil
}

// checkLevels checks the workload at every level and the shard, which it
// copies.
func (o *Options) checkLevels() error {
	for _, q := range o.QPS {
		if err := ParamsOf(o.Workload, q).Validate(); err != nil {
			return err
		}
	}
	for _, n := range o.Concurrency {
		if n < 1 {
			return &ParamError{"max-concurrency", n, "at least 1 client"}
		}
	}
	if len(o.Concurrency) > 0 {
		if err := ParamsOf(o.Workload, 1).Validate(); err != nil {
			return err
		}
	}
	if o.Shard != nil {
		s := *o.Shard
		if err := s.validate(o, time.Now()); err != nil {
			return err
		}
		o.Shard = &s
	}
	return nil
}

// newRecord is the record a replay of opts starts, before anything is
// measured: unverified until the endpoint says what it is.
func newRecord(opts Options, tb timebase, w schema.WorkloadRecord) *schema.Record {
	model := opts.ModelInfo
	model.ID = opts.Model
	rec := &schema.Record{
		SchemaVersion: schema.SchemaVersion, Kind: schema.KindUnverified, VerdictRule: schema.VerdictRule, Backend: opts.Backend, Hone: opts.Hone,
		Engine: schema.EngineInfo{Endpoint: opts.Endpoint}, Model: model, Config: opts.Config, Hardware: opts.Hardware,
		GPUs: opts.GPUs, TimeScale: cmp.Or(opts.TimeScale, 1), RequestTimeoutMs: float64(opts.RequestTimeout) / 1e6, SLO: opts.SLO,
		Workload: w, Clock: tb.Stamp(tb.T0), StartedAt: tb.T0.UTC(), Outcomes: map[string]int{}, Validation: schema.Validation{Reasons: map[string]int{}},
	}
	if rec.Config == nil {
		rec.Config = map[string]any{}
	}
	if rec.Hardware == nil {
		rec.Hardware = map[string]any{}
	}
	return rec
}

// Run replays the workload against the endpoint: for each run, each level
// in order, open loop, each level after the previous one drained. It
// returns the record of what was measured. On a setup failure (endpoint
// unreachable, model not served, no /tokenize) or when ctx is canceled it
// returns the record so far, marked incomplete with the reason, together
// with the error; only invalid options give a nil record.
func Run(ctx context.Context, opts Options) (*schema.Record, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: newTransport()}
	}
	tb := newTimebase()
	rec := newRecord(opts, tb, schema.WorkloadRecord{Workload: opts.Workload, QPS: opts.QPS, Runs: opts.Runs, Generator: PrefixGenerator,
		SuffixRecipe:  "uniform over the prefixes' distinct token ids, PCG(seed ^ (run+1)*0x9E3779B97F4A7C15, float64bits(qps) ^ id<<1)",
		PrewarmPolicy: "every level starts cold (see cache), then the schedule's 8 warm-up requests (ids 0-7), one per session, open it"})
	if opts.Shard != nil {
		rec.Shard = opts.Shard.info()
	}
	fail := func(err error) (*schema.Record, error) {
		rec.Incomplete, rec.Error = true, err.Error()
		finishRecord(rec)
		return rec, err
	}
	eng := &engine{http: hc, base: opts.Endpoint, model: opts.Model}
	info, err := eng.info(ctx)
	rec.Engine = info
	var me *ModelError
	switch {
	case errors.As(err, &me):
		return fail(fmt.Errorf("engine at %s: %w", opts.Endpoint, err))
	case err != nil:
		// Requests will say what is wrong, one outcome each.
		rec.Engine.Error = err.Error()
	}
	kind, err := resolveKind(opts.Kind, info)
	if err != nil {
		return nil, err
	}
	scale, err := resolveTimeScale(opts.TimeScale, info)
	if err != nil {
		return nil, err
	}
	opts.Kind, opts.TimeScale = kind, scale
	rec.Kind, rec.TimeScale = kind, scale
	if rec.Backend == "" {
		rec.Backend = backendOf(kind, info)
	}
	tok := &engine{http: hc, base: opts.TokenizeEndpoint, model: opts.Model}
	prompts, err := BuildPrompts(ctx, opts.Workload, tok.tokenize)
	if err != nil {
		return fail(fmt.Errorf("build prompts: %w", err))
	}
	rec.Workload.Sessions = prompts.Prefixes
	rec.Workload.SuffixVocab = prompts.VocabSize()
	if rec.Cache, err = cacheFor(ctx, eng, opts); err != nil {
		var pe *ParamError
		if errors.As(err, &pe) {
			return nil, err
		}
		return fail(err)
	}
	setNonces(rec, opts)
	rec.CachedTokensRule = CachedTokensAsReported
	if len(opts.Concurrency) > 0 {
		rec.Workload.QPS, rec.Workload.Load, rec.Workload.Concurrency = []float64{}, schema.LoadClosed, opts.Concurrency
	}
	r := &runner{opts: opts, eng: eng, tok: tok, prompts: prompts, cache: rec.Cache.Procedure, nonce: rec.Cache.Nonce, tb: tb, idNonce: rec.RequestIDNonce,
		cl: &client{http: hc, url: opts.Endpoint + "/v1/completions", idHeader: eng.conventions().HTTP.RequestIDHeader, scale: opts.TimeScale,
			timeout: time.Duration(float64(opts.RequestTimeout) * opts.TimeScale), tb: tb}}
	r.plan()
	stopProgress := r.startProgress()
	defer stopProgress()
	if err := r.runAll(ctx, rec); err != nil {
		return fail(err)
	}
	finishRecord(rec)
	return rec, nil
}

// cacheFor is the cache procedure of a replay of opts: the reset shard 0
// of a sharded replay sends for every shard, or the one chooseCache
// finds the engine supports.
func cacheFor(ctx context.Context, eng *engine, opts Options) (cache schema.CacheState, err error) {
	if opts.Shard != nil && opts.Shard.Index != 0 && opts.Cache == schema.CacheReset {
		// Shard 0 resets for every shard; probing would reset too.
		cache, err = schema.CacheState{Procedure: schema.CacheReset}, nil
	} else {
		cache, err = chooseCache(ctx, eng, opts.Cache)
	}
	if opts.Shard != nil && cache.Procedure == schema.CacheReset {
		cache.Detail = fmt.Sprintf("%s before every level, sent by shard 0 of %d for every shard", eng.resetRoute(), opts.Shard.Count)
	}
	return cache, err
}

// setNonces draws the record's prefix nonce (fresh prefixes) and request
// id nonce; a sharded replay's are its shards' common ones.
func setNonces(rec *schema.Record, opts Options) {
	if rec.Cache.Procedure == schema.CacheFreshPrefixes {
		rec.Cache.Nonce = opts.PrefixNonce
		if opts.Shard != nil && rec.Cache.Nonce == 0 {
			rec.Cache.Nonce = opts.Shard.nonce(1) // every shard's prompts alike
		}
		for rec.Cache.Nonce == 0 {
			rec.Cache.Nonce = rand.Uint64()
		}
	}
	rec.RequestIDNonce = fmt.Sprintf("%08x", rand.Uint32())
	if opts.Shard != nil {
		rec.RequestIDNonce = fmt.Sprintf("%08x", uint32(opts.Shard.nonce(2)))
	}
}

// plan sets the shard's schedule, if any, and the requests and schedule
// time the progress report starts from.
func (r *runner) plan() {
	opts := r.opts
	if opts.Shard != nil {
		r.shard = newShardPlan(*opts.Shard, opts, r.levelSpan)
	}
	for _, q := range r.levelKeys() {
		n := opts.Workload.Requests
		if r.shard != nil {
			all, _ := Generate(ParamsOf(opts.Workload, q))
			n = len(r.shard.mine(all))
		}
		r.totalPlanned += n * opts.Runs
		r.remaining += r.levelSpan(q) * time.Duration(opts.Runs)
	}
}

// runAll runs every level of every run into rec; an error is a level's
// setup failure or ctx's end, with rec holding the runs so far.
func (r *runner) runAll(ctx context.Context, rec *schema.Record) error {
	for run := range r.opts.Runs {
		rr := schema.RunRecord{Run: run}
		for li, q := range r.levelKeys() {
			lr, err := r.level(ctx, run, li, q)
			if err != nil {
				rec.Runs = append(rec.Runs, rr)
				return err
			}
			rr.Levels = append(rr.Levels, lr)
			if r.opts.CachedTokensReported || r.detailsSeen {
				rec.CachedTokensRule = CachedTokensZeroWhenAbsent
			}
			r.report(&rr.Levels[len(rr.Levels)-1])
			if ctx.Err() != nil {
				break
			}
		}
		rec.Runs = append(rec.Runs, rr)
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted during run %d: %w", run, context.Cause(ctx))
		}
	}
	return nil
}

// finishRecord sums outcomes and validation over every request and judges the
// runs.
func finishRecord(rec *schema.Record) {
	rec.FinishedAt = time.Now().UTC()
	Judge(rec)
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			for _, q := range l.Requests {
				rec.Outcomes[q.Outcome]++
				if q.Valid {
					rec.Validation.Valid++
				} else {
					rec.Validation.Invalid++
					check, _, _ := strings.Cut(q.Invalid, ":")
					rec.Validation.Reasons[check]++
				}
			}
		}
	}
}

// summarizeRun sets the run's verdict, and its objective and cost from its
// valid levels only.
func summarizeRun(rr *schema.RunRecord, gpus int) {
	var levels []slo.Level
	rr.Verdict = schema.Verdict{Valid: true, Reasons: []schema.Reason{}}
	for _, l := range rr.Levels {
		if l.Verdict.Valid {
			levels = append(levels, l.Level)
			continue
		}
		for _, r := range l.Verdict.Reasons {
			rr.Verdict.Reasons = append(rr.Verdict.Reasons, schema.Reason{Code: r.Code, Detail: fmt.Sprintf("%s: %s", l.Name(), r.Detail), Scale: r.Scale})
		}
		rr.Verdict.Valid = false
	}
	rr.Objective = slo.Objective(levels)
	rr.GPUSecondsPerRequest = nil
	for _, l := range rr.Levels {
		if l.Verdict.Valid && l.Passed && l.EffectiveQPS == rr.Objective && l.GPUSecondsPerRequest != nil {
			rr.GPUSecondsPerRequest = l.GPUSecondsPerRequest
			break
		}
	}
}

// SteadyTolerance is how far a level's effective rate may fall short of
// the offered rate, the SLO met, before the level is marked NotSteady
// (capacity.SteadyTolerance judges departures by the same bound).
const SteadyTolerance = 0.05

type runner struct {
	opts    Options
	eng     *engine
	tok     *engine
	cl      *client
	prompts *Prompts
	cache   string // CacheReset or CacheFreshPrefixes
	nonce   uint64 // CacheFreshPrefixes: the replay's prefix nonce
	tb      timebase
	// idNonce makes this invocation's request ids its own: an id reused
	// across replays could meet KV a prefill worker still holds for it.
	idNonce string
	// detailsSeen: some request carried prompt_tokens_details, so the
	// engine reports cached tokens and their absence means 0.
	detailsSeen bool
	// shard is the schedule of levels of a sharded replay; nil otherwise.
	shard *shardPlan

	mu           sync.Mutex
	cur          Progress
	started      time.Time
	levelStart   time.Time
	levelSpanCur time.Duration
	totalPlanned int
	remaining    time.Duration // schedule time of levels not yet started
	totalDone    int
	done, failed atomic.Int64
	progressCh   chan *schema.LevelRecord

	ssePool sync.Pool
}

// levelKeys are the levels' keys (LevelKeys).
func (r *runner) levelKeys() []float64 { return LevelKeys(r.opts.QPS, r.opts.Concurrency) }

// levelSpan is how long a level's schedule lasts in real time (a closed
// loop's: until its measurement starts; the rest depends on the engine).
func (r *runner) levelSpan(qps float64) time.Duration {
	if qps < 0 {
		return time.Duration(MeasureStartMillis * r.opts.TimeScale * 1e6)
	}
	n := r.opts.Workload.Requests
	last := MeasureStartMillis + float64((n-1-Sessions)*1000)/qps
	return time.Duration(last * r.opts.TimeScale * 1e6)
}

// level brings the engine's cache to the prescribed cold state, runs one
// load level open loop and summarizes it. An error is a setup failure
// (the prompts could not be built).
func (r *runner) level(ctx context.Context, run, li int, qps float64) (schema.LevelRecord, error) {
	w := r.opts.Workload
	clients := ClosedClients(qps)
	all, _ := GenerateLevel(w, qps) // validated in defaults
	reqs := all
	if r.shard != nil {
		reqs = r.shard.mine(all)
	}
	lr := schema.LevelRecord{Level: LevelOf(qps), Planned: len(reqs), Outcomes: map[string]int{}, Failures: map[string]int{},
		PrefixSeed: w.Seed}
	bg := context.WithoutCancel(ctx)
	prompts, err := r.coldStart(ctx, &lr, run, qps)
	if err != nil {
		return lr, err
	}
	records, bodies := r.encodeLevel(&lr, prompts, run, qps, all, reqs)

	if r.leads() {
		lr.Counters.Before, _ = r.eng.scrape(bg)
	}

	r.beginLevel(run, li, qps, len(reqs))
	start := time.Now()
	var late time.Duration
	g := run*len(r.opts.QPS) + li
	if r.shard != nil {
		// Every shard starts the level at the same instant, ready or not.
		start = r.shard.starts[g]
		late = time.Since(start)
	}
	lr.StartedAt = r.tb.Stamp(start)
	sent := r.send(ctx, &lr, start, reqs, bodies, records, clients)
	var overrun time.Duration
	if r.shard != nil && ctx.Err() == nil {
		drain := r.shard.drains[g]
		overrun = time.Since(drain)
		if r.leads() && overrun < 0 {
			// The other shards' requests may still run: the counters
			// after the level are read at its drain deadline.
			finesleep.Until(ctx, drain)
		}
	}
	if r.leads() {
		lr.Counters.After, _ = r.eng.scrape(bg)
	}
	lr.Requests = records[:sent]
	lr.Sent = sent
	lr.Complete = sent == len(reqs) && ctx.Err() == nil
	r.fillCachedTokens(lr.Requests)
	if r.shard != nil {
		r.shard.settle(&lr, all, reqs, late, overrun, r.opts)
	} else {
		summarizeLevel(&lr, reqs, r.opts.SLO, r.opts.GPUs)
		judgeLevel(&lr, r.opts.SLO, r.opts.TimeScale)
	}
	r.endLevel(len(reqs))
	return lr, nil
}

// coldStart brings the engine's cache to the level's cold state: a reset
// (invalidating lr where it fails), or prompts on fresh prefixes, which it
// returns (else the replay's). An error is a setup failure.
func (r *runner) coldStart(ctx context.Context, lr *schema.LevelRecord, run int, qps float64) (*Prompts, error) {
	w := r.opts.Workload
	prompts := r.prompts
	bg := context.WithoutCancel(ctx)
	switch r.cache {
	case schema.CacheReset:
		if !r.leads() {
			break
		}
		if err := r.eng.resetPrefixCache(bg); err != nil {
			lr.Invalidate(schema.ReasonWarmStart, "could not reset the prefix cache before the level: %v", err)
		}
	case schema.CacheFreshPrefixes:
		lw := w
		lw.Seed = LevelPrefixSeed(w.Seed^r.nonce, run, qps)
		p, err := BuildPrompts(ctx, lw, r.tok.tokenize)
		if err != nil {
			return nil, fmt.Errorf("build prompts for run %d, %g req/s (fresh prefixes, seed %d): %w", run+1, qps, lw.Seed, err)
		}
		prompts, lr.PrefixSeed = p, lw.Seed
	}
	return prompts, nil
}

// encodeLevel is the records and request bodies of reqs (this process's
// share of the level's requests all), and sets lr's hash of every prompt.
func (r *runner) encodeLevel(lr *schema.LevelRecord, prompts *Prompts, run int, qps float64, all, reqs []Request) ([]schema.RequestRecord, [][]byte) {
	records := make([]schema.RequestRecord, len(reqs))
	bodies := make([][]byte, len(reqs))
	hashes := sha256.New()
	i := 0
	for _, q := range all {
		ids := prompts.Prompt(run, qps, q)
		hash := HashTokens(ids)
		// Every prompt counts in prompts_sha256, also another shard's.
		hashes.Write([]byte(hash))
		if i == len(reqs) || reqs[i].ID != q.ID {
			continue
		}
		body, err := encodeCompletion(r.opts.Model, ids, q.OutputTokens)
		if err != nil {
			panic(err) // ints and strings always encode
		}
		bodies[i] = body
		records[i] = schema.RequestRecord{ID: q.ID, Session: q.Session, RequestID: fmt.Sprintf("hone-%s-%d-%g-%d", r.idNonce, run, qps, q.ID),
			InputTokens: len(ids), PromptSHA256: hash, ScheduledMs: q.ArrivalMs}
		i++
	}
	lr.PromptsSHA256 = hex.EncodeToString(hashes.Sum(nil))
	return records, bodies
}

// send dispatches the level's requests from start and returns how many
// were sent; once the warm-up requests have ended (and ctx has not), the
// leading process reads lr's warm-up counters.
func (r *runner) send(ctx context.Context, lr *schema.LevelRecord, start time.Time, reqs []Request, bodies [][]byte, records []schema.RequestRecord, clients int) int {
	bg := context.WithoutCancel(ctx)
	at := func(ms float64) time.Time { return start.Add(time.Duration(ms * r.opts.TimeScale * 1e6)) }

	var warm sync.WaitGroup
	nWarm := 0 // the first nWarm of reqs
	for _, q := range reqs {
		if q.ID < Sessions {
			nWarm++
		}
	}
	warm.Add(nWarm)
	midDone := make(chan struct{})
	go func() {
		defer close(midDone)
		warm.Wait()
		if ctx.Err() != nil || !r.leads() {
			return
		}
		lr.Counters.Warmup, _ = r.eng.scrape(bg)
		lr.WarmupOverlap = time.Now().After(at(MeasureStartMillis))
	}()
	sent := r.dispatch(ctx, start, reqs, bodies, records, clients, func(i int) {
		if reqs[i].ID < Sessions {
			warm.Done()
		}
	})
	for i := sent; i < nWarm; i++ {
		warm.Done()
	}
	<-midDone
	return sent
}

// leads reports whether this replay resets the engine's prefix cache and
// reads its counters: a single process, or shard 0 of a sharded replay.
func (r *runner) leads() bool { return r.shard == nil || r.shard.Index == 0 }

// dispatch sends request i at start + ArrivalMs x TimeScale, each in its
// own goroutine, whatever earlier requests are doing (open loop), and
// waits until every request sent has finished (finished(i) is called for
// each). With clients > 0 the measured requests (ids from Sessions on) go
// in a closed loop instead: the first clients of them at their ArrivalMs,
// each later one, in order, the moment a measured request ends; its
// scheduled time becomes that moment. It stops sending when ctx ends and
// returns how many were sent: reqs[:sent].
func (r *runner) dispatch(ctx context.Context, start time.Time, reqs []Request, bodies [][]byte, records []schema.RequestRecord, clients int, finished func(i int)) int {
	scale := r.opts.TimeScale
	var wg sync.WaitGroup
	sent, measured := 0, 0
	ended := make(chan struct{}, len(reqs)) // a closed loop's measured request ended
	for i := range reqs {
		due := start.Add(time.Duration(reqs[i].ArrivalMs * scale * 1e6))
		closed := clients > 0 && reqs[i].ID >= Sessions
		if closed && measured >= clients {
			select {
			case <-ended:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			due = time.Now()
			records[i].ScheduledMs = float64(due.Sub(start)) / 1e6 / scale
		} else if !finesleep.Until(ctx, due) {
			// On an idle host a Go timer alone wakes up to a millisecond
			// late, which would spend a 1 ms dispatch-lag budget by itself.
			break
		}
		if closed {
			measured++
		}
		if r.opts.beforeSend != nil {
			r.opts.beforeSend(r.cur.Run, r.cur.QPS, reqs[i].ID)
		}
		rr := &records[i]
		rr.Scheduled = r.tb.Stamp(due)
		wg.Add(1)
		sent++
		go func(i int) {
			defer wg.Done()
			sse, _ := r.ssePool.Get().(*sseReader)
			if sse == nil {
				sse = newSSEReader(nil)
			}
			r.cl.do(ctx, bodies[i], rr, start, due, reqs[i].OutputTokens, sse)
			sse.reset(nil)
			r.ssePool.Put(sse)
			r.done.Add(1)
			if rr.Outcome != schema.OutcomeOK {
				r.failed.Add(1)
			}
			if finished != nil {
				finished(i)
			}
			if closed {
				ended <- struct{}{}
			}
		}(i)
	}
	wg.Wait()
	return sent
}

// summarizeLevel computes the level's figures from its requests.
// DefaultRequestTimeout bounds one request when Options.RequestTimeout
// is 0.
const DefaultRequestTimeout = 10 * time.Minute

// SummarizeLevel fills the level's summary from its request records, as a
// replay does: percentiles over the measured requests (ids from Sessions
// on) that completed, effective rate, GPU-seconds per request, hit rates
// and whether it passed. Producers of records other than replay (package
// predict) use it so their levels mean exactly what a replay's do.
func SummarizeLevel(lr *schema.LevelRecord, reqs []Request, target slo.SLO, gpus int) {
	summarizeLevel(lr, reqs, target, gpus)
}

func summarizeLevel(lr *schema.LevelRecord, reqs []Request, target slo.SLO, gpus int) {
	measuredPlanned := 0
	for _, q := range reqs {
		if q.ID >= Sessions {
			measuredPlanned++
		}
	}
	var windowFromMs float64
	if len(reqs) > Sessions {
		windowFromMs = reqs[Sessions].ArrivalMs
	}
	summarizeOver(lr, Sessions, measuredPlanned, windowFromMs, target, gpus)
}

// summarizeOver is summarize for a level whose first warmups requests
// (ids) are warm-ups (Sessions; a trace has none), that planned
// measuredPlanned measured requests and whose window opens at
// windowFromMs (the first measured request's arrival): a shard plans only
// some of the level's requests.
func summarizeOver(lr *schema.LevelRecord, warmups, measuredPlanned int, windowFromMs float64, target slo.SLO, gpus int) {
	var ttft, tpot, lag []float64
	var cached, prompt float64
	haveCached := false
	last := math.Inf(-1)
	for i := range lr.Requests {
		q := &lr.Requests[i]
		lr.Outcomes[q.Outcome]++
		lag = append(lag, q.DispatchLagMs)
		if !q.Valid {
			lr.Invalid++
		}
		if q.ID < warmups {
			continue
		}
		if q.Outcome != schema.OutcomeOK || q.TTFTMs == nil {
			lr.Failures[q.Outcome]++
			continue
		}
		lr.Measured++
		ttft = append(ttft, *q.TTFTMs)
		// TPOT over requests of two or more output tokens, as vllm bench
		// serve and ServeStats take it: one token has no time per output
		// token, and its 0 would pull a percentile down to nothing.
		if q.OutputTokens > 1 {
			tpot = append(tpot, *q.TPOTMs)
		}
		last = math.Max(last, *q.FinishMs)
		if q.CachedTokens != nil && q.PromptTokens != nil {
			haveCached = true
			cached += float64(*q.CachedTokens)
			prompt += float64(*q.PromptTokens)
		}
	}
	measuredInvalid := 0
	for _, q := range lr.Requests {
		if q.ID >= warmups && !q.Valid {
			measuredInvalid++
		}
	}
	if len(lag) > 0 {
		lr.DispatchLagP50Ms = slo.NearestRank(lag, 50)
		lr.DispatchLagP99Ms = slo.NearestRank(lag, 99)
		lr.DispatchLagMaxMs = slo.NearestRank(lag, 100)
	}
	if len(ttft) > 0 {
		lr.P50TTFTMs, lr.P90TTFTMs, lr.P99TTFTMs = slo.NearestRank(ttft, 50), slo.NearestRank(ttft, 90), slo.NearestRank(ttft, 99)
		if len(tpot) > 0 { // else 0: not measured (the gate refuses it at a valid level)
			lr.P50TPOTMs, lr.P90TPOTMs, lr.P99TPOTMs = slo.NearestRank(tpot, 50), slo.NearestRank(tpot, 90), slo.NearestRank(tpot, 99)
		}
		lr.WindowSeconds = (last - windowFromMs) / 1000
		if lr.WindowSeconds > 0 {
			lr.EffectiveQPS = float64(lr.Measured) / lr.WindowSeconds
			if gpus > 0 {
				c := float64(gpus) * lr.WindowSeconds / float64(lr.Measured)
				lr.GPUSecondsPerRequest = &c
			}
		}
		lr.SLOMet = target.Met(lr.P99TTFTMs, lr.P99TPOTMs)
		lr.Goodput = GoodputOf(lr.Requests, warmups, target.Limits(), lr.WindowSeconds)
		lr.NotSteady = lr.SLOMet && lr.OfferedQPS > 0 && lr.EffectiveQPS < (1-SteadyTolerance)*lr.OfferedQPS
	}
	lr.Passed = lr.SLOMet && lr.Complete && lr.Measured == measuredPlanned && measuredInvalid == 0
	lr.HitRateMetrics = HitRate(lr.Counters.Before, lr.Counters.After)
	if lr.Counters.Warmup != nil {
		lr.HitRateMetricsMeasure = HitRate(lr.Counters.Warmup, lr.Counters.After)
	}
	if haveCached && prompt > 0 {
		h := cached / prompt
		lr.HitRateCachedTokens = &h
	}
	lr.WarmupHitRate = nil
	if warmups > 0 {
		lr.WarmupHitRate = warmupHitRate(lr)
	}
	lr.EngineMetricsKeys = engineMetricsKeys(lr.Requests, warmups)
	rate := lr.HitRateMetricsMeasure
	if rate == nil {
		rate = lr.HitRateCachedTokens
	}
	if rate != nil && warmups > 0 { // the seed workload's promise (a measurement-phase hit rate over 90%); a trace makes its own (TraceInfo)
		met := *rate > 0.9
		lr.CachePromiseMet = &met
	}
}

// warmupHitRate is the warm-up requests' prefix-cache hit rate: from their
// own cached_tokens where every warm-up that completed reported them, else
// from the /metrics counters over the warm-up phase when no measured
// request overlapped it; nil when neither tells.
func warmupHitRate(lr *schema.LevelRecord) *float64 {
	var cached, prompt float64
	n, reported := 0, 0
	for _, q := range lr.Requests {
		if q.ID >= Sessions || q.FirstMs == nil {
			continue
		}
		n++
		if q.CachedTokens != nil && q.PromptTokens != nil {
			reported++
			cached += float64(*q.CachedTokens)
			prompt += float64(*q.PromptTokens)
		}
	}
	if n > 0 && reported == n && prompt > 0 {
		h := cached / prompt
		return &h
	}
	if !lr.WarmupOverlap && lr.Counters.Warmup != nil {
		return HitRate(lr.Counters.Before, lr.Counters.Warmup)
	}
	return nil
}

func (r *runner) beginLevel(run, li int, qps float64, planned int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done.Store(0)
	r.failed.Store(0)
	r.levelStart = time.Now()
	r.levelSpanCur = r.levelSpan(qps)
	r.remaining -= r.levelSpanCur
	r.cur = Progress{Run: run, Runs: r.opts.Runs, Level: li, Levels: len(r.levelKeys()), QPS: qps, Planned: planned,
		TotalPlanned: r.totalPlanned}
}

func (r *runner) endLevel(planned int) {
	r.mu.Lock()
	r.totalDone += planned
	r.mu.Unlock()
}

// snapshot is the current progress.
func (r *runner) snapshot() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.cur
	p.Done, p.Failed = int(r.done.Load()), int(r.failed.Load())
	p.TotalDone = r.totalDone + p.Done
	p.Elapsed = time.Since(r.started)
	left := r.levelSpanCur - time.Since(r.levelStart)
	p.ETA = max(left, 0) + r.remaining
	return p
}

// startProgress calls opts.Progress from one goroutine: every 250 ms and
// once per finished level.
func (r *runner) startProgress() (stop func()) {
	r.started = time.Now()
	if r.opts.Progress == nil {
		return func() {}
	}
	r.progressCh = make(chan *schema.LevelRecord)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case lr := <-r.progressCh:
				p := r.snapshot()
				p.LevelDone = lr
				r.opts.Progress(p)
			case <-t.C:
				r.opts.Progress(r.snapshot())
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// report hands a finished level to the progress goroutine.
func (r *runner) report(lr *schema.LevelRecord) {
	if r.progressCh != nil {
		r.progressCh <- lr
	}
}

// CachedTokensRule states how a request's cached_tokens were read, for the
// record.
const (
	CachedTokensAsReported     = "as reported: a usage block without prompt_tokens_details leaves cached_tokens unknown (null)"
	CachedTokensZeroWhenAbsent = "the engine reports cached tokens (vLLM --enable-prompt-tokens-details), and vLLM omits " +
		"prompt_tokens_details when the count is 0: a usage block without it counts as 0 cached"
)

// fillCachedTokens sets cached_tokens to 0 on every answered request whose
// usage carried no prompt_tokens_details, once the engine is known to
// report them (Options.CachedTokensReported, or a request so far carried
// them), so that a cold request or a cache-off level counts as 0% rather
// than dropping out of the hit rate and biasing it upward.
func (r *runner) fillCachedTokens(reqs []schema.RequestRecord) {
	fillCachedTokens(reqs, r.opts.CachedTokensReported, &r.detailsSeen)
}

// fillCachedTokens is runner.fillCachedTokens over one level's requests,
// levels in order: reported is Options.CachedTokensReported and *seen
// whether an earlier level carried the details (updated).
func fillCachedTokens(reqs []schema.RequestRecord, reported bool, seen *bool) {
	for _, q := range reqs {
		if q.CachedTokens != nil {
			*seen = true
			break
		}
	}
	if !reported && !*seen {
		return
	}
	for i := range reqs {
		if q := &reqs[i]; q.PromptTokens != nil && q.CachedTokens == nil {
			zero := 0
			q.CachedTokens = &zero
		}
	}
}

// normalEndpoint is an endpoint URL as replay uses it: http(s) with a
// host, without a trailing "/" or "/v1".
func normalEndpoint(e string) (string, error) {
	u, err := url.Parse(e)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", &ParamError{"endpoint", e, "an http(s) URL with a host, e.g. http://127.0.0.1:8000"}
	}
	return strings.TrimSuffix(strings.TrimSuffix(u.String(), "/"), "/v1"), nil
}

// backendOf names what serves the endpoint when the caller did not: the
// engine its GET /version answer is (engine.Recognise), "unknown" for an
// unverified kind.
func backendOf(kind schema.Kind, info schema.EngineInfo) string {
	if e, ok := engines.Recognise(info.Version); ok && kind != schema.KindUnverified {
		return e.Name()
	}
	return "unknown"
}
