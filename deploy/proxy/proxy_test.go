package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

type testProxy struct {
	*Proxy
	URL string
}

func startProxy(t *testing.T, cfg Config) *testProxy {
	t.Helper()
	p, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.CloseClientConnections()
		srv.Close()
	})
	return &testProxy{Proxy: p, URL: srv.URL}
}

func colocated(engines ...*fakeEngine) Config {
	c := Config{Mode: ModeColocated, HealthInterval: 50 * time.Millisecond}
	for _, e := range engines {
		c.Workers = append(c.Workers, Worker{Name: e.name, Role: RoleColocated, URL: e.srv.URL})
	}
	return c
}

func disagg(prefill, decode []*fakeEngine) Config {
	c := Config{Mode: ModeDisaggregated, HealthInterval: 50 * time.Millisecond}
	for _, e := range prefill {
		c.Workers = append(c.Workers, Worker{Name: e.name, Role: RolePrefill, URL: e.srv.URL})
	}
	for _, e := range decode {
		c.Workers = append(c.Workers, Worker{Name: e.name, Role: RoleDecode, URL: e.srv.URL})
	}
	return c
}

var testClient = &http.Client{Timeout: 10 * time.Second}

// completion is the request the live workload sends (ARCHITECTURE.md).
func completion(prompt []int, maxTokens int) map[string]any {
	return map[string]any{
		"model": "m", "prompt": prompt, "max_tokens": maxTokens, "min_tokens": maxTokens,
		"temperature": 0, "ignore_eos": true, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "return_token_ids": true,
	}
}

func post(t *testing.T, url string, body any, header map[string]string) (int, http.Header, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(out)
}

// sessionPrompt is session s's 64-token prefix plus a per-request suffix.
func sessionPrompt(s, req int) []int {
	var p []int
	for i := range 64 {
		p = append(p, 1000*(s+1)+i)
	}
	for i := range 16 {
		p = append(p, 50_000+req*16+i)
	}
	return p
}

func TestColocatedPassThrough(t *testing.T) {
	e := newFakeEngine(t, "replica-0")
	p := startProxy(t, colocated(e))
	prompt := sessionPrompt(0, 0)
	status, h, body := post(t, p.URL, completion(prompt, 5), map[string]string{"X-Request-Id": "r1"})
	if status != 200 || h.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q: %s", status, h.Get("Content-Type"), body)
	}
	if want := expectedStream("r1", 5, len(prompt), 0); body != want {
		t.Errorf("stream changed in transit:\ngot  %q\nwant %q", body, want)
	}
	reqs := e.got()
	if len(reqs) != 1 || reqs[0].ID != "r1" {
		t.Fatalf("engine saw %+v", reqs)
	}
	var sent map[string]any
	json.Unmarshal(mustJSON(completion(prompt, 5)), &sent)
	if !reflect.DeepEqual(reqs[0].Body, sent) {
		t.Errorf("body changed: got %v want %v", reqs[0].Body, sent)
	}
	tls, _ := p.Timelines(0, 0)
	if len(tls) != 1 {
		t.Fatalf("timelines: %+v", tls)
	}
	tl := tls[0]
	if tl.Outcome != OutcomeSuccess || tl.RequestID != "r1" || tl.Decode == nil || tl.Decode.Worker != "replica-0" || tl.Status != 200 {
		t.Errorf("timeline %+v", tl)
	}
	if tl.FirstByte == nil || tl.LastByte == nil || tl.Decode.Sent.MonoNs < tl.Received.MonoNs ||
		tl.FirstByte.MonoNs < tl.Decode.Sent.MonoNs || tl.LastByte.MonoNs < tl.FirstByte.MonoNs {
		t.Errorf("timeline stamps out of order: %+v", tl)
	}
	if d := tl.Received.UnixNs - time.Now().UnixNano(); d > 0 || d < -int64(5*time.Second) {
		t.Errorf("wall stamp off by %v", time.Duration(d))
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestAffinityVsRoundRobin: with session affinity four replicas reach the
// prefix-cache hit rate of one engine; round-robin reaches less.
func TestAffinityVsRoundRobin(t *testing.T) {
	const sessions, perSession = 8, 8
	run := func(t *testing.T, engines []*fakeEngine, routing string) (hits, queries int, workersPerSession map[int]map[string]bool) {
		cfg := colocated(engines...)
		cfg.Routing = routing
		cfg.AffinityTokens = 32
		p := startProxy(t, cfg)
		workersPerSession = map[int]map[string]bool{}
		for r := range perSession {
			for i := range sessions {
				s := (i + r) % sessions // rotate the order, so round-robin does not line up with sessions
				id := fmt.Sprintf("s%d-r%d", s, r)
				status, _, body := post(t, p.URL, completion(sessionPrompt(s, r), 2), map[string]string{"X-Request-Id": id})
				if status != 200 {
					t.Fatalf("%s: %d %s", id, status, body)
				}
			}
		}
		tls, _ := p.Timelines(0, 0)
		for _, tl := range tls {
			var s int
			fmt.Sscanf(tl.RequestID, "s%d-", &s)
			if workersPerSession[s] == nil {
				workersPerSession[s] = map[string]bool{}
			}
			workersPerSession[s][tl.Decode.Worker] = true
		}
		for _, e := range engines {
			hits += e.hits
			queries += e.queries
		}
		// The front door's /metrics sums the workers' counters.
		resp, err := testClient.Get(p.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sum := 0.0
		for _, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(line, "vllm:prefix_cache_hits_total{hone_worker=") {
				var v float64
				fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
				sum += v
			}
		}
		if int(sum) != hits {
			t.Errorf("merged /metrics hits %v, workers' sum %d:\n%s", sum, hits, text)
		}
		return hits, queries, workersPerSession
	}
	single := []*fakeEngine{newFakeEngine(t, "only")}
	h1, q1, _ := run(t, single, RoundRobin)
	engines := func(prefix string) []*fakeEngine {
		var out []*fakeEngine
		for i := range 4 {
			out = append(out, newFakeEngine(t, fmt.Sprintf("%s-%d", prefix, i)))
		}
		return out
	}
	ha, qa, spread := run(t, engines("aff"), SessionAffinity)
	hr, qr, _ := run(t, engines("rr"), RoundRobin)
	if q1 != qa || q1 != qr {
		t.Fatalf("queries differ: %d %d %d", q1, qa, qr)
	}
	for s, ws := range spread {
		if len(ws) != 1 {
			t.Errorf("affinity: session %d went to %d workers", s, len(ws))
		}
	}
	// One engine: each session misses its 64-token prefix once.
	if want := sessions * (perSession - 1) * 64; h1 != want {
		t.Errorf("single engine hits %d, want %d", h1, want)
	}
	if ha != h1 {
		t.Errorf("affinity hits %d, single engine %d", ha, h1)
	}
	if hr >= ha {
		t.Errorf("round-robin hits %d, want fewer than affinity's %d", hr, ha)
	}
	t.Logf("hit rate: single %.3f affinity %.3f round-robin %.3f", float64(h1)/float64(q1), float64(ha)/float64(qa), float64(hr)/float64(qr))
}

func TestSessionHeaderAffinity(t *testing.T) {
	var es []*fakeEngine
	for i := range 3 {
		es = append(es, newFakeEngine(t, fmt.Sprintf("r%d", i)))
	}
	p := startProxy(t, colocated(es...))
	for i := range 12 {
		// Different prompts, one session header: one worker.
		post(t, p.URL, completion([]int{i, i + 1, i + 2}, 1), map[string]string{"X-Session-Id": "agent-7"})
	}
	tls, _ := p.Timelines(0, 0)
	ws := map[string]int{}
	for _, tl := range tls {
		ws[tl.Decode.Worker]++
	}
	if len(ws) != 1 || len(tls) != 12 {
		t.Errorf("one session header spread over %v", ws)
	}
}

func TestAffinityKey(t *testing.T) {
	parse := func(s string) map[string]json.RawMessage {
		var f map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	k1, ok1 := affinityKey("", parse(`{"prompt":[1,2,3,4,5]}`), 3)
	k2, _ := affinityKey("", parse(`{"prompt":[ 1, 2,3 ,9,9,9]}`), 3)
	k3, _ := affinityKey("", parse(`{"prompt":[1,2,4,4,5]}`), 3)
	if !ok1 || k1 != k2 {
		t.Errorf("same leading tokens, different keys")
	}
	if k1 == k3 {
		t.Errorf("different leading tokens, same key")
	}
	kh, _ := affinityKey("s1", parse(`{"prompt":[1,2,3]}`), 3)
	kh2, _ := affinityKey("s1", parse(`{"prompt":[7]}`), 3)
	if kh != kh2 || kh == k1 {
		t.Errorf("session header must decide the key")
	}
	if _, ok := affinityKey("", parse(`{"model":"m"}`), 3); ok {
		t.Errorf("no prompt: want no key")
	}
	ks, _ := affinityKey("", parse(`{"prompt":"def main(): pass"}`), 2)
	ks2, _ := affinityKey("", parse(`{"prompt":"def main(): return"}`), 2)
	if ks != ks2 {
		t.Errorf("text prompts with the same leading 8 bytes: different keys")
	}
}

// TestDisaggregatedProtocol checks both NIXL legs on the wire.
func TestDisaggregatedProtocol(t *testing.T) {
	pre, dec := newFakeEngine(t, "prefill-0"), newFakeEngine(t, "decode-0")
	p := startProxy(t, disagg([]*fakeEngine{pre}, []*fakeEngine{dec}))
	prompt := sessionPrompt(1, 0)
	req := completion(prompt, 3)
	req["min_completion_tokens"] = 3
	status, _, body := post(t, p.URL, req, map[string]string{"X-Request-Id": "req-9"})
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if want := expectedStream("req-9", 3, len(prompt), 0); body != want {
		t.Errorf("decode stream changed:\ngot  %q\nwant %q", body, want)
	}
	pr, dr := pre.got(), dec.got()
	if len(pr) != 1 || len(dr) != 1 {
		t.Fatalf("legs: prefill %d decode %d", len(pr), len(dr))
	}
	pb := pr[0].Body
	if pb["stream"] != false || pb["max_tokens"] != 1.0 {
		t.Errorf("prefill leg: stream %v max_tokens %v", pb["stream"], pb["max_tokens"])
	}
	for _, k := range []string{"min_tokens", "min_completion_tokens", "stream_options", "return_token_ids"} {
		if _, ok := pb[k]; ok {
			t.Errorf("prefill leg kept %s", k)
		}
	}
	wantKV := map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	if !reflect.DeepEqual(pb["kv_transfer_params"], wantKV) {
		t.Errorf("prefill kv_transfer_params = %v", pb["kv_transfer_params"])
	}
	db := dr[0].Body
	if db["stream"] != true || db["min_tokens"] != 3.0 || db["max_tokens"] != 3.0 || db["stream_options"] == nil || db["return_token_ids"] != true {
		t.Errorf("decode leg lost the original fields: %v", db)
	}
	kv, _ := db["kv_transfer_params"].(map[string]any)
	if kv["remote_engine_id"] != "prefill-0" || kv["do_remote_prefill"] != true || kv["remote_request_id"] != "req-9" {
		t.Errorf("decode kv_transfer_params = %v", kv)
	}
	if pr[0].ID != "req-9" || dr[0].ID != "req-9" {
		t.Errorf("X-Request-Id: prefill %q decode %q", pr[0].ID, dr[0].ID)
	}
	tls, _ := p.Timelines(0, 0)
	tl := tls[0]
	if tl.Outcome != OutcomeSuccess || len(tl.Prefill) != 1 || tl.Prefill[0].Answered == nil || tl.Retries != 0 {
		t.Fatalf("timeline %+v", tl)
	}
	if tl.Decode.Sent.MonoNs < tl.Prefill[0].Answered.MonoNs {
		t.Errorf("decode sent before prefill answered")
	}
}

func TestP2pNcclRequestID(t *testing.T) {
	pre, dec := newFakeEngine(t, "prefill-0"), newFakeEngine(t, "decode-0")
	cfg := disagg([]*fakeEngine{pre}, []*fakeEngine{dec})
	cfg.Connector = P2pNcclConnector
	cfg.Workers[0].KVAddr, cfg.Workers[1].KVAddr = "127.0.0.1:21001", "127.0.0.1:21002"
	p := startProxy(t, cfg)
	if status, _, body := post(t, p.URL, completion([]int{1, 2, 3}, 2), map[string]string{"X-Request-Id": "u1"}); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	want := "___prefill_addr_127.0.0.1:21001___decode_addr_127.0.0.1:21002_u1"
	if pre.got()[0].ID != want || dec.got()[0].ID != want {
		t.Errorf("ids: prefill %q decode %q, want %q", pre.got()[0].ID, dec.got()[0].ID, want)
	}
	if _, ok := dec.got()[0].Body["kv_transfer_params"]; ok {
		t.Errorf("P2pNccl decode leg must not carry kv_transfer_params")
	}
}

// P2pNcclConnector has no decode-side fallback: its decode worker waits for
// the prompt's KV whatever happens, so a failed prefill is a 502 and the
// decode worker never sees the request.
func TestP2pNcclPrefillFailureIs502(t *testing.T) {
	pre, dec := newFakeEngine(t, "prefill-0"), newFakeEngine(t, "decode-0")
	pre.set(func(f *fakeEngine) { f.failStatus = 503 })
	cfg := disagg([]*fakeEngine{pre}, []*fakeEngine{dec})
	cfg.Connector = P2pNcclConnector
	cfg.Workers[0].KVAddr, cfg.Workers[1].KVAddr = "127.0.0.1:21001", "127.0.0.1:21002"
	cfg.HealthInterval = time.Hour
	p := startProxy(t, cfg)
	status, _, body := post(t, p.URL, completion([]int{1, 2, 3}, 2), map[string]string{"X-Request-Id": "u2"})
	if status != http.StatusBadGateway || !strings.Contains(body, "no decode-side fallback") {
		t.Errorf("%d %s; want 502 naming the missing fallback", status, body)
	}
	if n := len(dec.got()); n != 0 {
		t.Errorf("the decode worker got %d requests, want none", n)
	}
	tls, _ := p.Timelines(0, 0)
	if len(tls) != 1 || tls[0].Outcome != OutcomeFailed || tls[0].Decode != nil {
		t.Errorf("timeline %+v", tls)
	}
}

func TestPrefillRetryAndFallback(t *testing.T) {
	cases := []struct {
		name         string
		setup        func(p0, p1 *fakeEngine)
		single       bool
		wantOutcome  string
		wantRetries  int
		wantParamsOn string // which prefill worker's params reach decode; "" none
	}{
		{"first fails, retry succeeds", func(p0, p1 *fakeEngine) {
			p0.set(func(f *fakeEngine) { f.failStatus = 500 })
		}, false, OutcomeSuccess, 1, "p1"},
		{"missing params, retry succeeds", func(p0, p1 *fakeEngine) {
			p0.set(func(f *fakeEngine) { f.noParams = true })
		}, false, OutcomeSuccess, 1, "p1"},
		{"both fail, fallback", func(p0, p1 *fakeEngine) {
			p0.set(func(f *fakeEngine) { f.failStatus = 503 })
			p1.set(func(f *fakeEngine) { f.noParams = true })
		}, false, OutcomeFallback, 1, ""},
		{"only prefill dead, fallback", func(p0, p1 *fakeEngine) {
			p0.srv.Close()
		}, true, OutcomeFallback, 0, ""},
		{"prefill slower than its timeout, fallback", func(p0, p1 *fakeEngine) {
			p0.set(func(f *fakeEngine) { f.hangHeaders = true })
		}, true, OutcomeFallback, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p0, p1, dec := newFakeEngine(t, "p0"), newFakeEngine(t, "p1"), newFakeEngine(t, "d0")
			pres := []*fakeEngine{p0, p1}
			if c.single {
				pres = pres[:1]
			}
			cfg := disagg(pres, []*fakeEngine{dec})
			cfg.PrefillTimeout = 10 * time.Second
			if strings.Contains(c.name, "timeout") {
				cfg.PrefillTimeout = 300 * time.Millisecond
			}
			cfg.HealthInterval = time.Hour // keep rotation fixed: the order of tries is the test
			c.setup(p0, p1)
			px := startProxy(t, cfg)
			// Session header picks p0 first: find one that does.
			hdr := ""
			for i := 0; hdr == ""; i++ {
				k, _ := affinityKey(fmt.Sprint(i), nil, 1)
				if px.set().pools[RolePrefill].pick(k, true, nil).Name == "p0" {
					hdr = fmt.Sprint(i)
				}
			}
			status, _, body := post(t, px.URL, completion([]int{5, 6, 7}, 2), map[string]string{"X-Session-Id": hdr, "X-Request-Id": "q"})
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			if want := expectedStream("q", 2, 3, 0); body != want {
				t.Errorf("stream:\ngot  %q\nwant %q", body, want)
			}
			tls, _ := px.Timelines(0, 0)
			tl := tls[0]
			if tl.Outcome != c.wantOutcome || tl.Retries != c.wantRetries {
				t.Errorf("outcome %s retries %d, want %s %d (%+v)", tl.Outcome, tl.Retries, c.wantOutcome, c.wantRetries, tl)
			}
			kv, has := dec.got()[0].Body["kv_transfer_params"].(map[string]any)
			if c.wantParamsOn == "" && has {
				t.Errorf("fallback decode carried params %v", kv)
			}
			if c.wantParamsOn != "" && kv["remote_engine_id"] != c.wantParamsOn {
				t.Errorf("decode params from %v, want %s", kv["remote_engine_id"], c.wantParamsOn)
			}
			if n := px.Counts()[c.wantOutcome]; n != 1 {
				t.Errorf("counted %d %s", n, c.wantOutcome)
			}
		})
	}
}

func TestPrefillRejectsBadRequest(t *testing.T) {
	p0, p1, dec := newFakeEngine(t, "p0"), newFakeEngine(t, "p1"), newFakeEngine(t, "d0")
	p0.set(func(f *fakeEngine) { f.failStatus = 400 })
	p1.set(func(f *fakeEngine) { f.failStatus = 400 })
	px := startProxy(t, disagg([]*fakeEngine{p0, p1}, []*fakeEngine{dec}))
	status, _, body := post(t, px.URL, completion([]int{1}, 2), nil)
	if status != 400 || !strings.Contains(body, "failing on purpose") {
		t.Errorf("%d %s", status, body)
	}
	if len(dec.got()) != 0 || len(p0.got())+len(p1.got()) != 1 {
		t.Errorf("a bad request was retried or decoded")
	}
	if px.Counts()[OutcomeFailed] != 1 {
		t.Errorf("counts %v", px.Counts())
	}
}

// TestStalls: a stalled decode or replica trips a timeout; the client gets
// an answer or a clean error well inside its own deadline.
func TestStalls(t *testing.T) {
	cases := []struct {
		name       string
		setup      func(f *fakeEngine)
		wantStatus int
		wantInBody string
	}{
		{"no headers", func(f *fakeEngine) { f.hangHeaders = true }, http.StatusGatewayTimeout, "sent no response within"},
		{"mid-stream", func(f *fakeEngine) { f.stallAfter = 2 }, http.StatusOK, "was silent for"},
	}
	for _, mode := range []string{ModeColocated, ModeDisaggregated} {
		for _, c := range cases {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				dec := newFakeEngine(t, "d0")
				cfg := colocated(dec)
				if mode == ModeDisaggregated {
					cfg = disagg([]*fakeEngine{newFakeEngine(t, "p0")}, []*fakeEngine{dec})
				}
				cfg.DecodeTimeout, cfg.StreamIdleTimeout = 200*time.Millisecond, 200*time.Millisecond
				c.setup(dec)
				px := startProxy(t, cfg)
				start := time.Now()
				status, _, body := post(t, px.URL, completion([]int{1, 2}, 5), nil)
				if el := time.Since(start); el > 3*time.Second {
					t.Errorf("answered after %v", el)
				}
				if status != c.wantStatus || !strings.Contains(body, c.wantInBody) {
					t.Errorf("%d %q", status, body)
				}
				if c.wantStatus == 200 && strings.Contains(body, "[DONE]") {
					t.Errorf("a cut stream must not end with [DONE]")
				}
				tls, _ := px.Timelines(0, 0)
				if tls[0].Outcome != OutcomeTimeout || px.Counts()[OutcomeTimeout] != 1 {
					t.Errorf("outcome %s, counts %v", tls[0].Outcome, px.Counts())
				}
			})
		}
	}
}

func TestDecodeFailureIsCleanError(t *testing.T) {
	t.Run("5xx", func(t *testing.T) {
		pre, dec := newFakeEngine(t, "p0"), newFakeEngine(t, "d0")
		dec.set(func(f *fakeEngine) { f.failStatus = 500 })
		px := startProxy(t, disagg([]*fakeEngine{pre}, []*fakeEngine{dec}))
		status, _, body := post(t, px.URL, completion([]int{1}, 2), nil)
		if status != 500 || !strings.Contains(body, "failing on purpose") {
			t.Errorf("%d %s", status, body)
		}
		if px.Counts()[OutcomeFailed] != 1 {
			t.Errorf("counts %v", px.Counts())
		}
	})
	t.Run("down", func(t *testing.T) {
		pre, dec := newFakeEngine(t, "p0"), newFakeEngine(t, "d0")
		cfg := disagg([]*fakeEngine{pre}, []*fakeEngine{dec})
		dec.srv.Close()
		px := startProxy(t, cfg)
		status, _, body := post(t, px.URL, completion([]int{1}, 2), nil)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if status != http.StatusBadGateway || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != 502 || !strings.Contains(e.Error.Message, "d0") {
			t.Errorf("%d %s", status, body)
		}
	})
}

func TestHealthRotation(t *testing.T) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	cfg := colocated(a, b)
	cfg.Routing = RoundRobin
	px := startProxy(t, cfg)
	a.set(func(f *fakeEngine) { f.unhealthy = true })
	waitFor(t, "a out of rotation", func() bool { return !px.set().all[0].up.Load() })
	for range 4 {
		post(t, px.URL, completion([]int{1}, 1), nil)
	}
	if n := len(a.got()); n != 0 {
		t.Errorf("a out of rotation got %d requests", n)
	}
	a.set(func(f *fakeEngine) { f.unhealthy = false })
	waitFor(t, "a back in rotation", func() bool { return px.set().all[0].up.Load() })
	for range 4 {
		post(t, px.URL, completion([]int{1}, 1), nil)
	}
	if n := len(a.got()); n != 2 {
		t.Errorf("a back in rotation got %d of 4 round-robin requests", n)
	}
	resp, _ := testClient.Get(px.URL + "/hone/metrics")
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), `hone_proxy_worker_transitions_total{to="out",worker="a"} 1`) {
		t.Errorf("transition not counted:\n%s", text)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCountsAddUp: under a mix of faults, concurrent requests each end with
// exactly one outcome, and the counts, the timelines and the requests sent
// agree.
func TestCountsAddUp(t *testing.T) {
	p0, p1 := newFakeEngine(t, "p0"), newFakeEngine(t, "p1")
	d0, d1 := newFakeEngine(t, "d0"), newFakeEngine(t, "d1")
	p0.set(func(f *fakeEngine) { f.failStatus = 500 })
	d1.set(func(f *fakeEngine) { f.stallAfter = 1 })
	cfg := disagg([]*fakeEngine{p0, p1}, []*fakeEngine{d0, d1})
	cfg.StreamIdleTimeout = 500 * time.Millisecond
	cfg.Routing = RoundRobin
	px := startProxy(t, cfg)
	const n = 40
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == n-1 {
				p1.set(func(f *fakeEngine) { f.noParams = true }) // late: some fallbacks
			}
			statuses[i], _, _ = post(t, px.URL, completion([]int{i, i, i}, 3), nil)
		}()
	}
	wg.Wait()
	c := px.Counts()
	total := uint64(0)
	for _, o := range Outcomes {
		total += c[o]
	}
	tls, _ := px.Timelines(0, 0)
	if total != n || len(tls) != n {
		t.Fatalf("sent %d, counted %d (%v), timelines %d", n, total, c, len(tls))
	}
	byOutcome := map[string]uint64{}
	for _, tl := range tls {
		byOutcome[tl.Outcome]++
	}
	for _, o := range Outcomes {
		if byOutcome[o] != c[o] {
			t.Errorf("%s: timelines %d, counter %d", o, byOutcome[o], c[o])
		}
	}
	if c[OutcomeTimeout] == 0 || c[OutcomeSuccess]+c[OutcomeFallback] == 0 {
		t.Errorf("want both timeouts (stalled d1) and answers: %v", c)
	}
}

func TestTimelineEndpoint(t *testing.T) {
	e := newFakeEngine(t, "r")
	px := startProxy(t, colocated(e))
	for range 5 {
		post(t, px.URL, completion([]int{1}, 1), nil)
	}
	get := func(q string) TimelinePage {
		resp, err := testClient.Get(px.URL + "/hone/timeline" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p TimelinePage
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := get("?limit=3")
	if len(p.Timelines) != 3 || p.Next != 3 || p.Timelines[0].Seq != 1 {
		t.Fatalf("page 1: next %d, %d timelines", p.Next, len(p.Timelines))
	}
	p = get(fmt.Sprintf("?since=%d", p.Next))
	if len(p.Timelines) != 2 || p.Next != 5 || p.Counts[OutcomeSuccess] != 5 {
		t.Fatalf("page 2: %+v", p)
	}
	if p = get("?since=5"); len(p.Timelines) != 0 || p.Next != 5 {
		t.Fatalf("page 3: %+v", p)
	}
	resp, _ := testClient.Get(px.URL + "/hone/timeline?since=x")
	if resp.StatusCode != 400 {
		t.Errorf("bad since: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

func TestTimelineRing(t *testing.T) {
	r := newTimelines(3, DefaultTimelineBytes)
	for i := range 5 {
		r.add(&Timeline{RequestID: fmt.Sprint(i)})
	}
	out, next, dropped := r.since(0, 0)
	if len(out) != 3 || out[0].RequestID != "2" || next != 5 || dropped != 2 {
		t.Errorf("got %d from %q, next %d, dropped %d", len(out), out[0].RequestID, next, dropped)
	}
}

func TestMergeExposition(t *testing.T) {
	a := "# HELP vllm:x X.\n# TYPE vllm:x counter\nvllm:x_total{engine=\"0\"} 3\n# TYPE vllm:g gauge\nvllm:g 1\n"
	b := "# HELP vllm:x X.\n# TYPE vllm:x counter\nvllm:x_total{engine=\"0\"} 4\n"
	var out bytes.Buffer
	mergeExposition(&out, []string{"w0", "w1"}, [][]byte{[]byte(a), []byte(b), nil}[:2])
	want := "# HELP vllm:x X.\n# TYPE vllm:x counter\nvllm:x_total{hone_worker=\"w0\",engine=\"0\"} 3\nvllm:x_total{hone_worker=\"w1\",engine=\"0\"} 4\n# TYPE vllm:g gauge\nvllm:g{hone_worker=\"w0\"} 1\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestForwardAndHealth(t *testing.T) {
	e := newFakeEngine(t, "r")
	px := startProxy(t, colocated(e))
	resp, err := testClient.Get(px.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", err, resp)
	}
	resp.Body.Close()
	// Unknown routes go to a worker: the fake answers 404 for /v1/models.
	resp, _ = testClient.Get(px.URL + "/v1/models")
	if resp.StatusCode != 404 {
		t.Errorf("forwarded /v1/models: %d", resp.StatusCode)
	}
	resp.Body.Close()
	status, _, body := post(t, px.URL, "not an object", nil)
	if status != 400 || !strings.Contains(body, "not a JSON object") {
		t.Errorf("bad body: %d %s", status, body)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: "pd"}, "mode:"},
		{Config{Mode: ModeColocated}, "at least one"},
		{Config{Mode: ModeDisaggregated, Workers: []Worker{{Name: "a", Role: RolePrefill, URL: "http://x:1"}}}, "at least one of each"},
		{Config{Mode: ModeColocated, Workers: []Worker{{Name: "a", Role: RoleColocated, URL: "x:1"}}}, "workers[0].url"},
		{Config{Mode: ModeColocated, Routing: "random", Workers: []Worker{{Name: "a", Role: RoleColocated, URL: "http://x:1"}}}, "routing:"},
	} {
		if _, err := New(c.cfg, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestSpliceAndEncode(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1}`:     `{"k":{"x":2},"a":1}`,
		`{}`:          `{"k":{"x":2}}`,
		" { \"a\":1}": ` {"k":{"x":2},"a":1}`,
	} {
		if got := string(spliceField([]byte(in), "k", json.RawMessage(`{"x":2}`))); got != want {
			t.Errorf("splice %q = %q, want %q", in, got, want)
		}
	}
	var back map[string]any
	b := encodeFields(map[string]json.RawMessage{"a\"b": json.RawMessage(`[1,2]`), "c": json.RawMessage(`"x"`)})
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 2 || back["c"] != "x" {
		t.Errorf("encodeFields: %s %v", b, err)
	}
}

// TestTimelineByteBudget: timelines carrying a client's 60 KiB X-Request-Id
// and error text are stored with both cut to MaxTimelineValue bytes and
// marked, and the store holds no more than its byte budget: each bounded
// timeline takes 152 (the slot) + 282 (the id: 256 bytes and
// "…(truncated 61184 bytes)") + 15 (the path) + 6 (the outcome) + 282 (the
// error) = 737 bytes, so a 10,000-byte budget holds the newest 13 of 100.
func TestTimelineByteBudget(t *testing.T) {
	r := newTimelines(1000, 10_000)
	huge := strings.Repeat("i", 60<<10)
	for range 100 {
		r.add(&Timeline{RequestID: huge, Path: "/v1/completions", Outcome: OutcomeFailed, Error: huge})
	}
	n, bytes := r.held()
	if n != 13 || bytes != 13*737 {
		t.Errorf("held %d timelines of %d bytes, want 13 of %d", n, bytes, 13*737)
	}
	out, next, dropped := r.since(0, 0)
	if len(out) != 13 || out[0].Seq != 88 || next != 100 || dropped != 87 {
		t.Fatalf("since(0): %d timelines from seq %d, next %d, dropped %d", len(out), out[0].Seq, next, dropped)
	}
	want := strings.Repeat("i", 256) + "…(truncated 61184 bytes)"
	for _, tl := range out {
		if tl.RequestID != want || tl.Error != want {
			t.Fatalf("stored id %d bytes, error %d bytes; want both %q", len(tl.RequestID), len(tl.Error), want)
		}
	}
	// A cut never splits a character: 255 ASCII bytes then "é" (2 bytes).
	if got := truncateValue(strings.Repeat("a", 255) + "é" + strings.Repeat("b", 10)); got != strings.Repeat("a", 255)+"…(truncated 12 bytes)" {
		t.Errorf("cut inside a character: %q", got[250:])
	}
}

// TestTimelineKeepsBoundedRequestID: through the proxy, a client's 60 KiB
// X-Request-Id reaches the worker and comes back whole, while the timeline
// at GET /hone/timeline keeps it cut to MaxTimelineValue and marked.
func TestTimelineKeepsBoundedRequestID(t *testing.T) {
	e := newFakeEngine(t, "r")
	px := startProxy(t, colocated(e))
	id := strings.Repeat("r", 60<<10)
	status, h, body := post(t, px.URL, completion([]int{1, 2, 3}, 2), map[string]string{"X-Request-Id": id})
	if status != 200 || h.Get("X-Request-Id") != id {
		t.Fatalf("POST: %d, id of %d bytes back, %s", status, len(h.Get("X-Request-Id")), body)
	}
	if got := e.got(); len(got) != 1 || got[0].ID != id {
		t.Fatalf("the worker did not get the whole id")
	}
	resp, err := testClient.Get(px.URL + "/hone/timeline")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page TimelinePage
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("r", 256) + "…(truncated 61184 bytes)"
	if len(page.Timelines) != 1 || page.Timelines[0].RequestID != want {
		t.Fatalf("timeline: %d timelines, id %.300q", len(page.Timelines), page.Timelines[0].RequestID)
	}
}
