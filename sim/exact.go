package sim

import (
	"fmt"
	"sort"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// Kind labels every result of this package.
const Kind = schema.KindSimulationOnly

// Mode is a deployment topology of the exact model.
type Mode string

const (
	Colocated     Mode = "colocated"
	Disaggregated Mode = "disaggregated"
)

// ParseMode accepts "colocated" or "disaggregated".
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Colocated, Disaggregated:
		return Mode(s), nil
	}
	return "", &replay.ParamError{Field: "mode", Value: s, Want: `"colocated" or "disaggregated"`}
}

// The CPU exercise's fixed hardware rates: no GPU, one worker per queue.
const (
	// PrefillTokensPerSecond is the prefill rate: p = uncached/4096*1000 ms.
	PrefillTokensPerSecond = 4096
	// DecodeStepMillis is one output token's time, d = 1000/2048 ms.
	DecodeStepMillis = 1000.0 / 2048
	// TransferMillis is the fixed KV transfer between prefill and decode.
	TransferMillis = 8.0
)

// Config is one configuration of the exact model.
type Config struct {
	Mode        Mode `json:"mode"`
	PrefixCache bool `json:"prefix_cache"`
}

// Timeline is one request's path through the model, in model milliseconds.
// It keeps every interval so attribution can be tested against it: TTFT =
// PrefillQueueMs + PrefillMs + TransferMs + DecodeQueueMs + DecodeStepMs,
// and the rest of the decode follows the first token.
type Timeline struct {
	replay.Request
	EffectiveCached int     `json:"effective_cached_tokens"`
	PrefillQueueMs  float64 `json:"prefill_queue_ms"` // waiting for the (prefill or shared) queue
	PrefillStartMs  float64 `json:"prefill_start_ms"`
	PrefillMs       float64 `json:"prefill_ms"`
	PrefillEndMs    float64 `json:"prefill_end_ms"`
	TransferMs      float64 `json:"transfer_ms"`     // 8 ms disaggregated, 0 colocated
	DecodeQueueMs   float64 `json:"decode_queue_ms"` // waiting for the decode queue (disaggregated)
	FirstMs         float64 `json:"first_ms"`
	FinishMs        float64 `json:"finish_ms"`
}

// Outcome converts t to the timing every backend reports.
func (t Timeline) Outcome() replay.Outcome {
	return replay.Outcome{ID: t.ID, ArrivalMs: t.ArrivalMs, FirstMs: t.FirstMs, FinishMs: t.FinishMs, OutputTokens: t.OutputTokens}
}

// Run plays reqs through the CPU exercise's exact queueing model and returns
// each request's timeline, indexed like reqs. Requests are served in order of
// arrival, equal arrivals by increasing id; queues start free at time 0. The
// arithmetic follows the exercise's equations term by term in float64, with
// output_tokens-1 in place of 127:
//
//	p = (input_tokens - effective_cached)/4096*1000, d = 1000/2048
//	colocated:     first = max(a, busy) + p + d;  finish = first + (out-1)*d;  busy = finish
//	disaggregated: prefill_end = max(a, prefill_end) + p
//	               first = max(prefill_end + 8, decode_end) + d
//	               finish = first + (out-1)*d;  decode_end = finish
func Run(cfg Config, reqs []replay.Request) ([]Timeline, error) {
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, b := reqs[order[x]], reqs[order[y]]
		if a.ArrivalMs != b.ArrivalMs {
			return a.ArrivalMs < b.ArrivalMs
		}
		return a.ID < b.ID
	})
	const d = DecodeStepMillis
	out := make([]Timeline, len(reqs))
	var busy, prefillEnd, decodeEnd float64
	for _, i := range order {
		r := reqs[i]
		if r.CachedTokens < 0 || r.CachedTokens >= r.InputTokens || r.OutputTokens < 1 {
			return nil, fmt.Errorf("request %d: need 0 <= cached_tokens < input_tokens and output_tokens >= 1, got %d/%d/%d",
				r.ID, r.CachedTokens, r.InputTokens, r.OutputTokens)
		}
		t := Timeline{Request: r}
		if cfg.PrefixCache {
			t.EffectiveCached = r.CachedTokens
		}
		a := r.ArrivalMs
		p := float64(r.InputTokens-t.EffectiveCached) / PrefillTokensPerSecond * 1000
		t.PrefillMs = p
		switch cfg.Mode {
		case Colocated:
			start := max(a, busy)
			t.PrefillStartMs = start
			t.PrefillQueueMs = start - a
			t.PrefillEndMs = start + p
			t.FirstMs = start + p + d
			t.FinishMs = t.FirstMs + float64(r.OutputTokens-1)*d
			busy = t.FinishMs
		case Disaggregated:
			start := max(a, prefillEnd)
			prefillEnd = start + p
			t.PrefillStartMs = start
			t.PrefillQueueMs = start - a
			t.PrefillEndMs = prefillEnd
			t.TransferMs = TransferMillis
			ready := prefillEnd + TransferMillis
			decodeStart := max(ready, decodeEnd)
			t.DecodeQueueMs = decodeStart - ready
			t.FirstMs = decodeStart + d
			t.FinishMs = t.FirstMs + float64(r.OutputTokens-1)*d
			decodeEnd = t.FinishMs
		}
		out[i] = t
	}
	return out, nil
}

// LevelResult is one load level: its summary and every request's timeline.
type LevelResult struct {
	slo.Level
	Timelines []Timeline `json:"-"`
}

// Result is the outcome of a scan over load levels, in the exercise's JSON
// shape: {"kind","config","levels","objective"}.
type Result struct {
	Kind      schema.Kind `json:"kind"`
	Config    ScanConfig  `json:"config"`
	Levels    []slo.Level `json:"levels"`
	Objective float64     `json:"objective"`
	// Details keeps per-request timelines for attribution; not serialised.
	Details []LevelResult `json:"-"`
}

// ScanConfig is everything that determines a scan's result.
type ScanConfig struct {
	Config
	Requests     int       `json:"requests"`
	InputTokens  int       `json:"input_tokens"`
	OutputTokens int       `json:"output_tokens"`
	QPS          []float64 `json:"qps"`
	slo.SLO
}

// DefaultScan is the CPU exercise's public instance for cfg: 128 requests of
// 4096 input and 128 output tokens at 1, 2, 4, 8, 16 and 32 QPS, default
// SLOs.
func DefaultScan(cfg Config) ScanConfig {
	return ScanConfig{Config: cfg, Requests: 128, InputTokens: 4096, OutputTokens: 128,
		QPS: []float64{1, 2, 4, 8, 16, 32}, SLO: slo.Default}
}

// Scan runs every load level of sc and computes the objective.
func Scan(sc ScanConfig) (Result, error) {
	if len(sc.QPS) == 0 {
		return Result{}, &replay.ParamError{Field: "qps", Value: "[]", Want: "at least one offered rate"}
	}
	res := Result{Kind: Kind, Config: sc, Levels: []slo.Level{}}
	for _, q := range sc.QPS {
		reqs, err := replay.Generate(replay.Params{Requests: sc.Requests, InputTokens: sc.InputTokens,
			UncachedTokens: replay.DefaultUncachedTokens, OutputTokens: sc.OutputTokens, OfferedQPS: q})
		if err != nil {
			return Result{}, err
		}
		tl, err := Run(sc.Config, reqs)
		if err != nil {
			return Result{}, err
		}
		outs := make([]replay.Outcome, len(tl))
		for i, t := range tl {
			outs[i] = t.Outcome()
		}
		lvl := replay.Summarize(q, outs, sc.SLO)
		res.Levels = append(res.Levels, lvl)
		res.Details = append(res.Details, LevelResult{Level: lvl, Timelines: tl})
	}
	res.Objective = slo.Objective(res.Levels)
	return res, nil
}
