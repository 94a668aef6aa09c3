package daemon

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
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
// still answers, long before the header timeout: the silent ones give
// their slots to the clients that come next once silent for
// apiSilentGrace, and those that announced a body get 413 and are closed
// without the daemon waiting for the rest
// (before, net/http waited for it without a deadline, and 19,960 such
// clients exhausted the daemon's descriptors).
func TestAPIStalledClients(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const maxConns = 4
	api, err := serveAPI(ln, Handler(fixture), guard.Limits{MaxConnections: maxConns, ReadHeaderTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	addr := ln.Addr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var silent, midBody []net.Conn
	for range 2 * maxConns {
		silent = append(silent, dial())
	}
	// The first silent ones hold every slot; the others wait.
	for deadline := time.Now().Add(10 * time.Second); api.ln.Open() != maxConns && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := api.ln.Open(); n != maxConns {
		t.Errorf("%d connections served with %d silent clients, want the cap, %d", n, 2*maxConns, maxConns)
	}
	for range 2 * maxConns {
		c := dial()
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\npart of it"); err != nil {
			t.Fatal(err)
		}
		midBody = append(midBody, c)
	}
	const bound = 20 * time.Second // a loaded host's slack; the header timeout is an hour
	cl := &http.Client{Transport: &http.Transport{}, Timeout: bound}
	defer cl.CloseIdleConnections()
	start := time.Now()
	for _, path := range []string{"/metrics", "/v1/snapshot"} {
		resp, err := cl.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s behind %d stalled clients: %v", path, 4*maxConns, err)
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
	// With an hour's header timeout, only making room for the clients
	// after them closed silent connections: the first ones, at least.
	closed := 0
	for _, c := range silent {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF || isReset(err) {
			closed++
		}
	}
	if closed < maxConns {
		t.Errorf("%d of %d silent connections closed to make room, want at least %d", closed, len(silent), maxConns)
	}
	if n := api.ln.Open(); n > maxConns {
		t.Errorf("%d connections served, above the cap of %d", n, maxConns)
	}
}

// isReset says whether err is the peer's reset: a close with unread data.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
