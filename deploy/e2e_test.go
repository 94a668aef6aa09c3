package deploy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/internal/honetest"
)

// honeBinary is $HONE_BIN, else hone built once for the test process.
func honeBinary(t *testing.T) string { return honetest.Binary(t) }

// TestEmulatorDisaggregatedEndToEnd deploys real `hone sim serve` workers
// (two prefill, one decode) and the proxy with deploy up, crashes one
// prefill worker mid-run by fault injection, and checks that no request is
// lost: each ends as success or fallback, the counts add up to the requests
// sent, and down leaves no process behind.
func TestEmulatorDisaggregatedEndToEnd(t *testing.T) {
	hone := honeBinary(t)
	base := freePorts(t, 6)
	traceDir := filepath.Join(t.TempDir(), "not", "yet") // up makes it
	y := fmt.Sprintf(`
name: e2e
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct}
gpus: {budget: 3}
topology:
  kind: disaggregated
  prefill: {replicas: 2, tp: 1}
  decode: {replicas: 1, tp: 1}
kv_connector: {side_channel_port: %d, load_failure_policy: recompute}
routing: {policy: round_robin, health_interval: 200ms, prefill_timeout: 5s, decode_timeout: 10s, stream_idle_timeout: 5s}
network: {proxy_port: %d, worker_port: %d}
emulator:
  profile: qwen2.5-coder-0.5b-h200
  time_scale: 0.05
  faults: ["prefill-0=crash-after=3"]
  trace_dir: %s
`, base+4, base, base+1, traceDir)
	s, err := ParseSpec([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := Up(ctx, s, UpOptions{StateDir: t.TempDir(), Hone: hone, Owned: true, HealthTimeout: 30 * time.Second, Grace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Down(time.Second) })
	st, _ := ReadState(d.StatePath)
	pids := members(t, st)

	const n = 24
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	bodies := make([]string, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"model":"Qwen/Qwen2.5-Coder-0.5B-Instruct","prompt":"session %d: func main() { fmt.Println(%d) }","max_tokens":8,"min_tokens":8,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, i%4, i)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.ProxyURL()+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				bodies[i] = err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies[i] = string(b)
		}()
	}
	wg.Wait()
	page, err := proxy.FetchTimelines(ctx, d.ProxyURL(), 0)
	if err != nil {
		t.Fatal(err)
	}
	total, retried := uint64(0), 0
	for _, o := range proxy.Outcomes {
		total += page.Counts[o]
	}
	for _, tl := range page.Timelines {
		retried += tl.Retries
	}
	if total != n || len(page.Timelines) != n {
		t.Fatalf("sent %d, counted %d %v, timelines %d", n, total, page.Counts, len(page.Timelines))
	}
	if lost := page.Counts[proxy.OutcomeFailed] + page.Counts[proxy.OutcomeTimeout]; lost != 0 {
		for _, tl := range page.Timelines {
			if tl.Outcome != proxy.OutcomeSuccess && tl.Outcome != proxy.OutcomeFallback {
				t.Logf("%s: %s %s", tl.RequestID, tl.Outcome, tl.Error)
			}
		}
		t.Errorf("%d requests lost to the prefill crash: %v", lost, page.Counts)
	}
	for i, b := range bodies {
		// Every answer is whole: all 8 tokens counted, and the stream's end.
		if !strings.Contains(b, `"completion_tokens":8`) || !strings.HasSuffix(b, "data: [DONE]\n\n") {
			t.Errorf("request %d: incomplete answer %q", i, b)
			break
		}
	}
	if retried == 0 {
		t.Errorf("prefill-0 crashed after 3 requests, yet nothing was retried: %v", page.Counts)
	}
	t.Logf("counts %v, retries %d", page.Counts, retried)
	if err := d.Down(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	assertAllGone(t, pids)
	// Every request the decode worker answered is in its trace, in the
	// directory up created.
	if b, err := os.ReadFile(filepath.Join(traceDir, "decode-0.jsonl")); err != nil || strings.Count(string(b), `"event":"request"`) != n {
		t.Errorf("decode-0 trace in emulator.trace_dir: %v, %d request lines, want %d", err, strings.Count(string(b), `"event":"request"`), n)
	}
}

// TestEmulatorAffinityHitRate deploys emulator replicas and measures the
// prefix-cache hit rate through the proxy's merged /metrics: two replicas
// with session affinity match one engine; round-robin does worse.
func TestEmulatorAffinityHitRate(t *testing.T) {
	hone := honeBinary(t)
	prefix := strings.Repeat("func handle(w http.ResponseWriter, r *http.Request) { body, _ := io.ReadAll(r.Body); w.Write(body) }\n", 6)
	hitRate := func(t *testing.T, replicas int, policy string) float64 {
		base := freePorts(t, replicas+1)
		y := fmt.Sprintf(`
name: hits
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct}
gpus: {budget: %d}
topology: {kind: colocated, replicas: %d, tp: 1}
routing: {policy: %s, affinity_tokens: 16}
network: {proxy_port: %d, worker_port: %d}
emulator: {profile: qwen2.5-coder-0.5b-h200, time_scale: 0.05}
`, replicas, replicas, policy, base, base+1)
		s, err := ParseSpec([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		d, err := Up(ctx, s, UpOptions{StateDir: t.TempDir(), Hone: hone, Owned: true, HealthTimeout: 30 * time.Second, Grace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Down(time.Second)
		const sessions, rounds = 4, 5
		for r := range rounds {
			for i := range sessions {
				sess := (i + r) % sessions
				body := fmt.Sprintf(`{"model":"Qwen/Qwen2.5-Coder-0.5B-Instruct","prompt":"// session %d\n%s// request %d","max_tokens":2,"stream":false}`, sess, prefix, r)
				body = strings.ReplaceAll(body, "\n", `\n`)
				resp, err := http.Post(d.ProxyURL()+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, b)
				}
			}
		}
		resp, err := http.Get(d.ProxyURL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var hits, queries float64
		for _, line := range strings.Split(string(text), "\n") {
			var v float64
			if f := strings.Fields(line); len(f) == 2 {
				fmt.Sscan(f[1], &v)
			}
			switch {
			case strings.HasPrefix(line, "vllm:prefix_cache_hits_total{"):
				hits += v
			case strings.HasPrefix(line, "vllm:prefix_cache_queries_total{"):
				queries += v
			}
		}
		if queries == 0 {
			t.Fatalf("no prefix-cache counters in the merged /metrics:\n%s", text)
		}
		return hits / queries
	}
	single := hitRate(t, 1, RoundRobin)
	affinity := hitRate(t, 2, SessionAffinity)
	rr := hitRate(t, 2, RoundRobin)
	t.Logf("hit rate: one engine %.4f, two with affinity %.4f, two round-robin %.4f", single, affinity, rr)
	if affinity != single {
		t.Errorf("affinity hit rate %.4f, one engine %.4f", affinity, single)
	}
	if rr >= affinity {
		t.Errorf("round-robin hit rate %.4f, want below affinity's %.4f", rr, affinity)
	}
}

// TestEmulatorFallbackAndStall: a prefill worker that refuses KV makes every
// request a counted fallback (decode-side prefill), and a decode engine that
// freezes trips the stream timeout: the client gets a clean end, not a hang.
func TestEmulatorFallbackAndStall(t *testing.T) {
	hone := honeBinary(t)
	base := freePorts(t, 5)
	y := fmt.Sprintf(`
name: stall
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct}
gpus: {budget: 2}
topology:
  kind: disaggregated
  prefill: {replicas: 1, tp: 1}
  decode: {replicas: 1, tp: 1}
kv_connector: {side_channel_port: %d}
routing: {decode_timeout: 3s, stream_idle_timeout: 2s}
network: {proxy_port: %d, worker_port: %d}
emulator:
  profile: qwen2.5-coder-0.5b-h200
  time_scale: 0.05
  faults: ["prefill-0=refuse-kv", "decode-0=stall=600s@3"]
`, base+3, base, base+1)
	s, err := ParseSpec([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := Up(ctx, s, UpOptions{StateDir: t.TempDir(), Hone: hone, Owned: true, HealthTimeout: 30 * time.Second, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Down(time.Second)
	for i := range 3 {
		body := fmt.Sprintf(`{"model":"Qwen/Qwen2.5-Coder-0.5B-Instruct","prompt":"request %d","max_tokens":4,"stream":true}`, i)
		start := time.Now()
		resp, err := http.Post(d.ProxyURL()+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if el := time.Since(start); el > 10*time.Second {
			t.Errorf("request %d answered after %v", i, el)
		}
	}
	page, err := proxy.FetchTimelines(ctx, d.ProxyURL(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tl := range page.Timelines {
		got = append(got, tl.Outcome)
	}
	if want := []string{proxy.OutcomeFallback, proxy.OutcomeFallback, proxy.OutcomeTimeout}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("outcomes %v, want %v", got, want)
	}
}
