package replay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/hone-llm/hone/schema"
)

// VLLMBenchSource is the vLLM source whose result layout VLLMBenchResult
// follows: benchmark() and main_async() in vllm/benchmarks/serve.py, the
// dict `vllm bench serve --save-result --save-detailed` writes.
const VLLMBenchSource = "vllm-project/vllm@009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 vllm/benchmarks/serve.py"

// VLLMBenchRule says how a record's level becomes a vllm bench serve
// result; every result carries it (VLLMBenchHone.Rule).
const VLLMBenchRule = "one result per level, pooled over the runs valid at the level (all runs when none is), as hone replay's table; " +
	"the measured requests only (warm-ups left out), failed ones included with zeros as vllm writes them; " +
	"times in model time (real / time_scale): per-request lists in seconds, summaries in ms; " +
	"ttfts and latencies from the scheduled send (hone's open-loop latency; vllm times from its own send, which start_times and queue_times give), " +
	"itls the gaps between output chunks; percentiles nearest rank (vllm interpolates), std the population's (np.std); " +
	"duration the measurement window (first measured arrival to last completion), summed over the runs pooled; " +
	"generated_texts are empty (hone keeps token ids, hashed in hone.output_sha256); " +
	"max_output_tokens_per_s counts output chunks per whole second from the first send, as vllm does, max over the runs"

// VLLMBenchResult is one load level in the layout `vllm bench serve
// --save-result --save-detailed` writes (VLLMBenchSource): the same keys
// and units (per-request lists in seconds, summaries in milliseconds), the
// summaries of ttft, tpot, itl and e2el as if run with --percentile-metrics
// ttft,tpot,itl,e2el --metric-percentiles 90,99. hone's own figures are
// under "hone". Where vllm's invocation would differ the fields say what
// vllm would have written for the same load: the seed workload's open loop sends
// at fixed intervals (request_rate its rate, burstiness "inf", as vllm
// writes an infinite rate); a closed loop is request_rate "inf" with
// max_concurrency its clients; a trace is self-timed (request_rate "inf",
// burstiness 1, vllm's defaults).
type VLLMBenchResult struct {
	Date           string  `json:"date"`
	EndpointType   string  `json:"endpoint_type"`
	Backend        string  `json:"backend"`
	Label          *string `json:"label"`
	ModelID        string  `json:"model_id"`
	TokenizerID    string  `json:"tokenizer_id"`
	NumPrompts     int     `json:"num_prompts"`
	RequestRate    any     `json:"request_rate"` // req/s, or "inf"
	Burstiness     any     `json:"burstiness"`   // 1, or "inf" for fixed intervals
	MaxConcurrency *int    `json:"max_concurrency"`

	Duration              float64     `json:"duration"`
	Completed             int         `json:"completed"`
	Failed                int         `json:"failed"`
	TotalInputTokens      int         `json:"total_input_tokens"`
	TotalOutputTokens     int         `json:"total_output_tokens"`
	RequestThroughput     float64     `json:"request_throughput"`
	RequestGoodput        *float64    `json:"request_goodput"`
	OutputThroughput      float64     `json:"output_throughput"`
	TotalTokenThroughput  float64     `json:"total_token_throughput"`
	InputLens             []int       `json:"input_lens"`
	OutputLens            []int       `json:"output_lens"`
	TTFTs                 []float64   `json:"ttfts"`
	ITLs                  [][]float64 `json:"itls"`
	Latencies             []float64   `json:"latencies"`
	StartTimes            []float64   `json:"start_times"`
	QueueTimes            []float64   `json:"queue_times"`
	GeneratedTexts        []string    `json:"generated_texts"`
	Errors                []string    `json:"errors"`
	MaxOutputTokensPerS   float64     `json:"max_output_tokens_per_s"`
	MaxConcurrentRequests int         `json:"max_concurrent_requests"`
	RTFx                  float64     `json:"rtfx"`

	MeanTTFTMs   float64 `json:"mean_ttft_ms"`
	MedianTTFTMs float64 `json:"median_ttft_ms"`
	StdTTFTMs    float64 `json:"std_ttft_ms"`
	P90TTFTMs    float64 `json:"p90_ttft_ms"`
	P99TTFTMs    float64 `json:"p99_ttft_ms"`
	MeanTPOTMs   float64 `json:"mean_tpot_ms"`
	MedianTPOTMs float64 `json:"median_tpot_ms"`
	StdTPOTMs    float64 `json:"std_tpot_ms"`
	P90TPOTMs    float64 `json:"p90_tpot_ms"`
	P99TPOTMs    float64 `json:"p99_tpot_ms"`
	MeanITLMs    float64 `json:"mean_itl_ms"`
	MedianITLMs  float64 `json:"median_itl_ms"`
	StdITLMs     float64 `json:"std_itl_ms"`
	P90ITLMs     float64 `json:"p90_itl_ms"`
	P99ITLMs     float64 `json:"p99_itl_ms"`
	MeanE2ELMs   float64 `json:"mean_e2el_ms"`
	MedianE2ELMs float64 `json:"median_e2el_ms"`
	StdE2ELMs    float64 `json:"std_e2el_ms"`
	P90E2ELMs    float64 `json:"p90_e2el_ms"`
	P99E2ELMs    float64 `json:"p99_e2el_ms"`

	Hone VLLMBenchHone `json:"hone"`
}

// VLLMBenchHone is what hone knows about a level beyond vllm's fields.
type VLLMBenchHone struct {
	Source      string          `json:"source"` // VLLMBenchSource
	Rule        string          `json:"rule"`   // VLLMBenchRule
	Kind        schema.Kind     `json:"kind"`
	Level       string          `json:"level"`
	OfferedQPS  float64         `json:"offered_qps"`
	Concurrency int             `json:"concurrency,omitempty"`
	Runs        int             `json:"runs"`
	Valid       bool            `json:"valid"` // every run pooled is valid at this level
	TimeScale   float64         `json:"time_scale"`
	Goodput     *schema.Goodput `json:"goodput"`
	// RequestIDs and OutputSHA256 run parallel to vllm's lists.
	RequestIDs   []string `json:"request_ids"`
	OutputSHA256 []string `json:"output_sha256"`
}

// VLLMBenchResults converts every level of rec (by the first run's
// levels, in order) into vllm bench serve's result layout; see
// VLLMBenchResult and VLLMBenchRule.
func VLLMBenchResults(rec *schema.Record) []VLLMBenchResult {
	if len(rec.Runs) == 0 {
		return []VLLMBenchResult{}
	}
	out := make([]VLLMBenchResult, len(rec.Runs[0].Levels))
	for i := range out {
		out[i] = vllmBenchLevel(rec, i)
	}
	return out
}

// WriteVLLMBench writes VLLMBenchResults(rec) as vllm bench serve
// --append-result writes its file: one compact JSON object per line, a
// level a line. A one-level record's output is exactly a --save-result
// file.
//
// The itls lists, most of a trace's result (tens of millions of numbers),
// are encoded a request at a time, never as one JSON text.
func WriteVLLMBench(w io.Writer, rec *schema.Record) error {
	for _, r := range VLLMBenchResults(rec) {
		err := encodeAround(w, &r.ITLs, &r, func(itl *[]float64) error {
			b, err := json.Marshal(*itl)
			if err == nil {
				_, err = w.Write(b)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("encode vllm bench result: %w", err)
		}
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return err
		}
	}
	return nil
}

func vllmBenchLevel(rec *schema.Record, i int) VLLMBenchResult {
	s := LevelServeStats(rec, i)
	scale := rec.TimeScale
	if !(scale > 0) {
		scale = 1
	}
	r := VLLMBenchResult{
		EndpointType: rec.Backend, Backend: rec.Backend, ModelID: rec.Model.ID, TokenizerID: rec.Model.ID,
		Duration: s.DurationS, Completed: s.Completed, Failed: s.Failed, RequestThroughput: s.RequestThroughput,
		OutputThroughput: s.OutputTokenThroughput, TotalTokenThroughput: s.TotalTokenThroughput,
		InputLens: []int{}, OutputLens: []int{}, TTFTs: []float64{}, ITLs: [][]float64{}, Latencies: []float64{},
		StartTimes: []float64{}, QueueTimes: []float64{}, GeneratedTexts: []string{}, Errors: []string{},
		Hone: VLLMBenchHone{Source: VLLMBenchSource, Rule: VLLMBenchRule, Kind: rec.Kind, OfferedQPS: s.OfferedQPS,
			Concurrency: s.Concurrency, Runs: s.Runs, Valid: s.Valid, TimeScale: scale, Goodput: LevelGoodput(rec, i),
			RequestIDs: []string{}, OutputSHA256: []string{}},
	}
	r.Hone.Level = LevelOf(s.OfferedQPS).Name()
	if s.Concurrency > 0 {
		r.Hone.Level = LevelOf(ClosedLevelKey(s.Concurrency)).Name()
	}
	if r.Hone.Goodput != nil {
		r.RequestGoodput = &r.Hone.Goodput.QPS
	}
	switch {
	case s.Concurrency > 0:
		n := s.Concurrency
		r.RequestRate, r.Burstiness, r.MaxConcurrency = "inf", 1.0, &n
	case rec.Workload.Kind == schema.WorkloadTrace:
		r.RequestRate, r.Burstiness = "inf", 1.0
	default:
		r.RequestRate, r.Burstiness = s.OfferedQPS, "inf"
	}
	for _, d := range []struct {
		d                           Dist
		mean, median, std, p90, p99 *float64
	}{
		{s.TTFT, &r.MeanTTFTMs, &r.MedianTTFTMs, &r.StdTTFTMs, &r.P90TTFTMs, &r.P99TTFTMs},
		{s.TPOT, &r.MeanTPOTMs, &r.MedianTPOTMs, &r.StdTPOTMs, &r.P90TPOTMs, &r.P99TPOTMs},
		{s.ITL, &r.MeanITLMs, &r.MedianITLMs, &r.StdITLMs, &r.P90ITLMs, &r.P99ITLMs},
		{s.E2E, &r.MeanE2ELMs, &r.MedianE2ELMs, &r.StdE2ELMs, &r.P90E2ELMs, &r.P99E2ELMs},
	} {
		*d.mean, *d.median, *d.std, *d.p90, *d.p99 = d.d.Mean, d.d.Median, d.d.Std, d.d.P90, d.d.P99
	}
	warmups := rec.Warmups()
	levels := pooledLevels(rec, i)
	var started time.Time
	for _, l := range levels {
		if started.IsZero() && l.StartedAt.UnixNs != 0 {
			started = time.Unix(0, l.StartedAt.UnixNs)
		}
		peakTok, peakConc := vllmPeaks(l, warmups, scale)
		r.MaxOutputTokensPerS = math.Max(r.MaxOutputTokensPerS, peakTok)
		r.MaxConcurrentRequests = max(r.MaxConcurrentRequests, peakConc)
		for qi := range l.Requests {
			q := &l.Requests[qi]
			if q.ID < warmups {
				continue
			}
			r.NumPrompts++
			in := q.InputTokens
			if q.PromptTokens != nil {
				in = *q.PromptTokens
			}
			r.InputLens = append(r.InputLens, in)
			r.StartTimes = append(r.StartTimes, q.SentMs/1000)
			r.QueueTimes = append(r.QueueTimes, q.DispatchLagMs/1000)
			r.GeneratedTexts = append(r.GeneratedTexts, "")
			r.Errors = append(r.Errors, q.Error)
			r.Hone.RequestIDs = append(r.Hone.RequestIDs, q.RequestID)
			r.Hone.OutputSHA256 = append(r.Hone.OutputSHA256, q.OutputSHA256)
			if !completed(q) {
				r.OutputLens, r.TTFTs, r.Latencies = append(r.OutputLens, 0), append(r.TTFTs, 0), append(r.Latencies, 0)
				r.ITLs = append(r.ITLs, []float64{})
				continue
			}
			r.TotalInputTokens += in
			r.TotalOutputTokens += q.OutputTokens
			r.OutputLens = append(r.OutputLens, q.OutputTokens)
			r.TTFTs = append(r.TTFTs, *q.TTFTMs/1000)
			r.Latencies = append(r.Latencies, (*q.FinishMs-q.ScheduledMs)/1000)
			mono := q.Chunks.Columns().MonoNs
			itl := make([]float64, 0, max(len(mono)-1, 0))
			for k := 1; k < len(mono); k++ {
				itl = append(itl, float64(mono[k]-mono[k-1])/1e9/scale)
			}
			r.ITLs = append(r.ITLs, itl)
		}
	}
	if started.IsZero() {
		started = rec.StartedAt
	}
	r.Date = started.UTC().Format("20060102-150405")
	return r
}

// vllmPeaks is vllm's max_output_tokens_per_s and max_concurrent_requests
// over l's completed measured requests: output chunks counted in whole
// seconds from the first send, and the most requests in flight at once
// over their [send, last chunk) intervals (an end before a start at the
// same instant).
func vllmPeaks(l *schema.LevelRecord, warmups int, scale float64) (tokensPerS float64, concurrent int) {
	type event struct {
		at    float64
		delta int
	}
	var events []event
	var times []float64 // output chunk arrivals, model seconds from the level's start
	first, last := math.Inf(1), math.Inf(-1)
	for qi := range l.Requests {
		q := &l.Requests[qi]
		if q.ID < warmups || !completed(q) {
			continue
		}
		start, end := q.SentMs/1000, *q.FinishMs/1000
		first, last = math.Min(first, start), math.Max(last, end)
		events = append(events, event{start, 1}, event{end, -1})
		f := *q.FirstMs / 1000
		mono := q.Chunks.Columns().MonoNs
		if len(mono) == 0 {
			times = append(times, f)
		}
		for _, m := range mono {
			times = append(times, f+float64(m-mono[0])/1e9/scale)
		}
	}
	if len(events) == 0 {
		return 0, 0
	}
	buckets := make([]int, int(math.Ceil(last-first))+1)
	for _, t := range times {
		if b := int(t - first); b >= 0 && b < len(buckets) {
			buckets[b]++
		}
	}
	slices.SortFunc(events, func(a, b event) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	n := 0
	for _, e := range events {
		n += e.delta
		concurrent = max(concurrent, n)
	}
	return float64(slices.Max(buckets)), concurrent
}
