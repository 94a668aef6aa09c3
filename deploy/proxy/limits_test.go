package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/guard"
	"github.com/hone-llm/hone/internal/guard/guardtest"
)

// listenProxy runs p.ListenAndServe (the real server, with its limits) on
// a free loopback port.
func listenProxy(t *testing.T, cfg Config) (*Proxy, string) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	p, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- p.ListenAndServe(ctx, func(a string) { addr <- a }, time.Second) }()
	select {
	case a := <-addr:
		t.Cleanup(func() { cancel(); <-done })
		return p, a
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	return nil, ""
}

// paddedCompletion is a valid completion body of exactly n bytes.
func paddedCompletion(t *testing.T, n int) []byte {
	t.Helper()
	b, _ := json.Marshal(completion([]int{1, 2, 3}, 1))
	if len(b) > n {
		t.Fatalf("body of %d bytes will not fit %d", len(b), n)
	}
	return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
}

func postRaw(t *testing.T, url string, body []byte) (int, string) {
	t.Helper()
	resp, err := testClient.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBodyLimit: a body of exactly --max-body-bytes is served; one byte
// more is 413 with an OpenAI-style error naming the limit.
func TestBodyLimit(t *testing.T) {
	e := newFakeEngine(t, "r")
	cfg := colocated(e)
	cfg.MaxBodyBytes = 4096
	px := startProxy(t, cfg)
	if code, body := postRaw(t, px.URL, paddedCompletion(t, 4096)); code != 200 || !strings.Contains(body, "[DONE]") {
		t.Errorf("exactly the limit: %d %.200s", code, body)
	}
	code, body := postRaw(t, px.URL, paddedCompletion(t, 4097))
	var e413 struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e413); err != nil || code != http.StatusRequestEntityTooLarge ||
		e413.Error.Code != 413 || !strings.Contains(e413.Error.Message, "limit of 4096 bytes") {
		t.Errorf("one byte over: %d %s", code, body)
	}
	if len(e.got()) != 1 {
		t.Errorf("worker saw %d requests, want 1", len(e.got()))
	}
	if n := px.guard.InUse(); n != 0 {
		t.Errorf("body bytes still held: %d", n)
	}
}

// TestBodyTimeout: a body trickled a byte at a time is cut at the body
// deadline: 408 naming it, the connection closed, the server's goroutine
// for it gone.
func TestBodyTimeout(t *testing.T) {
	e := newFakeEngine(t, "r")
	cfg := colocated(e)
	cfg.BodyTimeout = 300 * time.Millisecond
	_, addr := listenProxy(t, cfg)
	time.Sleep(100 * time.Millisecond) // let the health loop's first round settle
	guardtest.CheckTrickledBody(t, addr, "/v1/completions", cfg.BodyTimeout)
}

// TestIdleTimeout: a keep-alive connection left idle is closed after
// IdleTimeout.
func TestIdleTimeout(t *testing.T) {
	e := newFakeEngine(t, "r")
	cfg := colocated(e)
	cfg.IdleTimeout = 200 * time.Millisecond
	_, addr := listenProxy(t, cfg)
	guardtest.CheckIdleTimeout(t, addr, cfg.IdleTimeout)
}

// TestConnectionCap: with MaxConnections busy, the next client waits, and
// is served when one closes.
func TestConnectionCap(t *testing.T) {
	e := newFakeEngine(t, "r")
	cfg := colocated(e)
	cfg.MaxConnections = 2
	cfg.ReadHeaderTimeout = time.Minute
	_, addr := listenProxy(t, cfg)
	guardtest.CheckConnectionCap(t, addr, cfg.MaxConnections)
}

// TestConnectionCapReclaimsIdle: with every slot held by idle keep-alive
// connections, a new client is served at once and an idle one is closed.
func TestConnectionCapReclaimsIdle(t *testing.T) {
	e := newFakeEngine(t, "r")
	cfg := colocated(e)
	cfg.MaxConnections = 2
	_, addr := listenProxy(t, cfg)
	guardtest.CheckCapReclaimsIdle(t, addr, cfg.MaxConnections)
}

// TestTimelineLimitMax: a page larger than MaxTimelinePage is refused with
// a 400 naming limit and the maximum; the maximum itself is served.
func TestTimelineLimitMax(t *testing.T) {
	e := newFakeEngine(t, "r")
	px := startProxy(t, colocated(e))
	post(t, px.URL, completion([]int{1}, 1), nil)
	resp, err := testClient.Get(px.URL + fmt.Sprintf("/hone/timeline?limit=%d", MaxTimelinePage+1))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "limit: at most 10000") {
		t.Errorf("limit over the max: %d %s", resp.StatusCode, b)
	}
	page, err := FetchTimelines(context.Background(), px.URL, 0)
	if err != nil || len(page.Timelines) != 1 {
		t.Errorf("FetchTimelines: %v %+v", err, page)
	}
}

// TestLimitsFromConfig: the limits come from the config (and its JSON,
// written by deploy), defaults filled for the rest.
func TestLimitsFromConfig(t *testing.T) {
	var c Config
	if err := json.Unmarshal([]byte(`{"mode":"colocated","workers":[{"name":"r","role":"colocated","url":"http://127.0.0.1:1"}],"max_body_bytes":1234,"max_connections":7}`), &c); err != nil {
		t.Fatal(err)
	}
	p, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := p.Config().Limits
	if l.MaxBodyBytes != 1234 || l.MaxConnections != 7 || l.BodyTimeout != guard.DefaultBodyTimeout || l.IdleTimeout != guard.DefaultIdleTimeout {
		t.Errorf("limits %+v", l)
	}
}

// TestBodyBudgetHoldsLegCopies: while a request is served, its body holds
// the budget colocated, and three times it disaggregated (the body, the
// prefill leg's and the decode leg's), since the proxy keeps those until
// the answer ends.
func TestBodyBudgetHoldsLegCopies(t *testing.T) {
	body := paddedCompletion(t, 1000)
	for _, c := range []struct {
		mode string
		want int64
	}{{ModeColocated, 1000}, {ModeDisaggregated, 3000}} {
		pre, dec := newFakeEngine(t, "p"), newFakeEngine(t, "d")
		dec.set(func(f *fakeEngine) { f.delay = 300 * time.Millisecond })
		cfg := colocated(dec)
		if c.mode == ModeDisaggregated {
			cfg = disagg([]*fakeEngine{pre}, []*fakeEngine{dec})
		}
		px := startProxy(t, cfg)
		done := make(chan int, 1)
		go func() { code, _ := postRaw(t, px.URL, body); done <- code }()
		var most int64
		for len(done) == 0 {
			most = max(most, px.guard.InUse())
			time.Sleep(time.Millisecond)
		}
		if code := <-done; code != 200 {
			t.Errorf("%s: %d", c.mode, code)
		}
		if most != c.want {
			t.Errorf("%s: held %d bytes of the budget, want %d", c.mode, most, c.want)
		}
		if n := px.guard.InUse(); n != 0 {
			t.Errorf("%s: held after: %d", c.mode, n)
		}
	}
}
