package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Config is a record's config: the deployment spec the run measured, as
// JSON (deploy.Spec: hone optimize and hone replay --config write it),
// with keys of hone's own (ConfigScenario, ConfigTPOTFloorMs) and
// whatever else a user's --config file holds. It stays a map, so a
// record's bytes are what was written whatever the keys (encoding/json
// writes them sorted); the parts consumers read have typed views
// (Scenario, TPOTFloorMs, Topology, Knobs, Decode), whose errors name the
// field as config.<field>.
type Config map[string]any

// Keys hone adds to a deployment spec's in a record's config.
const (
	// ConfigScenario names the scenario the gate groups runs by (hone
	// optimize sets it).
	ConfigScenario = "scenario"
	// ConfigTPOTFloorMs is the gate's TPOT floor in model milliseconds.
	ConfigTPOTFloorMs = "tpot_floor_ms"
)

// Scenario is the config's scenario, else its (spec's) name, else "".
func (c Config) Scenario() string {
	for _, k := range []string{ConfigScenario, "name"} {
		if s, ok := c[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// TPOTFloorMs is the config's tpot_floor_ms; ok is false when it has none,
// and a value that is not a positive number is an error.
func (c Config) TPOTFloorMs() (ms float64, ok bool, err error) {
	v, ok := c[ConfigTPOTFloorMs]
	if !ok {
		return 0, false, nil
	}
	if err := c.section(ConfigTPOTFloorMs, &ms); err != nil || !(ms > 0) || math.IsInf(ms, 0) {
		return 0, true, fmt.Errorf("config.%s: %v: want a positive number of milliseconds (model time)", ConfigTPOTFloorMs, v)
	}
	return ms, true, nil
}

// Topology is the config's topology section; ok is false when it has
// none.
func (c Config) Topology() (t Topology, ok bool, err error) {
	ok, err = c.has("topology"), c.section("topology", &t)
	return t, ok, err
}

// Knobs is the config's knobs section (zero when it has none).
func (c Config) Knobs() (Knobs, error) {
	var k Knobs
	return k, c.section("knobs", &k)
}

// Decode decodes the whole config into v (a deployment spec) through its
// JSON.
func (c Config) Decode(v any) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return configError("config", json.Unmarshal(b, v))
}

func (c Config) has(key string) bool { return c[key] != nil }

// section decodes the config's key, when it has one, into v through its
// JSON: a record read from a file holds JSON values, one built in memory
// may hold Go values.
func (c Config) section(key string, v any) error {
	if !c.has(key) {
		return nil
	}
	b, err := json.Marshal(c[key])
	if err != nil {
		return fmt.Errorf("config.%s: %w", key, err)
	}
	return configError("config."+key, json.Unmarshal(b, v))
}

// configError words a decoding error of the config part at path, naming
// the field a wrong type was found in.
func configError(path string, err error) error {
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s.%s: got a JSON %s (%w)", path, te.Field, te.Value, err)
	}
	if errors.As(err, &te) {
		return fmt.Errorf("%s: got a JSON %s (%w)", path, te.Value, err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// Topology splits the GPUs. Colocated: Replicas engines of TP GPUs each
// (one engine with TP=N is Replicas 1). Disaggregated: Prefill and Decode
// pools.
type Topology struct {
	Kind     string `yaml:"kind" json:"kind"`
	Replicas int    `yaml:"replicas" json:"replicas,omitempty"`
	TP       int    `yaml:"tp" json:"tp,omitempty"`
	Prefill  *Pool  `yaml:"prefill" json:"prefill,omitempty"`
	Decode   *Pool  `yaml:"decode" json:"decode,omitempty"`
}

// Pool is one role's workers in a disaggregated topology.
type Pool struct {
	Replicas int `yaml:"replicas" json:"replicas"`
	TP       int `yaml:"tp" json:"tp"`
}

// Knobs are the engine settings the optimizer turns. Nil pointers leave the
// engine's default.
type Knobs struct {
	PrefixCaching        *bool    `yaml:"prefix_caching" json:"prefix_caching,omitempty"`
	MaxNumSeqs           int      `yaml:"max_num_seqs" json:"max_num_seqs,omitempty"`
	MaxNumBatchedTokens  int      `yaml:"max_num_batched_tokens" json:"max_num_batched_tokens,omitempty"`
	GPUMemoryUtilization float64  `yaml:"gpu_memory_utilization" json:"gpu_memory_utilization,omitempty"`
	BlockSize            int      `yaml:"block_size" json:"block_size,omitempty"`
	MaxModelLen          int      `yaml:"max_model_len" json:"max_model_len,omitempty"`
	EnforceEager         bool     `yaml:"enforce_eager" json:"enforce_eager,omitempty"`
	CUDAGraphMode        string   `yaml:"cudagraph_mode" json:"cudagraph_mode,omitempty"`
	SpeculativeNgram     *Ngram   `yaml:"speculative_ngram" json:"speculative_ngram,omitempty"`
	ExtraArgs            []string `yaml:"extra_args" json:"extra_args,omitempty"`
}

// Ngram is prompt-lookup speculative decoding.
type Ngram struct {
	NumSpeculativeTokens int `yaml:"num_speculative_tokens" json:"num_speculative_tokens"`
	PromptLookupMax      int `yaml:"prompt_lookup_max" json:"prompt_lookup_max"`
	PromptLookupMin      int `yaml:"prompt_lookup_min" json:"prompt_lookup_min,omitempty"`
}
