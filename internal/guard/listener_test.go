package guard

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// With ReclaimNew, connections that send nothing hold slots only until
// another client needs one: with max of them open and a header timeout of
// a minute, a GET is served at once and exactly one of them is closed.
// Without it, they hold their slots until the header timeout.
func TestListenerReclaimNew(t *testing.T) {
	const max = 2
	for _, reclaim := range []bool{false, true} {
		g, err := New(Limits{MaxConnections: max, ReadHeaderTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		srv := g.Server(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gl := g.Listener(ln, srv)
		if reclaim {
			gl.ReclaimNew()
		}
		go srv.Serve(gl)
		addr := ln.Addr().String()
		var silent []net.Conn
		for range max {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			silent = append(silent, c)
		}
		for deadline := time.Now().Add(10 * time.Second); gl.Open() != max && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		wait := 300 * time.Millisecond // enough to be served at once; far below the header timeout
		if reclaim {
			wait = 20 * time.Second
		}
		resp, err := (&http.Client{Transport: &http.Transport{}, Timeout: wait}).Get("http://" + addr + "/")
		if reclaim != (err == nil) {
			t.Errorf("ReclaimNew %v: a GET behind %d silent connections: %v", reclaim, max, err)
		}
		if err == nil {
			resp.Body.Close()
		}
		closed := 0
		for _, c := range silent {
			c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err == io.EOF {
				closed++
			}
		}
		if want := map[bool]int{false: 0, true: 1}[reclaim]; closed != want {
			t.Errorf("ReclaimNew %v: %d silent connections closed, want %d", reclaim, closed, want)
		}
		srv.Close()
	}
}
