package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy/proxy/guard"
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

// rawRequest writes a request's head on c.
func rawHead(t *testing.T, c net.Conn, method, path string, contentLength int) {
	t.Helper()
	h := method + " " + path + " HTTP/1.1\r\nHost: x\r\n"
	if contentLength >= 0 {
		h += fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", contentLength)
	}
	if _, err := io.WriteString(c, h+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

// waitClosed reads c to EOF (or a reset) and fails if that takes longer
// than a generous bound.
func waitClosed(t *testing.T, c net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	if err != nil && (errorsAs(err, &ne) && ne.Timeout()) {
		t.Fatalf("%s: connection still open after 20 s", what)
	}
}

func errorsAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// settle waits until the process's goroutines number at most n.
func settle(t *testing.T, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Errorf("%s: %d goroutines, want at most %d as before", what, runtime.NumGoroutine(), n)
			return
		}
		time.Sleep(20 * time.Millisecond)
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
	before := runtime.NumGoroutine()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	rawHead(t, c, "POST", "/v1/completions", 1000)
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		for {
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if el := time.Since(start); el < cfg.BodyTimeout {
		t.Errorf("cut after %v, before the %v deadline", el, cfg.BodyTimeout)
	}
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "within 300ms") || !resp.Close {
		t.Errorf("trickled body: %d close=%v %s", resp.StatusCode, resp.Close, body)
	}
	waitClosed(t, c, br, "trickled body")
	close(stop)
	<-trickled
	c.Close()
	settle(t, before, "after the trickled connection")
}

// TestIdleTimeout: a keep-alive connection left idle is closed after
// IdleTimeout.
func TestIdleTimeout(t *testing.T) {
	e := newFakeEngine(t, "r")
	cfg := colocated(e)
	cfg.IdleTimeout = 200 * time.Millisecond
	_, addr := listenProxy(t, cfg)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rawHead(t, c, "GET", "/health", -1)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("health: %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	waitClosed(t, c, br, "idle keep-alive connection")
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", el)
	}
}

// TestConnectionCap: with MaxConnections busy, the next client waits, and
// is served when one closes.
func TestConnectionCap(t *testing.T) {
	e := newFakeEngine(t, "r")
	cfg := colocated(e)
	cfg.MaxConnections = 2
	cfg.ReadHeaderTimeout = time.Minute
	_, addr := listenProxy(t, cfg)
	testCap(t, addr)
}

// testCap holds two connections that send nothing (not idle: new), then
// checks a third client waits for one of them.
func testCap(t *testing.T, addr string) {
	t.Helper()
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	cl := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer cl.CloseIdleConnections()
	got := make(chan error, 1)
	go func() {
		resp, err := cl.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a third client was served past the cap of 2 (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting client was not served after a connection closed")
	}
}

// TestConnectionCapReclaimsIdle: with every slot held by idle keep-alive
// connections, a new client is served at once and an idle one is closed.
func TestConnectionCapReclaimsIdle(t *testing.T) {
	e := newFakeEngine(t, "r")
	cfg := colocated(e)
	cfg.MaxConnections = 2
	_, addr := listenProxy(t, cfg)
	var idle []*bufio.Reader
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rawHead(t, c, "GET", "/health", -1)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		idle, conns = append(idle, br), append(conns, c)
	}
	resp, err := (&http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}).Get("http://" + addr + "/health")
	if err != nil {
		t.Fatalf("a new client behind idle connections: %v", err)
	}
	resp.Body.Close()
	closed := 0
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := idle[i].ReadByte(); err == io.EOF {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("%d idle connections closed to make room, want 1", closed)
	}
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
