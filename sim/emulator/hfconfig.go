package emulator

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// hfConfig is the part of a Hugging Face config.json that a dense
// decoder-only transformer's costs need.
type hfConfig struct {
	Layers       *int   `json:"num_hidden_layers"`
	Hidden       *int   `json:"hidden_size"`
	Heads        *int   `json:"num_attention_heads"`
	KVHeads      *int   `json:"num_key_value_heads"`
	HeadDim      *int   `json:"head_dim"`
	Intermediate *int   `json:"intermediate_size"`
	Vocab        *int   `json:"vocab_size"`
	MaxPos       *int   `json:"max_position_embeddings"`
	Tied         *bool  `json:"tie_word_embeddings"`
	Dtype        string `json:"torch_dtype"`
	ModelType    string `json:"model_type"`
	Experts      *int   `json:"num_experts"`
	LocalExperts *int   `json:"num_local_experts"`
}

// ModelFromHFConfig reads a Hugging Face config.json of a dense
// decoder-only transformer into a Model named name. bytesPerElem is the
// weights' and KV cache's element size (2 for bf16; 1 for fp8 weights,
// whose KV cache hone keeps at 2 unless told otherwise, as vLLM's
// kv_cache_dtype auto does). Parameters are counted from the shapes: per
// layer the Q, K, V and O projections, the gated MLP (3 × hidden ×
// intermediate) and the norms; the embedding, and the lm_head unless tied.
// An error names the file and the missing or bad field.
func ModelFromHFConfig(path, name string) (Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Model{}, fmt.Errorf("model config: %w", err)
	}
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return Model{}, fmt.Errorf("model config %s: %w", path, err)
	}
	need := func(field string, v *int) (int, error) {
		if v == nil {
			return 0, fmt.Errorf("model config %s: %s: missing (want a positive integer)", path, field)
		}
		if *v <= 0 {
			return 0, fmt.Errorf("model config %s: %s: want a positive integer, got %d", path, field, *v)
		}
		return *v, nil
	}
	if (c.Experts != nil && *c.Experts > 0) || (c.LocalExperts != nil && *c.LocalExperts > 0) {
		return Model{}, fmt.Errorf("model config %s: num_experts: a mixture of experts; hone's cost forms model dense transformers only", path)
	}
	var m Model
	m.Name = name
	fields := []struct {
		name string
		v    *int
		dst  *int
	}{
		{"num_hidden_layers", c.Layers, &m.Layers},
		{"hidden_size", c.Hidden, &m.Hidden},
		{"num_attention_heads", c.Heads, &m.Heads},
		{"intermediate_size", c.Intermediate, &m.Intermediate},
		{"vocab_size", c.Vocab, &m.Vocab},
		{"max_position_embeddings", c.MaxPos, &m.MaxModelLen},
	}
	for _, f := range fields {
		if *f.dst, err = need(f.name, f.v); err != nil {
			return Model{}, err
		}
	}
	m.KVHeads = m.Heads
	if c.KVHeads != nil {
		if m.KVHeads, err = need("num_key_value_heads", c.KVHeads); err != nil {
			return Model{}, err
		}
	}
	m.HeadDim = m.Hidden / m.Heads
	if c.HeadDim != nil {
		if m.HeadDim, err = need("head_dim", c.HeadDim); err != nil {
			return Model{}, err
		}
	}
	m.BytesPerElem = 2
	switch strings.ToLower(c.Dtype) {
	case "", "bfloat16", "float16":
	case "float32":
		// Served in bf16 by default, as vLLM casts float32 checkpoints.
	default:
		return Model{}, fmt.Errorf("model config %s: torch_dtype: %q: want bfloat16, float16 or float32", path, c.Dtype)
	}
	h, q, kv, inter := float64(m.Hidden), float64(m.Heads*m.HeadDim), float64(m.KVHeads*m.HeadDim), float64(m.Intermediate)
	perLayer := h*q + 2*h*kv + q*h + 3*h*inter + 2*h
	embed := float64(m.Vocab) * h
	m.EmbedParams = embed
	m.Params = float64(m.Layers)*perLayer + embed + h
	if c.Tied == nil || !*c.Tied {
		m.Params += embed
	}
	return m, nil
}

// HFQuantMethod is a config.json's quantization_config.quant_method
// (e.g. "fp8"), "" when the config states none.
func HFQuantMethod(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var c struct {
		Q *struct {
			Method string `json:"quant_method"`
		} `json:"quantization_config"`
	}
	if json.Unmarshal(b, &c) != nil || c.Q == nil {
		return ""
	}
	return strings.ToLower(c.Q.Method)
}
