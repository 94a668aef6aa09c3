package emulator

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// StepSummary is what one engine step holds, in the aggregate form that
// vLLM's forward-pass metrics report (and hone's step evidence): enough to
// cost a step without the per-sequence list. The emulator summarises its
// own steps the same way (Summarize), so a profile fitted to measured
// summaries costs emulated steps on the same features.
type StepSummary struct {
	PrefillTokens   int     // new prompt tokens computed this step (Σ chunk lengths)
	PrefillRequests int     // sequences with a prompt chunk this step
	PrefillKV       int     // tokens already in the KV cache ahead of those chunks (prefix hits, earlier chunks)
	PrefillLenVar   float64 // population variance of those sequences' prompt lengths (chunk + context)
	DecodeRequests  int     // sequences decoding one token
	DecodeKV        int     // KV tokens those sequences attend to
}

// Phase names a step by what it holds: "context" (prompt chunks only),
// "decode" (decode only) or "mixed" (both); "" for an empty step.
func (s StepSummary) Phase() string {
	switch {
	case s.PrefillRequests > 0 && s.DecodeRequests > 0:
		return "mixed"
	case s.PrefillRequests > 0:
		return "context"
	case s.DecodeRequests > 0:
		return "decode"
	}
	return ""
}

// AttentionPairs is the prefill attention work of the step, in (query
// token, key token) pairs: Σ n·c + n²/2 over the prompt chunks (n new
// tokens on c cached). From the aggregate it is (Σ L² − C²)/2 with L = n+c
// each sequence's prompt length, Σ L² from the mean and variance of L, and
// the cached tokens C taken as one sequence's (exact when one sequence
// continues a chunk or hits the cache and the rest start cold, as chunked
// prefill schedules them; otherwise an underestimate of Σ n·c).
func (s StepSummary) AttentionPairs() float64 {
	if s.PrefillRequests <= 0 {
		return 0
	}
	np := float64(s.PrefillRequests)
	total := float64(s.PrefillTokens + s.PrefillKV)
	sumL2 := np*s.PrefillLenVar + total*total/np
	c := float64(s.PrefillKV)
	return math.Max((sumL2-c*c)/2, float64(s.PrefillTokens)/2)
}

// Summarize is the StepSummary of one emulated step.
func Summarize(entries []StepEntry) StepSummary {
	var s StepSummary
	var lens []float64
	for _, e := range entries {
		if e.Decode {
			s.DecodeRequests++
			s.DecodeKV += e.Context + e.Tokens
			continue
		}
		s.PrefillRequests++
		s.PrefillTokens += e.Tokens
		s.PrefillKV += e.Context
		lens = append(lens, float64(e.Tokens+e.Context))
	}
	if len(lens) > 1 {
		var mean float64
		for _, l := range lens {
			mean += l
		}
		mean /= float64(len(lens))
		for _, l := range lens {
			s.PrefillLenVar += (l - mean) * (l - mean)
		}
		s.PrefillLenVar /= float64(len(lens))
	}
	return s
}

// StepCosts is the step cost fitted to measured forward passes (hone
// calibrate --steps), with tensor parallelism explicit so that a fit on
// some TP sizes predicts another:
//
//	host (every rank, not divided):  FixedMs + PrefillStepMs [step has a prompt chunk] + DecodeSeqMs × decode sequences
//	GPU (split across TP ranks):     ( max(WeightsMs, TokenMs × tokens + GEMMOffsetMs)
//	                                   + PrefillAttnMsPerM × attention pairs / 1e6
//	                                   + DecodeKVMsPerK × decode KV tokens / 1e3 ) / TP
//	all-reduce (TP > 1):             AllReduces × AllReduce.Ms(TP, tokens × hidden)
//
// tokens are all the step's tokens (prompt chunks and decodes). The GEMMs
// are a roofline: reading the weights (memory-bound, WeightsMs) until the
// step holds enough tokens to be compute-bound (TokenMs each, from an
// offset GEMMOffsetMs, usually negative: GEMMs just past the knee run
// more efficiently than a line through zero says); the knee,
// (WeightsMs − GEMMOffsetMs)/TokenMs tokens, does not move with TP, since
// each rank reads 1/TP of the weights and does 1/TP of the FLOPs. PrefillStepMs is the
// cost of a step with prompt chunks beyond the GPU work: vLLM runs it with
// piecewise CUDA graphs and attention outside them, where a decode-only
// step replays one full graph. The GPU terms are what one GPU does at
// TP 1. The all-reduce term is not fitted: it comes from measured
// all-reduce tables of the GPU (or its spec), so that two TP sizes fit the
// host and GPU parts apart and a third is predicted. EagerStepMs is added
// under --enforce-eager.
type StepCosts struct {
	FixedMs           float64 `yaml:"fixed_ms"`
	PrefillStepMs     float64 `yaml:"prefill_step_ms"`
	DecodeSeqMs       float64 `yaml:"decode_seq_ms"`
	WeightsMs         float64 `yaml:"weights_ms"`
	TokenMs           float64 `yaml:"token_ms"`
	GEMMOffsetMs      float64 `yaml:"gemm_offset_ms"`
	PrefillAttnMsPerM float64 `yaml:"prefill_attn_ms_per_mpair"`
	DecodeKVMsPerK    float64 `yaml:"decode_kv_ms_per_ktoken"`
	// DecodeKVMsPerKFP8 and PrefillAttnMsPerMFP8, when set, are
	// DecodeKVMsPerK and PrefillAttnMsPerM with an fp8 KV cache
	// (--kv-cache-dtype fp8), from measured fp8-KV attention kernels;
	// Profile.WithKVCacheDType takes them instead of halving
	// DecodeKVMsPerK and keeping PrefillAttnMsPerM (fp8 attention
	// dequantises: decode gains less than the bytes say, prefill loses).
	DecodeKVMsPerKFP8    float64 `yaml:"decode_kv_ms_per_ktoken_fp8,omitempty"`
	PrefillAttnMsPerMFP8 float64 `yaml:"prefill_attn_ms_per_mpair_fp8,omitempty"`
	EagerStepMs          float64 `yaml:"eager_step_ms,omitempty"`
	// AllReduces is the number of all-reduces in one step (2 per layer for
	// a dense transformer: after attention and after the MLP).
	AllReduces int            `yaml:"all_reduces"`
	AllReduce  AllReduceModel `yaml:"all_reduce"`
	// TPs, when set, are the only TP sizes the costs hold for: a fit on
	// one TP size cannot tell the host part from the GPU part, so it
	// predicts no other. Empty: any TP.
	TPs []int `yaml:"tps,omitempty,flow"`
}

// HoldsFor says why the costs do not hold at tp, nil when they do: a
// profile fitted on one TP size predicts only that one, and a TP > 1
// needs all-reduce figures.
func (c *StepCosts) HoldsFor(tp int) error {
	if len(c.TPs) > 0 && !slices.Contains(c.TPs, max(tp, 1)) {
		return fmt.Errorf("its step costs hold for TP %v only (fitted on one TP size, whose host and GPU parts cannot be told apart), not TP %d", c.TPs, tp)
	}
	if !c.CanAllReduce(tp) {
		return fmt.Errorf("it has no all-reduce figures for TP %d (steps.all_reduce: points or bus_bytes_per_sec)", tp)
	}
	return nil
}

// StepCostTerms names the fitted coefficients in the order StepFeatures
// returns their features.
var StepCostTerms = []string{"fixed_ms", "prefill_step_ms", "decode_seq_ms", "weights_ms", "token_ms", "gemm_offset_ms", "prefill_attn_ms_per_mpair", "decode_kv_ms_per_ktoken"}

// SignedTerm is the one coefficient of StepCostTerms that may be negative:
// the compute branch's offset.
const SignedTerm = 5

// Tokens is the step's tokens through the GEMMs: prompt chunks and decodes.
func (s StepSummary) Tokens() int { return s.PrefillTokens + s.DecodeRequests }

// Knee is the tokens at which the GEMMs turn compute-bound:
// (WeightsMs − GEMMOffsetMs)/TokenMs (+Inf without a per-token cost).
func (c *StepCosts) Knee() float64 {
	if c.TokenMs <= 0 {
		return math.Inf(1)
	}
	return (c.WeightsMs - c.GEMMOffsetMs) / c.TokenMs
}

// StepFeatures is the design row of one step at tensor parallelism tp
// with the GEMMs' knee at knee tokens: the multipliers of each
// coefficient in StepCostTerms' order. Below the knee the step pays
// WeightsMs, above it TokenMs per token.
func StepFeatures(s StepSummary, tp int, knee float64) []float64 {
	inv := 1 / float64(max(tp, 1))
	x := make([]float64, len(StepCostTerms))
	x[0] = 1
	if s.PrefillRequests > 0 {
		x[1] = 1
	}
	x[2] = float64(s.DecodeRequests)
	if t := float64(s.Tokens()); t > knee {
		x[4] = t * inv
		x[5] = inv
	} else {
		x[3] = inv
	}
	x[6] = s.AttentionPairs() / 1e6 * inv
	x[7] = float64(s.DecodeKV) / 1e3 * inv
	return x
}

// Coefficients returns the fitted coefficients in StepCostTerms' order.
func (c *StepCosts) Coefficients() []float64 {
	return []float64{c.FixedMs, c.PrefillStepMs, c.DecodeSeqMs, c.WeightsMs, c.TokenMs, c.GEMMOffsetMs, c.PrefillAttnMsPerM, c.DecodeKVMsPerK}
}

// SetCoefficients sets the coefficients from x in StepCostTerms' order.
func (c *StepCosts) SetCoefficients(x []float64) {
	c.FixedMs, c.PrefillStepMs, c.DecodeSeqMs, c.WeightsMs, c.TokenMs, c.GEMMOffsetMs, c.PrefillAttnMsPerM, c.DecodeKVMsPerK = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
}

// AllReduceMs is the step's all-reduce time at tp for a step of tokens
// tokens of hidden width: 0 at tp ≤ 1.
func (c *StepCosts) AllReduceMs(tp, tokens, hidden int) float64 {
	if tp <= 1 || tokens <= 0 || c.AllReduces <= 0 {
		return 0
	}
	return float64(c.AllReduces) * c.AllReduce.Ms(tp, float64(tokens)*float64(hidden))
}

// CanAllReduce says whether the all-reduce model has figures for tp.
func (c *StepCosts) CanAllReduce(tp int) bool {
	return tp <= 1 || c.AllReduces == 0 || len(c.AllReduce.Points[tp]) > 0 || c.AllReduce.BusBytesPerSec > 0 || c.AllReduce.LatencyUs > 0
}

// SummaryMs is the modelled duration of a step given its summary.
func (c *StepCosts) SummaryMs(s StepSummary, tp, hidden int, eager bool) float64 {
	f := StepFeatures(s, tp, c.Knee())
	ms := 0.0
	for i, x := range c.Coefficients() {
		ms += x * f[i]
	}
	ms += c.AllReduceMs(tp, s.Tokens(), hidden)
	if eager {
		ms += c.EagerStepMs
	}
	return ms
}

// AllReduceModel is the latency of one all-reduce of a bf16 activation
// tensor across TP ranks: measured points where the GPU has them (a table
// by rank count, interpolated linearly in the message size and extended
// at the largest point's bandwidth), else a spec figure: LatencyUs plus a
// ring's 2(TP−1)/TP of the bytes at BusBytesPerSec.
type AllReduceModel struct {
	// Source says where the figures come from (a table's repository and
	// path, or "spec: ...").
	Source         string            `yaml:"source,omitempty"`
	Points         map[int][]ARPoint `yaml:"points,omitempty"` // by TP size, sorted by elements
	LatencyUs      float64           `yaml:"latency_us,omitempty"`
	BusBytesPerSec float64           `yaml:"bus_bytes_per_sec,omitempty"`
	BytesPerElem   int               `yaml:"bytes_per_elem,omitempty"` // 2 for bf16 when the spec form is used
}

// ARPoint is one measured all-reduce: Elements bf16 elements took Ms.
type ARPoint struct {
	Elements float64 `yaml:"elements"`
	Ms       float64 `yaml:"ms"`
}

// Ms is one all-reduce of elements elements across tp ranks.
func (a *AllReduceModel) Ms(tp int, elements float64) float64 {
	if tp <= 1 {
		return 0
	}
	if pts := a.Points[tp]; len(pts) > 0 {
		i := sort.Search(len(pts), func(i int) bool { return pts[i].Elements >= elements })
		switch {
		case i == 0:
			return pts[0].Ms
		case i == len(pts):
			last := pts[len(pts)-1]
			if len(pts) == 1 {
				return last.Ms * elements / last.Elements
			}
			prev := pts[len(pts)-2]
			slope := (last.Ms - prev.Ms) / (last.Elements - prev.Elements)
			return last.Ms + slope*(elements-last.Elements)
		default:
			lo, hi := pts[i-1], pts[i]
			return lo.Ms + (hi.Ms-lo.Ms)*(elements-lo.Elements)/(hi.Elements-lo.Elements)
		}
	}
	bpe := float64(max(a.BytesPerElem, 2))
	ms := a.LatencyUs / 1000
	if a.BusBytesPerSec > 0 {
		ms += 2 * float64(tp-1) / float64(tp) * elements * bpe / a.BusBytesPerSec * 1000
	}
	return ms
}

// validate checks the all-reduce model: points sorted by elements with
// non-negative latencies, or non-negative spec figures.
func (a *AllReduceModel) validate(v *validator, field string) {
	for tp, pts := range a.Points {
		if tp < 2 {
			v.fail(field+".points", "want TP sizes >= 2, got %d", tp)
		}
		for i, p := range pts {
			if !(p.Elements > 0) || !(p.Ms >= 0) || math.IsInf(p.Ms, 0) {
				v.fail(fmt.Sprintf("%s.points[%d][%d]", field, tp, i), "want elements > 0 and ms >= 0, got %v, %v", p.Elements, p.Ms)
			}
			if i > 0 && !(p.Elements > pts[i-1].Elements) {
				v.fail(fmt.Sprintf("%s.points[%d][%d]", field, tp, i), "want elements increasing, got %v after %v", p.Elements, pts[i-1].Elements)
			}
		}
	}
	v.nonNeg(field+".latency_us", a.LatencyUs)
	v.nonNeg(field+".bus_bytes_per_sec", a.BusBytesPerSec)
}
