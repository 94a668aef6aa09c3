// Package guardtest holds the checks that hone's HTTP servers (the proxy,
// deploy/proxy, and the engine emulator, sim/emulator) run in their tests
// to see that the limits of internal/guard are in force on the real server:
// each test starts its server with a small limit and hands its address
// (host:port) to a check, then asserts what is its own (its error shape).
// The checks need the server to answer GET Health with 200 and no more
// than a small body. It is imported by tests only.
package guardtest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Health is the path the checks GET; the server answers it with 200.
const Health = "/health"

// wait bounds every wait on the server that a passing check should not
// need: generous, for a loaded machine.
const wait = 20 * time.Second

// RawRequestHead writes a request's head on c: method, path and Host, and,
// when contentLength >= 0, a JSON Content-Type and that Content-Length.
// The body, if any, is the caller's to send.
func RawRequestHead(t testing.TB, c net.Conn, method, path string, contentLength int) {
	t.Helper()
	h := method + " " + path + " HTTP/1.1\r\nHost: x\r\n"
	if contentLength >= 0 {
		h += fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", contentLength)
	}
	if _, err := io.WriteString(c, h+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

// WaitClosed reads r, c's reader, to its end (EOF or a reset) and fails if
// c is still open after a generous bound.
func WaitClosed(t testing.TB, c net.Conn, r io.Reader, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, r)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: connection still open after %v", what, wait)
	}
}

// SettleGoroutines waits until the process's goroutines number at most n
// (a count taken before), failing if they do not within a generous bound.
func SettleGoroutines(t testing.TB, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Errorf("%s: %d goroutines, want at most %d as before", what, runtime.NumGoroutine(), n)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// KeepAlive dials addr and GETs Health on the raw connection, failing
// unless the answer is a 200 that keeps the connection alive. It returns
// the connection, now idle, and its reader; the caller closes it.
func KeepAlive(t testing.TB, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	RawRequestHead(t, c, "GET", Health, -1)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	c.SetReadDeadline(time.Time{})
	if resp.StatusCode != 200 || resp.Close {
		c.Close()
		t.Fatalf("health: %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	return c, br
}

// CheckIdleTimeout checks that a keep-alive connection left idle is closed
// by the server, and not before half of idle, the server's IdleTimeout
// (the server's timer starts once its answer is written, before the client
// has read it).
func CheckIdleTimeout(t testing.TB, addr string, idle time.Duration) {
	t.Helper()
	c, br := KeepAlive(t, addr)
	defer c.Close()
	start := time.Now()
	WaitClosed(t, c, br, "idle keep-alive connection")
	if el := time.Since(start); el < idle/2 {
		t.Errorf("closed after %v, before the idle timeout of %v", el, idle)
	}
}

// CheckConnectionCap checks the cap of max connections on a server whose
// ReadHeaderTimeout outlasts the check: with max connections open that
// send nothing (new, not idle), a further client waits, and is served
// (200) when one of them closes.
func CheckConnectionCap(t testing.TB, addr string, max int) {
	t.Helper()
	var held []net.Conn
	for range max {
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
		resp, err := cl.Get("http://" + addr + Health)
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
		t.Fatalf("a further client was served past the cap of %d (%v)", max, err)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("the waiting client was not served after a connection closed")
	}
}

// CheckCapReclaimsIdle checks that with all max connections of the cap
// idle keep-alive ones, a new client is served at once, and exactly one
// of the idle connections is closed to make room.
func CheckCapReclaimsIdle(t testing.TB, addr string, max int) {
	t.Helper()
	var idle []*bufio.Reader
	var conns []net.Conn
	for range max {
		c, br := KeepAlive(t, addr)
		defer c.Close()
		idle, conns = append(idle, br), append(conns, c)
	}
	resp, err := (&http.Client{Transport: &http.Transport{}, Timeout: wait}).Get("http://" + addr + Health)
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

// CheckTrickledBody POSTs to path a body of 1000 bytes trickled a byte
// every 50 ms, and checks it is cut at the server's body deadline (its
// BodyTimeout), not before: 408 with a body that says "within <deadline>",
// the connection closed, and the process's goroutines back to their number
// before the check (the server's for the connection gone). It returns the
// answer's body, for the server's test to check its error shape.
func CheckTrickledBody(t testing.TB, addr, path string, deadline time.Duration) []byte {
	t.Helper()
	before := runtime.NumGoroutine()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	RawRequestHead(t, c, "POST", path, 1000)
	stop, trickled := make(chan struct{}), make(chan struct{})
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
	stopTrickle := sync.OnceFunc(func() { close(stop); <-trickled })
	defer stopTrickle()
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if el := time.Since(start); el < deadline {
		t.Errorf("cut after %v, before the %v deadline", el, deadline)
	}
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "within "+deadline.String()) || !resp.Close {
		t.Errorf("trickled body: %d close=%v %s", resp.StatusCode, resp.Close, body)
	}
	WaitClosed(t, c, br, "trickled body")
	stopTrickle()
	c.Close()
	SettleGoroutines(t, before, "after the trickled connection")
	return body
}
