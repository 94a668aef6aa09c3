package optimizer

import (
	"context"
	"fmt"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/slo"
)

// ModelEvaluator is the exact model backend: it evaluates a spec with the
// CPU exercise's deterministic queueing model (sim.Scan: fixed rates, FCFS
// queues) instead of deploying it,
// in milliseconds, and labels the trial simulation_only. It maps the spec
// to sim.Config (modelConfig) and refuses what the model cannot express
// with a trial whose Error names the spec field.
//
// The trial carries the same figures as a measured one, read by the same
// code (summarizeRecord, diagnoseTrial) from a record of the scan: one
// objective per run, level summaries, the prefix hit rate, and a
// bottleneck from the model's own exact split of every request's TTFT.
// The model is deterministic, so every run is the same run; the
// diagnosis reads it once. CostGPUSec stays nil: the model's two modes
// have different resource models (package sim), so no GPU cost compares
// them.
type ModelEvaluator struct {
	// Workload: Requests, InputTokens and OutputTokens shape the scan;
	// UncachedTokens must be 0 or the model's (replay.DefaultUncachedTokens);
	// Seed picks token ids, which the model does not read.
	Workload schema.Workload
	QPS      []float64
	Runs     int // 0: 1
	SLO      slo.SLO
}

// Evaluate implements Evaluator.
func (e *ModelEvaluator) Evaluate(_ context.Context, spec *deploy.Spec, _ string) (t Trial) {
	start := time.Now()
	t = Trial{Started: start.UTC(), Kind: sim.Kind}
	defer func() { t.Seconds = time.Since(start).Seconds() }()
	cfg, err := modelConfig(spec)
	if err != nil {
		t.Error = "the exact model cannot express " + err.Error()
		return t
	}
	w := e.Workload
	if w.UncachedTokens != 0 && w.UncachedTokens != replay.DefaultUncachedTokens {
		t.Error = fmt.Sprintf("the exact model cannot express workload uncached_tokens %d: its scan has %d",
			w.UncachedTokens, replay.DefaultUncachedTokens)
		return t
	}
	res, err := sim.Scan(sim.ScanConfig{Config: cfg, Requests: w.Requests, InputTokens: w.InputTokens,
		OutputTokens: w.OutputTokens, QPS: e.QPS, SLO: e.SLO})
	if err != nil {
		t.Error = "exact model: " + err.Error()
		return t
	}
	rec := modelRecord(res, max(e.Runs, 1))
	diagnoseTrial(&t, rec, modelAttributions(res))
	summarizeRecord(&t, rec)
	return t
}

// modelConfig maps a spec to the exact model, the CPU exercise's queueing
// model (package sim): one FCFS queue for a colocated deployment, one prefill
// and one decode queue for a disaggregated one, fixed single-worker service
// rates, a prefix cache on or off. So:
//
//   - colocated, single-GPU engines (tp 1), any number of data-parallel
//     replicas, is its colocated mode: the exercise's colocated deployment
//     of the whole budget, as Colocate builds it. The model does not tell
//     replicas apart from one engine; it has no term for tensor
//     parallelism.
//   - disaggregated 1P1D with single-GPU workers is its disaggregated mode.
//   - knobs.prefix_caching (default on) is its cache flag.
//
// Routing matters only between replicas: the model's one colocated queue
// keeps every session's prefix cached, as session affinity does, and
// cannot express the prefixes round-robin routing loses. Engine knobs the
// model's fixed rates have no term for are refused; model, precision,
// memory, network and emulator settings are what those rates stand for
// and are not read. The error names the spec field.
func modelConfig(s *deploy.Spec) (sim.Config, error) {
	refuse := func(field, format string, a ...any) (sim.Config, error) {
		return sim.Config{}, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...))
	}
	t := s.Topology
	cfg := sim.Config{PrefixCache: cachingOn(s)}
	switch t.Kind {
	case deploy.Colocated:
		if t.TP > 1 {
			return refuse("topology.tp", "%d: its colocated engines are single-GPU; it has no term for tensor parallelism", t.TP)
		}
		if t.Replicas > 1 && s.Routing.Policy == deploy.RoundRobin {
			return refuse("routing.policy", "round_robin over %d replicas: its one colocated queue keeps every session's prefix cached", t.Replicas)
		}
		cfg.Mode = sim.Colocated
	case deploy.Disaggregated:
		for _, p := range []struct {
			name string
			pool *deploy.Pool
		}{{"prefill", t.Prefill}, {"decode", t.Decode}} {
			switch {
			case p.pool == nil:
				return refuse("topology."+p.name, "missing: its disaggregated mode is 1P1D")
			case p.pool.Replicas != 1:
				return refuse("topology."+p.name+".replicas", "%d: its disaggregated mode is 1P1D, one %s queue", p.pool.Replicas, p.name)
			case p.pool.TP > 1:
				return refuse("topology."+p.name+".tp", "%d: its %s worker is single-GPU; it has no term for tensor parallelism", p.pool.TP, p.name)
			}
		}
		cfg.Mode = sim.Disaggregated
	default:
		return refuse("topology.kind", "%q: want colocated or disaggregated", t.Kind)
	}
	k := s.Knobs
	switch {
	case k.EnforceEager:
		return refuse("knobs.enforce_eager", "its decode step is fixed at %g ms, CUDA graphs or not", sim.DecodeStepMillis)
	case k.CUDAGraphMode != "":
		return refuse("knobs.cudagraph_mode", "%q: its decode step is fixed at %g ms", k.CUDAGraphMode, sim.DecodeStepMillis)
	case k.MaxNumSeqs != 0:
		return refuse("knobs.max_num_seqs", "%d: each of its queues serves one request at a time", k.MaxNumSeqs)
	case k.MaxNumBatchedTokens != 0:
		return refuse("knobs.max_num_batched_tokens", "%d: it does not batch", k.MaxNumBatchedTokens)
	case k.SpeculativeNgram != nil:
		return refuse("knobs.speculative_ngram", "it decodes one token per step")
	case len(k.ExtraArgs) > 0:
		return refuse("knobs.extra_args", "%q: it reads no engine arguments", k.ExtraArgs)
	}
	return cfg, nil
}

// modelRecord is the scan as a record of runs identical runs, every level
// valid and complete, with the measured requests' prefix hit rate.
func modelRecord(res sim.Result, runs int) *schema.Record {
	rec := &schema.Record{Kind: sim.Kind, Backend: "exact model", SLO: res.Config.SLO}
	var levels []schema.LevelRecord
	for _, d := range res.Details {
		var cached, input float64
		measured := 0
		for _, tl := range d.Timelines {
			if tl.ID >= replay.Sessions {
				cached += float64(tl.EffectiveCached)
				input += float64(tl.InputTokens)
				measured++
			}
		}
		l := schema.LevelRecord{Level: d.Level, Verdict: schema.Verdict{Valid: true}, Complete: true,
			Planned: len(d.Timelines), Sent: len(d.Timelines), Measured: measured}
		if measured > 0 {
			hit := cached / input
			l.HitRateCachedTokens = &hit
		}
		levels = append(levels, l)
	}
	for r := range runs {
		rec.Runs = append(rec.Runs, schema.RunRecord{Run: r, Objective: res.Objective, Levels: levels, Verdict: schema.Verdict{Valid: true}})
	}
	return rec
}

// modelAttributions splits every measured request's TTFT exactly, from the
// model's own intervals, into diagnose's parts: the queue wait, the
// prefill (with the first token on a colocated engine), the KV transfer
// and the decode queue with its first step; nothing is client time.
func modelAttributions(res sim.Result) []diagnose.Attribution {
	const source = "exact model"
	var out []diagnose.Attribution
	for _, d := range res.Details {
		for _, tl := range d.Timelines {
			if tl.ID < replay.Sessions {
				continue
			}
			a := diagnose.Attribution{OfferedQPS: d.OfferedQPS, ID: tl.ID, RequestID: fmt.Sprintf("model-%g-%d", d.OfferedQPS, tl.ID),
				TTFTMs: tl.FirstMs - tl.ArrivalMs, E2EMs: tl.FinishMs - tl.ArrivalMs,
				Parts: map[string]float64{diagnose.Client: 0, diagnose.Queueing: tl.PrefillQueueMs, diagnose.Prefill: tl.PrefillMs,
					diagnose.Transfer: tl.TransferMs, diagnose.DecodeQ: tl.DecodeQueueMs, diagnose.Decode: tl.FinishMs - tl.FirstMs},
				Sources: map[string]string{}}
			if res.Config.Mode == sim.Colocated {
				a.Parts[diagnose.Prefill] += sim.DecodeStepMillis
			} else {
				a.Parts[diagnose.DecodeQ] += sim.DecodeStepMillis
			}
			for p := range a.Parts {
				a.Sources[p] = source
			}
			out = append(out, a)
		}
	}
	return out
}
