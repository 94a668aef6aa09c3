package emulator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hone-llm/hone/schema"
)

// metrics are vLLM's V1 Prometheus metrics under their vLLM names, plus a
// few of the emulator's own under hone_emulator_. Durations are model
// seconds (wall seconds / --time-scale).
type metrics struct {
	reg *prometheus.Registry

	prefixQueries, prefixHits          prometheus.Counter
	promptTokens, generationTokens     prometheus.Counter
	preemptions                        prometheus.Counter
	success                            *prometheus.CounterVec
	running, waiting, kvUsage          prometheus.Gauge
	ttft, itl, tpot, e2e               prometheus.Observer
	queue, prefill, decode, inference  prometheus.Observer
	nixlXfer, nixlBytes                prometheus.Observer
	nixlFailed                         prometheus.Counter
	kvBytesSent, kvBytesReceived       prometheus.Counter
	kvPullsLate, kvPullLateSeconds     prometheus.Counter
	kvPullLateModelSeconds             prometheus.Counter
	stepLateness                       prometheus.Observer
	faultCuts                          prometheus.Counter
	requestPromptTokens, requestOutput prometheus.Observer
}

var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
var itlBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}

func newMetrics(model string) *metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(g)
		return g
	}
	hist := func(name, help string, b []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b, ConstLabels: labels})
		reg.MustRegister(h)
		return h
	}
	m := &metrics{reg: reg}
	m.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in prompt tokens.")
	m.prefixHits = counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in prompt tokens.")
	m.promptTokens = counter("vllm:prompt_tokens_total", "Prefill tokens of finished requests.")
	m.generationTokens = counter("vllm:generation_tokens_total", "Generated tokens.")
	m.preemptions = counter("vllm:num_preemptions_total", "Preemptions (by recompute).")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
		Help: "Finished requests by finish reason.", ConstLabels: labels}, []string{"finished_reason"})
	reg.MustRegister(m.success)
	m.running = gauge("vllm:num_requests_running", "Requests in the running batch.")
	m.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
	m.kvUsage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0-1 (1 = all blocks in use).")
	m.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token, model seconds.", latencyBuckets)
	m.itl = hist("vllm:inter_token_latency_seconds", "Inter-token latency, model seconds.", itlBuckets)
	m.tpot = hist("vllm:request_time_per_output_token_seconds", "Per-request mean time per output token, model seconds.", itlBuckets)
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Arrival to last token, model seconds.", latencyBuckets)
	m.queue = hist("vllm:request_queue_time_seconds", "Queued to first scheduled, model seconds.", latencyBuckets)
	m.prefill = hist("vllm:request_prefill_time_seconds", "First scheduled to first token, model seconds.", latencyBuckets)
	m.decode = hist("vllm:request_decode_time_seconds", "First to last token, model seconds.", latencyBuckets)
	m.inference = hist("vllm:request_inference_time_seconds", "First scheduled to last token, model seconds.", latencyBuckets)
	m.requestPromptTokens = hist("vllm:request_prompt_tokens", "Prompt tokens per request.", prometheus.ExponentialBuckets(1, 2, 17))
	m.requestOutput = hist("vllm:request_generation_tokens", "Generated tokens per request.", prometheus.ExponentialBuckets(1, 2, 17))
	m.nixlXfer = hist("vllm:nixl_xfer_time_seconds", "KV pull duration on the decode side, model seconds.", latencyBuckets)
	m.nixlBytes = hist("vllm:nixl_bytes_transferred", "KV bytes per pull, decode side.", prometheus.ExponentialBuckets(1<<14, 4, 12))
	m.nixlFailed = counter("vllm:nixl_num_failed_transfers_total", "Failed KV pulls.")
	m.kvBytesSent = counter("hone_emulator_kv_bytes_sent_total", "KV bytes written on the side channel (prefill side).")
	m.kvBytesReceived = counter("hone_emulator_kv_bytes_received_total", "KV bytes read from the side channel (decode side).")
	m.kvPullsLate = counter(schema.EmulatorKVPullsLate, "KV pulls whose bytes crossed the side channel after their modelled end (decode side): the host, not the model, set when the KV became usable.")
	m.kvPullLateSeconds = counter(schema.EmulatorKVPullLateSeconds, "Model seconds by which KV pulls' bytes arrived after their modelled end, summed (decode side): host time that entered model time.")
	m.kvPullLateModelSeconds = counter(schema.EmulatorKVPullLateModelSeconds, "The modelled duration of the late KV pulls, model seconds summed (decode side).")
	m.stepLateness = hist("hone_emulator_step_lateness_seconds", "Wall time by which a step completed after its modelled end.",
		[]float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1})
	m.faultCuts = counter("hone_emulator_fault_stream_cuts_total", "Streams cut by the cut-stream-after-tokens fault.")
	return m
}

// watchCache exports the cache's eviction count.
func (m *metrics) watchCache(c *kvCache) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hone_emulator_kv_evictions_total",
		Help: "Cached KV blocks evicted (LRU) to make room."}, func() float64 { return float64(c.evictions.Load()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hone_emulator_kv_blocks",
		Help: "KV cache capacity in blocks."}, func() float64 { return float64(c.numBlocks()) }))
}

// observe records a request that finished normally.
func (m *metrics) observe(r *request, res *Result) {
	t := res.Timing
	m.success.WithLabelValues(res.FinishReason).Inc()
	m.promptTokens.Add(float64(res.PromptTokens))
	m.requestPromptTokens.Observe(float64(res.PromptTokens))
	m.requestOutput.Observe(float64(res.OutputTokens))
	m.ttft.Observe(t.TTFTMs / 1000)
	m.e2e.Observe(t.E2EMs / 1000)
	m.queue.Observe(t.QueueMs / 1000)
	m.prefill.Observe(t.PrefillMs / 1000)
	m.decode.Observe(t.DecodeMs / 1000)
	m.inference.Observe((t.PrefillMs + t.DecodeMs) / 1000)
	if res.OutputTokens > 1 {
		m.tpot.Observe(t.DecodeMs / float64(res.OutputTokens-1) / 1000)
	}
}
