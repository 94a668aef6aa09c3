package emulator

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Model describes the transformer whose GPU time the emulator models.
// The derivation of every figure is in PROFILES.md.
type Model struct {
	Name         string // Hugging Face id, served by default
	Layers       int
	Hidden       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Vocab        int     // logits width (lm_head rows)
	Params       float64 // all parameters, embeddings included
	EmbedParams  float64 // the (tied) embedding / lm_head matrix
	BytesPerElem int     // 2 for bf16
	MaxModelLen  int
}

// KVBytesPerToken is the size of one token's K and V across all layers:
// layers × 2 (K and V) × KV heads × head dim × bytes per element.
func (m Model) KVBytesPerToken() int {
	return m.Layers * 2 * m.KVHeads * m.HeadDim * m.BytesPerElem
}

// Qwen25Coder05B is Qwen/Qwen2.5-Coder-0.5B-Instruct (config.json): 24
// layers, hidden 896, 14 query heads and 2 KV heads of dimension 64, vocab
// 151936 with tied embeddings, 494M parameters, bf16, 32768 positions.
var Qwen25Coder05B = Model{
	Name: "Qwen/Qwen2.5-Coder-0.5B-Instruct", Layers: 24, Hidden: 896, Heads: 14, KVHeads: 2, HeadDim: 64,
	Vocab: 151936, Params: 494.03e6, EmbedParams: 151936 * 896, BytesPerElem: 2, MaxModelLen: 32768,
}

// GPU holds the public datasheet figures a profile is derived from.
type GPU struct {
	Name         string
	MemoryBytes  float64 // usable device memory as nvidia-smi reports it
	PeakFLOPS    float64 // dense bf16 tensor-core FLOP/s
	MemBandwidth float64 // bytes/s
	LinkBytesSec float64 // GPU-to-GPU bandwidth available to a KV transfer, bytes/s
}

// Profile is a named cost model: what one engine step costs on a GPU, how
// much KV cache fits, and how fast KV moves between workers. All durations
// are model time.
type Profile struct {
	Name  string
	Model Model
	GPU   GPU

	// Achieved fractions of peak compute and bandwidth (MFU, MBU).
	MFU, MBU float64
	// StepOverheadMs is the per-step host cost (scheduler, input
	// preparation, sampler, detokenizer) that does not overlap the GPU.
	StepOverheadMs float64
	// LaunchUs is one kernel launch; KernelsPerLayer the kernels of one
	// layer; a CUDA-graph replay costs GraphLaunchMs instead of the
	// per-kernel launches.
	LaunchUs        float64
	KernelsPerLayer int
	GraphLaunchMs   float64
	// ActivationReserveBytes is memory kept back from the KV cache for
	// activations, CUDA graphs and the non-torch allocator.
	ActivationReserveBytes float64
	// TransferFixedMs is the fixed cost of one KV pull (handshake,
	// descriptor exchange, completion notification).
	TransferFixedMs float64

	// Serving defaults, as vLLM picks them for this GPU class.
	MaxNumSeqs          int
	MaxNumBatchedTokens int

	// Exercise, when set, replaces the roofline by the brief's rates.
	Exercise *ExerciseRates
}

// ExerciseRates is the CPU exercise's model: prefill at PrefillTokensPerSec,
// d = DecodeMsPerToken for each token sampled, and a fixed transfer.
type ExerciseRates struct {
	PrefillTokensPerSec float64
	DecodeMsPerToken    float64
	// TransferMs is the KV handoff, counted as the brief counts it: from
	// the prefill's end to the decode worker being able to start, so the
	// proxy's hop to the decode worker overlaps it.
	TransferMs float64
}

// StepEntry is one sequence's share of an engine step: Tokens new query
// tokens attending to Context tokens already in the KV cache. Decode is a
// single token that is the sequence's last known token; Samples says the
// step ends with a sampled token for this sequence; RemoteDecode marks a
// prefill worker's request whose sampled token is thrown away by the proxy.
type StepEntry struct {
	Tokens       int
	Context      int
	Decode       bool
	Samples      bool
	RemoteDecode bool
}

// StepMs is the modelled duration of one engine step in milliseconds.
//
// Roofline: max(FLOPs/(peak×MFU), bytes/(bandwidth×MBU)) plus host and
// launch overhead. FLOPs = 2×(non-embedding params)×tokens + 2×(lm_head
// params)×sampled + 4×layers×heads×head_dim×Σ(attended context per query
// token). Bytes = all weights once + every entry's KV context read + new KV
// written. Launch overhead: a decode-only step replays one CUDA graph; a
// step with prefill runs piecewise graphs with attention eager
// (2 kernels/layer); eager mode launches every kernel.
func (p *Profile) StepMs(entries []StepEntry, eager bool) float64 {
	if len(entries) == 0 {
		return 0
	}
	if e := p.Exercise; e != nil {
		ms := 0.0
		for _, en := range entries {
			if !en.Decode {
				ms += float64(en.Tokens) / e.PrefillTokensPerSec * 1000
			}
			if en.Samples && !en.RemoteDecode {
				ms += e.DecodeMsPerToken
			}
		}
		return ms
	}
	m := p.Model
	nonEmb := m.Params - m.EmbedParams
	var tokens, sampled, attn, kvRead, kvWrite float64
	prefill := false
	kvb := float64(m.KVBytesPerToken())
	for _, en := range entries {
		n, c := float64(en.Tokens), float64(en.Context)
		tokens += n
		if en.Samples {
			sampled++
		}
		if !en.Decode {
			prefill = true
		}
		attn += n*c + n*(n+1)/2
		kvRead += c * kvb
		kvWrite += n * kvb
	}
	flops := 2*nonEmb*tokens + 2*m.EmbedParams*sampled + 4*float64(m.Layers*m.Heads*m.HeadDim)*attn
	bytes := m.Params*float64(m.BytesPerElem) + kvRead + kvWrite
	compute := flops / (p.GPU.PeakFLOPS * p.MFU) * 1000
	memory := bytes / (p.GPU.MemBandwidth * p.MBU) * 1000
	launch := p.GraphLaunchMs
	switch {
	case eager:
		launch = float64(m.Layers*p.KernelsPerLayer) * p.LaunchUs / 1000
	case prefill:
		launch = p.GraphLaunchMs + float64(m.Layers*2)*p.LaunchUs/1000
	}
	return math.Max(compute, memory) + p.StepOverheadMs + launch
}

// TransferMs is the modelled duration of one KV pull of bytes.
func (p *Profile) TransferMs(bytes int64) float64 {
	if p.Exercise != nil {
		return p.Exercise.TransferMs
	}
	ms := p.TransferFixedMs
	if p.GPU.LinkBytesSec > 0 {
		ms += float64(bytes) / p.GPU.LinkBytesSec * 1000
	}
	return ms
}

// LinkBytesPerSec is the pacing rate of KV bytes in model time; 0 means
// unpaced (only the fixed transfer time is modelled).
func (p *Profile) LinkBytesPerSec() float64 {
	if p.Exercise != nil {
		return 0
	}
	return p.GPU.LinkBytesSec
}

// NumBlocks is the KV cache capacity in blocks of blockSize tokens at the
// given memory utilisation: (util × memory − weights − reserve) / block bytes.
func (p *Profile) NumBlocks(blockSize int, util float64) int {
	if p.Exercise != nil {
		// Large enough that the exercise never evicts: 2^20 tokens.
		return (1 << 20) / blockSize
	}
	free := util*p.GPU.MemoryBytes - p.Model.Params*float64(p.Model.BytesPerElem) - p.ActivationReserveBytes
	n := int(free / float64(blockSize*p.Model.KVBytesPerToken()))
	return max(n, 0)
}

const (
	gib = 1 << 30
	mib = 1 << 20
)

var profiles = map[string]*Profile{
	// The brief's CPU-exercise simulator: prefill 4096 tok/s, d = 1000/2048
	// ms per sampled token, a batch of one, 8 ms transfer.
	"exercise": {
		Name: "exercise", Model: Qwen25Coder05B,
		GPU:                 GPU{Name: "exercise (brief's fixed rates)"},
		MaxNumSeqs:          1,
		MaxNumBatchedTokens: 32768,
		Exercise:            &ExerciseRates{PrefillTokensPerSec: 4096, DecodeMsPerToken: 1000.0 / 2048, TransferMs: 8},
	},
	// An engine that costs nothing: every step and transfer takes zero model
	// time, so a replay's TTFT is the host's own floor (dispatch, HTTP,
	// the proxy's hops, delivery). hone optimize measures it to pick a time
	// scale; it ranks nothing.
	"null": {
		Name: "null", Model: Qwen25Coder05B,
		GPU:                 GPU{Name: "none (zero-cost engine)"},
		MaxNumSeqs:          4096,
		MaxNumBatchedTokens: 1 << 22,
		Exercise:            &ExerciseRates{PrefillTokensPerSec: math.Inf(1), DecodeMsPerToken: 0, TransferMs: 0},
	},
	// NVIDIA A10 (24 GB GDDR6): 125 TFLOPS dense bf16, 600 GB/s, PCIe 4.0 x16.
	"qwen2.5-coder-0.5b-a10": {
		Name: "qwen2.5-coder-0.5b-a10", Model: Qwen25Coder05B,
		GPU: GPU{Name: "NVIDIA A10", MemoryBytes: 23028 * mib, PeakFLOPS: 125e12, MemBandwidth: 600e9, LinkBytesSec: 20e9},
		MFU: 0.35, MBU: 0.70,
		StepOverheadMs: 1.5, LaunchUs: 5, KernelsPerLayer: 14, GraphLaunchMs: 0.05,
		ActivationReserveBytes: 2 * gib, TransferFixedMs: 1.0,
		MaxNumSeqs: 256, MaxNumBatchedTokens: 2048,
	},
	// NVIDIA L4 (24 GB GDDR6): 121 TFLOPS dense bf16, 300 GB/s, PCIe 4.0 x16.
	"qwen2.5-coder-0.5b-l4": {
		Name: "qwen2.5-coder-0.5b-l4", Model: Qwen25Coder05B,
		GPU: GPU{Name: "NVIDIA L4", MemoryBytes: 23034 * mib, PeakFLOPS: 121e12, MemBandwidth: 300e9, LinkBytesSec: 20e9},
		MFU: 0.35, MBU: 0.70,
		StepOverheadMs: 1.5, LaunchUs: 5, KernelsPerLayer: 14, GraphLaunchMs: 0.05,
		ActivationReserveBytes: 2 * gib, TransferFixedMs: 1.0,
		MaxNumSeqs: 256, MaxNumBatchedTokens: 2048,
	},
	// NVIDIA H200 SXM (141 GB HBM3e): 989 TFLOPS dense bf16, 4.8 TB/s,
	// NVLink 4 (450 GB/s per direction).
	"qwen2.5-coder-0.5b-h200": {
		Name: "qwen2.5-coder-0.5b-h200", Model: Qwen25Coder05B,
		GPU: GPU{Name: "NVIDIA H200", MemoryBytes: 143771 * mib, PeakFLOPS: 989e12, MemBandwidth: 4.8e12, LinkBytesSec: 300e9},
		MFU: 0.20, MBU: 0.60,
		StepOverheadMs: 1.0, LaunchUs: 4, KernelsPerLayer: 14, GraphLaunchMs: 0.04,
		ActivationReserveBytes: 4 * gib, TransferFixedMs: 0.5,
		MaxNumSeqs: 1024, MaxNumBatchedTokens: 8192,
	},
}

// DefaultProfile is the profile used when none is named.
const DefaultProfile = "qwen2.5-coder-0.5b-a10"

// LookupProfile returns a copy of the named profile.
func LookupProfile(name string) (*Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return nil, fmt.Errorf("unknown profile %q: want one of %s", name, strings.Join(ProfileNames(), ", "))
	}
	c := *p
	if p.Exercise != nil {
		e := *p.Exercise
		c.Exercise = &e
	}
	return &c, nil
}

// ProfileNames lists the built-in profiles, sorted.
func ProfileNames() []string {
	var out []string
	for n := range profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
