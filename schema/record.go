package schema

import (
	"encoding/json"
	"time"

	"github.com/hone-llm/hone/slo"
)

// SchemaVersion is the version of the run record layout that WriteRecord
// writes. Version 3 packs each request's chunks (ChunksEncoding) instead of
// version 2's arrays, and nothing else changed: ReadRecord reads versions
// OldestSchemaVersion to SchemaVersion and rejects any other instead of
// guessing at its fields.
const SchemaVersion = 3

// OldestSchemaVersion is the oldest record version ReadRecord reads.
const OldestSchemaVersion = 2

// Build identifies the hone binary that made a record.
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// Model identifies the weights served, as the deployment knows them.
type Model struct {
	ID          string            `json:"id" jsonschema:"minLength=1"`
	Revision    string            `json:"revision,omitempty"`
	Precision   string            `json:"precision,omitempty"`
	FilesSHA256 map[string]string `json:"files_sha256,omitempty"`
}

// CacheState records the cold-start procedure. Records made with
// different procedures are not compared by the gate.
type CacheState struct {
	Procedure string `json:"procedure"`
	Detail    string `json:"detail"`
	// Nonce (fresh prefixes only) is the replay's random perturbation of
	// the prefix seeds: level seeds are LevelPrefixSeed(seed ^ nonce, run,
	// qps), so a second replay never meets the first one's prefixes.
	Nonce uint64 `json:"nonce,omitempty" jsonschema:"minimum=0"`
}

// Validation sums up output checks over the whole record.
type Validation struct {
	Valid   int            `json:"valid" jsonschema:"minimum=0"`
	Invalid int            `json:"invalid" jsonschema:"minimum=0"`
	Reasons map[string]int `json:"reasons"` // invalid requests by first reason
}

// Record is one replay: every request of every level of every run, with
// the summaries the gate, diagnose and the optimizer read.
type Record struct {
	SchemaVersion int    `json:"schema_version"`
	Kind          Kind   `json:"kind"`
	Backend       string `json:"backend"`
	// Incomplete is true when the run stopped early (interrupted, or a
	// setup step failed); Error says why.
	Incomplete bool   `json:"incomplete"`
	Error      string `json:"error,omitempty"`

	Hone     Build          `json:"hone"`
	Engine   EngineInfo     `json:"engine"`
	Model    Model          `json:"model"`
	Config   Config         `json:"config"`
	Hardware map[string]any `json:"hardware"`
	GPUs     int            `json:"gpus" jsonschema:"minimum=0"`

	// TimeScale is the engine's time scale: the schedule ran S times
	// faster and every _ms figure is real time / S (model time).
	TimeScale        float64        `json:"time_scale" jsonschema:"exclusiveMinimum=0"`
	RequestTimeoutMs float64        `json:"request_timeout_ms" jsonschema:"exclusiveMinimum=0"`
	SLO              slo.SLO        `json:"slo"`
	Workload         WorkloadRecord `json:"workload"`

	// Clock pairs the wall and CLOCK_MONOTONIC clocks at the start.
	Clock      Stamp     `json:"clock"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`

	// Cache is how every level was brought to the prescribed cold state.
	Cache CacheState `json:"cache"`
	// RequestIDNonce is this replay's own part of every request id
	// (hone-<nonce>-<run>-<qps>-<id>), so that no two replays send the same id.
	RequestIDNonce string `json:"request_id_nonce"`
	// CachedTokensRule says how requests' cached_tokens were read
	// (CachedTokensAsReported or CachedTokensZeroWhenAbsent).
	CachedTokensRule string `json:"cached_tokens_rule"`

	Runs       []RunRecord    `json:"runs"`
	Outcomes   map[string]int `json:"outcomes"` // every request sent, by outcome
	Validation Validation     `json:"validation"`
	// Verdict is valid when every level of every run is; VerdictRule
	// states the thresholds.
	Verdict     Verdict `json:"verdict"`
	VerdictRule string  `json:"verdict_rule"`
	// Attribution is diagnose's per-request attribution, when it ran.
	Attribution json.RawMessage `json:"attribution,omitempty"`
	// Shard is set in a sharded replay's records: a shard's own (hone
	// replay --shard) and the one merged from them (MergeShards). Absent
	// in a single process's record.
	Shard *ShardInfo `json:"shard,omitempty"`
	// ChunksDropped is true in a record whose requests' chunks were
	// dropped after the measurement (DropChunks: a fixture kept in the
	// repository); every other figure is as measured. Such a record has
	// no inter-token latencies.
	ChunksDropped bool `json:"chunks_dropped,omitempty"`
}

// DropChunks drops every request's chunks (its token timings and ids,
// most of a record's bytes) and marks the record so. The per-request
// figures derived from them (ttft_ms, tpot_ms, output_tokens,
// output_sha256), the levels' summaries and the verdicts stay as they
// were measured, so a record that keeps only what the optimizer and
// calibration read is a quarter the size.
func (r *Record) DropChunks() {
	for ri := range r.Runs {
		for li := range r.Runs[ri].Levels {
			for qi := range r.Runs[ri].Levels[li].Requests {
				r.Runs[ri].Levels[li].Requests[qi].Chunks = Chunks{}
			}
		}
	}
	r.ChunksDropped = true
}

// RunRecord is one pass over all levels; --runs repeats it so the gate has
// per-run values.
type RunRecord struct {
	Run       int     `json:"run" jsonschema:"minimum=0"`
	Objective float64 `json:"objective" jsonschema:"minimum=0"`
	// GPUSecondsPerRequest is the cost at the objective's level; nil when
	// no level passed.
	GPUSecondsPerRequest *float64      `json:"gpu_seconds_per_request"`
	Levels               []LevelRecord `json:"levels"`
	// Verdict is valid when every level is; the objective reads valid
	// levels only.
	Verdict Verdict `json:"verdict"`
}

// LevelRecord is one load level: its summary and every request.
type LevelRecord struct {
	// Level holds the exercise's fields: offered_qps, p99_ttft_ms,
	// p99_tpot_ms, effective_qps and passed. Percentiles are nearest rank
	// over the measured requests (ids >= 8) that completed (with fewer
	// than 100 of them, p99 is the largest or second largest), TPOT's over
	// those of two or more output tokens (0 when none: not measured); TTFT
	// runs from the scheduled send. passed also requires that every measured
	// request completed with a valid output and that the level ran to the
	// end.
	slo.Level
	// Verdict says whether these figures may decide anything.
	Verdict   Verdict `json:"verdict"`
	P50TTFTMs float64 `json:"p50_ttft_ms" jsonschema:"minimum=0"`
	P90TTFTMs float64 `json:"p90_ttft_ms" jsonschema:"minimum=0"`
	P50TPOTMs float64 `json:"p50_tpot_ms" jsonschema:"minimum=0"`
	P90TPOTMs float64 `json:"p90_tpot_ms" jsonschema:"minimum=0"`
	SLOMet    bool    `json:"slo_met"` // the percentiles alone meet the SLO
	// NotSteady: the effective rate fell more than SteadyTolerance short of
	// the offered rate while the SLO was met. The level was too short to
	// reach steady state (its window ends with the last requests' decode),
	// so its effective rate is a burst figure, not a saturation point (hone
	// replay --capacity measures at steady state).
	NotSteady bool `json:"not_steady,omitempty"`
	// Goodput counts the measured requests that met the per-request limits
	// (the SLO's goodput limits, else its TTFT and TPOT limits per
	// request); nil when no request was measured.
	Goodput *Goodput `json:"goodput,omitempty"`

	Complete  bool           `json:"complete"`
	Planned   int            `json:"requests_planned" jsonschema:"minimum=0"`
	Sent      int            `json:"requests_sent" jsonschema:"minimum=0"`
	Measured  int            `json:"measured_ok" jsonschema:"minimum=0"` // measured requests with outcome ok
	Outcomes  map[string]int `json:"outcomes"`                           // all sent requests
	Failures  map[string]int `json:"measured_failures"`
	Invalid   int            `json:"invalid" jsonschema:"minimum=0"`
	StartedAt Stamp          `json:"started_at"`

	// WindowSeconds runs from request 8's scheduled arrival to the last
	// measured completion (model time); cost = gpus x window / measured.
	WindowSeconds        float64  `json:"window_seconds"`
	GPUSecondsPerRequest *float64 `json:"gpu_seconds_per_request"`

	// Prefix-cache hit rates: from /metrics deltas over the whole level
	// and over the measurement phase (from the scrape after the warm-up
	// requests finished), and from summed cached_tokens / prompt_tokens of
	// the measured requests. nil where the engine did not report.
	HitRateMetrics        *float64 `json:"hit_rate_metrics"`
	HitRateMetricsMeasure *float64 `json:"hit_rate_metrics_measure"`
	WarmupOverlap         bool     `json:"warmup_overlap"` // warm-ups ran into the measurement phase
	HitRateCachedTokens   *float64 `json:"hit_rate_cached_tokens"`
	// WarmupHitRate is the warm-up requests' (ids 0-7) hit rate: near 0 on
	// the cold engine every level must start with. From their
	// cached_tokens, else from /metrics when the warm-ups did not overlap
	// the measurement phase; nil when neither was reported.
	WarmupHitRate *float64 `json:"warmup_hit_rate"`
	// PrefixSeed is the seed of this level's session prefixes: the
	// workload's seed when the engine's cache was reset before the level,
	// a fresh one per level otherwise (CacheState says which).
	PrefixSeed uint64 `json:"prefix_seed" jsonschema:"minimum=0"`
	// CachePromiseMet checks the workload's promise (measurement-phase hit
	// rate > 90%) on what was measured: metrics when present, else
	// cached_tokens; nil when neither was reported.
	CachePromiseMet *bool `json:"cache_promise_met"`

	DispatchLagP50Ms float64 `json:"dispatch_lag_p50_ms"`
	DispatchLagP99Ms float64 `json:"dispatch_lag_p99_ms"`
	DispatchLagMaxMs float64 `json:"dispatch_lag_max_ms"`

	// EngineMetricsKeys records the level's attribution sources: per key
	// of the engine's per-request "metrics" object, the measured requests
	// (of measured_ok) whose answer carried it (see engineMetricsKeys).
	EngineMetricsKeys map[string]int `json:"engine_metrics_keys,omitempty"`

	// PromptsSHA256 hashes every request's prompt hash in id order: equal
	// values mean identical inputs.
	PromptsSHA256 string          `json:"prompts_sha256" jsonschema:"pattern=^[0-9a-f]{64}$"`
	Counters      LevelCounters   `json:"counters"`
	Requests      []RequestRecord `json:"requests"`
}

// LevelCounters are the engine's /metrics counters around a level.
type LevelCounters struct {
	Before Counters `json:"before"`
	Warmup Counters `json:"warmup"` // after the warm-up requests finished
	After  Counters `json:"after"`
}

// Warmups is how many of every level's first requests (by id) are
// warm-ups, which no figure counts: Sessions for the seed workload, 0
// for a trace (every request is measured).
func (r *Record) Warmups() int {
	if r.Workload.Kind == WorkloadTrace {
		return 0
	}
	return Sessions
}

// Cache procedures: how every level is brought to a cold prefix cache
// before its warm-ups.
const (
	// CacheReset: POST /reset_prefix_cache to the endpoint before every
	// level (hone's emulator and proxy serve it; vLLM with
	// VLLM_SERVER_DEV_MODE=1).
	CacheReset = "reset_prefix_cache"
	// CacheFreshPrefixes: every level gets session prefixes from a fresh
	// seed (same lengths, recorded per level), so nothing an earlier
	// level or an earlier replay cached can hit.
	CacheFreshPrefixes = "fresh_prefixes"
)

// Outcomes of one request. Every request ends in exactly one; failed ones
// are counted and kept in the record, never dropped.
const (
	OutcomeOK           = "ok"            // a complete stream ending in [DONE]
	OutcomeHTTPError    = "http_error"    // a non-200 status, or an error event in the stream
	OutcomeConnectError = "connect_error" // no HTTP response: refused, reset, DNS
	OutcomeStreamCut    = "stream_cut"    // the stream ended before [DONE]
	OutcomeMalformed    = "malformed"     // not an event stream, or an event that is not a chunk
	OutcomeTimeout      = "timeout"       // the per-request timeout ran out
	OutcomeCanceled     = "canceled"      // the run was interrupted while it was in flight
)

// Outcomes lists every request outcome, OutcomeOK first.
func Outcomes() []string {
	return []string{OutcomeOK, OutcomeHTTPError, OutcomeConnectError, OutcomeStreamCut, OutcomeMalformed, OutcomeTimeout, OutcomeCanceled}
}

// RequestRecord is everything measured about one request. Durations (_ms)
// are model time: real time divided by the run's time scale, measured from
// the start of the level. Stamps are raw clock readings, never scaled.
type RequestRecord struct {
	ID            int     `json:"id" jsonschema:"minimum=0"`
	Session       int     `json:"session" jsonschema:"minimum=0,maximum=7"`
	RequestID     string  `json:"request_id"` // sent as X-Request-Id
	InputTokens   int     `json:"input_tokens" jsonschema:"minimum=1"`
	PromptSHA256  string  `json:"prompt_sha256" jsonschema:"pattern=^[0-9a-f]{64}$"`
	Outcome       string  `json:"outcome"`
	Error         string  `json:"error,omitempty"`
	Status        int     `json:"status,omitempty" jsonschema:"minimum=100,maximum=599"` // HTTP status, 0 when none came
	ScheduledMs   float64 `json:"scheduled_ms" jsonschema:"minimum=0"`
	SentMs        float64 `json:"sent_ms"`
	DispatchLagMs float64 `json:"dispatch_lag_ms"`
	Scheduled     Stamp   `json:"scheduled"`
	Sent          Stamp   `json:"sent"`
	// FirstMs and FinishMs are the arrivals of the first and last chunk
	// that carried output; TTFT is from the scheduled send (an open loop's
	// latency includes the client's own lateness; the verdict flags a
	// level whose lateness matters), TTFTFromSent from the actual send;
	// TPOT is (finish-first)/(output_tokens-1).
	FirstMs        *float64        `json:"first_ms"`
	FinishMs       *float64        `json:"finish_ms"`
	TTFTMs         *float64        `json:"ttft_ms"`
	TTFTFromSentMs *float64        `json:"ttft_from_sent_ms"`
	TPOTMs         *float64        `json:"tpot_ms"`
	OutputTokens   int             `json:"output_tokens" jsonschema:"minimum=0"`
	OutputSHA256   string          `json:"output_sha256,omitempty" jsonschema:"pattern=^[0-9a-f]{64}$"`
	FinishReason   string          `json:"finish_reason,omitempty"`
	PromptTokens   *int            `json:"prompt_tokens" jsonschema:"minimum=0"` // usage.prompt_tokens
	CachedTokens   *int            `json:"cached_tokens" jsonschema:"minimum=0"` // usage.prompt_tokens_details.cached_tokens
	EngineMetrics  json.RawMessage `json:"engine_metrics,omitempty"`
	Valid          bool            `json:"valid"`
	Invalid        string          `json:"invalid,omitempty"` // "<check>: <detail>" when not valid
	Chunks         Chunks          `json:"chunks"`
}

// Goodput is a level's requests that met every per-request limit
// (slo.PerRequest): the fraction of its measured requests (failed ones
// count, as not met) and the rate, good requests over the level's window
// (the effective rate's denominator). TTFT runs from the scheduled send,
// as the record's; E2E from the scheduled send to the last token.
type Goodput struct {
	Limits   slo.PerRequest `json:"limits"`
	Good     int            `json:"good" jsonschema:"minimum=0"`
	Measured int            `json:"measured" jsonschema:"minimum=1"`
	Fraction float64        `json:"fraction" jsonschema:"minimum=0,maximum=1"`
	QPS      float64        `json:"qps" jsonschema:"minimum=0"`
}

// ShardInfo places a record in a sharded replay (hone replay --shard): a
// shard's record has Index; a merged record (MergeShards) has none and
// lists its shards in Merged.
type ShardInfo struct {
	Index         *int    `json:"index,omitempty" jsonschema:"minimum=0"`
	Count         int     `json:"count" jsonschema:"minimum=1"`
	StartAtUnixNs int64   `json:"start_at_unix_ns"`
	LevelGapMs    float64 `json:"level_gap_ms" jsonschema:"minimum=0"` // model time
	SetupMs       float64 `json:"setup_ms" jsonschema:"minimum=0"`     // real time
	Assignment    string  `json:"assignment"`
	// Merged describes each shard of a merged record. Its requests' mono_ns
	// stamps are on their shard's host clock, paired with the wall clock
	// by that shard's Clock; the record's own Clock is shard 0's.
	Merged []ShardPart `json:"merged,omitempty"`
}

// ShardPart is one shard of a merged record.
type ShardPart struct {
	Index      int            `json:"index" jsonschema:"minimum=0"`
	Clock      Stamp          `json:"clock"`
	StartedAt  time.Time      `json:"started_at"`
	FinishedAt time.Time      `json:"finished_at"`
	Incomplete bool           `json:"incomplete"`
	Error      string         `json:"error,omitempty"`
	Hardware   map[string]any `json:"hardware,omitempty"`
}
