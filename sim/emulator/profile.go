package emulator

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Model describes the transformer whose GPU time the emulator models.
// The derivation of every figure is in PROFILES.md.
type Model struct {
	Name         string  `yaml:"name"` // Hugging Face id, served by default
	Layers       int     `yaml:"layers"`
	Hidden       int     `yaml:"hidden"`
	Intermediate int     `yaml:"intermediate,omitempty"` // MLP width (config.json intermediate_size)
	Heads        int     `yaml:"heads"`
	KVHeads      int     `yaml:"kv_heads"`
	HeadDim      int     `yaml:"head_dim"`
	Vocab        int     `yaml:"vocab"`          // logits width (lm_head rows)
	Params       float64 `yaml:"params"`         // all parameters, embeddings included
	EmbedParams  float64 `yaml:"embed_params"`   // the (tied) embedding / lm_head matrix
	BytesPerElem int     `yaml:"bytes_per_elem"` // 2 for bf16
	// WeightBytesPerElem is the weights' element size where it differs
	// from the KV cache's (1 for fp8 weights with a bf16 KV cache); 0 is
	// BytesPerElem.
	WeightBytesPerElem int `yaml:"weight_bytes_per_elem,omitempty"`
	// KVBytesPerElem is the KV cache's element size where it differs
	// from BytesPerElem (1 under --kv-cache-dtype fp8); 0 is BytesPerElem.
	KVBytesPerElem int `yaml:"kv_bytes_per_elem,omitempty"`
	MaxModelLen    int `yaml:"max_model_len"`
}

// WeightBytes is the size of all weights.
func (m Model) WeightBytes() float64 { return m.Params * float64(m.WeightElemBytes()) }

// WeightElemBytes is the size of one weight: WeightBytesPerElem, else
// BytesPerElem.
func (m Model) WeightElemBytes() int {
	if m.WeightBytesPerElem > 0 {
		return m.WeightBytesPerElem
	}
	return m.BytesPerElem
}

// KVBytesPerToken is the size of one token's K and V across all layers:
// layers × 2 (K and V) × KV heads × head dim × bytes per element.
func (m Model) KVBytesPerToken() int {
	return m.Layers * 2 * m.KVHeads * m.HeadDim * m.kvElemBytes()
}

// kvElemBytes is the size of one KV cache element.
func (m Model) kvElemBytes() int {
	if m.KVBytesPerElem > 0 {
		return m.KVBytesPerElem
	}
	return m.BytesPerElem
}

// KVCacheDTypes are the --kv-cache-dtype values the engine takes (vLLM's
// CacheDType), and the element size each gives; 0: the model's own.
var KVCacheDTypes = map[string]int{"": 0, "auto": 0, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}

// WithKVCacheDType makes p's KV cache dtype d: its element size (so the
// cache holds more tokens and a transfer moves fewer bytes) and the step
// costs' attention: measured with an fp8 cache where the step costs have
// it (DecodeKVMsPerKFP8, PrefillAttnMsPerMFP8), else the decode KV read
// scaled with the bytes read; nothing else.
func (p *Profile) WithKVCacheDType(d string) error {
	b, ok := KVCacheDTypes[d]
	if !ok {
		return fmt.Errorf("kv cache dtype %q: want auto, bfloat16, float16, fp8, fp8_e4m3 or fp8_e5m2", d)
	}
	if b == 0 || b == p.Model.kvElemBytes() {
		return nil
	}
	if p.Steps != nil {
		st := *p.Steps
		if b == 1 && st.DecodeKVMsPerKFP8 > 0 {
			st.DecodeKVMsPerK = st.DecodeKVMsPerKFP8
			if st.PrefillAttnMsPerMFP8 > 0 {
				st.PrefillAttnMsPerM = st.PrefillAttnMsPerMFP8
			}
		} else {
			st.DecodeKVMsPerK *= float64(b) / float64(p.Model.kvElemBytes())
		}
		p.Steps = &st
	}
	p.Model.KVBytesPerElem = b
	return nil
}

// KVCacheNote says how p costs the decode KV read with KV cache dtype d
// ("" where d is the model's own: nothing to say), so that a prediction
// with another cache says what its figure rests on.
func (p *Profile) KVCacheNote(d string) string {
	b, ok := KVCacheDTypes[d]
	if !ok || b == 0 || b == p.Model.kvElemBytes() {
		return ""
	}
	switch {
	case p.Steps == nil && (p.Linear != nil || p.Exercise != nil):
		return fmt.Sprintf("KV cache %s: %d-byte elements, so the cache holds more tokens; this profile's step costs do not change with it", d, b)
	case p.Steps == nil:
		return fmt.Sprintf("KV cache %s: %d-byte elements, so the cache holds more tokens and the roofline reads fewer KV bytes", d, b)
	case b == 1 && p.Steps.DecodeKVMsPerKFP8 > 0:
		return fmt.Sprintf("KV cache %s: attention measured with fp8-KV kernels: decode KV read %.4g ms per 1k tokens (TP 1; %.4g with the model's own), prompt attention %.4g ms per million pairs (%.4g)",
			d, p.Steps.DecodeKVMsPerKFP8, p.Steps.DecodeKVMsPerK, p.Steps.PrefillAttnMsPerMFP8, p.Steps.PrefillAttnMsPerM)
	}
	return fmt.Sprintf("KV cache %s: decode KV read scaled with the bytes from the model's own (%.4g → %.4g ms per 1k tokens, TP 1): this profile has no measured figure for it",
		d, p.Steps.DecodeKVMsPerK, p.Steps.DecodeKVMsPerK*float64(b)/float64(p.Model.kvElemBytes()))
}

// KVBytesPerTokenPerGPU is the part of one token's KV that each of tp
// tensor-parallel ranks holds: the KV heads are split across the ranks,
// and where there are fewer KV heads than ranks each rank keeps a
// replica of one, as vLLM does: layers × 2 × max(1, KV heads/tp) × head
// dim × bytes. tp ≤ 1 is KVBytesPerToken.
func (m Model) KVBytesPerTokenPerGPU(tp int) int {
	if tp <= 1 {
		return m.KVBytesPerToken()
	}
	return m.Layers * 2 * max(1, m.KVHeads/tp) * m.HeadDim * m.kvElemBytes()
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
	Name         string  `yaml:"name"`
	MemoryBytes  float64 `yaml:"memory_bytes"`   // usable device memory as nvidia-smi reports it
	PeakFLOPS    float64 `yaml:"peak_flops"`     // dense bf16 tensor-core FLOP/s
	MemBandwidth float64 `yaml:"mem_bandwidth"`  // bytes/s
	LinkBytesSec float64 `yaml:"link_bytes_sec"` // GPU-to-GPU bandwidth available to a KV transfer, bytes/s
	// InterconnectBytesSec is the per-direction bandwidth between the
	// tensor-parallel ranks of one worker (PCIe or NVLink, datasheet),
	// and InterconnectLatencyUs the fixed cost of one all-reduce over it.
	InterconnectBytesSec  float64 `yaml:"interconnect_bytes_sec"`
	InterconnectLatencyUs float64 `yaml:"interconnect_latency_us"`
}

// Profile is a named cost model: what one engine step costs on a GPU, how
// much KV cache fits, and how fast KV moves between workers. All durations
// are model time.
//
// A profile is one of three forms: the roofline (Model, GPU and the
// efficiencies below), Linear (fitted per-step coefficients) or Exercise (the
// CPU exercise's fixed prefill, decode and transfer rates). Every form needs
// Model, whose size and vocabulary the server and the KV transfer use; the
// roofline and Linear take the KV-cache capacity from Model and GPU.
type Profile struct {
	Name  string `yaml:"name"`
	Model Model  `yaml:"model"`
	GPU   GPU    `yaml:"gpu"`

	// Achieved fractions of peak compute and bandwidth (MFU, MBU).
	MFU float64 `yaml:"mfu"`
	MBU float64 `yaml:"mbu"`
	// StepOverheadMs is the per-step host cost (scheduler, input
	// preparation, sampler, detokenizer) that does not overlap the GPU.
	StepOverheadMs float64 `yaml:"step_overhead_ms"`
	// LaunchUs is one kernel launch; KernelsPerLayer the kernels of one
	// layer; a CUDA-graph replay costs GraphLaunchMs instead of the
	// per-kernel launches.
	LaunchUs        float64 `yaml:"launch_us"`
	KernelsPerLayer int     `yaml:"kernels_per_layer"`
	GraphLaunchMs   float64 `yaml:"graph_launch_ms"`
	// ActivationReserveBytes is memory kept back from the KV cache for
	// activations, CUDA graphs and the non-torch allocator.
	ActivationReserveBytes float64 `yaml:"activation_reserve_bytes"`
	// TransferFixedMs is the fixed cost of one KV pull (handshake,
	// descriptor exchange, completion notification).
	TransferFixedMs float64 `yaml:"transfer_fixed_ms"`
	// FrontendMs is the API server's work between a request's receipt
	// and the engine core's taking it in (HTTP parsing, input
	// processing, the hop to the engine core): vLLM's arrival_time is
	// stamped at receipt, its queued time at the engine core. The
	// engine sees a request FrontendMs after its arrival.
	FrontendMs float64 `yaml:"frontend_ms"`

	// Serving defaults, as vLLM picks them for this GPU class.
	MaxNumSeqs          int `yaml:"max_num_seqs"`
	MaxNumBatchedTokens int `yaml:"max_num_batched_tokens"`

	// Exercise, when set, replaces the roofline by the CPU exercise's
	// fixed rates.
	Exercise *ExerciseRates `yaml:"exercise,omitempty"`
	// Linear, when set, replaces the roofline by fitted per-step costs
	// (hone calibrate).
	Linear *LinearCosts `yaml:"linear,omitempty"`
	// Steps, when set, replaces the roofline by step costs fitted to
	// measured forward passes with tensor parallelism explicit (hone
	// calibrate --steps, hone profile derive).
	Steps *StepCosts `yaml:"steps,omitempty"`

	// Source says how the profile was made and from what data; nil is a
	// hand-made profile.
	Source *ProfileSource `yaml:"source,omitempty"`

	// TP is the worker's tensor-parallel size (Config.TensorParallelSize);
	// 0 or 1 is one GPU. StepMs uses it for the roofline only (compute and
	// memory traffic split across the ranks, plus the all-reduces);
	// NumBlocks sizes the KV cache per GPU with it for the roofline and
	// Linear. It belongs to the deployment, not the cost model, so profile
	// files do not carry it.
	TP int `yaml:"-"`
}

// ExerciseRates is the CPU exercise's model: prefill at PrefillTokensPerSec,
// d = DecodeMsPerToken for each token sampled, and a fixed transfer.
type ExerciseRates struct {
	PrefillTokensPerSec float64 `yaml:"prefill_tokens_per_sec"`
	DecodeMsPerToken    float64 `yaml:"decode_ms_per_token"`
	// TransferMs is the KV handoff, counted as the exact model counts it
	// (package sim): from the prefill's end to the decode worker being able
	// to start, so the proxy's hop to the decode worker overlaps it.
	TransferMs float64 `yaml:"transfer_ms"`
}

// LinearCosts is a step cost linear in what the step holds, the form
// hone calibrate fits to a device's measured steps:
//
//	StepBaseMs + Σ decode entries DecodePerSeqMs
//	           + Σ prefill entries (PrefillPerTokenMs × tokens + PrefillPerContextMs × context)
//	           + EagerStepMs under --enforce-eager
//
// A fit holds for the deployment shape it was measured on, tensor
// parallelism included, so StepMs ignores Profile.TP for it.
type LinearCosts struct {
	StepBaseMs     float64 `yaml:"step_base_ms"`      // every step: host overhead, weights read, launches
	DecodePerSeqMs float64 `yaml:"decode_per_seq_ms"` // each decode entry in the step
	// PrefillPerTokenMs is each new (uncached) prefill token;
	// PrefillPerContextMs each context token a prefill chunk attends to,
	// counted once per entry, not per query token.
	PrefillPerTokenMs   float64 `yaml:"prefill_per_token_ms"`
	PrefillPerContextMs float64 `yaml:"prefill_per_context_ms"`
	EagerStepMs         float64 `yaml:"eager_step_ms"` // added to every step under --enforce-eager
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
// (2 kernels/layer); eager mode launches every kernel. With TP ranks, each
// rank does FLOPs/TP and moves weights/TP plus its share of the KV
// (KVBytesPerTokenPerGPU), and the step adds two ring all-reduces per
// layer of tokens×hidden×bytes each (AllReduceMs); host and launch
// overhead are not divided.
//
// Linear and Exercise profiles replace the roofline (see LinearCosts and
// ExerciseRates) and ignore TP; a Steps profile replaces it with costs
// that model TP explicitly (StepCosts).
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
	if c := p.Steps; c != nil {
		return c.SummaryMs(Summarize(entries), p.ranks(), p.Model.Hidden, eager)
	}
	if l := p.Linear; l != nil {
		ms := l.StepBaseMs
		for _, en := range entries {
			if en.Decode {
				ms += l.DecodePerSeqMs
			} else {
				ms += l.PrefillPerTokenMs*float64(en.Tokens) + l.PrefillPerContextMs*float64(en.Context)
			}
		}
		if eager {
			ms += l.EagerStepMs
		}
		return ms
	}
	m := p.Model
	tp := p.ranks()
	nonEmb := m.Params - m.EmbedParams
	var tokens, sampled, attn, kvRead, kvWrite float64
	prefill := false
	kvb := float64(m.KVBytesPerTokenPerGPU(tp))
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
	flops := (2*nonEmb*tokens + 2*m.EmbedParams*sampled + 4*float64(m.Layers*m.Heads*m.HeadDim)*attn) / float64(tp)
	bytes := m.WeightBytes()/float64(tp) + kvRead + kvWrite
	compute := flops / (p.GPU.PeakFLOPS * p.MFU) * 1000
	memory := bytes / (p.GPU.MemBandwidth * p.MBU) * 1000
	launch := p.GraphLaunchMs
	switch {
	case eager:
		launch = float64(m.Layers*p.KernelsPerLayer) * p.LaunchUs / 1000
	case prefill:
		launch = p.GraphLaunchMs + float64(m.Layers*2)*p.LaunchUs/1000
	}
	ms := math.Max(compute, memory) + p.StepOverheadMs + launch
	if tp > 1 {
		ms += float64(2*m.Layers) * p.AllReduceMs(tokens)
	}
	return ms
}

// ranks is the tensor-parallel size, at least 1.
func (p *Profile) ranks() int { return max(p.TP, 1) }

// AllReduceMs is one ring all-reduce across the profile's TP ranks of the
// activations of tokens tokens (tokens × hidden × bytes per element):
// 2(TP−1)/TP of the bytes cross each rank's link, at
// GPU.InterconnectBytesSec, plus GPU.InterconnectLatencyUs. 0 on one GPU.
func (p *Profile) AllReduceMs(tokens float64) float64 {
	tp := p.ranks()
	if tp <= 1 {
		return 0
	}
	bytes := tokens * float64(p.Model.Hidden*p.Model.BytesPerElem)
	ms := p.GPU.InterconnectLatencyUs / 1000
	if p.GPU.InterconnectBytesSec > 0 {
		ms += 2 * float64(tp-1) / float64(tp) * bytes / p.GPU.InterconnectBytesSec * 1000
	}
	return ms
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
// given memory utilisation: (util × memory − weights − reserve) / block
// bytes, per GPU. With TP ranks every rank holds weights/TP and its share
// of every block (KVBytesPerTokenPerGPU), so the worker's capacity is one
// rank's. Linear profiles size it the same way; Exercise profiles never
// evict.
func (p *Profile) NumBlocks(blockSize int, util float64) int {
	if p.Exercise != nil {
		// Large enough that the exercise never evicts: 2^20 tokens.
		return (1 << 20) / blockSize
	}
	tp := p.ranks()
	free := util*p.GPU.MemoryBytes - p.Model.WeightBytes()/float64(tp) - p.ActivationReserveBytes
	n := int(free / float64(blockSize*p.Model.KVBytesPerTokenPerGPU(tp)))
	return max(n, 0)
}

const (
	gib = 1 << 30
	mib = 1 << 20
)

var profiles = map[string]*Profile{
	// The CPU exercise's exact model (package sim): prefill 4096 tok/s, d =
	// 1000/2048 ms per sampled token, a batch of one, 8 ms transfer.
	"exercise": {
		Name: "exercise", Model: Qwen25Coder05B,
		GPU:                 GPU{Name: "exercise (the CPU exercise's fixed rates)"},
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
	// NVIDIA A10 (24 GB GDDR6): 125 TFLOPS dense bf16, 600 GB/s, PCIe 4.0
	// x16 (32 GB/s per direction), no NVLink.
	"qwen2.5-coder-0.5b-a10": {
		Name: "qwen2.5-coder-0.5b-a10", Model: Qwen25Coder05B,
		GPU: GPU{Name: "NVIDIA A10", MemoryBytes: 23028 * mib, PeakFLOPS: 125e12, MemBandwidth: 600e9, LinkBytesSec: 20e9,
			InterconnectBytesSec: 32e9, InterconnectLatencyUs: 15},
		MFU: 0.35, MBU: 0.70,
		StepOverheadMs: 1.5, LaunchUs: 5, KernelsPerLayer: 14, GraphLaunchMs: 0.05,
		ActivationReserveBytes: 2 * gib, TransferFixedMs: 1.0, FrontendMs: 2.0,
		MaxNumSeqs: 256, MaxNumBatchedTokens: 2048,
	},
	// NVIDIA L4 (24 GB GDDR6): 121 TFLOPS dense bf16, 300 GB/s, PCIe 4.0
	// x16 (32 GB/s per direction), no NVLink.
	"qwen2.5-coder-0.5b-l4": {
		Name: "qwen2.5-coder-0.5b-l4", Model: Qwen25Coder05B,
		GPU: GPU{Name: "NVIDIA L4", MemoryBytes: 23034 * mib, PeakFLOPS: 121e12, MemBandwidth: 300e9, LinkBytesSec: 20e9,
			InterconnectBytesSec: 32e9, InterconnectLatencyUs: 15},
		MFU: 0.35, MBU: 0.70,
		StepOverheadMs: 1.5, LaunchUs: 5, KernelsPerLayer: 14, GraphLaunchMs: 0.05,
		ActivationReserveBytes: 2 * gib, TransferFixedMs: 1.0, FrontendMs: 2.0,
		MaxNumSeqs: 256, MaxNumBatchedTokens: 2048,
	},
	// NVIDIA H200 SXM (141 GB HBM3e): 989 TFLOPS dense bf16, 4.8 TB/s,
	// NVLink 4 (450 GB/s per direction).
	"qwen2.5-coder-0.5b-h200": {
		Name: "qwen2.5-coder-0.5b-h200", Model: Qwen25Coder05B,
		GPU: GPU{Name: "NVIDIA H200", MemoryBytes: 143771 * mib, PeakFLOPS: 989e12, MemBandwidth: 4.8e12, LinkBytesSec: 300e9,
			InterconnectBytesSec: 450e9, InterconnectLatencyUs: 5},
		MFU: 0.20, MBU: 0.60,
		StepOverheadMs: 1.0, LaunchUs: 4, KernelsPerLayer: 14, GraphLaunchMs: 0.04,
		ActivationReserveBytes: 4 * gib, TransferFixedMs: 0.5, FrontendMs: 2.0,
		MaxNumSeqs: 1024, MaxNumBatchedTokens: 8192,
	},
}

// DefaultProfile is the profile used when none is named.
const DefaultProfile = "qwen2.5-coder-0.5b-a10"

// LookupProfile returns a copy of the named built-in profile or, when name
// ends in .yaml or .yml, the profile file at that path (LoadProfileFile).
func LookupProfile(name string) (*Profile, error) {
	p, ok := profiles[name]
	if !ok {
		if isProfileFile(name) {
			return LoadProfileFile(name)
		}
		return nil, fmt.Errorf("unknown profile %q: want one of %s, or a .yaml profile file", name, strings.Join(ProfileNames(), ", "))
	}
	return p.clone(), nil
}

// clone is a deep copy.
func (p *Profile) clone() *Profile {
	c := *p
	if p.Exercise != nil {
		e := *p.Exercise
		c.Exercise = &e
	}
	if p.Linear != nil {
		l := *p.Linear
		c.Linear = &l
	}
	if p.Steps != nil {
		st := *p.Steps
		st.TPs = slices.Clone(p.Steps.TPs)
		st.AllReduce.Points = make(map[int][]ARPoint, len(p.Steps.AllReduce.Points))
		for tp, pts := range p.Steps.AllReduce.Points {
			st.AllReduce.Points[tp] = append([]ARPoint(nil), pts...)
		}
		c.Steps = &st
	}
	if p.Source != nil {
		c.Source = p.Source.clone()
	}
	return &c
}

// BuiltinProfiles returns a copy of every built-in profile, by name.
func BuiltinProfiles() []*Profile {
	var out []*Profile
	for _, n := range ProfileNames() {
		out = append(out, profiles[n].clone())
	}
	return out
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

// Shapes of the steps LinearApprox reads the roofline at: a decode entry's
// context is a coding prompt's (the replay workload's 4096 tokens); a cold
// chunk fills the default token budget of the smaller GPUs; a warm chunk
// is the workload's 128 uncached tokens on the rest of a 4096-token prompt.
const (
	approxContext    = 4096
	approxBatch      = 64
	approxColdChunk  = 2048
	approxWarmChunk  = 128
	approxWarmPrefix = approxContext - approxWarmChunk
)

// LinearApprox is the linear cost form (LinearCosts) that approximates p,
// a starting point for hone calibrate. It returns *p.Linear when p has
// one. For the roofline, at tensor parallelism p.TP, it reads StepMs at a
// few typical steps:
//
//	DecodePerSeqMs      (64 decode entries − 1 decode entry) / 63, at 4096 context
//	StepBaseMs          1 decode entry − DecodePerSeqMs
//	PrefillPerTokenMs   (a cold 2048-token chunk − StepBaseMs) / 2048
//	PrefillPerContextMs (a 128-token chunk on 3968 context − on 0 context) / 3968
//	EagerStepMs         1 decode entry eager − with CUDA graphs
//
// each at least 0. Decode steps are memory-bound on the roofline, hence
// linear in the batch, and the cold chunk is matched exactly; what the
// linear form cannot follow is the roofline's max(compute, memory): a small
// prefill chunk is memory-bound, so the form, whose per-token cost is the
// compute-bound one, overestimates it (TestLinearApprox states by how much).
//
// For an Exercise profile the form is StepBaseMs 0, DecodePerSeqMs d,
// PrefillPerTokenMs 1000/PrefillTokensPerSec, no context, no eager cost:
// exact for every decode step and every prefill chunk that samples no
// token, but the exercise also charges d for the token a prompt's last
// chunk samples, which a linear form has no term for (it has none per
// sampled prefill), so such a step comes out d shorter. The exercise's
// TransferMs is not a step cost; it is TransferFixedMs of a linear profile
// with no link pacing.
func (p *Profile) LinearApprox() LinearCosts {
	if p.Linear != nil {
		return *p.Linear
	}
	if e := p.Exercise; e != nil {
		return LinearCosts{DecodePerSeqMs: e.DecodeMsPerToken, PrefillPerTokenMs: 1000 / e.PrefillTokensPerSec}
	}
	decode := func(n int, eager bool) float64 {
		en := make([]StepEntry, n)
		for i := range en {
			en[i] = StepEntry{Tokens: 1, Context: approxContext, Decode: true, Samples: true}
		}
		return p.StepMs(en, eager)
	}
	chunk := func(tokens, context int) float64 {
		return p.StepMs([]StepEntry{{Tokens: tokens, Context: context}}, false)
	}
	var l LinearCosts
	d1 := decode(1, false)
	l.DecodePerSeqMs = max((decode(approxBatch, false)-d1)/(approxBatch-1), 0)
	l.StepBaseMs = max(d1-l.DecodePerSeqMs, 0)
	l.PrefillPerTokenMs = max((chunk(approxColdChunk, 0)-l.StepBaseMs)/approxColdChunk, 0)
	l.PrefillPerContextMs = max((chunk(approxWarmChunk, approxWarmPrefix)-chunk(approxWarmChunk, 0))/approxWarmPrefix, 0)
	l.EagerStepMs = max(decode(1, true)-d1, 0)
	return l
}
