package replay

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hone-llm/hone/internal/finesleep"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// TraceRate is the offered rate of a trace's one level: its requests per
// second of its span at its speed (model time; a span under 1 ms counts
// as 1 ms).
func TraceRate(info schema.TraceInfo) float64 {
	span := (info.LastMs - info.FirstMs) / cmp.Or(info.Speed, 1)
	return float64(info.Requests) * 1000 / math.Max(span, 1)
}

// newTraceWorkload is the workload of a replay or prediction of the trace
// tf at speed: the trace (kind WorkloadTrace), one run of one level at
// TraceRate.
func newTraceWorkload(tf *TraceFile, speed float64, seed uint64, vocab int) schema.WorkloadRecord {
	info := tf.Info
	info.Speed, info.Vocab, info.ImpliedHitRule, info.TokenRecipe = speed, vocab, ImpliedHitRule, TraceTokenRecipe
	in, out := int(info.InputTokens/int64(info.Requests)), int(info.OutputTokens/int64(info.Requests))
	return schema.WorkloadRecord{
		Workload: schema.Workload{Seed: seed, Requests: info.Requests, InputTokens: max(in, 1), UncachedTokens: max(in, 1), OutputTokens: max(out, 1)},
		Kind:     schema.WorkloadTrace, Trace: &info, QPS: []float64{TraceRate(info)}, Load: schema.LoadOpen, Runs: 1, Generator: PrefixGenerator,
		Sessions: []schema.SessionPrefix{}, SuffixVocab: vocab, SuffixRecipe: TraceTokenRecipe,
		PrewarmPolicy: "none: the trace's requests from its first, on an engine that starts cold (see cache); input_tokens and output_tokens are the trace's means",
	}
}

// SetTraceMeasured sets the trace's measured hit rate from the record's
// one level: its requests' cached_tokens where every request that
// completed reported them, else the /metrics counters' delta.
func SetTraceMeasured(rec *schema.Record) {
	t := rec.Workload.Trace
	if t == nil || len(rec.Runs) == 0 || len(rec.Runs[0].Levels) == 0 {
		return
	}
	l := &rec.Runs[0].Levels[0]
	t.MeasuredHitRate, t.MeasuredFrom = nil, ""
	all := true
	for _, q := range l.Requests {
		if q.Outcome == schema.OutcomeOK && (q.CachedTokens == nil || q.PromptTokens == nil) {
			all = false
		}
	}
	switch {
	case all && l.HitRateCachedTokens != nil:
		t.MeasuredHitRate, t.MeasuredFrom = l.HitRateCachedTokens, "cached_tokens: summed over every request that completed / their prompt tokens"
	case l.HitRateMetrics != nil:
		t.MeasuredHitRate, t.MeasuredFrom = l.HitRateMetrics, "/metrics: prefix-cache hits / queries over the replay"
	}
}

// RunTrace replays the trace tf against opts.Endpoint: every request at
// (timestamp - first) / speed model ms after the start (speed 0: 1), open
// loop, its prompt token-exact (TraceTokens: requests sharing k hash ids
// share exactly k blocks of tokens), exactly output_length tokens out,
// on an engine that starts cold (opts.Cache as Run). The trace is read as
// it is sent, not loaded. The record holds one run of one level with every
// request (ids: the trace's order, from 0; no warm-ups), and the trace's
// fingerprint and implied and measured hit rates (Workload.Trace).
// opts.Workload (only its Seed is read), QPS, Concurrency, Runs and Shard
// are not used. Errors and a partial record are as Run's.
func RunTrace(ctx context.Context, opts Options, tf *TraceFile, speed float64) (*schema.Record, error) {
	if speed == 0 {
		speed = 1
	}
	if !(speed > 0) || math.IsInf(speed, 0) {
		return nil, &ParamError{"trace-speed", speed, "a positive factor (2: twice as fast as the trace)"}
	}
	if opts.Shard != nil || len(opts.Concurrency) > 0 || opts.Runs > 1 {
		return nil, &ParamError{"trace", tf.Path, "alone: a trace is one open-loop pass (no shard, max-concurrency or runs)"}
	}
	seed := cmp.Or(opts.Workload.Seed, DefaultSeed)
	opts.Workload, opts.QPS = DefaultWorkload(), []float64{1} // checked by defaults; a trace reads neither
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	var sp *spill
	if opts.SpillDir != "" {
		var err error
		if sp, err = newSpill(opts.SpillDir); err != nil {
			return nil, &ParamError{"out", opts.SpillDir, fmt.Sprintf("a directory hone can write, for the record and its spill file (%v)", err)}
		}
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: newTransport()}
	}
	tb := newTimebase()
	rec := newRecord(opts, tb, newTraceWorkload(tf, speed, seed, 0))
	rec.CachedTokensRule = CachedTokensAsReported
	fail := func(err error) (*schema.Record, error) {
		rec.Incomplete, rec.Error = true, err.Error()
		finishRecord(rec)
		SetTraceMeasured(rec)
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
		rec.Engine.Error = err.Error()
	}
	if rec.Kind, err = resolveKind(opts.Kind, info); err != nil {
		return nil, err
	}
	if rec.TimeScale, err = resolveTimeScale(opts.TimeScale, info); err != nil {
		return nil, err
	}
	if opts.Backend == "" {
		rec.Backend = backendOf(rec.Kind, info)
	}
	tok := &engine{http: hc, base: opts.TokenizeEndpoint, model: opts.Model}
	vocab, err := TraceVocab(ctx, seed, tok.tokenize)
	if err != nil {
		return fail(fmt.Errorf("build prompts: %w", err))
	}
	rec.Workload.Trace.Vocab, rec.Workload.SuffixVocab = len(vocab), len(vocab)
	if rec.Cache, err = chooseCache(ctx, eng, opts.Cache); err != nil {
		var pe *ParamError
		if errors.As(err, &pe) {
			return nil, err
		}
		return fail(err)
	}
	if rec.Cache.Procedure == schema.CacheFreshPrefixes {
		for rec.Cache.Nonce = opts.PrefixNonce; rec.Cache.Nonce == 0; {
			rec.Cache.Nonce = rand.Uint64()
		}
		rec.Cache.Detail += "; for a trace: every block's tokens are drawn with the seed ^ nonce"
	} else {
		rec.Cache.Detail = eng.resetRoute() + " before the trace"
	}
	rec.RequestIDNonce = fmt.Sprintf("%08x", rand.Uint32())
	tr := &traceRunner{opts: opts, tf: tf, speed: speed, tb: tb, eng: eng, scale: rec.TimeScale,
		tokens: NewTraceTokens(vocab, tf.Info.BlockSize, seed^rec.Cache.Nonce), idNonce: rec.RequestIDNonce,
		cl: &client{http: hc, url: opts.Endpoint + "/v1/completions", idHeader: eng.conventions().HTTP.RequestIDHeader, scale: rec.TimeScale,
			timeout: time.Duration(float64(opts.RequestTimeout) * rec.TimeScale), tb: tb, pack: true, spill: sp}}
	stop := tr.startProgress(rec.Workload.QPS[0])
	lr, err := tr.level(ctx, rec.Workload.QPS[0])
	stop(&lr)
	if sp != nil && sp.failed() != nil {
		slog.Warn("replay: the spill file failed; the requests after it kept their chunks in memory", "dir", opts.SpillDir, "err", sp.failed())
	}
	rec.Runs = []schema.RunRecord{{Run: 0, Levels: []schema.LevelRecord{lr}}}
	if tr.detailsSeen || opts.CachedTokensReported {
		rec.CachedTokensRule = CachedTokensZeroWhenAbsent
	}
	rec.Workload.Trace.FirstTokenReuses = tr.tokens.Reuses()
	switch {
	case err != nil:
		return fail(err)
	case ctx.Err() != nil:
		return fail(fmt.Errorf("interrupted: %w", context.Cause(ctx)))
	}
	finishRecord(rec)
	SetTraceMeasured(rec)
	return rec, nil
}

type traceRunner struct {
	opts        Options
	tf          *TraceFile
	speed       float64
	scale       float64
	tb          timebase
	eng         *engine
	cl          *client
	tokens      *TraceTokens
	idNonce     string
	detailsSeen bool
	done        atomic.Int64
	failed      atomic.Int64
}

// startProgress calls opts.Progress every 250 ms from one goroutine, as
// Run does: the trace is one level; its ETA is what is left of the
// trace's span. stop reports the finished level.
func (r *traceRunner) startProgress(qps float64) (stop func(*schema.LevelRecord)) {
	if r.opts.Progress == nil {
		return func(*schema.LevelRecord) {}
	}
	n := r.tf.Info.Requests
	span := time.Duration((r.tf.Info.LastMs - r.tf.Info.FirstMs) / r.speed * r.scale * 1e6)
	began := time.Now()
	snap := func() Progress {
		done := int(r.done.Load())
		el := time.Since(began)
		return Progress{Runs: 1, Levels: 1, QPS: qps, Done: done, Failed: int(r.failed.Load()), Planned: n, TotalDone: done,
			TotalPlanned: n, Elapsed: el, ETA: max(span-el, 0)}
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				r.opts.Progress(snap())
			}
		}
	}()
	return func(lr *schema.LevelRecord) {
		close(quit)
		<-finished
		p := snap()
		p.LevelDone = lr
		r.opts.Progress(p)
	}
}

// level sends the trace as one level: cold engine, counters around it,
// each request built the moment before it is due.
func (r *traceRunner) level(ctx context.Context, qps float64) (schema.LevelRecord, error) {
	n := r.tf.Info.Requests
	lr := schema.LevelRecord{Level: slo.Level{OfferedQPS: qps}, Planned: n, Outcomes: map[string]int{}, Failures: map[string]int{},
		PrefixSeed: r.tokens.seed}
	bg := context.WithoutCancel(ctx)
	src, err := r.tf.Open()
	if err != nil {
		return lr, err
	}
	defer src.Close()
	lr.Counters.Before, _ = r.eng.scrape(bg)
	records := make([]schema.RequestRecord, n) // a trace's requests are counted before the replay
	hashes := sha256.New()
	var (
		wg   sync.WaitGroup
		ids  []int
		sent int
		pool sync.Pool
	)
	start := time.Now()
	lr.StartedAt = r.tb.Stamp(start)
	first := r.tf.Info.FirstMs
	for q, ok := src.Next(); ok && sent < n; q, ok = src.Next() {
		ids = r.tokens.Append(ids[:0], q)
		hash := HashTokens(ids)
		hashes.Write([]byte(hash))
		body, err := encodeCompletion(r.opts.Model, ids, q.OutputLength)
		if err != nil {
			panic(err) // ints and strings always encode
		}
		rr := &records[sent]
		*rr = schema.RequestRecord{ID: sent, RequestID: fmt.Sprintf("hone-%s-0-trace-%d", r.idNonce, sent), InputTokens: len(ids),
			PromptSHA256: hash, ScheduledMs: (q.TimestampMs - first) / r.speed}
		due := start.Add(time.Duration(rr.ScheduledMs * r.scale * 1e6))
		if !finesleep.Until(ctx, due) {
			break
		}
		rr.Scheduled = r.tb.Stamp(due)
		sent++
		wg.Add(1)
		go func(out int) {
			defer wg.Done()
			sse, _ := pool.Get().(*sseReader)
			if sse == nil {
				sse = newSSEReader(nil)
			}
			r.cl.do(ctx, body, rr, start, due, out, sse)
			sse.reset(nil)
			pool.Put(sse)
			if rr.Outcome != schema.OutcomeOK {
				r.failed.Add(1)
			}
			r.done.Add(1)
		}(q.OutputLength)
	}
	wg.Wait()
	lr.Counters.After, _ = r.eng.scrape(bg)
	lr.PromptsSHA256 = hex.EncodeToString(hashes.Sum(nil))
	lr.Requests = records[:sent]
	lr.Sent = sent
	lr.Complete = sent == n && ctx.Err() == nil
	fillCachedTokens(lr.Requests, r.opts.CachedTokensReported, &r.detailsSeen)
	SummarizeTraceLevel(&lr, r.opts.SLO, r.opts.GPUs)
	judgeLevel(&lr, r.opts.SLO, r.scale)
	return lr, src.Err()
}

// SummarizeTraceLevel fills the level's summary as Summarize does, for a
// trace's level: every request is measured (no warm-ups), the window
// opening at the first request's arrival (0).
func SummarizeTraceLevel(lr *schema.LevelRecord, target slo.SLO, gpus int) {
	summarizeOver(lr, 0, lr.Planned, 0, target, gpus)
}

// NewTraceRecord is the record a prediction of tf at speed fills
// (package predict): the trace's workload, its prompts drawn from vocab
// ids; the caller sets the rest.
func NewTraceRecord(tf *TraceFile, speed float64, seed uint64, vocab int) *schema.Record {
	return &schema.Record{SchemaVersion: schema.SchemaVersion, VerdictRule: schema.VerdictRule, Workload: newTraceWorkload(tf, cmp.Or(speed, 1), seed, vocab),
		Outcomes: map[string]int{}, Validation: schema.Validation{Reasons: map[string]int{}}, Config: map[string]any{}, Hardware: map[string]any{}}
}
