package calibrate

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/hone-llm/hone/sim/emulator"
)

// Deriving a profile where no step data exists (hone profile derive).
//
// From per-operation tables: each step of a grid of step shapes (prompt
// chunks of 16–8,192 tokens cold and on cached context, decode batches of
// 1–256 at 512–32k KV tokens, mixed steps) is costed per rank at each TP
// as vLLM runs it: per layer the QKV, output, gate-up and down GEMMs at
// the step's tokens (the rank's 1/TP of the columns or rows), the
// attention kernels (prompt chunks, decodes) at the rank's heads, two
// all-reduces; the lm_head GEMM at the sampled sequences; and a host cost
// per step that the tables cannot give (DeriveConfig.Host: the host part of
// a profile fitted to measured steps on another GPU host; else HostMs,
// hand-made).
// The step-cost form (emulator.StepCosts) is then fitted to those costs
// over all TPs, as calibrate --steps fits measured steps, so the derived
// profile is TP-explicit like a fitted one and used the same way.
//
// From the roofline (no tables for the GPU): the same grid costed with
// the GPU's datasheet peaks at efficiencies fitted on GPUs that have
// tables (DeriveConfig.Efficiency).

// Dtypes hone profile derive accepts for the weights (the KV cache stays
// bf16, as vLLM's kv_cache_dtype auto keeps it).
var Dtypes = map[string]string{"bf16": "bfloat16", "fp8": "fp8"}

// Efficiency is the fraction of a GPU's datasheet peaks that the GEMMs
// reach: MFU when compute-bound, MBU when reading weights and KV.
type Efficiency struct {
	MFU    float64 `yaml:"mfu"`
	MBU    float64 `yaml:"mbu"`
	Source string  `yaml:"source"` // the GPUs whose tables they were fitted on
}

// DeriveConfig configures Derive.
type DeriveConfig struct {
	Name      string
	Model     emulator.Model
	GPU       emulator.GPU
	Dtype     string // bf16 or fp8
	TPs       []int  // the TP sizes to derive from (those where the weights fit)
	Tables    *OpTables
	AllReduce emulator.AllReduceModel
	// Efficiency is used when Tables is nil.
	Efficiency Efficiency
	// HostMs is the per-step host cost (scheduler, sampler, launches)
	// that no table measures, hand-made; Host, when set, replaces it.
	HostMs float64
	// Host is the host part measured elsewhere: a profile fitted to
	// measured steps (HostFrom), whose terms that do not shrink with TP
	// (fixed, per step with prompt chunks, per decode sequence) a derived
	// step takes as they are.
	Host *HostCosts
	Data []emulator.DataRef
}

// HostCosts is the host part of a fitted step-cost form and where it was
// measured.
type HostCosts struct {
	FixedMs, PrefillStepMs, DecodeSeqMs float64
	Source                              string
}

// HostFrom is the host part of p's step costs; p must be fitted to
// measured steps.
func HostFrom(p *emulator.Profile) (*HostCosts, error) {
	if p.Steps == nil || p.SourceKind() != emulator.SourceFittedSteps {
		return nil, fmt.Errorf("profile %s is %s: want one fitted to measured steps", p.Name, p.SourceKind())
	}
	return &HostCosts{FixedMs: p.Steps.FixedMs, PrefillStepMs: p.Steps.PrefillStepMs, DecodeSeqMs: p.Steps.DecodeSeqMs,
		Source: "profile " + p.Name + " (" + p.SourceKind() + ")"}, nil
}

// hostMs is a step's host cost: Host's terms, else the hand-made HostMs.
func (cfg *DeriveConfig) hostMs(s emulator.StepSummary) float64 {
	h := cfg.Host
	if h == nil {
		return cfg.HostMs
	}
	ms := h.FixedMs + h.DecodeSeqMs*float64(s.DecodeRequests)
	if s.PrefillRequests > 0 {
		ms += h.PrefillStepMs
	}
	return ms
}

// DefaultHostMs is the hand-made host cost of a derived step: the
// hand-made H200 profile's step overhead.
const DefaultHostMs = 1.0

// weightBytes is the bytes of one weight in dtype.
func weightBytes(dtype string) float64 {
	if dtype == "fp8" {
		return 1
	}
	return 2
}

// WeightsFit says whether the model's weights at tp leave room for a KV
// cache of at least one max-length sequence at 0.9 memory utilisation.
func WeightsFit(m emulator.Model, gpu emulator.GPU, dtype string, tp int) bool {
	free := 0.9*gpu.MemoryBytes - m.Params*weightBytes(dtype)/float64(tp) - fittedReserveBytes
	return free >= float64(m.MaxModelLen*m.KVBytesPerTokenPerGPU(tp))
}

// deriveShapes is the grid of step shapes costed.
func deriveShapes(maxLen int) []emulator.StepSummary {
	var out []emulator.StepSummary
	for _, n := range []int{16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192} {
		out = append(out, emulator.StepSummary{PrefillTokens: n, PrefillRequests: 1})
		for _, c := range []int{4096, 16384} {
			if n+c <= maxLen && n <= 2048 {
				out = append(out, emulator.StepSummary{PrefillTokens: n, PrefillRequests: 1, PrefillKV: c})
			}
		}
	}
	for _, b := range []int{1, 2, 4, 8, 16, 32, 64, 128, 256} {
		for _, kv := range []int{512, 2048, 8192, 32768} {
			if kv <= maxLen {
				out = append(out, emulator.StepSummary{DecodeRequests: b, DecodeKV: b * kv})
			}
		}
	}
	for _, n := range []int{128, 1024, 4096} {
		for _, b := range []int{8, 32} {
			out = append(out, emulator.StepSummary{PrefillTokens: n, PrefillRequests: 1, DecodeRequests: b, DecodeKV: b * 4096})
		}
	}
	return out
}

// stepMs costs one step at tp from the tables or the roofline; fp8KV:
// its attention from the tables' fp8-KV rows.
func (cfg *DeriveConfig) stepMs(s emulator.StepSummary, tp int, fp8KV bool) (float64, error) {
	m := cfg.Model
	t := float64(tp)
	layers := float64(m.Layers)
	hid, inter, vocab := float64(m.Hidden), float64(m.Intermediate), float64(m.Vocab)
	q, kvw := float64(m.Heads*m.HeadDim), float64(m.KVHeads*m.HeadDim)
	tokens := float64(s.Tokens())
	sampled := float64(s.PrefillRequests + s.DecodeRequests)
	heads := int64(max(m.Heads/tp, 1))
	kvh := int64(max(m.KVHeads/tp, 1))
	hd := int64(m.HeadDim)
	ms := cfg.hostMs(s) + float64(2*m.Layers)*cfg.AllReduce.Ms(tp, tokens*hid)
	if cfg.Tables == nil {
		e := cfg.Efficiency
		g := cfg.GPU
		wb := weightBytes(cfg.Dtype)
		nonEmb := m.Params - 2*m.EmbedParams
		gemmFLOPs := 2*nonEmb*tokens + 2*m.EmbedParams*sampled
		weights := (nonEmb + m.EmbedParams) * wb
		peak := g.PeakFLOPS
		if cfg.Dtype == "fp8" {
			peak *= 2
		}
		ms += math.Max(gemmFLOPs/(peak*e.MFU), weights/(g.MemBandwidth*e.MBU)) * 1000 / t
		pairs := s.AttentionPairs()
		ms += 4 * layers * q * pairs / (g.PeakFLOPS * e.MFU) * 1000 / t
		ms += float64(s.DecodeKV) * float64(m.KVBytesPerToken()) / (g.MemBandwidth * e.MBU) * 1000 / t
		return ms, nil
	}
	ctxAttn, genAttn := cfg.Tables.ContextAttnMs, cfg.Tables.GenAttnMs
	if fp8KV {
		ctxAttn, genAttn = cfg.Tables.ContextAttnMsFP8, cfg.Tables.GenAttnMsFP8
	}
	dt := Dtypes[cfg.Dtype]
	gemm := func(mm, n, k float64) (float64, error) { return cfg.Tables.GEMMMs(dt, mm, n, k) }
	var layer float64
	for _, nk := range [][2]float64{{(q + 2*kvw) / t, hid}, {hid, q / t}, {2 * inter / t, hid}, {hid, inter / t}} {
		g, err := gemm(tokens, nk[0], nk[1])
		if err != nil {
			return 0, err
		}
		layer += g
	}
	if s.PrefillRequests > 0 {
		// The chunks as AttentionPairs reads them: the cached tokens on the first.
		for _, e := range SummaryEntries(s) {
			if e.Decode {
				continue
			}
			a, err := ctxAttn(float64(e.Tokens), float64(e.Context), heads, kvh, hd)
			if err != nil {
				return 0, err
			}
			layer += a
		}
	}
	if s.DecodeRequests > 0 {
		a, err := genAttn(float64(s.DecodeRequests), float64(s.DecodeKV)/float64(s.DecodeRequests), heads, kvh, hd)
		if err != nil {
			return 0, err
		}
		layer += a
	}
	lm, err := cfg.Tables.GEMMMs("bfloat16", sampled, vocab/t, hid)
	if err != nil {
		return 0, err
	}
	return ms + layers*layer + lm, nil
}

// Derive makes a profile from the model's architecture and the GPU.
func Derive(cfg DeriveConfig) (*emulator.Profile, error) {
	if _, ok := Dtypes[cfg.Dtype]; !ok {
		return nil, fmt.Errorf("dtype %q: want bf16 or fp8", cfg.Dtype)
	}
	if cfg.Model.Intermediate <= 0 {
		return nil, errors.New("model: intermediate size unknown (config.json intermediate_size)")
	}
	var tps []int
	for _, tp := range cfg.TPs {
		if WeightsFit(cfg.Model, cfg.GPU, cfg.Dtype, tp) {
			tps = append(tps, tp)
		}
	}
	if len(tps) == 0 {
		return nil, fmt.Errorf("the weights of %s (%s) leave no room for a %d-token KV cache on %s at TP %v", cfg.Model.Name, cfg.Dtype, cfg.Model.MaxModelLen, cfg.GPU.Name, cfg.TPs)
	}
	for _, tp := range tps {
		if tp > 1 && !(&emulator.StepCosts{AllReduces: 1, AllReduce: cfg.AllReduce}).CanAllReduce(tp) {
			return nil, fmt.Errorf("TP %d: no all-reduce figures", tp)
		}
	}
	fit, err := cfg.fitDerived(tps, false)
	if err != nil {
		return nil, err
	}
	costs := fit.Costs
	fp8 := cfg.Tables != nil && cfg.Tables.HasFP8KV()
	if fp8 {
		// The same grid with fp8-KV attention, the same form fitted: its
		// attention coefficients are the fp8 cache's (the others move by
		// a few percent at most and are not kept).
		f8, err := cfg.fitDerived(tps, true)
		if err != nil {
			return nil, err
		}
		costs.DecodeKVMsPerKFP8 = f8.Costs.DecodeKVMsPerK
		costs.PrefillAttnMsPerMFP8 = f8.Costs.PrefillAttnMsPerM
	}
	m := cfg.Model
	if cfg.Dtype == "fp8" {
		m.WeightBytesPerElem = 1
	}
	p := &emulator.Profile{Name: cfg.Name, Model: m, GPU: cfg.GPU,
		ActivationReserveBytes: fittedReserveBytes, TransferFixedMs: fittedTransferFixedMs, FrontendMs: fittedFrontendMs}
	p.MaxNumSeqs, p.MaxNumBatchedTokens = emulator.ServingDefaults(cfg.GPU)
	p.Steps = &costs
	src := &emulator.ProfileSource{Kind: emulator.SourceDerivedTable, Data: cfg.Data}
	how := fmt.Sprintf("per-operation tables of %s (vLLM %s)", cfg.GPU.Name, tablesVersion(cfg.Tables))
	if cfg.Tables == nil {
		src.Kind = emulator.SourceDerivedRoof
		how = fmt.Sprintf("the %s datasheet at MFU %.3f, MBU %.3f (fitted on %s)", cfg.GPU.Name, cfg.Efficiency.MFU, cfg.Efficiency.MBU, cfg.Efficiency.Source)
	}
	var ts []string
	for _, tp := range tps {
		ts = append(ts, fmt.Sprint(tp))
	}
	host := fmt.Sprintf("a hand-made host cost of %g ms per step", cfg.HostMs)
	if h := cfg.Host; h != nil {
		host = fmt.Sprintf("the host part measured in %s (%.4g ms per step, %.4g ms more with prompt chunks, %.4g ms per decode sequence)", h.Source, h.FixedMs, h.PrefillStepMs, h.DecodeSeqMs)
	}
	src.Method = fmt.Sprintf("hone profile derive: %d step shapes per TP (%s) costed from %s (per layer QKV, output, gate-up and down GEMMs, attention, two all-reduces; lm_head at the sampled sequences) plus %s; the step-cost form fitted to them",
		len(deriveShapes(cfg.Model.MaxModelLen)), strings.Join(ts, ", "), how, host)
	if fp8 {
		src.Method += "; decode_kv_ms_per_ktoken_fp8 and prefill_attn_ms_per_mpair_fp8 (an fp8 KV cache) from the same form fitted to the same shapes with the tables' fp8-KV attention"
	}
	src.Residuals = fit.Residuals
	src.Note = "no standard errors: a derivation, not a measurement; norms, rotary embedding and activations are not costed; the host cost, activation_reserve_bytes, transfer_fixed_ms, frontend_ms and the KV link are hand-made"
	if cfg.Host != nil {
		src.Note = "no standard errors: a derivation, not a measurement; norms, rotary embedding and activations are not costed; the host part is another GPU host's, measured (" + cfg.Host.Source + "); activation_reserve_bytes, transfer_fixed_ms, frontend_ms and the KV link are hand-made"
	}
	p.Source = src
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("derived profile: %w", err)
	}
	return p, nil
}

// fitDerived costs the grid of step shapes at each of tps (fp8KV:
// attention with an fp8 KV cache) and fits the step-cost form to it.
func (cfg *DeriveConfig) fitDerived(tps []int, fp8KV bool) (*StepFit, error) {
	var data []*StepData
	for _, tp := range tps {
		d := &StepData{Dir: fmt.Sprintf("derived TP %d", tp), TP: tp}
		for i, s := range deriveShapes(cfg.Model.MaxModelLen) {
			ms, err := cfg.stepMs(s, tp, fp8KV)
			if err != nil {
				return nil, err
			}
			d.Steps = append(d.Steps, MeasuredStep{Line: i + 2, Counter: int64(2 * i), Phase: s.Phase(), Summary: s, Ms: ms})
		}
		data = append(data, d)
	}
	fit, err := FitSteps(data, StepFitConfig{Model: cfg.Model, AllReduces: 2 * cfg.Model.Layers, AllReduce: cfg.AllReduce, Bootstrap: 2})
	if err != nil {
		return nil, fmt.Errorf("fit the step form to the derived steps: %w", err)
	}
	return fit, nil
}

func tablesVersion(t *OpTables) string {
	if t == nil {
		return ""
	}
	return t.Version
}

// FitEfficiency is the roofline efficiency that reproduces a
// table-derived profile of the same model: MBU from its weights_ms, MFU
// from its token_ms, against the GPU's datasheet.
func FitEfficiency(p *emulator.Profile, dtype string) Efficiency {
	m := p.Model
	wb := weightBytes(dtype)
	nonEmb := m.Params - 2*m.EmbedParams
	peak := p.GPU.PeakFLOPS
	if dtype == "fp8" {
		peak *= 2
	}
	weightsMs := (nonEmb + m.EmbedParams) * wb / p.GPU.MemBandwidth * 1000
	tokenMs := 2 * nonEmb / peak * 1000
	return Efficiency{MBU: weightsMs / p.Steps.WeightsMs, MFU: tokenMs / p.Steps.TokenMs, Source: p.GPU.Name}
}
