package replay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

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
func openLoopAt(tb testing.TB, url string, qps float64, n int) []RequestRecord {
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
	records := make([]RequestRecord, n)
	for i := range reqs {
		reqs[i] = Request{ID: i, ArrivalMs: float64(i) * 1000 / qps, InputTokens: 4096, OutputTokens: 128}
		bodies[i] = body
		records[i] = RequestRecord{ID: i, InputTokens: 4096, RequestID: fmt.Sprint(i)}
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
func lagStats(records []RequestRecord) (p99, maxLag float64, failed int) {
	lags := make([]float64, len(records))
	for i, r := range records {
		lags[i] = r.DispatchLagMs
		if r.Outcome != OutcomeOK || !r.Valid {
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
