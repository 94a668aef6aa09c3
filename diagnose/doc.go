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
//     object when vLLM runs with --enable-per-request-metrics (it needs no
//     request field; a stream carries it on its usage chunk). vLLM's keys
//     are read with vLLM's definitions: queue_time_ms (queued → first
//     scheduled), time_to_first_token_ms (first scheduled → first token:
//     the prefill as it is, the queue is not inside it),
//     generation_time_ms (first → last token), mean_itl_ms; hone's
//     emulator, which follows the same definitions, adds two keys vLLM
//     does not have: e2e_time_ms (arrival at the API server → last token,
//     which puts the server's own frontend work under queueing) and
//     kv_transfer_time_ms (below);
//   - the proxy's per-request timeline (received, each prefill leg sent and
//     answered, decode leg sent, first and last byte), joined by
//     X-Request-Id;
//   - optionally the daemon's kernel evidence (a snapshot): KV-transfer
//     connections, the HTTP exchanges on the engines' API sockets and the
//     engines' CUDA steps. From it alone each request gets a kernel split
//     (joinExchanges, inferChunks): queueing, prefill and decode on the
//     engine that served it and, for a 1P1D request, transfer (decode
//     receipt → the KV pull's last operation) and decode_queue (→ the
//     first-token send). Evidence.Source chooses per request between it
//     and the engines' metrics; where both exist they are compared.
//
// TTFT is the record's: from the scheduled send to the first token
// (RequestRecord.TTFTMs), never from the actual send (TTFTFromSentMs), so
// a request's parts add up to the TTFT the record's percentiles and
// verdicts read, and the client's lateness is part of it. The parts are
// queueing (engine queues, failed prefill legs), prefill, transfer (the
// decode worker waiting for KV), decode_queue (the decode worker's queue
// after the KV and its first step) and client: the residual, which
// therefore holds only what happened outside the engines — dispatch lag,
// the hops through the proxy and its hand-off, first-byte delivery.
//
// vLLM's decode worker schedules a request only once its KV is there, so
// its queue_time_ms holds the KV wait and any queue after it (for a seat:
// max-num-seqs). The two are split at the KV pull's end where its timing
// is known — hone's emulator's kv_transfer_time_ms (the decode worker's
// own pull; vLLM has no such key) or the daemon's KV connection (its last
// operation) — and the rest of the wait is decode_queue; with neither,
// the whole queue_time_ms stays transfer and its source says so.
//
// Only valid levels decide. Attribute copies each level's
// replay.Verdict onto its requests; MarkClientBound adds replay's
// client_bound bounds applied to the client part (p99 against
// replay.ClientBoundSLOFraction of the TTFT SLO, median against
// replay.ClientBoundTTFTFraction of the median TTFT) and re-judges the
// record. SummarizeKnobs shows invalid levels, flagged with their reason
// codes, and names the bottleneck from the valid ones (BottleneckRule):
//
//   - client-bound when every level is invalid, or the lowest or highest
//     level is invalid for client_bound, or the rule below would name the
//     client part: the measurement, not the deployment, is what was
//     measured, and the proposals fix the measurement (fewer streams per
//     client, a larger --time-scale, the load generator on another host);
//   - decode when p99 TPOT misses its SLO at a valid level;
//   - otherwise each part is read on the level's tail: the requests whose
//     TTFT is in the top TailFraction (10%). The tail mean of a part is
//     its mean over those requests; tail means add up to the tail's mean
//     TTFT, so a part's growth is its exact share of the tail's growth,
//     and the tail is what a p99 SLO is about. (The p99-rank request alone
//     is, with 40-72 requests a level, the maximum: one outlier decided.)
//     Every interval is a seeded percentile bootstrap at Confidence (90%),
//     Resamples (1000) draws of requests with replacement within a level;
//     one input always gives one output;
//   - when the tail's TTFT interval lies above the SLO already at the
//     lowest valid level, the part with the largest tail mean there;
//   - else the part whose tail-mean growth from the lowest to the highest
//     valid level is largest among those whose growth interval lies above
//     GrowthFraction (10%) of the lowest level's tail TTFT and above
//     MaterialFraction (5%) of the TTFT SLO: a move that is immaterial
//     against the SLO names nothing, however quiet the lowest level;
//   - else a part that dominates the TTFT budget: a mean per-request share
//     of TTFT over DominantShare (50%) at every valid level (one request
//     moves it by at most 1/n) with a tail mean over MaterialFraction of
//     the TTFT SLO, or a tail-mean interval above
//     SLOBudgetFraction (50%) of the TTFT SLO at every valid level;
//   - else none.
//
// A freeze — a span of StallTPOTs (10) TPOT SLOs or more in which no
// request of a level (one run) got a chunk while one was mid-stream — is
// one event, and the requests in flight across it an outlier set. When
// there is one and the rule named a part, the rule is read again without
// them (the level's p99 TPOT recomputed): when it then names nothing the
// verdict is stall, else that verdict, the freeze noted.
//
// When the runner-up's interval overlaps the named part's, the diagnosis
// says so (Uncertain; Label reads "X (uncertain: Y within the interval)");
// Bottleneck stays the bare part name, which the optimizer matches.
// Diagnosis.Confidence is the verdict's own: the share of the bootstrap
// resamples in which the rule names the same part (IntervalLevel is the
// intervals' 90%). The proposals follow the configuration where it is
// known (SummarizeKnobs): a queue on an engine that streamed max-num-seqs
// requests at once proposes raising it.
//
// The emulator's ground-truth trace is never an input to attribution; it is
// what attribution is tested against (Compare).
//
// diagnose launches nothing.
package diagnose
