package gate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

func init() { RegisterReader(readReplayRecord) }

// readReplayRecord reads a `hone replay` run record: one Run per pass over
// the levels. The scenario is the record config's "scenario" (hone replay
// --scenario), else its "name", else "default"; the fingerprint holds what
// must match for runs to be compared, the cold-start procedure included.
// Each level carries its verdict's reasons when it is invalid; the
// config's "tpot_floor_ms", when set, replaces DefaultTPOTFloorMs.
func readReplayRecord(b []byte) ([]Run, bool, error) {
	var probe struct {
		SchemaVersion *int   `json:"schema_version"`
		Kind          string `json:"kind"`
		Runs          []any  `json:"runs"`
	}
	if err := json.Unmarshal(b, &probe); err != nil || probe.SchemaVersion == nil || probe.Runs == nil {
		return nil, false, nil
	}
	if err := replay.ValidateRecord(b); err != nil {
		return nil, true, fmt.Errorf("not a valid hone replay record: %w", err)
	}
	var rec schema.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, true, err
	}
	runs, err := runsOfRecord(&rec)
	return runs, true, err
}

// runsOfRecord is a replay record's runs (see readReplayRecord).
func runsOfRecord(rec *schema.Record) ([]Run, error) {
	if rec.Incomplete {
		return nil, fmt.Errorf("the record is incomplete (%s): it cannot stand for a run", rec.Error)
	}
	if rec.Workload.LoadMode() == schema.LoadClosed {
		// Its levels are clients in flight, not offered rates: comparing
		// it level by level with anything needs levels keyed by clients,
		// which the gate's series do not have yet.
		return nil, fmt.Errorf("workload.load: %q (closed loop, clients %v): the gate compares open-loop records (levels by offered rate) only, so far; predict or replay with --qps to gate", rec.Workload.Load, rec.Workload.Concurrency)
	}
	scenario := scenarioOf(rec.Config)
	fp := recordFingerprint(rec)
	bounds := Bounds{MeasuredPerLevel: max(rec.Workload.Requests-rec.Warmups(), 0)}
	if f, ok, err := rec.Config.TPOTFloorMs(); err != nil {
		return nil, err
	} else if ok {
		bounds.TPOTFloorMs = f
	}
	var runs []Run
	for _, rr := range rec.Runs {
		run := Run{Kind: string(rec.Kind), Scenario: scenario, Fingerprint: fp, Objective: rr.Objective, Bounds: bounds}
		for _, l := range rr.Levels {
			m := map[string]float64{
				"effective_qps": l.EffectiveQPS,
				"p50_ttft_ms":   l.P50TTFTMs, "p99_ttft_ms": l.P99TTFTMs,
				"p50_tpot_ms": l.P50TPOTMs, "p99_tpot_ms": l.P99TPOTMs,
			}
			if l.GPUSecondsPerRequest != nil {
				m["gpu_seconds_per_request"] = *l.GPUSecondsPerRequest
			}
			if g := l.Goodput; g != nil {
				m["goodput_fraction"], m["goodput_qps"] = g.Fraction, g.QPS
			}
			if h := l.HitRateMetricsMeasure; h != nil {
				m["cache_hit_rate"] = *h
			} else if h := l.HitRateCachedTokens; h != nil {
				m["cache_hit_rate"] = *h
			}
			failed := l.Invalid
			for _, n := range l.Failures {
				failed += n
			}
			var invalid []string
			if !l.Verdict.Valid {
				for _, r := range l.Verdict.Reasons {
					invalid = append(invalid, r.String())
				}
				if len(invalid) == 0 {
					invalid = []string{"invalid: the record gives no reason"}
				}
			}
			run.Levels = append(run.Levels, LevelRun{OfferedQPS: l.OfferedQPS, Passed: l.Passed, Failed: failed, Metrics: m, Invalid: invalid,
				Samples: levelSamples(l.Requests, rec.Warmups())})
		}
		sort.Slice(run.Levels, func(i, j int) bool { return run.Levels[i].OfferedQPS < run.Levels[j].OfferedQPS })
		runs = append(runs, run)
	}
	return runs, nil
}

// recordFingerprint is what must match for a replay record's runs to be
// compared (DefaultCompared picks from it), the cold-start procedure and
// load mode included.
func recordFingerprint(rec *schema.Record) Fingerprint {
	return Fingerprint{
		"kind":           string(rec.Kind),
		"engine":         rec.Backend,
		"model":          rec.Model.ID,
		"revision":       rec.Model.Revision,
		"precision":      rec.Model.Precision,
		"gpu_count":      fmt.Sprint(rec.GPUs),
		"gpu_model":      fmt.Sprint(rec.Hardware["gpu_model"]),
		"workload":       workloadFingerprint(rec.Workload),
		"slo":            sloFingerprint(rec.SLO),
		"time_scale":     fmt.Sprint(rec.TimeScale),
		"cache":          rec.Cache.Procedure,
		"load":           rec.Workload.LoadMode(),
		"hone_version":   rec.Hone.Version,
		"engine_version": strings.TrimSpace(fmt.Sprint(rec.Engine.Version)),
	}
}

// sloFingerprint is the SLO as the gate compares it; goodput limits are
// named only when set, so records from before them compare as before.
func sloFingerprint(s slo.SLO) string {
	out := fmt.Sprintf("ttft<=%gms tpot<=%gms", s.TTFTMillis, s.TPOTMillis)
	if s.Goodput.Set() {
		out += " goodput=" + s.Goodput.String()
	}
	return out
}

// workloadFingerprint is the workload as the gate compares it; a length
// ratio is named only when set, so records from before it compare as
// before.
func workloadFingerprint(w schema.WorkloadRecord) string {
	if t := w.Trace; w.Kind == schema.WorkloadTrace && t != nil {
		// The trace is the workload: its bytes, its speed and how its
		// blocks became tokens.
		return fmt.Sprintf("trace=%s speed=%g block=%d", t.SHA256, t.Speed, t.BlockSize)
	}
	return fmt.Sprintf("seed=%d requests=%d input=%d uncached=%d output=%d qps=%v", w.Seed, w.Requests, w.InputTokens, w.UncachedTokens, w.OutputTokens, w.QPS) +
		lengthRatio(w)
}

// lengthRatio is " length_ratio=R" when the workload draws its lengths,
// else "".
func lengthRatio(w schema.WorkloadRecord) string {
	if w.LengthRatio > 0 && w.LengthRatio < 1 {
		return fmt.Sprintf(" length_ratio=%g", w.LengthRatio)
	}
	return ""
}

// scenarioOf is a record config's "scenario" (hone replay --scenario),
// else its "name", else "default".
func scenarioOf(config schema.Config) string {
	if s := config.Scenario(); s != "" {
		return s
	}
	return "default"
}

// levelSamples are the per-request values a level's p99 TTFT and p99 TPOT
// are percentiles of, chosen as replay summarizes a level: measured
// requests (ids >= warmups: 8, none in a trace) that completed with a TTFT; TPOT over
// those of two or more output tokens.
func levelSamples(reqs []schema.RequestRecord, warmups int) map[string][]float64 {
	ttft, tpot := []float64{}, []float64{}
	for _, q := range reqs {
		if q.ID < warmups || q.Outcome != schema.OutcomeOK || q.TTFTMs == nil {
			continue
		}
		ttft = append(ttft, *q.TTFTMs)
		if q.OutputTokens > 1 && q.TPOTMs != nil {
			tpot = append(tpot, *q.TPOTMs)
		}
	}
	return map[string][]float64{"p99_ttft_ms": ttft, "p99_tpot_ms": tpot}
}
