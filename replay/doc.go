// Package replay owns the workload hone replays, the client that replays it
// against a live endpoint, the run records it writes, and the arithmetic
// that turns per-request timings into the figures every backend reports.
//
// It holds the seed workload's exact request schedule (Generate) and turns a
// level's per-request timings into its figures (SummarizeLevel: p99s over
// the measured requests, effective QPS); what an SLO is, the objective and
// the nearest-rank percentile itself live in package slo, the record's
// types (schema.Record and what it holds) in package schema. It knows
// nothing about deployments or eBPF, and of engines only what package
// engine's registry says (GET /version recognition, /metrics counter
// names): the simulator, the emulator and real vLLM all feed it the same
// per-request timings.
//
// The live path (Run) turns that schedule into real tokens: eight code
// prefixes generated from a seed and tokenized once through the engine's
// /tokenize, per-request suffixes drawn from the seed, streamed
// /v1/completions requests sent open loop at each level, and a Record that
// keeps every request's send and chunk times on the wall and
// CLOCK_MONOTONIC clocks, its outcome and output hash, and per-level,
// per-run summaries. Records are versioned JSON (schema.Record; the JSON
// Schema generated from its types is schema/record.schema.json),
// written atomically (WriteRecord) and validated on read (ReadRecord), both
// streaming, a request at a time, so that a 100,000-request trace's record
// is written and read in bounded memory (MaxRecordBytes).
// Version 3 (SchemaVersion) packs each request's chunk times and token ids
// into one base64 string (ChunksEncoding: delta-coded varints, exact to the
// nanosecond: ~9 bytes a one-token chunk where version 2's arrays took
// ~42). Only the chunks changed, and ReadRecord still reads version 2,
// whose chunks are arrays, into the same Record. A record path ending in
// .gz is written gzipped (about 7.4 bytes per output token on the seed
// workload), and readers recognize gzip by its content whatever the name
// (ReadRecord; ReadRecordFile for the small documents beside records).
//
// vllm bench serve's results: VLLMBenchResults turns every level of a
// record into the JSON `vllm bench serve --save-result --save-detailed`
// writes (VLLMBenchSource names the vLLM commit its keys were read from):
// vllm's keys and units, the figures ServeStats and LevelGoodput compute,
// hone's own under "hone" (VLLMBenchRule says what differs from vllm's
// measurement).
//
// Time: with a time scale S (an engine emulator running S times faster),
// sends happen at arrival x S and every _ms figure in a record is real time
// / S, so records are always in model time. Clock stamps are never scaled.
//
// Kinds (schema.Kind): a record's kind is set when it is made and never
// relabelled. It is what the endpoint proves by its GET /version answer
// (an engine the registry recognises: vLLM's version is "device", the
// emulator's "emulated"; no answer or an unknown one is "unverified"); a
// caller may state "unverified" or the kind the evidence shows; any other
// stated kind stops the replay before its first request (resolveKind).
//
// Traces: RunTrace replays a request trace instead of the seed
// workload (OpenTrace: Mooncake's JSON lines, or a hone record's requests,
// RecordTrace), streamed as it is sent, one open-loop level at the
// trace's timestamps / speed, on a cold engine. Prompts are token-exact
// (TraceTokens): requests whose hash lists agree on their first k full
// blocks share exactly k blocks of tokens and nothing more, each block's
// first token unique among the blocks that follow the same chain. The
// record's workload (kind "trace", TraceInfo) keeps the trace's sha256,
// the hit rate its structure implies (ImpliedHitRule: an unbounded cache,
// the first occurrence of a block a miss, whole engine blocks) and the
// measured one. A trace has no warm-ups: every request is measured
// (Record.Warmups). A bad line is a TraceError naming it.
//
// Memory: a trace may hold 10^5 requests, so RunTrace packs every
// request's chunks in memory as the request ends (Chunks.Pack: the
// record's own encoding, ~6 bytes an output token where the columns took
// 48; Len and Columns read them), with Options.SpillDir (hone replay
// --trace: the directory of --out) moves them to an unlinked spill file
// there, so that a request costs a summary of ~0.8 kB in memory, and
// WriteRecord encodes a request at a time (EncodeRecord), reading its
// chunks back, instead of the whole record at once.
// BenchmarkTraceMemory measures what a replay holds per request.
//
// Shards: a rate one client host cannot hold is sent by several processes,
// each with Options.Shard (hone replay --shard i/N), which never talk to
// each other and agree through their options alone. Shard 0 sends the eight
// warm-ups, resets the prefix cache before every level and scrapes the
// engine's counters, so the engine sees the prewarm and cold start of a
// single process; measured request id i goes to shard i mod N (ShardOf:
// the client keeps no per-session state, so round robin spreads the load
// evenly where keeping sessions together would buy nothing). Every shard
// sends each of its requests at its global arrival time from the level's
// start instant, fixed in advance for all: the first level at StartAt,
// each later one after the previous one's span, LevelGap (model time, for
// its last requests to drain; shard 0 reads the counters at that drain
// deadline) and Setup (real time, for the reset and scrapes). Levels never
// shift: a shard ready after a level's start marks it client_bound, one
// with requests still in flight at its drain deadline marks it incomplete.
// The fresh-prefix and request-id nonces are derived from StartAt, so every
// shard sends the same prompts under the same ids. Each shard writes a full
// record with a shard field; MergeShards checks that the records belong
// together and combines them into the record one process would have
// written: requests unioned in id order, summaries and verdicts recomputed
// by the same code, shard 0's counters, and every shard's verdict reasons.
// A shard's own record leaves the checks that need every shard's requests
// (counter_contamination's query count, emulator_bound) to the merge.
//
// The command: Command is hone replay and Merge is hone replay merge
// (cli.go; CommandOptions and MergeOptions name their flags). cmd/hone
// checks the flags and calls one of them. Command resolves the model,
// states the replay, runs it, writes the record and prints its summary (a
// table, JSON or vllm bench serve's results); Merge writes and prints the
// merged record the same way; the verdict is the error (internal/usage's
// kinds). What lives in packages that import this one
// comes in as functions: diagnose's client-bound rule (Judge), the host's
// hardware (Hardware) and hone replay --capacity's search
// (capacity.ReplaySearch, as Capacity).
package replay
