package daemon

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/guard"
)

// The API's default limits: the cap is DefaultAPIConnections, or the
// automatic cap of this process's descriptors where that is lower.
func TestAPILimitsDefaults(t *testing.T) {
	l := APILimits(guard.Limits{})
	want := guard.Limits{MaxConnections: min(1024, guard.AutoConnections()), ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
	if l != want {
		t.Errorf("APILimits() = %+v, want %+v", l, want)
	}
	if l := APILimits(guard.Limits{MaxConnections: 7}); l.MaxConnections != 7 {
		t.Errorf("an explicit cap of 7 became %d", l.MaxConnections)
	}
}

// With more stalled clients than the cap, some sending nothing and some
// stalled in the middle of a body they announced, the API serves exactly
// cap connections at once, and a fresh GET /metrics and /v1/snapshot
// still answers: the silent ones are cut at the header timeout, those
// that announced a body get 413 and are closed without the daemon waiting
// for the rest (before, net/http waited for it without a deadline, and
// 19,960 such clients exhausted the daemon's descriptors).
func TestAPIStalledClients(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const maxConns = 4
	const header = 2 * time.Second
	api, err := serveAPI(ln, Handler(fixture), guard.Limits{MaxConnections: maxConns, ReadHeaderTimeout: header})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	addr := ln.Addr().String()
	var most atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			if n := int64(api.ln.Open()); n > most.Load() {
				most.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var silent, midBody []net.Conn
	for range maxConns {
		silent = append(silent, dial())
	}
	for range 2 * maxConns {
		c := dial()
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\npart of it"); err != nil {
			t.Fatal(err)
		}
		midBody = append(midBody, c)
	}
	// The silent ones were accepted first and hold every slot.
	deadline := time.Now().Add(header / 2)
	for api.ln.Open() != maxConns && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := api.ln.Open(); n != maxConns {
		t.Errorf("%d connections served with %d stalled clients, want the cap, %d", n, 3*maxConns, maxConns)
	}
	const bound = 20 * time.Second // header (2 s) and a loaded host's slack
	cl := &http.Client{Transport: &http.Transport{}, Timeout: bound}
	defer cl.CloseIdleConnections()
	start := time.Now()
	for _, path := range []string{"/metrics", "/v1/snapshot"} {
		resp, err := cl.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s behind %d stalled clients: %v", path, 3*maxConns, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
	t.Logf("GETs answered after %v", time.Since(start))
	for i, c := range midBody {
		c.SetReadDeadline(time.Now().Add(bound))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("client %d stalled mid-body: no answer: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
			t.Errorf("client %d stalled mid-body: %d close=%v, want 413 and the connection closed", i, resp.StatusCode, resp.Close)
		}
		if _, err := br.ReadByte(); err != io.EOF && !isReset(err) {
			t.Errorf("client %d stalled mid-body: connection still open after the 413 (%v)", i, err)
		}
	}
	for i, c := range silent {
		c.SetReadDeadline(time.Now().Add(bound))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF && !isReset(err) {
			t.Errorf("silent client %d: %v, want the connection closed at the header timeout", i, err)
		}
	}
	if n := most.Load(); n != maxConns {
		t.Errorf("at most %d connections served at once, want exactly the cap, %d", n, maxConns)
	}
}

// isReset says whether err is the peer's reset: a close with unread data.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
