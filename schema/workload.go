package schema

// WorkloadRecord is the workload's recipe and fingerprint: enough to
// regenerate every prompt and to prove two records used identical inputs.
type WorkloadRecord struct {
	Workload
	// Kind is WorkloadTrace for a trace replay (hone replay --trace),
	// whose requests Trace describes; "" for the seed workload.
	Kind  string     `json:"kind,omitempty"`
	Trace *TraceInfo `json:"trace,omitempty"`
	QPS   []float64  `json:"qps" jsonschema:"minItems=0,exclusiveMinimum=0"`
	// Load is how requests after the warm-ups are sent: LoadOpen (at the
	// schedule's arrival times, one level per rate in QPS; "" in records
	// from before closed loops) or LoadClosed (Concurrency clients, each
	// sending its next request when its last one ends; one level per
	// entry of Concurrency).
	Load          string          `json:"load,omitempty"`
	Concurrency   []int           `json:"concurrency,omitempty" jsonschema:"minItems=1,minimum=1"`
	Runs          int             `json:"runs" jsonschema:"minimum=1"`
	Generator     string          `json:"generator"`
	Sessions      []SessionPrefix `json:"sessions"`
	SuffixVocab   int             `json:"suffix_vocab_size" jsonschema:"minimum=0"`
	SuffixRecipe  string          `json:"suffix_recipe"`
	PrewarmPolicy string          `json:"prewarm"`
}

// WorkloadTrace is the kind of a trace replay's workload
// (WorkloadRecord.Kind).
const WorkloadTrace = "trace"

// Load modes of a record's workload (WorkloadRecord.Load).
const (
	LoadOpen   = "open"
	LoadClosed = "closed"
)

// LoadMode is the record's load mode, LoadOpen for records from before
// closed loops.
func (w WorkloadRecord) LoadMode() string {
	if w.Load == "" {
		return LoadOpen
	}
	return w.Load
}

// Workload is the token-level workload: the seed schedule (replay.Generate) at
// each offered rate, with real token ids. Eight sessions each get a distinct,
// deterministic code prefix cut to exactly InputTokens-UncachedTokens
// tokens; every request appends its own UncachedTokens ids drawn from Seed.
type Workload struct {
	Seed           uint64 `json:"seed" jsonschema:"minimum=0"`
	Requests       int    `json:"requests" jsonschema:"minimum=1"`
	InputTokens    int    `json:"input_tokens" jsonschema:"minimum=1"`
	UncachedTokens int    `json:"uncached_tokens" jsonschema:"minimum=1"`
	OutputTokens   int    `json:"output_tokens" jsonschema:"minimum=1"`
	// LengthRatio, in (0, 1), draws each measured request's input and
	// output lengths uniformly from [LengthRatio × L, L] (vllm bench serve's
	// random-range-ratio as the InferenceX runs use it), from Seed and the
	// request id; 0 (or 1): every request is InputTokens and OutputTokens
	// long.
	LengthRatio float64 `json:"length_ratio,omitempty" jsonschema:"minimum=0,maximum=1"`
}

// CachedTokens is the length of every session prefix.
func (w Workload) CachedTokens() int { return w.InputTokens - w.UncachedTokens }

// SessionPrefix is one session's prefix and how it was made.
type SessionPrefix struct {
	Session      int    `json:"session" jsonschema:"minimum=0,maximum=7"`
	TextBytes    int    `json:"text_bytes" jsonschema:"minimum=0"`
	TextSHA256   string `json:"text_sha256" jsonschema:"pattern=^[0-9a-f]{64}$"`
	TextTokens   int    `json:"text_tokens" jsonschema:"minimum=0"`                // what /tokenize returned for the whole text
	PrefixSHA256 string `json:"prefix_sha256" jsonschema:"pattern=^[0-9a-f]{64}$"` // of the ids kept (CachedTokens of them)
}

// Trace formats (TraceInfo.Format).
const (
	TraceMooncake = "mooncake"    // JSON lines: timestamp (ms), input_length, output_length, hash_ids
	TraceRecord   = "hone-record" // a hone run record, its requests replayed as a trace
)

// TraceInfo is what a record keeps of the trace it replayed: its
// fingerprint, its shape, and the prefix-cache hit rate its structure
// implies beside the one measured.
type TraceInfo struct {
	Format string `json:"format"`                                     // TraceMooncake or TraceRecord
	SHA256 string `json:"sha256" jsonschema:"pattern=^[0-9a-f]{64}$"` // of the file as given (compressed or not)
	// Requests, InputTokens, OutputTokens: the trace's totals.
	Requests     int   `json:"requests" jsonschema:"minimum=1"`
	InputTokens  int64 `json:"input_tokens" jsonschema:"minimum=1"`
	OutputTokens int64 `json:"output_tokens" jsonschema:"minimum=1"`
	// FirstMs and LastMs are the first and last timestamps, trace time.
	FirstMs float64 `json:"first_ms" jsonschema:"minimum=0"`
	LastMs  float64 `json:"last_ms" jsonschema:"minimum=0"`
	// Speed divides the trace's time: request i is sent at
	// (timestamp_i - first) / speed model ms after the start.
	Speed float64 `json:"speed" jsonschema:"exclusiveMinimum=0"`
	// BlockSize is the trace's: one hash id per BlockSize prompt tokens.
	BlockSize int `json:"block_size" jsonschema:"minimum=1"`
	// EngineBlockSize is the serving engine's KV block size, which the
	// implied hit rate is computed with.
	EngineBlockSize int `json:"engine_block_size" jsonschema:"minimum=1"`
	// ImpliedHitRate is ImpliedHitRule applied to the trace: implied
	// cached tokens / input tokens.
	ImpliedHitRate      float64 `json:"implied_hit_rate" jsonschema:"minimum=0,maximum=1"`
	ImpliedCachedTokens int64   `json:"implied_cached_tokens" jsonschema:"minimum=0"`
	ImpliedHitRule      string  `json:"implied_hit_rule"`
	// MeasuredHitRate is what the engine reported over every request:
	// summed cached_tokens / prompt_tokens where every request answered
	// with them, else the /metrics counters' delta over the replay;
	// MeasuredFrom says which. nil when the engine reported neither.
	MeasuredHitRate *float64 `json:"measured_hit_rate" jsonschema:"minimum=0,maximum=1"`
	MeasuredFrom    string   `json:"measured_from,omitempty"`
	// Vocab is how many distinct token ids prompts are drawn from
	// (TraceTokens); FirstTokenReuses counts blocks whose first token an
	// earlier sibling already began with (a chain with more distinct
	// successors than the first-token ids, 0 to the vocabulary's largest
	// id), each sharing one token more than its hash ids say. 0 on every
	// trace whose chains have fewer successors.
	Vocab            int    `json:"vocab_size" jsonschema:"minimum=0"`
	FirstTokenReuses int    `json:"first_token_reuses" jsonschema:"minimum=0"`
	TokenRecipe      string `json:"token_recipe"`
}

// Sessions is the number of distinct session prefixes of the seed
// workload (session = id % Sessions); its first Sessions requests are the
// warm-ups.
const Sessions = 8
