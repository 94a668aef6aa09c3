package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// chunksRoundTrip marshals c and unmarshals it into a fresh Chunks.
func chunksRoundTrip(t *testing.T, c schema.Chunks) (schema.Chunks, []byte) {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back schema.Chunks
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return back, b
}

func TestChunksRoundTrip(t *testing.T) {
	for name, c := range map[string]schema.Chunks{
		"one token a chunk": {MonoNs: []int64{322695735892, 322695771078, 322695799491}, UnixNs: []int64{1796074842176421997, 1796074842176457173, 1796074842176485576},
			TokenIDs: [][]int{{7815}, {15734}, {23653}}},
		"several and none": {MonoNs: []int64{5, 5, 4}, UnixNs: []int64{-7, 9, 4}, TokenIDs: [][]int{{1, 2, 151935}, {}, {0}}},
		// Differences that wrap around 64 bits still come back exactly.
		"extremes": {MonoNs: []int64{math.MinInt64, math.MaxInt64, 0, math.MinInt64}, UnixNs: []int64{math.MaxInt64, math.MinInt64, math.MaxInt64, -1},
			TokenIDs: [][]int{{math.MaxInt64, math.MinInt64}, {-1}, {}, {math.MaxInt32}}},
	} {
		t.Run(name, func(t *testing.T) {
			back, b := chunksRoundTrip(t, c)
			if !reflect.DeepEqual(back, c) {
				t.Errorf("%s read back as %+v, want %+v", b, back, c)
			}
			if !bytes.HasPrefix(b, []byte(`{"encoding":"hone-chunks/v1","count":`+strconv.Itoa(len(c.MonoNs))+`,"data":"`)) {
				t.Errorf("packed form %s", b)
			}
		})
	}
	// The layout (see ChunksEncoding), byte by byte.
	data, err := schema.EncodeChunks(schema.Chunks{MonoNs: []int64{1000, 1064, 1100}, UnixNs: []int64{1500, 1563, 1600}, TokenIDs: [][]int{{3}, {-2, 64}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	// mono_ns: 1000 -> zigzag 2000 = d0 0f; interval 64 -> 128 = 80 01;
	// interval 36, change -28 -> 55 = 37. offset: 500 -> e8 07; 499, -1 ->
	// 01; 500, +1 -> 02. ids: 1, 2, 0. tokens: 3 -> 06, -2 -> 03, 64 -> 80 01.
	if want := "d00f8001 37 e807 01 02 01 02 00 06 03 8001"; hex.EncodeToString(data) != strings.ReplaceAll(want, " ", "") {
		t.Errorf("layout % x, want %s", data, want)
	}
}

// A request that read no stream has nil columns and stays so; a stream
// without output has empty columns and stays so (as in version 2's
// arrays, which read null and [] the same way).
func TestChunksNilAndEmpty(t *testing.T) {
	back, b := chunksRoundTrip(t, schema.Chunks{})
	if string(b) != "null" || back.MonoNs != nil || back.UnixNs != nil || back.TokenIDs != nil {
		t.Errorf("no chunks: %s read back as %#v", b, back)
	}
	empty := schema.Chunks{MonoNs: []int64{}, UnixNs: []int64{}, TokenIDs: [][]int{}}
	back, b = chunksRoundTrip(t, empty)
	if string(b) != `{"encoding":"hone-chunks/v1","count":0,"data":""}` || back.MonoNs == nil || back.UnixNs == nil || back.TokenIDs == nil || len(back.MonoNs) != 0 {
		t.Errorf("empty chunks: %s read back as %#v", b, back)
	}
	// A chunk without ids reads as an empty, non-nil slice, as [] did.
	back, _ = chunksRoundTrip(t, schema.Chunks{MonoNs: []int64{1}, UnixNs: []int64{2}, TokenIDs: [][]int{nil}})
	if back.TokenIDs[0] == nil || len(back.TokenIDs[0]) != 0 {
		t.Errorf("chunk without ids read back as %#v", back.TokenIDs[0])
	}
	// Version 2's arrays, both ways.
	for doc, want := range map[string]schema.Chunks{
		`{"mono_ns":null,"unix_ns":null,"token_ids":null}`:       {},
		`{"mono_ns":[],"unix_ns":[],"token_ids":[]}`:             empty,
		`{"mono_ns":[1,2],"unix_ns":[3,4],"token_ids":[[5],[]]}`: {MonoNs: []int64{1, 2}, UnixNs: []int64{3, 4}, TokenIDs: [][]int{{5}, {}}},
	} {
		var c schema.Chunks
		if err := json.Unmarshal([]byte(doc), &c); err != nil || !reflect.DeepEqual(c, want) {
			t.Errorf("%s: %#v %v, want %#v", doc, c, err, want)
		}
		again, _ := chunksRoundTrip(t, c)
		if !reflect.DeepEqual(again, want) {
			t.Errorf("%s rewritten packed read back as %#v", doc, again)
		}
	}
}

func TestChunksMalformed(t *testing.T) {
	packed := func(count int, data []byte) string {
		return fmt.Sprintf(`{"encoding":"hone-chunks/v1","count":%d,"data":%q}`, count, base64.StdEncoding.EncodeToString(data))
	}
	huge := binary.AppendUvarint([]byte{2, 2}, 1<<62)
	for name, tc := range map[string]struct{ doc, want string }{
		"truncated varint":   {packed(1, []byte{0x80, 0x80, 0x80}), "mono_ns column, chunk 0 of 1: data ends inside a varint"},
		"truncated ids":      {packed(2, []byte{2, 2, 0, 0, 1, 0x80}), "ids column, chunk 1 of 2: data ends inside a varint at byte 5 of 6"},
		"truncated tokens":   {packed(2, []byte{2, 2, 0, 0, 1, 0, 0x80}), "tokens column, chunk 0 of 2: data ends inside a varint at byte 6 of 7"},
		"count too large":    {packed(5, []byte{2, 2, 0}), "count 5, but 3 bytes of data hold at most 1 chunks"},
		"count too small":    {packed(1, []byte{2, 2, 0, 2, 2, 0}), "3 bytes of data after the last of 1 chunks"},
		"negative count":     {packed(-1, nil), "count -1 is negative"},
		"absurd token count": {packed(1, huge), "4611686018427387904 token ids (0 before it), but only 0 bytes"},
		"too many tokens":    {packed(2, []byte{2, 2, 0, 0, 2, 2, 1, 1, 1}), "chunk 1 of 2: 2 token ids (2 before it), but only 3 bytes"},
		"overlong varint":    {packed(1, append(bytes.Repeat([]byte{0xff}, 10), 1, 0, 0)), "mono_ns column, chunk 0 of 1: varint at byte 0 overflows 64 bits"},
		"count overflow":     {`{"encoding":"hone-chunks/v1","count":1e30,"data":""}`, "count"},
		"not base64":         {`{"encoding":"hone-chunks/v1","count":0,"data":"!!"}`, "not standard base64"},
		"other encoding":     {`{"encoding":"hone-chunks/v9","count":0,"data":""}`, `encoding "hone-chunks/v9"`},
		"no data":            {`{"encoding":"hone-chunks/v1","count":0}`, `without "count" or "data"`},
		"mixed forms":        {`{"encoding":"hone-chunks/v1","count":0,"data":"","mono_ns":[]}`, `unknown field "mono_ns"`},
		"uneven columns":     {`{"mono_ns":[1,2],"unix_ns":[1],"token_ids":[[],[]]}`, "columns differ in length (mono_ns 2, unix_ns 1, token_ids 2)"},
		"not an object":      {`[1,2]`, "chunks:"},
	} {
		var c schema.Chunks
		err := json.Unmarshal([]byte(tc.doc), &c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %s: err %v, want one saying %q", name, tc.doc, err, tc.want)
		}
	}
	if _, err := json.Marshal(schema.Chunks{MonoNs: []int64{1}, TokenIDs: [][]int{{1}}}); err == nil || !strings.Contains(err.Error(), "columns differ") {
		t.Errorf("uneven columns written: %v", err)
	}
}

// TestRecordBytesPerOutputToken: a record of the brief's workload (128
// requests of 4096 input and 128 output tokens, one level of one run),
// built as a replay fills it, is at most 8 bytes per output token gzipped,
// and reads back exactly from both the plain and the gzipped file.
func TestRecordBytesPerOutputToken(t *testing.T) {
	rec := packed(t, briefRecord(t, 1)) // as ReadRecord returns it
	tokens := 0
	for _, q := range rec.Runs[0].Levels[0].Requests {
		tokens += q.OutputTokens
	}
	if tokens != 128*128 {
		t.Fatalf("%d output tokens, want 128 x 128", tokens)
	}
	dir := t.TempDir()
	sizes := map[string]float64{}
	for _, name := range []string{"rec.json", "rec.json.gz"} {
		path := filepath.Join(dir, name)
		if err := WriteRecord(path, rec); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		sizes[name] = float64(fi.Size()) / float64(tokens)
		back, err := ReadRecord(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, rec) {
			t.Errorf("%s does not read back as the record written", name)
		}
	}
	v2 := recordV2JSON(t, rec)
	v2Path := filepath.Join(dir, "v2.json")
	if err := os.WriteFile(v2Path, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	if back, err := ReadRecord(v2Path); err != nil || !reflect.DeepEqual(back, rec) {
		t.Errorf("the version 2 form does not read back as the record (%v)", err)
	}
	var v2gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&v2gz, gzip.BestCompression)
	zw.Write(v2)
	zw.Close()
	t.Logf("bytes per output token: v2 %.2f, v2 .gz %.2f, v3 %.2f, v3 .gz %.2f (%d output tokens)",
		float64(len(v2))/float64(tokens), float64(v2gz.Len())/float64(tokens), sizes["rec.json"], sizes["rec.json.gz"], tokens)
	if sizes["rec.json.gz"] > 8 {
		t.Errorf("gzipped record: %.2f bytes per output token, want <= 8", sizes["rec.json.gz"])
	}
}

// briefRecord builds, without a server, the record a replay of the brief's
// workload at 4 req/s would write: every request field filled as the
// client fills it, chunks one token each ~6.5 ms apart with a few µs of
// jitter, token ids uniform over Qwen2.5's 151,936-token vocabulary, and
// the emulator's per-request engine metrics.
func briefRecord(t *testing.T, seed uint64) *schema.Record {
	t.Helper()
	const (
		qps       = 4
		vocab     = 151936
		monoStart = int64(3_217_456_123_457)         // CLOCK_MONOTONIC at the level's start: ~54 min of uptime
		wallMinus = int64(1_796_071_624_702_495_104) // unix_ns - mono_ns, constant
	)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	w := DefaultWorkload()
	reqs, err := Generate(ParamsOf(w, qps))
	if err != nil {
		t.Fatal(err)
	}
	stamp := func(mono int64) schema.Stamp { return schema.Stamp{UnixNs: mono + wallMinus, MonoNs: mono} }
	ms := func(mono int64) float64 { return float64(mono-monoStart) / 1e6 }
	hexOf := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return hex.EncodeToString(b)
	}
	jf := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	nonce := hexOf(4)
	lr := schema.LevelRecord{Level: slo.Level{OfferedQPS: qps}, Planned: len(reqs), Sent: len(reqs), Complete: true,
		Outcomes: map[string]int{}, Failures: map[string]int{}, PrefixSeed: w.Seed, StartedAt: stamp(monoStart),
		EngineMetricsKeys: map[string]int{}}
	hashes := make([]string, 0, len(reqs))
	var prefillTokens, cachedTotal float64
	for _, q := range reqs {
		due := monoStart + int64(q.ArrivalMs*1e6)
		sent := due + 20_000 + int64(rng.IntN(180_000)) // 20-200 µs of dispatch lag
		cached := 0
		if q.ID >= Sessions {
			cached = w.InputTokens - w.UncachedTokens
		}
		queue := 0.05 + rng.Float64()*2
		prefill := 18 + float64(w.InputTokens-cached)*0.011 + rng.Float64()*3
		first := sent + int64((0.4+queue+prefill)*1e6) + int64(rng.IntN(100_000))
		rr := schema.RequestRecord{ID: q.ID, Session: q.Session, RequestID: fmt.Sprintf("hone-%s-%d-%g-%d", nonce, 0, float64(qps), q.ID),
			InputTokens: w.InputTokens, PromptSHA256: hexOf(32), Outcome: schema.OutcomeOK, Status: 200,
			ScheduledMs: q.ArrivalMs, SentMs: ms(sent), DispatchLagMs: float64(sent-due) / 1e6,
			Scheduled: stamp(due), Sent: stamp(sent), FinishReason: "length"}
		ch := schema.Chunks{MonoNs: make([]int64, 0, q.OutputTokens), UnixNs: make([]int64, 0, q.OutputTokens), TokenIDs: make([][]int, 0, q.OutputTokens)}
		flat := make([]int, 0, q.OutputTokens)
		mono := first
		for k := range q.OutputTokens {
			if k > 0 {
				mono += 6_500_000 + int64(rng.IntN(8001)) - 4000
			}
			flat = append(flat, rng.IntN(vocab))
			ch.MonoNs = append(ch.MonoNs, mono)
			ch.UnixNs = append(ch.UnixNs, mono+wallMinus)
			ch.TokenIDs = append(ch.TokenIDs, flat[k:k+1:k+1])
		}
		rr.Chunks = ch
		rr.OutputTokens, rr.OutputSHA256 = len(flat), HashTokens(flat)
		f, l := ms(first), ms(mono)
		ttft, fromSent := f-rr.ScheduledMs, f-rr.SentMs
		tpot := Outcome{ID: rr.ID, ArrivalMs: rr.SentMs, FirstMs: f, FinishMs: l, OutputTokens: rr.OutputTokens}.TPOT()
		rr.FirstMs, rr.FinishMs, rr.TTFTMs, rr.TTFTFromSentMs, rr.TPOTMs = &f, &l, &ttft, &fromSent, &tpot
		pt, ct := w.InputTokens, cached
		rr.PromptTokens, rr.CachedTokens = &pt, &ct
		// The emulator's metrics object (sim/emulator RequestMetrics), in
		// its field order.
		decode := l - f
		itl := decode / float64(rr.OutputTokens-1)
		rr.EngineMetrics = json.RawMessage(`{"time_to_first_token_ms":` + jf(prefill) + `,"generation_time_ms":` + jf(decode) +
			`,"queue_time_ms":` + jf(queue) + `,"mean_itl_ms":` + jf(itl) + `,"tokens_per_second":` + jf(float64(rr.OutputTokens)/(prefill+decode)*1000) +
			`,"prefill_time_ms":` + jf(prefill) + `,"kv_transfer_time_ms":0,"decode_time_ms":` + jf(decode) +
			`,"e2e_time_ms":` + jf(l-rr.ScheduledMs+0.3) + `,"time_scale":1}`)
		validateRequest(&rr, w.OutputTokens)
		if q.ID >= Sessions {
			for _, k := range []string{"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second",
				"prefill_time_ms", "kv_transfer_time_ms", "decode_time_ms", "e2e_time_ms", "time_scale"} {
				lr.EngineMetricsKeys[k]++
			}
		}
		prefillTokens += float64(w.InputTokens)
		cachedTotal += float64(cached)
		hashes = append(hashes, rr.PromptSHA256)
		lr.Requests = append(lr.Requests, rr)
	}
	lr.PromptsSHA256 = HashTokens([]int{len(hashes)}) // a sha256, as the replay's hash of hashes is
	warmQ := float64(Sessions * w.InputTokens)
	lr.Counters = schema.LevelCounters{
		Before: schema.Counters{"vllm:prefix_cache_queries_total": 1_048_576, "vllm:prefix_cache_hits_total": 958_464, "vllm:request_success_total": 256},
		Warmup: schema.Counters{"vllm:prefix_cache_queries_total": 1_048_576 + warmQ, "vllm:prefix_cache_hits_total": 958_464, "vllm:request_success_total": 264},
		After:  schema.Counters{"vllm:prefix_cache_queries_total": 1_048_576 + prefillTokens, "vllm:prefix_cache_hits_total": 958_464 + cachedTotal, "vllm:request_success_total": 384},
	}
	SummarizeLevel(&lr, reqs, slo.Default, 1)
	judgeLevel(&lr, slo.Default, 1)
	start := time.Unix(0, monoStart+wallMinus).UTC()
	rec := &schema.Record{SchemaVersion: schema.SchemaVersion, Kind: schema.KindEmulated, Backend: "vllm", Hone: schema.Build{Version: "v0.9.0", Commit: "3f2c1a9e"},
		Engine: schema.EngineInfo{Endpoint: "http://127.0.0.1:8000", Version: "0.11.0"},
		Model:  schema.Model{ID: "Qwen/Qwen2.5-Coder-7B-Instruct", Revision: "main", Precision: "bf16"},
		Config: map[string]any{"engine": "vllm", "mode": "colocated", "tp": 1.0, "prefix_caching": true}, Hardware: map[string]any{"gpus": []any{"NVIDIA H200"}},
		GPUs: 1, TimeScale: 1, RequestTimeoutMs: 600000, SLO: slo.Default,
		Workload: schema.WorkloadRecord{Workload: w, QPS: []float64{qps}, Runs: 1, Generator: PrefixGenerator, SuffixRecipe: "uniform", PrewarmPolicy: "cold, then 8 warm-ups"},
		Clock:    stamp(monoStart - 2_000_000_000), StartedAt: start.Add(-2 * time.Second), FinishedAt: start.Add(40 * time.Second),
		Cache: schema.CacheState{Procedure: schema.CacheReset, Detail: "POST /reset_prefix_cache before every level"}, RequestIDNonce: nonce,
		CachedTokensRule: CachedTokensAsReported, Outcomes: map[string]int{schema.OutcomeOK: len(reqs)},
		Validation: schema.Validation{Valid: len(reqs), Reasons: map[string]int{}}, VerdictRule: schema.VerdictRule,
		Runs: []schema.RunRecord{{Run: 0, Objective: lr.EffectiveQPS, Levels: []schema.LevelRecord{lr}, Verdict: lr.Verdict}}}
	rec.Verdict = lr.Verdict
	return rec
}

// chunkArrays is version 2's form of Chunks: plain arrays.
type chunkArrays struct {
	MonoNs   []int64 `json:"mono_ns"`
	UnixNs   []int64 `json:"unix_ns"`
	TokenIDs [][]int `json:"token_ids"`
}

// packedChunksJSON matches a request's chunks as WriteRecord writes them.
var packedChunksJSON = regexp.MustCompile(`"chunks":(null|\{"encoding":"hone-chunks/v1","count":[0-9]+,"data":"[A-Za-z0-9+/=]*"\})`)

// recordV2JSON writes rec as version 2 did: WriteRecord's JSON with every
// request's chunks as arrays, byte for byte what version 2 wrote.
func recordV2JSON(t *testing.T, rec *schema.Record) []byte {
	t.Helper()
	cp := *rec
	cp.SchemaVersion = schema.SchemaVersion
	b, err := json.Marshal(&cp)
	if err != nil {
		t.Fatal(err)
	}
	var all []chunkArrays
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			for _, q := range l.Requests {
				c := q.Chunks.Columns()
				all = append(all, chunkArrays{c.MonoNs, c.UnixNs, c.TokenIDs})
			}
		}
	}
	i := 0
	b = packedChunksJSON.ReplaceAllFunc(b, func([]byte) []byte {
		a, err := json.Marshal(all[i])
		if err != nil {
			t.Fatal(err)
		}
		i++
		return append([]byte(`"chunks":`), a...)
	})
	if i != len(all) {
		t.Fatalf("replaced %d chunks of %d requests", i, len(all))
	}
	head := []byte(`{"schema_version":3,`)
	if !bytes.HasPrefix(b, head) {
		t.Fatalf("record starts %.40s", b)
	}
	return append(append([]byte(`{"schema_version":2,`), b[len(head):]...), '\n')
}
