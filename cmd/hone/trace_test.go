package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// sharedTrace's hash lists imply 5616 of its 9884 input tokens cached on
// 16-token blocks (replay/testdata/traces/README.md works them out).
const (
	sharedTrace       = "../../replay/testdata/traces/shared-prefixes.jsonl"
	sharedTraceSHA256 = "3f169943f9128806ef822765979e442b6ffff72a5d17488afd718fadb386c1cd"
	sharedTraceCached = 5616
	sharedTraceInput  = 9884
)

// wireTap forwards to an engine and keeps every completion's prompt ids,
// by X-Request-Id, as they crossed the wire.
type wireTap struct {
	mu      sync.Mutex
	prompts map[string][]int
}

func startWireTap(t *testing.T, engine string) (*wireTap, string) {
	t.Helper()
	u, err := url.Parse(engine)
	if err != nil {
		t.Fatal(err)
	}
	tap := &wireTap{prompts: map[string][]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // stream every event as it comes
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/completions" {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Error(err)
			}
			var b struct {
				Prompt []int `json:"prompt"`
			}
			if err := json.Unmarshal(body, &b); err != nil {
				t.Errorf("completion body: %v", err)
			}
			tap.mu.Lock()
			tap.prompts[r.Header.Get("X-Request-Id")] = b.Prompt
			tap.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return tap, srv.URL
}

// traceRequests reads a trace's requests, copied.
func traceRequests(t *testing.T, path string) []replay.TraceRequest {
	t.Helper()
	tf, err := replay.OpenTrace(path, 0, 16)
	if err != nil {
		t.Fatal(err)
	}
	src, err := tf.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var out []replay.TraceRequest
	for q, ok := src.Next(); ok; q, ok = src.Next() {
		c := *q
		c.HashIDs = append([]int64(nil), q.HashIDs...)
		out = append(out, c)
	}
	return out
}

// sharedBlocks is how many full 512-token blocks two trace requests share.
func sharedBlocks(a, b replay.TraceRequest) int {
	n := min(len(a.HashIDs), a.InputLength/512, len(b.HashIDs), b.InputLength/512)
	k := 0
	for k < n && a.HashIDs[k] == b.HashIDs[k] {
		k++
	}
	return k
}

// onlyHostInvalidRecord reports whether the record at path has an invalid
// level and every invalid level's reasons are ones the measuring host
// decided (schema.HostReason).
func onlyHostInvalidRecord(t *testing.T, path string) bool {
	t.Helper()
	rec, err := replay.ReadRecord(path)
	if err != nil {
		return false
	}
	invalid := false
	for _, r := range rec.Runs {
		for _, l := range r.Levels {
			for _, why := range l.Verdict.Reasons {
				invalid = true
				if !schema.HostReason(why.Code) {
					return false
				}
			}
		}
	}
	if invalid {
		t.Logf("the host made a level invalid (%s): judged on what the host does not decide", path)
	}
	return invalid
}

// TestReplayTraceOnEmulator replays a trace whose structure implies a
// known hit rate against the emulator, through a tap that keeps every
// prompt as sent: the measured hit rate is within 1% of the implied one,
// every prompt and output has the trace's length exactly, and two
// requests that share k blocks share exactly k × 512 tokens on the wire.
// hone predict --trace then sends the same prompts through the
// simulation and predicts the implied rate exactly.
func TestReplayTraceOnEmulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := startEmulator(t, ctx)
	tap, endpoint := startWireTap(t, url)
	out := filepath.Join(t.TempDir(), "trace.json")
	began := time.Now()
	// Requests 500 trace ms apart at speed 1 and time scale 0.25: 125 ms
	// real, far more than any of them needs to prefill, so each finds the
	// blocks of the ones before it cached, as the implied rate assumes.
	stdout, stderr, code := runHone(ctx, "replay", "--endpoint", endpoint, "--model", "Qwen/Qwen2.5-Coder-0.5B-Instruct",
		"--trace", sharedTrace, "--out", out)
	// Exit 1 says a level is invalid; where only the host decided that
	// (a load generator this busy host made late), what this test checks
	// (lengths, shared tokens, hit rates) holds all the same.
	if code != 0 && (code != 1 || !onlyHostInvalidRecord(t, out)) {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	if d := time.Since(began); d < 3500*time.Millisecond/4 {
		t.Errorf("replayed a 3.5 s trace at time scale 0.25 in %v: sends did not wait for their timestamps", d)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	tr := rec.Workload.Trace
	if rec.Workload.Kind != schema.WorkloadTrace || tr == nil || tr.SHA256 != sharedTraceSHA256 || tr.Requests != 8 || tr.Speed != 1 ||
		tr.BlockSize != 512 || tr.EngineBlockSize != 16 || tr.ImpliedCachedTokens != sharedTraceCached || tr.FirstTokenReuses != 0 {
		t.Fatalf("workload %+v, trace %+v", rec.Workload, tr)
	}
	implied := float64(sharedTraceCached) / sharedTraceInput
	if tr.ImpliedHitRate != implied || tr.MeasuredHitRate == nil || math.Abs(*tr.MeasuredHitRate-implied) > 0.01*implied {
		t.Fatalf("hit rate: implied %v (want %v), measured %v (%s)", tr.ImpliedHitRate, implied, tr.MeasuredHitRate, tr.MeasuredFrom)
	}
	t.Logf("hit rate: implied %.4f, measured %.4f (%s)", tr.ImpliedHitRate, *tr.MeasuredHitRate, tr.MeasuredFrom)
	if !strings.Contains(stdout, "prefix-cache hit rate implied 56.82%") {
		t.Errorf("stdout: %s", stdout)
	}

	reqs := traceRequests(t, sharedTrace)
	lvl := rec.Runs[0].Levels[0]
	if len(lvl.Requests) != len(reqs) || lvl.Measured != len(reqs) || !lvl.Complete {
		t.Fatalf("level: %d requests, %d measured, complete %t", len(lvl.Requests), lvl.Measured, lvl.Complete)
	}
	prompts := make([][]int, len(reqs))
	for i, q := range lvl.Requests {
		p := tap.prompts[q.RequestID]
		if q.ID != i || len(p) != reqs[i].InputLength || q.InputTokens != reqs[i].InputLength ||
			q.OutputTokens != reqs[i].OutputLength || q.Outcome != schema.OutcomeOK || q.PromptSHA256 != replay.HashTokens(p) {
			t.Errorf("request %d: id %d, %d tokens on the wire, %d recorded, %d out, %s; trace line %+v", i, q.ID, len(p), q.InputTokens, q.OutputTokens, q.Outcome, reqs[i])
		}
		if want := reqs[i].TimestampMs - reqs[0].TimestampMs; q.ScheduledMs != want {
			t.Errorf("request %d scheduled at %v ms, want %v", i, q.ScheduledMs, want)
		}
		prompts[i] = p
	}
	for i := range reqs {
		for j := range i {
			k := sharedBlocks(reqs[i], reqs[j])
			common := 0
			for common < len(prompts[i]) && common < len(prompts[j]) && prompts[i][common] == prompts[j][common] {
				common++
			}
			if common != k*512 {
				t.Errorf("lines %d and %d share %d blocks: %d common tokens on the wire, want %d", j+1, i+1, k, common, k*512)
			}
		}
	}

	// The same trace in virtual time: the same prompts, the implied rate.
	pout := filepath.Join(t.TempDir(), "predicted.json")
	stdout, stderr, code = runHone(ctx, "predict", "--trace", sharedTrace, "--out", pout, "../../examples/emulator-l4-colocated.yaml")
	if code != 0 {
		t.Fatalf("predict: exit %d: %s\n%s", code, stderr, stdout)
	}
	pred, err := replay.ReadRecord(pout)
	if err != nil {
		t.Fatal(err)
	}
	pt := pred.Workload.Trace
	if pred.Kind != schema.KindPredicted || pt == nil || pt.SHA256 != sharedTraceSHA256 || pt.MeasuredHitRate == nil || *pt.MeasuredHitRate != implied {
		t.Errorf("prediction: kind %s, trace %+v", pred.Kind, pt)
	}
	if pl := pred.Runs[0].Levels[0]; pl.PromptsSHA256 != lvl.PromptsSHA256 || len(pl.Requests) != len(reqs) {
		t.Errorf("prediction's prompts %s (%d requests), the replay's %s", pl.PromptsSHA256, len(pl.Requests), lvl.PromptsSHA256)
	}
	if !strings.Contains(stdout, "predicted 56.82%") {
		t.Errorf("predict stdout: %s", stdout)
	}
}

// TestBadTraceExit2 names the line of a trace that cannot be replayed,
// before anything is sent.
func TestBadTraceExit2(t *testing.T) {
	dir := t.TempDir()
	for name, line := range map[string]string{
		"unsorted":        `{"timestamp": 1, "input_length": 10, "output_length": 3, "hash_ids": [1]}`,
		"negative length": `{"timestamp": 9, "input_length": 10, "output_length": -3, "hash_ids": [1]}`,
		"long hash list":  `{"timestamp": 9, "input_length": 10, "output_length": 3, "hash_ids": [1, 2]}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".jsonl")
		data := `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}` + "\n" + line + "\n"
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"replay", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--trace", path, "--out", filepath.Join(dir, "r.json")},
			{"predict", "--trace", path, "../../examples/emulator-l4-colocated.yaml"},
		} {
			_, stderr, code := runCLI(t, "", args...)
			if code != 2 || !strings.Contains(stderr, path+" line 2: ") {
				t.Errorf("%s, hone %s: exit %d, %s", name, args[0], code, stderr)
			}
		}
	}
	_, stderr, code := runCLI(t, "", "replay", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--trace", sharedTrace, "--qps", "4")
	if code != 2 || !strings.Contains(stderr, "--qps: a trace states its own") {
		t.Errorf("--trace with --qps: exit %d, %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "", "replay", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--trace-speed", "2")
	if code != 2 || !strings.Contains(stderr, "--trace-speed: only with --trace") {
		t.Errorf("--trace-speed alone: exit %d, %s", code, stderr)
	}
}
