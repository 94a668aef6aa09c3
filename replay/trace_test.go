package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hone-llm/hone/schema"
)

const (
	sharedTrace   = "testdata/traces/shared-prefixes.jsonl"
	mooncakeTrace = "testdata/traces/mooncake-conversation-4670-4693.jsonl"
)

// sharedTraceCached is each request's cached tokens under ImpliedHitRule
// on 16-token engine blocks, worked by hand from the trace's hash lists
// (see testdata/traces/README.md).
var sharedTraceCached = []int{0, 1024, 512, 1520, 0, 1024, 512, 1024}

func TestOpenTraceShape(t *testing.T) {
	for _, tc := range []struct {
		path                     string
		requests                 int
		input, output, cached    int64
		firstMs, lastMs          float64
		sha256                   string
		wantRateNum, wantRateDen int64
	}{
		{sharedTrace, 8, 9884, 61, 5616, 0, 3500, "3f169943f9128806ef822765979e442b6ffff72a5d17488afd718fadb386c1cd", 5616, 9884},
		// Lines 4670-4693 of Mooncake's conversation trace: every request
		// shares hash 0 (the system prompt's first block) with the first,
		// and nothing else within the excerpt.
		{mooncakeTrace, 24, 109720, 7249, 11776, 1500000, 1509000, "db385909c33c6bf1f41cb640586a08dd4bbab3ed64ac2cb0d2bdc8a606649213", 11776, 109720},
	} {
		tf, err := OpenTrace(tc.path, 0, 16)
		if err != nil {
			t.Fatal(err)
		}
		i := tf.Info
		if i.Format != TraceMooncake || i.Requests != tc.requests || i.InputTokens != tc.input || i.OutputTokens != tc.output ||
			i.ImpliedCachedTokens != tc.cached || i.FirstMs != tc.firstMs || i.LastMs != tc.lastMs || i.SHA256 != tc.sha256 ||
			i.BlockSize != 512 || i.EngineBlockSize != 16 {
			t.Errorf("%s: %+v", tc.path, i)
		}
		if want := float64(tc.wantRateNum) / float64(tc.wantRateDen); i.ImpliedHitRate != want {
			t.Errorf("%s: implied hit rate %v, want %v", tc.path, i.ImpliedHitRate, want)
		}
	}
}

func TestImpliedHitsPerRequest(t *testing.T) {
	src := openSource(t, sharedTrace)
	im := NewImpliedHits(512, 16)
	var got []int
	for q, ok := src.Next(); ok; q, ok = src.Next() {
		got = append(got, im.Add(q))
	}
	if !equalInts(got, sharedTraceCached) {
		t.Errorf("cached %v, want %v", got, sharedTraceCached)
	}
	// With 512-token engine blocks request 3 (1536 tokens, all three
	// blocks seen) keeps its last block to compute: 1024.
	src = openSource(t, sharedTrace)
	im = NewImpliedHits(512, 512)
	got = got[:0]
	for q, ok := src.Next(); ok; q, ok = src.Next() {
		got = append(got, im.Add(q))
	}
	if want := []int{0, 1024, 512, 1024, 0, 1024, 512, 1024}; !equalInts(got, want) {
		t.Errorf("512-token engine blocks: cached %v, want %v", got, want)
	}
}

func openSource(t *testing.T, path string) TraceSource {
	t.Helper()
	tf, err := OpenTrace(path, 0, 16)
	if err != nil {
		t.Fatal(err)
	}
	src, err := tf.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SharedBlocks is how many full blocks two trace requests share: the
// common start of their hash lists, cut to the whole blocks of each.
func SharedBlocks(a, b *TraceRequest, block int) int {
	n := min(fullBlocks(a, block), fullBlocks(b, block))
	k := 0
	for k < n && a.HashIDs[k] == b.HashIDs[k] {
		k++
	}
	return k
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestTraceTokensShareExactly(t *testing.T) {
	for _, path := range []string{sharedTrace, mooncakeTrace} {
		src := openSource(t, path)
		vocab := make([]int, 100)
		for i := range vocab {
			vocab[i] = 1000 + 7*i
		}
		tt := NewTraceTokens(vocab, 512, 1)
		var reqs []TraceRequest
		var prompts [][]int
		for q, ok := src.Next(); ok; q, ok = src.Next() {
			c := *q
			c.HashIDs = append([]int64(nil), q.HashIDs...)
			reqs = append(reqs, c)
			p := tt.Append(nil, q)
			if len(p) != q.InputLength {
				t.Fatalf("%s line %d: %d tokens, want %d", path, q.Line, len(p), q.InputLength)
			}
			prompts = append(prompts, p)
		}
		pairs := 0
		for i := range reqs {
			for j := range i {
				k := SharedBlocks(&reqs[i], &reqs[j], 512)
				if got := commonPrefix(prompts[i], prompts[j]); got != k*512 {
					t.Errorf("%s lines %d and %d share %d blocks: %d common tokens, want %d", path, reqs[j].Line, reqs[i].Line, k, got, k*512)
				}
				if k > 0 {
					pairs++
				}
			}
		}
		if pairs == 0 || tt.Reuses() != 0 {
			t.Errorf("%s: %d sharing pairs, %d first-token reuses", path, pairs, tt.Reuses())
		}
	}
	// First tokens 0 and 1 for three first blocks: the third reuses one.
	tt := NewTraceTokens([]int{0, 1}, 4, 1)
	for i := range 3 {
		tt.Append(nil, &TraceRequest{InputLength: 4, HashIDs: []int64{int64(i)}})
	}
	if tt.Reuses() != 1 {
		t.Errorf("reuses %d, want 1", tt.Reuses())
	}
}

func writeTrace(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBadTraces(t *testing.T) {
	ok := `{"timestamp": 5, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2]}`
	for _, tc := range []struct {
		name, bad, want string
	}{
		{"unsorted", `{"timestamp": 4, "input_length": 10, "output_length": 3, "hash_ids": [1]}`, "timestamp 4 is before the previous line's 5"},
		{"negative input", `{"timestamp": 6, "input_length": -1, "output_length": 3, "hash_ids": []}`, "input_length -1: want at least 1"},
		{"negative output", `{"timestamp": 6, "input_length": 10, "output_length": -3, "hash_ids": []}`, "output_length -3: want at least 1"},
		{"fractional", `{"timestamp": 6, "input_length": 10.5, "output_length": 3, "hash_ids": []}`, "input_length 10.5: want a whole number"},
		{"hash list too long", `{"timestamp": 6, "input_length": 1025, "output_length": 3, "hash_ids": [1, 2, 3, 4]}`, "hash_ids: 4 ids, more than the 3 blocks of 512 tokens an input of 1025 tokens has"},
		{"negative hash", `{"timestamp": 6, "input_length": 10, "output_length": 3, "hash_ids": [-1]}`, "hash_ids[0] -1: want a whole number >= 0"},
		{"missing timestamp", `{"input_length": 10, "output_length": 3}`, "timestamp: missing"},
		{"not JSON", `{"timestamp": 6,`, "want a JSON object"},
	} {
		path := writeTrace(t, ok, "", tc.bad, ok)
		_, err := OpenTrace(path, 0, 16)
		var te *TraceError
		if !errors.As(err, &te) || te.Line != 3 || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("%s: %v, want line 3: %s", tc.name, err, tc.want)
		}
	}
	if _, err := OpenTrace(writeTrace(t, ""), 0, 16); err == nil || !strings.Contains(err.Error(), "no requests") {
		t.Errorf("empty trace: %v", err)
	}
}

func TestOpenTraceGzip(t *testing.T) {
	plain, err := os.ReadFile(sharedTrace)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(plain)
	zw.Close()
	path := filepath.Join(t.TempDir(), "trace.jsonl.gz")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	tf, err := OpenTrace(path, 0, 16)
	if err != nil {
		t.Fatal(err)
	}
	if tf.Info.Requests != 8 || tf.Info.ImpliedCachedTokens != 5616 {
		t.Errorf("gzipped trace: %+v", tf.Info)
	}
}

// TestRecordAsTrace replays the brief's record as a trace: each level's
// sessions share their prefix (3968 tokens: 31 blocks of 128), warm-ups
// included, and nothing else.
func TestRecordAsTrace(t *testing.T) {
	rec := briefRecord(t, 3)
	path := filepath.Join(t.TempDir(), "run.json.gz")
	if err := WriteRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	tf, err := OpenTrace(path, 0, 16)
	if err != nil {
		t.Fatal(err)
	}
	levels, per := 0, 0
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			levels++
			per = len(l.Requests)
		}
	}
	w := rec.Workload
	if tf.Info.Format != TraceRecord || tf.Info.BlockSize != 128 || tf.Info.Requests != levels*per {
		t.Fatalf("info %+v (%d levels of %d)", tf.Info, levels, per)
	}
	// Per level: the 8 first requests of a session miss, every later one
	// hits the whole prefix.
	want := int64(levels * (per - Sessions) * w.CachedTokens())
	if tf.Info.ImpliedCachedTokens != want {
		t.Errorf("implied cached %d, want %d", tf.Info.ImpliedCachedTokens, want)
	}
	// Indented, as jq writes it: still a record.
	var out bytes.Buffer
	if err := json.Indent(&out, mustJSON(t, rec), "", "  "); err != nil {
		t.Fatal(err)
	}
	ipath := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(ipath, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if itf, err := OpenTrace(ipath, 0, 16); err != nil || itf.Info.Format != TraceRecord || itf.Info.Requests != tf.Info.Requests {
		t.Errorf("indented record: %v %+v", err, itf)
	}
	src, _ := tf.Open()
	q, _ := src.Next()
	if q.InputLength != w.InputTokens || q.OutputLength != w.OutputTokens || len(q.HashIDs) != (w.InputTokens+127)/128 {
		t.Errorf("first request %+v", q)
	}
}

// FuzzParseTraceLine: any line parses or fails without panicking, and a
// line that parses holds what a replay relies on.
func FuzzParseTraceLine(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}`,
		`{"timestamp": 1.5, "input_length": 1, "output_length": 1}`,
		`{"timestamp": 3, "input_length": 1e3, "output_length": 2, "hash_ids": [1e18]}`,
		`[]`, `{"timestamp": null}`, `{"hash_ids": [1, -2]}`,
	} {
		f.Add([]byte(s), 512)
	}
	f.Fuzz(func(t *testing.T, line []byte, block int) {
		if block < 1 || block > 1<<20 {
			return
		}
		var q TraceRequest
		if err := ParseTraceLine(line, block, 1, &q); err != nil {
			return
		}
		if q.InputLength < 1 || q.OutputLength < 1 || q.TimestampMs < 1 || len(q.HashIDs) > (q.InputLength+block-1)/block {
			t.Fatalf("accepted %+v", q)
		}
		for _, h := range q.HashIDs {
			if h < 0 {
				t.Fatalf("accepted hash %d", h)
			}
		}
		vocab := []int{1, 2, 3}
		if q.InputLength <= 1<<16 {
			if p := NewTraceTokens(vocab, block, 1).Append(nil, &q); len(p) != q.InputLength {
				t.Fatalf("%d tokens for input_length %d", len(p), q.InputLength)
			}
		}
	})
}

func mustJSON(t *testing.T, rec *schema.Record) []byte {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Prompts planned in trace order and rendered later, in reverse, are the
// ones Append makes in order (a trace source reuses its requests' hash
// lists: a plan keeps its own).
func TestTracePlanRender(t *testing.T) {
	vocab := []int{3, 5, 8, 13, 21, 34}
	appended, planned := NewTraceTokens(vocab, 512, 9), NewTraceTokens(vocab, 512, 9)
	var want [][]int
	var plans []TracePrompt
	src := openSource(t, mooncakeTrace)
	for q, ok := src.Next(); ok; q, ok = src.Next() {
		want = append(want, appended.Append(nil, q))
		plans = append(plans, planned.Plan(q))
		if plans[len(plans)-1].Len() != q.InputLength {
			t.Fatalf("line %d: plan of %d tokens, want %d", q.Line, plans[len(plans)-1].Len(), q.InputLength)
		}
	}
	for i := len(plans) - 1; i >= 0; i-- {
		if got := planned.Render(nil, &plans[i]); !slices.Equal(got, want[i]) {
			t.Errorf("request %d: rendered prompt differs from Append's (%d tokens, %d common)", i, len(got), commonPrefix(got, want[i]))
		}
	}
	if len(want) < 10 || planned.Reuses() != appended.Reuses() {
		t.Errorf("%d requests, reuses %d and %d", len(want), planned.Reuses(), appended.Reuses())
	}
}
