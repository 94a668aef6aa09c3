package schema

import "encoding/json"

// EngineMetrics is the engine's per-request "metrics" object
// (RequestRecord.EngineMetrics) as the record's readers see it: vLLM's
// keys (vllm serve --enable-per-request-metrics) and hone's emulator's
// extensions, in model milliseconds. A key the engine did not write is
// nil. The emulator writes the object (emulator.RequestMetrics, which
// states every key's definition); DecodeEngineMetrics is the one decoder.
type EngineMetrics struct {
	// vLLM's keys: first scheduled → first token; first → last token;
	// queued → first scheduled; mean inter-token latency; output tokens
	// per second of first scheduled → last token.
	TimeToFirstTokenMs *float64 `json:"time_to_first_token_ms"`
	GenerationTimeMs   *float64 `json:"generation_time_ms"`
	QueueTimeMs        *float64 `json:"queue_time_ms"`
	MeanITLMs          *float64 `json:"mean_itl_ms"`
	TokensPerSecond    *float64 `json:"tokens_per_second"`
	// hone's emulator's keys: its ground truth. KVTransferTimeMs is the
	// decode worker's KV pull (receipt → pulled KV usable), of which
	// KVTransferLateMs is past the modelled end (host time); E2ETimeMs
	// runs from arrival to the last token; TimeScale is wall = model ×
	// time_scale.
	PrefillTimeMs    *float64 `json:"prefill_time_ms"`
	KVTransferTimeMs *float64 `json:"kv_transfer_time_ms"`
	KVTransferLateMs *float64 `json:"kv_transfer_late_ms"`
	DecodeTimeMs     *float64 `json:"decode_time_ms"`
	E2ETimeMs        *float64 `json:"e2e_time_ms"`
	TimeScale        *float64 `json:"time_scale"`
}

// DecodeEngineMetrics decodes a request's per-request metrics; ok is false
// when there are none or they are not a JSON object of numbers (the keys
// that did decode stay set).
func DecodeEngineMetrics(raw json.RawMessage) (m EngineMetrics, ok bool) {
	if len(raw) == 0 {
		return m, false
	}
	return m, json.Unmarshal(raw, &m) == nil
}

// EngineMetricsKeys lists the keys of a request's per-request metrics
// whose value is not null; nil when there are none or they are not a JSON
// object.
func EngineMetricsKeys(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	var out []string
	for k, v := range m {
		if string(v) != "null" {
			out = append(out, k)
		}
	}
	return out
}
