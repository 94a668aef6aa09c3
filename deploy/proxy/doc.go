// Package proxy is hone's OpenAI-compatible front door: every request to a
// deployment, colocated or disaggregated, passes through it, so every config
// is measured through the same path and every request has a timeline.
//
// Colocated replicas are chosen by session affinity (rendezvous hashing of a
// session header or of the prompt's leading tokens, so a session keeps its
// prefix cache) or round-robin. Disaggregated requests follow vLLM's NIXL
// proxy protocol: a prefill leg (stream false, max_tokens 1, min_tokens and
// stream_options removed, kv_transfer_params with do_remote_decode), then a
// decode leg carrying the returned kv_transfer_params under the same
// X-Request-Id, its stream passed through unchanged and flushed as it comes.
//
// Failure handling: every leg has a timeout; a failed prefill (or one that
// returns no kv_transfer_params) is retried once on another prefill worker,
// then falls back to decode-side prefill; a failed decode is a clean error.
// Each request ends as exactly one of success, fallback, failed or timeout,
// counted in hone_proxy_requests_total and kept in a timeline (wall and
// CLOCK_MONOTONIC nanoseconds) served at GET /hone/timeline. The outcome is
// what the client saw: a stream whose [DONE] was written to the client is
// answered, however late the client's close and the worker's end are
// noticed; one that carried an error event failed; a client gone before
// [DONE] failed ("client went away").
//
// POST /reset_prefix_cache goes to every worker of every pool, so a load
// level can start with the whole deployment's prefix cache cold; other
// routes the proxy does not serve go to one worker.
//
// Limits (package guard, Config's max_body_bytes and siblings, the flags of
// `hone proxy`): request bodies of at most 32 MiB (413 above, naming the
// limit), received within 30 s of their headers (408 and the connection
// closed after), at most 1 GiB of them held at once, the two copies a
// disaggregated request's legs send counted with its body (a request waits
// for room until its body deadline, then 503, its body read and discarded
// first so that the client sees the answer); headers of 64 KiB within 10 s;
// keep-alive connections closed after 60 s idle; at most MaxConnections
// clients at once (half of RLIMIT_NOFILE less 512, at most 16384), the rest
// waiting to be accepted; at most MaxTimelinePage (10,000) timelines a
// page of GET /hone/timeline. The timeline store keeps the newest
// timeline_capacity (200,000) timelines in at most timeline_bytes (256 MiB),
// each string in them (the client's X-Request-Id, errors) cut to
// MaxTimelineValue (256) bytes and marked "…(truncated N bytes)".
//
// Run (cli.go) is `hone proxy`: it states the config from a --config file,
// a --spec's plan or the worker flags, the flags given over the file's
// settings, and serves until its context ends.
//
// The proxy does not launch engines (package deploy does) nor judge configs.
package proxy
