package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/hone-llm/hone/internal/atomicfile"
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

// Kinds of live records. A record's kind is set when it is made and never
// changed: emulated and device numbers stay in separate columns everywhere.
const (
	KindEmulated = "emulated" // hone's engine emulator (hone sim serve)
	KindDevice   = "device"   // real vLLM on GPUs: the endpoint answered GET /version as vLLM does
	// KindUnverified: the endpoint gave no evidence of what it is (no
	// GET /version, or an answer that is neither vLLM's nor the
	// emulator's). Reports never show such numbers as device numbers.
	KindUnverified = "unverified"
	// KindPredicted: nothing was measured. The emulator's engine ran in
	// virtual time (package predict) with a cost profile: a prediction,
	// to be compared with measurements, never mixed with them.
	KindPredicted = "predicted"
)

// Build identifies the hone binary that made a record.
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// Model identifies the weights served, as the deployment knows them.
type Model struct {
	ID          string            `json:"id"`
	Revision    string            `json:"revision,omitempty"`
	Precision   string            `json:"precision,omitempty"`
	FilesSHA256 map[string]string `json:"files_sha256,omitempty"`
}

// WorkloadRecord is the workload's recipe and fingerprint: enough to
// regenerate every prompt and to prove two records used identical inputs.
type WorkloadRecord struct {
	Workload
	// Kind is WorkloadTrace for a trace replay (hone replay --trace),
	// whose requests Trace describes; "" for the brief's workload.
	Kind  string     `json:"kind,omitempty"`
	Trace *TraceInfo `json:"trace,omitempty"`
	QPS   []float64  `json:"qps"`
	// Load is how requests after the warm-ups are sent: LoadOpen (at the
	// schedule's arrival times, one level per rate in QPS; "" in records
	// from before closed loops) or LoadClosed (Concurrency clients, each
	// sending its next request when its last one ends; one level per
	// entry of Concurrency).
	Load          string          `json:"load,omitempty"`
	Concurrency   []int           `json:"concurrency,omitempty"`
	Runs          int             `json:"runs"`
	Generator     string          `json:"generator"`
	Sessions      []SessionPrefix `json:"sessions"`
	SuffixVocab   int             `json:"suffix_vocab_size"`
	SuffixRecipe  string          `json:"suffix_recipe"`
	PrewarmPolicy string          `json:"prewarm"`
}

// Warmups is how many of every level's first requests (by id) are
// warm-ups, which no figure counts: Sessions for the brief's workload, 0
// for a trace (every request is measured).
func (r *Record) Warmups() int {
	if r.Workload.Kind == WorkloadTrace {
		return 0
	}
	return Sessions
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

// CacheState records the cold-start procedure. Records made with
// different procedures are not compared by the gate.
type CacheState struct {
	Procedure string `json:"procedure"`
	Detail    string `json:"detail"`
	// Nonce (fresh prefixes only) is the replay's random perturbation of
	// the prefix seeds: level seeds are LevelPrefixSeed(seed ^ nonce, run,
	// qps), so a second replay never meets the first one's prefixes.
	Nonce uint64 `json:"nonce,omitempty"`
}

// Validation sums up output checks over the whole record.
type Validation struct {
	Valid   int            `json:"valid"`
	Invalid int            `json:"invalid"`
	Reasons map[string]int `json:"reasons"` // invalid requests by first reason
}

// Record is one replay: every request of every level of every run, with
// the summaries the gate, diagnose and the optimizer read.
type Record struct {
	SchemaVersion int    `json:"schema_version"`
	Kind          string `json:"kind"`
	Backend       string `json:"backend"`
	// Incomplete is true when the run stopped early (interrupted, or a
	// setup step failed); Error says why.
	Incomplete bool   `json:"incomplete"`
	Error      string `json:"error,omitempty"`

	Hone     Build          `json:"hone"`
	Engine   EngineInfo     `json:"engine"`
	Model    Model          `json:"model"`
	Config   map[string]any `json:"config"`
	Hardware map[string]any `json:"hardware"`
	GPUs     int            `json:"gpus"`

	// TimeScale is the engine's time scale: the schedule ran S times
	// faster and every _ms figure is real time / S (model time).
	TimeScale        float64        `json:"time_scale"`
	RequestTimeoutMs float64        `json:"request_timeout_ms"`
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
	Run       int     `json:"run"`
	Objective float64 `json:"objective"`
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
	P50TTFTMs float64 `json:"p50_ttft_ms"`
	P90TTFTMs float64 `json:"p90_ttft_ms"`
	P50TPOTMs float64 `json:"p50_tpot_ms"`
	P90TPOTMs float64 `json:"p90_tpot_ms"`
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
	Planned   int            `json:"requests_planned"`
	Sent      int            `json:"requests_sent"`
	Measured  int            `json:"measured_ok"` // measured requests with outcome ok
	Outcomes  map[string]int `json:"outcomes"`    // all sent requests
	Failures  map[string]int `json:"measured_failures"`
	Invalid   int            `json:"invalid"`
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
	PrefixSeed uint64 `json:"prefix_seed"`
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
	PromptsSHA256 string          `json:"prompts_sha256"`
	Counters      LevelCounters   `json:"counters"`
	Requests      []RequestRecord `json:"requests"`
}

// LevelCounters are the engine's /metrics counters around a level.
type LevelCounters struct {
	Before Counters `json:"before"`
	Warmup Counters `json:"warmup"` // after the warm-up requests finished
	After  Counters `json:"after"`
}

//go:embed schema/record.schema.json
var recordSchemaJSON []byte

// RecordSchema returns the JSON Schema (draft 2020-12) of run records.
func RecordSchema() []byte { return bytes.Clone(recordSchemaJSON) }

// recordSchemas are the record schema compiled: the whole record's, and
// one request's (ReadRecord checks each as it streams).
type recordSchemas struct{ record, request *jsonschema.Schema }

var compiledSchemas = sync.OnceValues(func() (recordSchemas, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(recordSchemaJSON))
	if err != nil {
		return recordSchemas{}, fmt.Errorf("compile record schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("record.schema.json", doc); err != nil {
		return recordSchemas{}, fmt.Errorf("compile record schema: %w", err)
	}
	var s recordSchemas
	if s.record, err = c.Compile("record.schema.json"); err != nil {
		return recordSchemas{}, fmt.Errorf("compile record schema: %w", err)
	}
	if s.request, err = c.Compile("record.schema.json#/$defs/request"); err != nil {
		return recordSchemas{}, fmt.Errorf("compile record schema: %w", err)
	}
	return s, nil
})

// ValidateRecord checks a record's JSON against the schema.
func ValidateRecord(data []byte) error {
	sch, err := compiledSchemas()
	if err != nil {
		return err
	}
	return validateJSON(sch.record, data)
}

// validateJSON checks data against sch.
func validateJSON(sch *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(inst)
}

// WriteRecord writes rec to path atomically: a temporary file in the same
// directory, fsynced, then renamed over path (and the directory fsynced),
// so a reader never sees half a record. It writes the current
// SchemaVersion whatever rec.SchemaVersion says (the in-memory form is the
// same for every readable version). A path ending in ".gz" is written
// gzipped; ReadRecord recognizes gzip by its content, whatever the name.
// The JSON is json.Marshal's, byte for byte, but encoded a request at a
// time (EncodeRecord), never whole in memory.
func WriteRecord(path string, rec *Record) error {
	// Compact: a full scan holds ~2,300 requests, and indenting would put
	// each number on its own line. Read it with jq (zcat first if .gz).
	gz := strings.HasSuffix(strings.ToLower(path), ".gz")
	err := atomicfile.WriteFunc(path, 0o644, func(w io.Writer) error {
		var zw *gzip.Writer
		if gz {
			var err error
			if zw, err = gzip.NewWriterLevel(w, gzip.BestCompression); err != nil {
				return err
			}
			w = zw
		}
		bw := bufio.NewWriterSize(w, 64<<10)
		if err := EncodeRecord(bw, rec); err != nil {
			return err
		}
		if err := bw.WriteByte('\n'); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if zw != nil {
			return zw.Close()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// EncodeRecord writes rec's JSON, at the current SchemaVersion, to w: the
// bytes json.Marshal would give, encoded a request at a time, so that a
// 100,000-request trace's record never sits in memory as JSON whole (it
// would take several hundred MB, and as much again while its buffer
// grows).
func EncodeRecord(w io.Writer, rec *Record) error {
	cp := *rec
	cp.SchemaVersion = SchemaVersion
	err := encodeAround(w, &cp.Runs, &cp, func(run *RunRecord) error {
		r := *run
		return encodeAround(w, &r.Levels, &r, func(level *LevelRecord) error {
			l := *level
			return encodeAround(w, &l.Requests, &l, func(q *RequestRecord) error {
				b, err := json.Marshal(q)
				if err != nil {
					return err
				}
				_, err = w.Write(b)
				return err
			})
		})
	})
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	return nil
}

// encodeAround writes v's JSON to w with the value of its slice field
// *field encoded element by element by each. The JSON around the field's
// value is found by encoding v with the field empty ([]) and nil (null):
// the two differ exactly there. The field is left as it was.
func encodeAround[T any](w io.Writer, field *[]T, v any, each func(*T) error) (err error) {
	elems := *field
	defer func() { *field = elems }()
	*field = []T{}
	a, err := json.Marshal(v)
	if err != nil {
		return err
	}
	*field = nil
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if !bytes.HasPrefix(a[i:], []byte("[]")) || !bytes.HasPrefix(b[i:], []byte("null")) || !bytes.Equal(a[i+2:], b[i+4:]) {
		return fmt.Errorf("encode %T: cannot find a slice field's value in %.80s", v, a)
	}
	if _, err := w.Write(a[:i]); err != nil {
		return err
	}
	if elems == nil {
		_, err = w.Write([]byte("null"))
	} else {
		_, err = w.Write([]byte("["))
		for k := range elems {
			if err == nil && k > 0 {
				_, err = w.Write([]byte(","))
			}
			if err == nil {
				err = each(&elems[k])
			}
		}
		if err == nil {
			_, err = w.Write([]byte("]"))
		}
	}
	if err != nil {
		return err
	}
	_, err = w.Write(a[i+2:])
	return err
}

// Agreement compares the outputs of two records request by request: among
// requests present in both (same run, offered rate and id) with the same
// prompt and a valid output in both, the fraction whose output ids are
// identical. Engines are not batch-invariant, so at temperature 0 this is
// a rate to report, not a pass/fail check. compared is 0 (and rate 0) when
// nothing was comparable.
func Agreement(a, b *Record) (rate float64, compared int) {
	type key struct {
		run int
		qps float64
		id  int
	}
	outs := map[key]*RequestRecord{}
	for _, r := range a.Runs {
		for _, l := range r.Levels {
			for i := range l.Requests {
				outs[key{r.Run, l.OfferedQPS, l.Requests[i].ID}] = &l.Requests[i]
			}
		}
	}
	same := 0
	for _, r := range b.Runs {
		for _, l := range r.Levels {
			for i := range l.Requests {
				y := &l.Requests[i]
				x := outs[key{r.Run, l.OfferedQPS, y.ID}]
				if x == nil || !x.Valid || !y.Valid || x.PromptSHA256 != y.PromptSHA256 || x.OutputSHA256 == "" {
					continue
				}
				compared++
				if x.OutputSHA256 == y.OutputSHA256 {
					same++
				}
			}
		}
	}
	if compared == 0 {
		return 0, 0
	}
	return float64(same) / float64(compared), compared
}
