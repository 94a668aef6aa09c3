package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/slo"
)

// instantEngine answers every completion at once: a JSON reply with
// kv_transfer_params when stream is false (a prefill leg), else a short SSE
// stream.
func instantEngine(b *testing.B) *httptest.Server {
	stream := []byte("data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	reply := []byte(`{"choices":[{"index":0,"text":"a"}],"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"127.0.0.1","remote_port":5600}}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":false`)) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(reply)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(stream)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// openLoop sends n requests to each URL at rate per second — one to each
// on every tick, so both see the same moment of a shared machine — on
// schedule whatever the answers do, and returns each one's latency (send to
// last byte), per URL.
func openLoop(b *testing.B, client *http.Client, urls []string, body []byte, n int, rate float64) [][]time.Duration {
	lat := make([][]time.Duration, len(urls))
	for i := range lat {
		lat[i] = make([]time.Duration, n)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	interval := time.Duration(float64(time.Second) / rate)
	t0 := time.Now()
	for i := range n {
		if d := time.Until(t0.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		for u, url := range urls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				lat[u][i] = time.Since(start)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return lat
}

// BenchmarkProxyOverhead measures the latency the proxy adds per request at
// 500 requests/s (open loop), against going straight to an engine that
// answers at once: p50 and p99 of proxied minus direct, sent in alternating
// blocks at 500 requests/s. b.N requests per side; run with
// -benchtime 3000x. own-p50/p99 are the proxy's own time before the
// streaming leg, from its timelines. Target: p99 added <= 1 ms (colocated).
// The disaggregated case adds a whole prefill round trip by design.
func BenchmarkProxyOverhead(b *testing.B) {
	for _, mode := range []string{ModeColocated, ModeDisaggregated} {
		b.Run(mode, func(b *testing.B) {
			eng, pre := instantEngine(b), instantEngine(b)
			cfg := Config{Mode: ModeColocated, Workers: []Worker{{Name: "r0", Role: RoleColocated, URL: eng.URL}}}
			if mode == ModeDisaggregated {
				cfg = Config{Mode: ModeDisaggregated, Workers: []Worker{{Name: "p0", Role: RolePrefill, URL: pre.URL}, {Name: "d0", Role: RoleDecode, URL: eng.URL}}}
			}
			cfg.HealthInterval = time.Hour
			p, err := New(cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(p.Handler())
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go p.Run(ctx)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}
			prompt := make([]int, 4096)
			for i := range prompt {
				prompt[i] = 1000 + i
			}
			body := mustJSON(completion(prompt, 2))
			n := max(b.N, 200)
			const rate = 500
			du, pu := []string{eng.URL + "/v1/completions"}, []string{srv.URL + "/v1/completions"}
			openLoop(b, client, du, body, 200, rate) // warm connections
			openLoop(b, client, pu, body, 200, rate)
			b.ResetTimer()
			// Alternate blocks of 250 (half a second each), so a busy moment
			// of a shared machine falls on both sides alike.
			var direct, proxied []time.Duration
			for done := 0; done < n; done += 250 {
				k := min(250, n-done)
				direct = append(direct, openLoop(b, client, du, body, k, rate)[0]...)
				proxied = append(proxied, openLoop(b, client, pu, body, k, rate)[0]...)
			}
			b.StopTimer()
			honetest.ReportAdded(b, direct, proxied)
			// The proxy's own time per request from its timelines: received
			// to the streaming leg sent, prefill legs excluded.
			tls, _ := p.Timelines(0, 0)
			var own []time.Duration
			for _, tl := range tls[len(tls)-n:] {
				d := tl.Decode.Sent.Sub(tl.Received)
				for _, l := range tl.Prefill {
					if l.Answered != nil {
						d -= l.Answered.Sub(l.Sent)
					}
				}
				own = append(own, d)
			}
			b.ReportMetric(float64(slo.NearestRank(own, 50))/1e3, "own-p50-us")
			b.ReportMetric(float64(slo.NearestRank(own, 99))/1e3, "own-p99-us")
			b.ReportMetric(rate, "req/s")
		})
	}
}

// BenchmarkProxyCPU is closed-loop: one request at a time through the
// colocated proxy, for the proxy's CPU and allocations per request.
func BenchmarkProxyCPU(b *testing.B) {
	eng := instantEngine(b)
	p, err := New(Config{Mode: ModeColocated, HealthInterval: time.Hour, Workers: []Worker{{Name: "r0", Role: RoleColocated, URL: eng.URL}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	prompt := make([]int, 4096)
	for i := range prompt {
		prompt[i] = 1000 + i
	}
	body := mustJSON(completion(prompt, 2))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkTimelineHugeRequestID sends colocated requests whose
// X-Request-Id is 60 KiB (a hostile client's) through the proxy's handler
// and reports the live heap each stored timeline costs (B/timeline: the
// heap after a GC, less the heap before, over the requests), the figure
// that times the store's capacity is the proxy's memory for timelines.
func BenchmarkTimelineHugeRequestID(b *testing.B) {
	srv := instantEngine(b)
	p, err := New(Config{Mode: ModeColocated, Routing: RoundRobin,
		Workers: []Worker{{Name: "w", Role: RoleColocated, URL: srv.URL}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"prompt":[1,2,3],"max_tokens":2,"stream":true}`)
	id := string(bytes.Repeat([]byte("r"), 60<<10))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		req := httptest.NewRequest(http.MethodPost, "/v1/completions", bytes.NewReader(body))
		req.Header.Set("X-Request-Id", id+strconv.Itoa(b.N)) // a fresh string, as a server reads each header
		p.Handler().ServeHTTP(httptest.NewRecorder(), req)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "B/timeline")
	runtime.KeepAlive(p)
}
