package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/honetest"
)

// BenchmarkProxyProcessOverhead is the proxy's added latency as deployed:
// deploy up starts a fake instant engine and the real proxy as processes of
// their own (so the load generator's garbage collection and scheduling are
// not the proxy's), and requests go straight to the engine or through the
// proxy in alternating blocks of 250 at 500 requests/s, open loop. Run with
// -benchtime 3000x (requests per side).
func BenchmarkProxyProcessOverhead(b *testing.B) {
	b.Setenv("HONE_DEPLOY_FAKE", "worker")
	for _, topo := range []string{"topology: {kind: colocated, replicas: 1, tp: 1}", onePoneD} {
		name := "colocated"
		if topo == onePoneD {
			name = "disaggregated"
		}
		b.Run(name, func(b *testing.B) {
			s := testSpec(b, topo)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d, err := Up(ctx, s, UpOptions{StateDir: b.TempDir(), VLLM: os.Args[0], Hone: os.Args[0], Owned: true, HealthTimeout: 20 * time.Second, Grace: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Down(time.Second)
			engine := d.State.Processes[len(d.State.Processes)-2].URL // the decode worker or the replica
			prompt := make([]int, 4096)
			for i := range prompt {
				prompt[i] = 1000 + i
			}
			body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 2, "min_tokens": 2, "stream": true,
				"stream_options": map[string]any{"include_usage": true}, "ignore_eos": true})
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}
			du, pu := engine+"/v1/completions", d.ProxyURL()+"/v1/completions"
			n := max(b.N, 250)
			const rate = 500
			paced(b, client, du, body, 250, rate)
			paced(b, client, pu, body, 250, rate)
			b.ResetTimer()
			var direct, proxied []time.Duration
			for done := 0; done < n; done += 250 {
				k := min(250, n-done)
				direct = append(direct, paced(b, client, du, body, k, rate)...)
				proxied = append(proxied, paced(b, client, pu, body, k, rate)...)
			}
			b.StopTimer()
			honetest.ReportAdded(b, direct, proxied)
			b.ReportMetric(rate, "req/s")
		})
	}
}

// paced sends n requests at rate per second on schedule, whatever the
// answers do, and returns their latencies (send to last byte).
func paced(b *testing.B, client *http.Client, url string, body []byte, n int, rate float64) []time.Duration {
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	interval := time.Duration(float64(time.Second) / rate)
	t0 := time.Now()
	for i := range n {
		if d := time.Until(t0.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
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
			lat[i] = time.Since(start)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return lat
}
