package predict

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// RunTrace predicts spec under the trace tf at speed (0: 1), as hone
// replay --trace replays it against the emulator: every request at
// (timestamp - first) / speed model ms on engines that start cold, its
// prompt the token ids replay.TraceTokens draws from the emulator
// tokenizer's ids of the same text (so the prompts, and the prompts'
// hashes, are the ones a replay against the emulator sends), exactly
// output_length tokens out. The record is of kind "predicted", one run of
// one level with every request (opts.KeepRequests), its workload the
// trace with the implied and the predicted hit rates. The simulation
// makes each request's prompt at its arrival and drops it when it ends
// (emulator.VirtualRequest.Render), as the replay builds each as it is
// sent. opts.QPS, Concurrency and
// Capacity are not read; of opts.Workload only the seed.
func RunTrace(spec *deploy.Spec, opts Options, tf *replay.TraceFile, speed float64) (*schema.Record, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if speed == 0 {
		speed = 1
	}
	if !(speed > 0) {
		return nil, &replay.ParamError{Field: "trace-speed", Value: speed, Want: "a positive factor"}
	}
	prof, err := profileFor(spec, opts)
	if err != nil {
		return nil, err
	}
	cl, err := clusterOf(spec, prof)
	if err != nil {
		return nil, err
	}
	seed := opts.Workload.Seed
	if seed == 0 {
		seed = replay.DefaultSeed
	}
	tok := emulator.NewTokenizer()
	vocab, err := replay.TraceVocab(context.Background(), seed, func(_ context.Context, text string) ([]int, error) {
		ids, _ := tok.Tokenize(text)
		return ids, nil
	})
	if err != nil {
		return nil, err
	}
	rec := replay.NewTraceRecord(tf, speed, seed, len(vocab))
	rec.Kind, rec.Backend = Kind, "predict: emulator engine in virtual time, profile "+prof.Name
	rec.Engine, rec.Model, rec.Config = schema.EngineInfo{Endpoint: "virtual"}, schema.Model{ID: spec.ServedName()}, specConfig(spec)
	rec.Hardware = map[string]any{"profile": prof.Name, "profile_source": prof.SourceKind(), "gpu": prof.GPU.Name}
	rec.GPUs, rec.TimeScale, rec.SLO = spec.GPUsNeeded(), 1, opts.SLO
	rec.Cache = schema.CacheState{Procedure: schema.CacheReset,
		Detail: "virtual engines start the trace empty: the prefix cache holds nothing, as after POST /reset_prefix_cache"}
	rec.RequestTimeoutMs, rec.CachedTokensRule = float64(replay.DefaultRequestTimeout)/1e6, replay.CachedTokensAsReported
	rec.StartedAt, rec.FinishedAt = time.Unix(0, 0).UTC(), time.Unix(0, 0).UTC()

	tokens := replay.NewTraceTokens(vocab, tf.Info.BlockSize, seed)
	ld, err := loadTrace(tf, tokens, newRouter(cl), speed)
	if err != nil {
		return nil, err
	}
	reqs, vr := ld.reqs, ld.vr
	rec.Workload.Trace.FirstTokenReuses = tokens.Reuses()
	outs, err := emulator.Simulate(cl.workers, vr)
	if err != nil {
		return nil, err
	}
	lr := schema.LevelRecord{Level: replay.LevelOf(rec.Workload.QPS[0]), Planned: len(reqs), Sent: len(reqs), Complete: true,
		Outcomes: map[string]int{}, Failures: map[string]int{}, PrefixSeed: seed,
		Verdict: schema.Verdict{Valid: true, Reasons: []schema.Reason{}}, PromptsSHA256: ld.promptsSHA256}
	lr.Requests = make([]schema.RequestRecord, len(reqs))
	for i, q := range reqs {
		lr.Requests[i] = requestRecord(q, vr[i], &outs[i], opts.KeepRequests)
		lr.Requests[i].PromptSHA256 = ld.hashes[i]
	}
	replay.SummarizeTraceLevel(&lr, opts.SLO, rec.GPUs)
	for _, r := range lr.Requests {
		rec.Outcomes[r.Outcome]++
		if r.Valid {
			rec.Validation.Valid++
		} else {
			rec.Validation.Invalid++
		}
	}
	rec.Runs = []schema.RunRecord{{Run: 0, Levels: []schema.LevelRecord{lr}}}
	replay.SetTraceMeasured(rec)
	if !opts.KeepRequests {
		rec.Runs[0].Levels[0].Requests = nil
	}
	replay.Judge(rec)
	return rec, nil
}

// traceLoad is a trace's requests as a replay sends them and as the
// simulation takes them, with their prompts' hashes.
type traceLoad struct {
	reqs          []replay.Request
	vr            []emulator.VirtualRequest
	hashes        []string // each prompt's
	promptsSHA256 string   // of every prompt's hash, in trace order
}

// loadTrace reads tf's requests, arriving at (timestamp - first) / speed,
// their prompts drawn by tokens and routed by router.
func loadTrace(tf *replay.TraceFile, tokens *replay.TraceTokens, router *router, speed float64) (*traceLoad, error) {
	src, err := tf.Open()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	ld := &traceLoad{
		vr:   make([]emulator.VirtualRequest, 0, tf.Info.Requests),
		reqs: make([]replay.Request, 0, tf.Info.Requests),
	}
	all := sha256.New()
	var ids []int
	for q, ok := src.Next(); ok; q, ok = src.Next() {
		// Every prompt is made here, in trace order, for its hash and its
		// route, and again by the simulation at its arrival (Render), which
		// drops it when it ends: what a long trace holds is its plans, a
		// few bytes a block, not 8 bytes a token.
		plan := tokens.Plan(q)
		ids = tokens.Render(ids[:0], &plan)
		i := len(ld.vr)
		at := (q.TimestampMs - tf.Info.FirstMs) / speed
		out := q.OutputLength
		ld.reqs = append(ld.reqs, replay.Request{ID: i, ArrivalMs: at, InputTokens: q.InputLength, OutputTokens: out})
		ld.vr = append(ld.vr, emulator.VirtualRequest{ID: fmt.Sprintf("predict-trace-%d", i), Prompt: ids, MaxTokens: out, ArrivalMs: at, Decode: -1})
		router.route(&ld.vr[i])
		// The simulation writes each request's output after its prompt.
		ld.vr[i].Prompt, ld.vr[i].PromptLen = nil, len(ids)
		ld.vr[i].Render = func() []int { return tokens.Render(make([]int, 0, plan.Len()+out), &plan) }
		h := replay.HashTokens(ids)
		all.Write([]byte(h))
		ld.hashes = append(ld.hashes, h)
	}
	if err := src.Err(); err != nil {
		return nil, err
	}
	ld.promptsSHA256 = hex.EncodeToString(all.Sum(nil))
	return ld, nil
}
