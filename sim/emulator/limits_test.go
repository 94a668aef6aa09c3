package emulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/guard"
	"github.com/hone-llm/hone/internal/guard/guardtest"
)

// paddedBody is a valid completion request of exactly n bytes.
func paddedBody(t *testing.T, n int) []byte {
	t.Helper()
	b := []byte(`{"prompt":[1,2,3],"max_tokens":1}`)
	if len(b) > n {
		t.Fatalf("body of %d bytes will not fit %d", len(b), n)
	}
	return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
}

type lengthless struct{ io.Reader }

func postBody(t *testing.T, url string, body io.Reader) (int, []byte) {
	t.Helper()
	resp, err := testClient.Post(url+"/v1/completions", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestBodyLimit: a body of exactly the limit is served; one byte more is
// vLLM's error shape with status 413, naming the limit, whether the body
// has a Content-Length or is chunked.
func TestBodyLimit(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.001, Guard: guard.Limits{MaxBodyBytes: 4096}})
	if code, b := postBody(t, s.URL(), bytes.NewReader(paddedBody(t, 4096))); code != 200 {
		t.Errorf("exactly the limit: %d %s", code, b)
	}
	for _, chunked := range []bool{false, true} {
		var body io.Reader = bytes.NewReader(paddedBody(t, 4097))
		if chunked {
			body = lengthless{body}
		}
		code, b := postBody(t, s.URL(), body)
		var e APIError
		if err := json.Unmarshal(b, &e); err != nil || code != http.StatusRequestEntityTooLarge || e.Object != "error" ||
			e.Code != 413 || !strings.Contains(e.Message, "limit of 4096 bytes") {
			t.Errorf("chunked %v, one byte over: %d %s", chunked, code, b)
		}
	}
	if n := s.guard.InUse(); n != 0 {
		t.Errorf("body bytes still held: %d", n)
	}
}

// TestBodyTimeout: a body trickled a byte at a time is cut at the body
// deadline with 408, in vLLM's error shape, and the connection closed, and
// the server's goroutine for it ends.
func TestBodyTimeout(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.001, Guard: guard.Limits{BodyTimeout: 300 * time.Millisecond}})
	b := guardtest.CheckTrickledBody(t, s.Addr().String(), "/v1/completions", 300*time.Millisecond)
	var e APIError
	if json.Unmarshal(b, &e) != nil || e.Code != 408 || !strings.Contains(e.Message, "within 300ms") {
		t.Errorf("trickled body: %s", b)
	}
}

// TestIdleTimeout: a keep-alive connection left idle is closed after
// IdleTimeout.
func TestIdleTimeout(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.001, Guard: guard.Limits{IdleTimeout: 200 * time.Millisecond}})
	guardtest.CheckIdleTimeout(t, s.Addr().String(), 200*time.Millisecond)
}

// TestConnectionCap: with MaxConnections held, the next client waits, and
// is served when one closes.
func TestConnectionCap(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.001, Guard: guard.Limits{MaxConnections: 2, ReadHeaderTimeout: time.Minute}})
	guardtest.CheckConnectionCap(t, s.Addr().String(), 2)
}

// TestConnectionCapReclaimsIdle: with every slot held by idle keep-alive
// connections, a new client is served at once and an idle one is closed.
func TestConnectionCapReclaimsIdle(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.001, Guard: guard.Limits{MaxConnections: 2}})
	guardtest.CheckCapReclaimsIdle(t, s.Addr().String(), 2)
}

// countingConn counts the bytes read from it.
type countingConn struct {
	net.Conn
	n atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

// flood writes chunks of 'x' (no newline) to c until a write fails or
// total bytes are sent.
func flood(c net.Conn, total int) <-chan int {
	done := make(chan int, 1)
	go func() {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		sent := 0
		for sent < total {
			n, err := c.Write(chunk)
			sent += n
			if err != nil {
				break
			}
		}
		done <- sent
	}()
	return done
}

// TestSideChannelLineLimit: a pull request line longer than the limit is
// answered with an error line and the connection closed, the prefill
// worker having read no more than the limit and its buffers.
func TestSideChannelLineLimit(t *testing.T) {
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.001, Role: RolePrefill})
	limit := s.cfg.pullLineMax
	if limit != 1<<20 {
		t.Fatalf("pull line limit %d, want 1 MiB for the default model and blocks", limit)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan *countingConn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		cc := &countingConn{Conn: c}
		s.eng.servePull(context.Background(), cc)
		served <- cc
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := flood(c, 64<<20)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	line, err := br.ReadBytes('\n')
	var h pullHeader
	if err != nil || json.Unmarshal(line, &h) != nil || h.OK || !strings.Contains(h.Error, "longer than 1048576 bytes") {
		t.Errorf("answer to an over-long line: %q %v", line, err)
	}
	guardtest.WaitClosed(t, c, br, "over-long pull line")
	var cc *countingConn
	select {
	case cc = <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("servePull did not return")
	}
	n := <-sent
	if read := cc.n.Load(); read > int64(limit)+128<<10 {
		t.Errorf("the prefill worker read %d bytes of a %d-byte line, limit %d", read, n, limit)
	}
	if n <= limit {
		t.Errorf("the client sent only %d bytes: the limit was not reached", n)
	}

	// The real side channel answers the same way.
	k, err := net.Dial("tcp", s.KVAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	flood(k, 4<<20)
	k.SetReadDeadline(time.Now().Add(20 * time.Second))
	kr := bufio.NewReader(k)
	if line, err := kr.ReadBytes('\n'); err != nil || !bytes.Contains(line, []byte("longer than")) {
		t.Errorf("side channel: %q %v", line, err)
	}
	guardtest.WaitClosed(t, k, kr, "side channel")
}

// TestReadLine: lines up to the limit are read whole, longer ones refused;
// the limit follows the model's length and the block size.
func TestReadLine(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("y", 100)+"\nrest"), 16)
	if l, err := readLine(br, 101); err != nil || len(l) != 101 {
		t.Errorf("a line of exactly the limit: %d %v", len(l), err)
	}
	br = bufio.NewReaderSize(strings.NewReader(strings.Repeat("y", 101)+"\n"), 16)
	if _, err := readLine(br, 101); !errors.Is(err, errLineTooLong) {
		t.Errorf("one byte over: %v", err)
	}
	if got := pullLineLimit(32768, 16, 100_000); got != 1<<20 {
		t.Errorf("default limit %d", got)
	}
	if got := pullLineLimit(1<<20, 1, 10_000_000); got != (1<<20)*9+64<<10 {
		t.Errorf("1M-token context, 1-token blocks: %d", got)
	}
}
