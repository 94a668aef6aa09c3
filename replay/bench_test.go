package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// instantServer answers every completion at once with a pre-rendered
// 128-token vLLM stream, so a benchmark measures the client alone.
func instantServer(tb testing.TB, outputTokens int) *httptest.Server {
	var sb strings.Builder
	for i := range outputTokens {
		fr := "null"
		if i == outputTokens-1 {
			fr = `"length"`
		}
		fmt.Fprintf(&sb, `data: {"id":"cmpl-b","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":%s,"stop_reason":null,"token_ids":[%d]}],"usage":null}`+"\n\n", fr, 1000+i)
	}
	fmt.Fprintf(&sb, `data: {"id":"cmpl-b","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4096,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":3968}}}`+"\n\ndata: [DONE]\n\n", 4096+outputTokens, outputTokens)
	body := []byte(sb.String())
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	}))
	tb.Cleanup(s.Close)
	return s
}

// openLoopAt sends n 128-token streams at rate qps through the replay's
// open loop and returns their records.
func openLoopAt(tb testing.TB, url string, qps float64, n int) []schema.RequestRecord {
	prompt := make([]int, 4096)
	for i := range prompt {
		prompt[i] = 1000 + i%3000
	}
	body, err := encodeCompletion("m", prompt, 128)
	if err != nil {
		tb.Fatal(err)
	}
	reqs := make([]Request, n)
	bodies := make([][]byte, n)
	records := make([]schema.RequestRecord, n)
	for i := range reqs {
		reqs[i] = Request{ID: i, ArrivalMs: float64(i) * 1000 / qps, InputTokens: 4096, OutputTokens: 128}
		bodies[i] = body
		records[i] = schema.RequestRecord{ID: i, InputTokens: 4096, RequestID: fmt.Sprint(i)}
	}
	tbase := newTimebase()
	r := &runner{opts: Options{TimeScale: 1}, tb: tbase, cl: &client{http: &http.Client{Transport: newTransport()},
		url: url + "/v1/completions", scale: 1, timeout: time.Minute, tb: tbase}}
	sent := r.dispatch(context.Background(), time.Now(), reqs, bodies, records, 0, nil)
	if sent != n {
		tb.Fatalf("sent %d of %d", sent, n)
	}
	return records
}

// lagStats returns p99 and max dispatch lag (ms) and the failures.
func lagStats(records []schema.RequestRecord) (p99, maxLag float64, failed int) {
	lags := make([]float64, len(records))
	for i, r := range records {
		lags[i] = r.DispatchLagMs
		if r.Outcome != schema.OutcomeOK || !r.Valid {
			failed++
		}
	}
	return slo.NearestRank(lags, 99), slo.NearestRank(lags, 100), failed
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkOpenLoop sends b.N 128-token streams open loop at a fixed rate
// to a server that answers at once. ns/op and allocs/op are per request;
// p99-lag-ms is the dispatch lag (actual send - scheduled send).
func BenchmarkOpenLoop(b *testing.B) {
	srv := instantServer(b, 128)
	for _, qps := range []float64{500, 1000, 2000} {
		b.Run(fmt.Sprintf("qps=%g", qps), func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			start := time.Now()
			records := openLoopAt(b, srv.URL, qps, b.N)
			el := time.Since(start)
			cpu := processCPU() - cpu0
			p99, mx, failed := lagStats(records)
			lags := make([]float64, len(records))
			for i, r := range records {
				lags[i] = r.DispatchLagMs
			}
			b.ReportMetric(slo.NearestRank(lags, 50), "p50-lag-ms")
			b.ReportMetric(p99, "p99-lag-ms")
			// CPU per request (client, dispatcher spin and the in-process
			// server together) does not depend on what else the host runs.
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/req")
			b.ReportMetric(mx, "max-lag-ms")
			b.ReportMetric(float64(failed), "failed")
			b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
		})
	}
}

// BenchmarkMaxRate finds the highest open-loop rate of 128-token streams
// the client holds with p99 dispatch lag <= 1 ms and no failed request,
// trying rising rates with 2 s of requests each; req/s is that rate.
func BenchmarkMaxRate(b *testing.B) {
	srv := instantServer(b, 128)
	rates := []float64{250, 500, 750, 1000, 1250, 1500, 2000, 2500, 3000, 4000}
	for range b.N {
		best := 0.0
		for _, qps := range rates {
			p99, mx, failed := lagStats(openLoopAt(b, srv.URL, qps, int(2*qps)))
			b.Logf("%5g req/s: p99 lag %.3f ms, max %.3f ms, %d failed", qps, p99, mx, failed)
			if p99 > 1 || failed > 0 {
				break
			}
			best = qps
		}
		b.ReportMetric(best, "req/s")
	}
}

// leanVLLM speaks vLLM's wire format for the routes a trace replay uses
// and keeps nothing per request, so that what a benchmark's process holds
// is the client's: every completion streams its max_tokens one-token
// chunks at once, then a usage chunk with vLLM's per-request metrics.
func leanVLLM(tb testing.TB) *httptest.Server {
	metrics := `{"time_to_first_token_ms":12.5,"generation_time_ms":830.25,"queue_time_ms":0.5,"mean_itl_ms":6.5,"tokens_per_second":153.8}`
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/version":
			io.WriteString(w, `{"version":"0.11.0-bench"}`)
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","root":"/m","max_model_len":32768}]}`)
		case "/metrics":
			io.WriteString(w, "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 0.0\nvllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 0.0\n")
		case "/reset_prefix_cache":
		case "/tokenize":
			var body struct{ Prompt string }
			json.NewDecoder(r.Body).Decode(&body)
			ids := wordTokens(body.Prompt)
			json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "max_model_len": 32768, "tokens": ids})
		case "/v1/completions":
			var req struct {
				Prompt    []int `json:"prompt"`
				MaxTokens int   `json:"max_tokens"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			w.Header().Set("Content-Type", "text/event-stream")
			bw := bufio.NewWriterSize(w, 32<<10)
			for i := range req.MaxTokens {
				fr := "null"
				if i == req.MaxTokens-1 {
					fr = `"length"`
				}
				fmt.Fprintf(bw, `data: {"id":"cmpl-b","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":%s,"stop_reason":null,"token_ids":[%d]}],"usage":null}`+"\n\n", fr, 1000+(i*7919+len(req.Prompt))%50000)
			}
			fmt.Fprintf(bw, `data: {"id":"cmpl-b","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d},"metrics":%s}`+"\n\ndata: [DONE]\n\n",
				len(req.Prompt), len(req.Prompt)+req.MaxTokens, req.MaxTokens, metrics)
			bw.Flush()
		default:
			http.NotFound(w, r)
		}
	}))
	tb.Cleanup(s.Close)
	return s
}

// writeBenchTrace writes a Mooncake trace of n requests, one every
// spacingMs, of input and output tokens each (a 512-token block per
// hash id; request i shares its first block with every 16th).
func writeBenchTrace(tb testing.TB, n int, spacingMs float64, input, output int) string {
	path := filepath.Join(tb.TempDir(), "trace.jsonl")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(bw, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%d, %d]}`+"\n",
			int(float64(i)*spacingMs), input, output, i%16, 1000+i)
	}
	if err := bw.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	return path
}

// maxRSS is the process's peak resident set so far (Linux: ru_maxrss in KiB).
func maxRSS() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss << 10
}

// countWriter counts what is written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// benchKeep holds the last benchmark's record, so that a heap profile
// (-memprofile, inuse_space) taken after it shows what the record holds.
var benchKeep *schema.Record

// BenchmarkTraceMemory replays a trace of n requests (b.N times; 1,200
// input and 256 output tokens each, 1,000 req/s) against a server that
// keeps nothing per request, and reports what the replay holds:
// retained-B/req is the live heap after the replay and the record's
// writing, the record alive, per request (what grows with a trace's
// length); peak-heap-MB the most heap in use at any time during both and
// the serving statistics hone replay prints, sampled every 5 ms;
// record-B/tok the gzipped record's bytes per output token, json-B/tok
// the plain record's. maxrss-MB is the process's
// peak resident set, the server and earlier sub-benchmarks included.
// read-s and read-peak-heap-MB are ReadRecord's time and most heap in use
// reading the record back (streaming; the replay's record still held).
// HONE_TRACE_MEMORY_REQUESTS=100000 sets the sizes (comma-separated): a
// 100,000-request trace takes 100 s. HONE_TRACE_MEMORY_RECORD=FILE keeps
// the last record there (gzipped), to measure the commands that read it
// (/usr/bin/time -v hone gate baseline create FILE --out ...).
func BenchmarkTraceMemory(b *testing.B) {
	srv := leanVLLM(b)
	sizes := []int{1000, 4000}
	if v := os.Getenv("HONE_TRACE_MEMORY_REQUESTS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("HONE_TRACE_MEMORY_REQUESTS=%q: want request counts, comma-separated", v)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		for _, spill := range []bool{false, true} {
			b.Run(fmt.Sprintf("requests=%d/spill=%t", n, spill), func(b *testing.B) { benchTraceMemory(b, srv, n, spill) })
		}
	}
}

// benchTraceMemory is BenchmarkTraceMemory's replay of n requests, the
// chunks spilled beside the record (Options.SpillDir) when spill.
func benchTraceMemory(b *testing.B, srv *httptest.Server, n int, spill bool) {
	const input, output = 1200, 256
	tf, err := OpenTrace(writeBenchTrace(b, n, 1, input, output), 0, 16)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		benchKeep = nil
		goroutines := runtime.NumGoroutine()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		var rec *schema.Record
		path := filepath.Join(b.TempDir(), "rec.json.gz")
		peak := honetest.HeapPeak(func() {
			tr := newTransport()
			var err error
			opts := Options{Endpoint: srv.URL, Model: "m", Cache: schema.CacheReset, HTTPClient: &http.Client{Transport: tr}}
			if spill {
				opts.SpillDir = filepath.Dir(path)
			}
			rec, err = RunTrace(context.Background(), opts, tf, 1)
			// Idle connections (64 KiB of buffers each) outlive the
			// replay by the transport's idle timeout: what they hold is
			// the load's concurrency, not the trace's length.
			tr.CloseIdleConnections()
			srv.CloseClientConnections()
			if err != nil {
				b.Fatal(err)
			}
			l := rec.Runs[0].Levels[0]
			if l.Sent != n || rec.Validation.Valid != n {
				b.Fatalf("sent %d, %d valid of %d: %v", l.Sent, rec.Validation.Valid, n, rec.Outcomes)
			}
			if err := WriteRecord(path, rec); err != nil {
				b.Fatal(err)
			}
			// What hone replay prints after writing the record.
			if s := ServeStatsByLevel(rec)[0]; s.ITL.N != n*(output-1) {
				b.Fatalf("%d ITLs, want %d", s.ITL.N, n*(output-1))
			}
		})
		// Both sides of the closed connections end in their own
		// goroutines, each holding its buffers until it does.
		for wait := time.Now(); runtime.NumGoroutine() > goroutines+1 && time.Since(wait) < 5*time.Second; {
			time.Sleep(10 * time.Millisecond)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		benchKeep = rec
		rss := maxRSS()
		st, _ := os.Stat(path)
		var plain countWriter
		if err := EncodeRecord(&plain, rec); err != nil {
			b.Fatal(err)
		}
		if keep := os.Getenv("HONE_TRACE_MEMORY_RECORD"); keep != "" {
			if err := os.Rename(path, keep); err != nil {
				b.Fatal(err)
			}
			path = keep
		}
		// Reading it back, as hone gate baseline create and
		// diagnose do (the replay's record still held).
		began := time.Now()
		readPeak := honetest.HeapPeak(func() {
			back, err := ReadRecord(path)
			if err != nil {
				b.Fatal(err)
			}
			if got := len(back.Runs[0].Levels[0].Requests); got != n {
				b.Fatalf("read back %d requests, want %d", got, n)
			}
		})
		b.ReportMetric(time.Since(began).Seconds(), "read-s")
		b.ReportMetric(float64(readPeak)/(1<<20), "read-peak-heap-MB")
		b.ReportMetric(float64(plain)/float64(n*output), "json-B/tok")
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "retained-B/req")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(st.Size())/float64(n*output), "record-B/tok")
		b.ReportMetric(float64(rss)/(1<<20), "maxrss-MB")
	}
}
