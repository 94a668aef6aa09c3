package replay

import (
	"github.com/hone-llm/hone/schema"
)

// vLLM's per-request metrics (vllm serve --enable-per-request-metrics)
// need nothing in the request body: vLLM has no per-request opt-in field.
// A non-streaming answer carries the "metrics" object at the top level; a
// stream carries it only on its final usage chunk, which vLLM sends only
// with stream_options.include_usage (or --enable-force-include-usage), so
// every request hone sends asks for usage (encodeCompletion). vLLM leaves
// metrics out for n > 1 and for several prompts in one request; hone sends
// one prompt, n 1. Its keys (build_per_request_timing_metrics, from the
// engine core's timestamps): time_to_first_token_ms first scheduled → first
// token, queue_time_ms queued → first scheduled, generation_time_ms first →
// last token, mean_itl_ms, tokens_per_second. Package diagnose reads them.

// engineMetricsKeys counts, per key of the engine's per-request "metrics"
// object, the measured requests that completed with it (a null value does
// not count): which engine figures attribution can use at this level.
// nil when no measured request carried metrics. The first warmups ids
// are warm-ups (Sessions; a trace has none).
func engineMetricsKeys(reqs []schema.RequestRecord, warmups int) map[string]int {
	var out map[string]int
	for _, q := range reqs {
		if q.ID < warmups || q.Outcome != schema.OutcomeOK || len(q.EngineMetrics) == 0 {
			continue
		}
		for _, k := range schema.EngineMetricsKeys(q.EngineMetrics) {
			if out == nil {
				out = map[string]int{}
			}
			out[k]++
		}
	}
	return out
}
