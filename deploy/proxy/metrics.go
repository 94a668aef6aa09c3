package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's own, in its own registry (hone_proxy_*).
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	retries   prometheus.Counter
	legFails  *prometheus.CounterVec
	prefill   prometheus.Histogram
	ttfb      prometheus.Histogram
	duration  prometheus.Histogram
	overhead  prometheus.Histogram
	inFlight  prometheus.Gauge
	workerUp  *prometheus.GaugeVec
	healthChg *prometheus.CounterVec
}

// Latency buckets from 100 µs to ~100 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 21)

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hone_proxy_requests_total", Help: "Requests finished, by outcome (success, fallback, failed, timeout).",
		}, []string{"outcome"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hone_proxy_prefill_retries_total", Help: "Prefill legs retried on another prefill worker.",
		}),
		legFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hone_proxy_leg_failures_total", Help: "Upstream legs that failed, by leg and reason.",
		}, []string{"leg", "reason"}),
		prefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hone_proxy_prefill_leg_seconds", Help: "Successful prefill legs, sent to answered.", Buckets: latencyBuckets,
		}),
		ttfb: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hone_proxy_time_to_first_byte_seconds", Help: "Received to the first body byte written to the client.", Buckets: latencyBuckets,
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hone_proxy_request_duration_seconds", Help: "Received to the last byte written to the client.", Buckets: latencyBuckets,
		}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hone_proxy_routing_seconds", Help: "Time the proxy itself spent before the streaming leg was sent, prefill legs excluded.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 20),
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hone_proxy_requests_in_flight", Help: "Requests being served.",
		}),
		workerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hone_proxy_worker_up", Help: "1 while a worker passes health checks.",
		}, []string{"worker", "role"}),
		healthChg: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hone_proxy_worker_transitions_total", Help: "Workers taken out of or let back into rotation.",
		}, []string{"worker", "to"}),
	}
	m.reg.MustRegister(m.requests, m.retries, m.legFails, m.prefill, m.ttfb, m.duration, m.overhead, m.inFlight, m.workerUp, m.healthChg)
	for _, o := range Outcomes {
		m.requests.WithLabelValues(o)
	}
	return m
}
