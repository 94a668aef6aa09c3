package schema

import "encoding/json"

// EngineInfo is what the endpoint says about itself.
type EngineInfo struct {
	Endpoint string `json:"endpoint"`
	Version  string `json:"version,omitempty"` // GET /version, when served
	// TimeScale is the time scale the engine states in GET /version
	// (hone's emulator does; vLLM runs in real time and says nothing).
	TimeScale float64 `json:"time_scale,omitempty" jsonschema:"exclusiveMinimum=0"`
	// CostProfile and CostProfileSource are the GPU-time model hone's
	// emulator states in GET /version (a profile name, and how it was made:
	// fitted to measured steps, derived, hand-made); vLLM says nothing.
	CostProfile       string `json:"cost_profile,omitempty"`
	CostProfileSource string `json:"cost_profile_source,omitempty"`
	// Model is the served model's /v1/models entry (id, root,
	// max_model_len, ...), as the engine wrote it.
	Model json.RawMessage `json:"model,omitempty" jsonschema:"type=object"`
	// Error says why /version or /v1/models could not be read; the run
	// goes on without them.
	Error string `json:"error,omitempty"`
}

// Counters is a /metrics scrape: every vllm: counter (name ending _total),
// summed over its label sets.
type Counters map[string]float64

// The emulator's counters (hone sim serve's /metrics, merged by hone's
// proxy) that the emulator_bound verdict reads around a level: how many KV
// pulls ended after their modelled end because the bytes had not yet
// crossed the side channel, and the model seconds they added together.
const (
	EmulatorKVPullsLate       = "hone_emulator_kv_pulls_late_total"
	EmulatorKVPullLateSeconds = "hone_emulator_kv_pull_late_seconds_total"
	// EmulatorKVPullLateModelSeconds is the modelled duration of those
	// same late pulls, summed: with it, the host's wall time per pull is
	// known (scale × (late + modelled)), and so is how late the pulls would
	// be at another time scale.
	EmulatorKVPullLateModelSeconds = "hone_emulator_kv_pull_late_model_seconds_total"
)
