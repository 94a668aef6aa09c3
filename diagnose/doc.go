// Package diagnose attributes each request's latency to where it went —
// client and proxy overhead, queueing, prefill, KV transfer and decode —
// and classifies what bounds a configuration, so the optimizer can choose
// the next one.
//
// It joins evidence that every backend can produce, on one clock
// (CLOCK_MONOTONIC nanoseconds, scaled to model time by the record's time
// scale):
//
//   - the replay record: when each request was scheduled, sent, and when
//     its first and last tokens arrived; the engine's per-request metrics
//     object when vLLM runs with --enable-per-request-metrics (only vLLM's
//     own keys are read: queue_time_ms, time_to_first_token_ms,
//     mean_itl_ms);
//   - the proxy's per-request timeline (received, each prefill leg sent and
//     answered, decode leg sent, first and last byte), joined by
//     X-Request-Id;
//   - optionally the daemon's KV-transfer socket evidence.
//
// The emulator's ground-truth trace is never an input to attribution; it is
// what attribution is tested against (Compare).
//
// diagnose launches nothing.
package diagnose
