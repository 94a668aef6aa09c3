package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

func TestEncodeCompletion(t *testing.T) {
	b, err := encodeCompletion("m", []int{1, 2, 3}, 128)
	if err != nil {
		t.Fatal(err)
	}
	// Exactly the fields vLLM needs; temperature 0 is written even though
	// go-openai tags its own field omitempty. No min_tokens: vLLM rejects
	// min_tokens > 1 with speculative decoding, and ignore_eos already
	// gives exactly max_tokens.
	want := `{"model":"m","prompt":[1,2,3],"max_tokens":128,"stream":true,"stream_options":{"include_usage":true},"temperature":0,"ignore_eos":true,"return_token_ids":true}`
	if string(b) != want {
		t.Errorf("body\n got %s\nwant %s", b, want)
	}
}

func TestParseCounters(t *testing.T) {
	text := `# HELP vllm:prefix_cache_queries_total x
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="a b}c"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="a"} 24
vllm:prefix_cache_hits_total{engine="0",model_name="x\"y"} 900 1700000000000
vllm:num_requests_running{engine="0"} 3
vllm:request_success_total{finished_reason="length"} 7
vllm:time_to_first_token_seconds_count 5
process_cpu_seconds_total 9
`
	c := ParseCounters([]byte(text))
	want := schema.Counters{"vllm:prefix_cache_queries_total": 1024, "vllm:prefix_cache_hits_total": 900, "vllm:request_success_total": 7}
	if len(c) != len(want) {
		t.Fatalf("got %v, want %v", c, want)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %g, want %g", k, c[k], v)
		}
	}
	after := schema.Counters{"vllm:prefix_cache_queries_total": 2048, "vllm:prefix_cache_hits_total": 1868}
	if r := HitRate(c, after); r == nil || *r != 968.0/1024 {
		t.Errorf("hit rate %v, want 968/1024", r)
	}
	// Older engines: the gpu_ names, without _total.
	old0 := ParseCounters([]byte("vllm:gpu_prefix_cache_queries 100\nvllm:gpu_prefix_cache_hits 50\n"))
	old1 := ParseCounters([]byte("vllm:gpu_prefix_cache_queries 300\nvllm:gpu_prefix_cache_hits 200\n"))
	if r := HitRate(old0, old1); r == nil || *r != 0.75 {
		t.Errorf("old-name hit rate %v, want 0.75", r)
	}
	if HitRate(nil, after) != nil || HitRate(after, after) != nil {
		t.Error("hit rate without a scrape or without queries must be nil")
	}
}

func TestBuildPrompts(t *testing.T) {
	w := schema.Workload{Seed: 3, Requests: 20, InputTokens: 600, UncachedTokens: 40, OutputTokens: 4}
	tok := func(_ context.Context, s string) ([]int, error) { return wordTokens(s), nil }
	p, err := BuildPrompts(context.Background(), w, tok)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := BuildPrompts(context.Background(), w, tok)
	reqs, _ := Generate(ParamsOf(w, 4))
	firstBlocks := map[string]bool{}
	for s, sp := range p.Prefixes {
		if len(p.ids[s]) != 560 || sp.PrefixSHA256 != HashTokens(p.ids[s]) || sp.PrefixSHA256 != p2.Prefixes[s].PrefixSHA256 {
			t.Fatalf("session %d: %d ids, hash %s (rebuilt %s)", s, len(p.ids[s]), sp.PrefixSHA256, p2.Prefixes[s].PrefixSHA256)
		}
		firstBlocks[HashTokens(p.ids[s][:16])] = true
	}
	if len(firstBlocks) != Sessions {
		t.Errorf("%d distinct first blocks among %d sessions: sessions would share cache", len(firstBlocks), Sessions)
	}
	seen := map[string]bool{}
	for _, q := range reqs {
		ids := p.Prompt(0, 4, q)
		if len(ids) != 600 || HashTokens(ids[:560]) != p.Prefixes[q.Session].PrefixSHA256 {
			t.Fatalf("request %d: %d ids or wrong prefix", q.ID, len(ids))
		}
		if HashTokens(ids) != HashTokens(p2.Prompt(0, 4, q)) {
			t.Errorf("request %d: prompt not deterministic", q.ID)
		}
		seen[HashTokens(ids[560:])] = true
		// Another run, another rate: another suffix.
		if HashTokens(p.Prompt(1, 4, q)[560:]) == HashTokens(ids[560:]) || HashTokens(p.Prompt(0, 8, q)[560:]) == HashTokens(ids[560:]) {
			t.Errorf("request %d: suffix repeats across runs or rates", q.ID)
		}
	}
	if len(seen) != len(reqs) {
		t.Errorf("%d distinct suffixes for %d requests", len(seen), len(reqs))
	}
	// Another seed, other text.
	if PrefixText(3, 0, 500) == PrefixText(4, 0, 500) || PrefixText(3, 0, 500) != PrefixText(3, 0, 500) {
		t.Error("prefix text must depend on the seed, and only on it")
	}
}

func TestWriteReadRecord(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	rec := &schema.Record{SchemaVersion: schema.SchemaVersion, Kind: schema.KindDevice, Backend: "vllm", Model: schema.Model{ID: "m"}, Config: map[string]any{"tp": 2},
		Hardware: map[string]any{}, GPUs: 1, TimeScale: 1, RequestTimeoutMs: 1000, SLO: slo.Default,
		Workload:  schema.WorkloadRecord{Workload: DefaultWorkload(), QPS: []float64{1}, Runs: 1, Generator: PrefixGenerator, SuffixRecipe: "x", PrewarmPolicy: "y"},
		StartedAt: time.Unix(0, 0).UTC(), FinishedAt: time.Unix(1, 0).UTC(), Outcomes: map[string]int{}, Validation: schema.Validation{Reasons: map[string]int{}},
		Cache: schema.CacheState{Procedure: schema.CacheReset}, Verdict: schema.Verdict{Valid: true}, VerdictRule: schema.VerdictRule}
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d files in the directory, want only the record (no temp file left)", len(entries))
	}
	back, err := ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Kind != schema.KindDevice || back.Config["tp"] != 2.0 {
		t.Errorf("read back kind %q config %v", back.Kind, back.Config)
	}
	// Wrong version, wrong kind, missing field: each refused, naming the file.
	data, _ := os.ReadFile(path)
	for name, edit := range map[string]func(m map[string]any){
		"schema_version 1": func(m map[string]any) { m["schema_version"] = 1 },
		"kind":             func(m map[string]any) { m["kind"] = "simulation_only" },
		"slo":              func(m map[string]any) { delete(m, "slo") },
	} {
		var m map[string]any
		json.Unmarshal(data, &m)
		edit(m)
		b, _ := json.Marshal(m)
		bad := filepath.Join(dir, "bad.json")
		os.WriteFile(bad, b, 0o644)
		if _, err := ReadRecord(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), strings.Fields(name)[0]) {
			t.Errorf("%s: err %v, want a refusal naming the file and the field", name, err)
		}
	}
	if err := WriteRecord(filepath.Join(dir, "missing", "r.json"), rec); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
	for _, v := range []any{1, 4, nil} {
		var m map[string]any
		json.Unmarshal(data, &m)
		m["schema_version"] = v
		b, _ := json.Marshal(m)
		bad := filepath.Join(dir, "bad.json")
		os.WriteFile(bad, b, 0o644)
		if _, err := ReadRecord(bad); err == nil || !strings.Contains(err.Error(), "want 2 or 3") {
			t.Errorf("schema_version %v: err %v, want one naming both readable versions", v, err)
		}
	}
}

// A path ending in .gz is written gzipped, atomically; readers recognize
// gzip by its magic bytes whatever the file is called.
func TestWriteReadRecordGzip(t *testing.T) {
	dir := t.TempDir()
	rec, err := ReadRecord(filepath.Join("testdata", "record.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	gz := filepath.Join(dir, "r.json.gz")
	if err := WriteRecord(gz, rec); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want only the record", len(entries))
	}
	zdata, _ := os.ReadFile(gz)
	if len(zdata) < 2 || zdata[0] != 0x1f || zdata[1] != 0x8b {
		t.Fatalf("%s is not gzip: % x", gz, zdata[:min(len(zdata), 4)])
	}
	misnamed := filepath.Join(dir, "r.json")
	os.WriteFile(misnamed, zdata, 0o644)
	for _, p := range []string{gz, misnamed} {
		back, err := ReadRecord(p)
		if err != nil || !reflect.DeepEqual(back, rec) {
			t.Errorf("%s: read back %v, equal %t", p, err, reflect.DeepEqual(back, rec))
		}
	}
	plain, err := ReadRecordFile(gz)
	if err != nil || !json.Valid(plain) || !bytes.HasPrefix(plain, []byte(`{"schema_version":3,`)) {
		t.Errorf("ReadRecordFile: %v, %.40s", err, plain)
	}
	// A truncated or corrupt gzip is an error naming the file.
	trunc := filepath.Join(dir, "trunc.json.gz")
	os.WriteFile(trunc, zdata[:len(zdata)/2], 0o644)
	if _, err := ReadRecord(trunc); err == nil || !strings.Contains(err.Error(), trunc) || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("truncated gzip: %v", err)
	}
	// A gzip bomb stops at the bound (MaxDocumentBytes; a small one here).
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	if _, err := gunzipRecord(bomb.Bytes(), 1<<19); err == nil || !strings.Contains(err.Error(), "more than 524288 bytes") {
		t.Errorf("bomb: %v", err)
	}
	if out, err := gunzipRecord(bomb.Bytes(), 1<<20); err != nil || len(out) != 1<<20 {
		t.Errorf("exactly at the bound: %d bytes, %v", len(out), err)
	}
}

// The probe's bomb (2 MB of gzip inflating to 2 GiB) stops after
// MaxDocumentBytes inflated into nothing: no buffer of its size is ever
// allocated. And a plain file over the bound is refused by its size,
// unread.
func TestDocumentSizeIsBounded(t *testing.T) {
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range (MaxDocumentBytes >> 20) + 1 {
		zw.Write(zeros)
	}
	zw.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := gunzipRecord(bomb.Bytes(), MaxDocumentBytes)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "decompresses to more than 268435456 bytes") {
		t.Errorf("bomb: %v", err)
	}
	// Allocation is what the code decides: the inflater's window and
	// buffers, not the 256 MiB it counted.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("the bomb allocated %d bytes; want the inflater's buffers only (< 8 MiB)", alloc)
	}

	dir := t.TempDir()
	big := filepath.Join(dir, "big.json")
	f, _ := os.Create(big)
	f.Truncate(MaxDocumentBytes + 1) // sparse: no disk
	f.Close()
	if _, err := ReadRecordFile(big); err == nil || !strings.Contains(err.Error(), big+": 268435457 bytes, more than the 268435456 a document may hold") {
		t.Errorf("big plain file: %v", err)
	}
}

// packed packs every request's chunks of rec in place, as ReadRecord
// returns them, and returns rec.
func packed(tb testing.TB, rec *schema.Record) *schema.Record {
	tb.Helper()
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			for i := range l.Requests {
				if err := l.Requests[i].Chunks.Pack(); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	return rec
}

// testdata/record.example.json stays a version 2 record (chunks as
// arrays) and record.example.v3.json is what WriteRecord makes of it: both
// read, and into identical Records.
func TestRecordVersions(t *testing.T) {
	v2path, v3path := filepath.Join("testdata", "record.example.json"), filepath.Join("testdata", "record.example.v3.json")
	v2data, err := os.ReadFile(v2path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(v2data, []byte(`"schema_version":2`)) || !bytes.Contains(v2data, []byte(`"chunks":{"mono_ns":[`)) {
		t.Fatalf("%s is no longer a version 2 record", v2path)
	}
	v2, err := ReadRecord(v2path)
	if err != nil {
		t.Fatal(err)
	}
	v3, err := ReadRecord(v3path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v2, v3) {
		t.Errorf("%s and %s read differently", v2path, v3path)
	}
	tokens := 0
	for _, q := range v3.Runs[0].Levels[0].Requests {
		if c := q.Chunks.Columns(); len(c.MonoNs) != 4 || len(c.UnixNs) != 4 || len(c.TokenIDs) != 4 {
			t.Errorf("request %d: %d chunks", q.ID, q.Chunks.Len())
		}
		tokens += q.OutputTokens
	}
	// Rewriting the version 2 record gives the version 3 fixture, byte for
	// byte: the layout has not drifted.
	out := filepath.Join(t.TempDir(), "v3.json")
	if err := WriteRecord(out, v2); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	want, _ := os.ReadFile(v3path)
	if !bytes.Equal(got, want) {
		t.Errorf("WriteRecord of %s differs from %s (regenerate it if the layout changed on purpose)", v2path, v3path)
	}
	t.Logf("example: %d output tokens; v2 %d bytes, v3 %d bytes", tokens, len(v2data), len(want))
}

func TestTimebase(t *testing.T) {
	tb := newTimebase()
	var ts unix.Timespec
	now := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Skip("no CLOCK_MONOTONIC:", err)
	}
	// Both read the same clock, one through an offset measured once, and
	// the direct reading comes second: it cannot be earlier (beyond the
	// offset's few-µs measurement error). How much later is the host's to
	// decide (a preemption between the two reads), so that side is bounded
	// loosely: a wrong clock or offset would be off by years, not 100 ms.
	if d := ts.Nano() - tb.MonoNs(now); d < -int64(50*time.Microsecond) || d > int64(100*time.Millisecond) {
		t.Errorf("CLOCK_MONOTONIC - derived = %d ns, want within [-50 µs, 100 ms)", d)
	}
	if s := tb.Stamp(now); s.UnixNs != now.UnixNano() || s.MonoNs != tb.MonoNs(now) {
		t.Errorf("stamp %+v", s)
	}
}

func TestProgressPrinter(t *testing.T) {
	var b strings.Builder
	pp := &ProgressPrinter{W: &b, PlainEvery: time.Hour}
	p := Progress{Run: 0, Runs: 3, Level: 1, Levels: 6, QPS: 2, Done: 64, Failed: 1, Planned: 128, TotalDone: 192,
		Elapsed: 96 * time.Second, ETA: 90 * time.Second}
	pp.Update(p)
	pp.Update(p) // within PlainEvery: no second line
	lr := &schema.LevelRecord{Level: slo.Level{OfferedQPS: 2, P99TTFTMs: 812.25, P99TPOTMs: 21.5, EffectiveQPS: 1.9876, Passed: true},
		Complete: true, Planned: 128, Sent: 128, Outcomes: map[string]int{schema.OutcomeOK: 127, schema.OutcomeTimeout: 1}, HitRateCachedTokens: fp(0.96875)}
	pp.Update(Progress{Run: 0, Runs: 3, LevelDone: lr})
	want := "run 1/3 level 2/6 (2 qps) [##########----------] 64/128 done, 1 failed  2.0 req/s  ETA 1m30s\n" +
		"run 1/3 qps 2: p99 TTFT 812.2 ms, p99 TPOT 21.50 ms, effective 1.988 req/s, passed; 128/128 sent, 1 failed, prefix hit 96.9% (cached_tokens)\n"
	if b.String() != want {
		t.Errorf("plain output\n got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	tty := &ProgressPrinter{W: &b, TTY: true}
	tty.Update(p)
	tty.Close()
	if !strings.HasPrefix(b.String(), "\r\x1b[Krun 1/3 level 2/6") || !strings.HasSuffix(b.String(), "ETA 1m30s\r\x1b[K") {
		t.Errorf("tty output %q", b.String())
	}
}

// DropChunks empties every request's chunks and nothing else: the record
// written without them reads back (the schema takes chunks null with
// chunks_dropped), marked, equal to the original but for the chunks.
func TestDropChunks(t *testing.T) {
	rec, err := ReadRecord(filepath.Join("testdata", "record.example.v3.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ReadRecord(filepath.Join("testdata", "record.example.v3.json"))
	rec.DropChunks()
	path := filepath.Join(t.TempDir(), "slim.json.gz")
	if err := WriteRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.ChunksDropped {
		t.Error("chunks_dropped not set")
	}
	n := 0
	for ri, r := range got.Runs {
		for li, l := range r.Levels {
			for qi, q := range l.Requests {
				if !q.Chunks.Absent() {
					t.Errorf("request %d kept its chunks", q.ID)
				}
				if want.Runs[ri].Levels[li].Requests[qi].Chunks.Len() > 0 {
					n++
				}
				want.Runs[ri].Levels[li].Requests[qi].Chunks = schema.Chunks{}
			}
		}
	}
	if n == 0 {
		t.Fatal("the example record has no chunks to drop")
	}
	want.ChunksDropped = true
	if !reflect.DeepEqual(got, want) {
		t.Error("the record changed beyond its chunks")
	}
}
