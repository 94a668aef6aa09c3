package guard

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// With ReclaimNew, connections that have sent nothing for the grace hold
// their slots only until another client needs one: with max of them open
// and a header timeout of a minute, a GET is served and exactly one of
// them is closed. Without it, or within the grace, they hold their slots
// (until the header timeout).
func TestListenerReclaimNew(t *testing.T) {
	const max = 2
	for _, c := range []struct {
		name    string
		grace   time.Duration // 0: no ReclaimNew
		reclaim bool
	}{{"off", 0, false}, {"within-grace", time.Hour, false}, {"past-grace", 50 * time.Millisecond, true}} {
		t.Run(c.name, func(t *testing.T) {
			g, err := New(Limits{MaxConnections: max, ReadHeaderTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			srv := g.Server(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			defer srv.Close()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			gl := g.Listener(ln, srv)
			if c.grace > 0 {
				gl.ReclaimNew(c.grace)
			}
			go srv.Serve(gl)
			addr := ln.Addr().String()
			var silent []net.Conn
			for range max {
				s, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				silent = append(silent, s)
			}
			for deadline := time.Now().Add(10 * time.Second); gl.Open() != max && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			wait := 300 * time.Millisecond // enough to be served at once; far below the header timeout
			if c.reclaim {
				wait = 20 * time.Second
			}
			resp, err := (&http.Client{Transport: &http.Transport{}, Timeout: wait}).Get("http://" + addr + "/")
			if c.reclaim != (err == nil) {
				t.Errorf("a GET behind %d silent connections: %v, want served %v", max, err, c.reclaim)
			}
			if err == nil {
				resp.Body.Close()
			}
			closed := 0
			for _, s := range silent {
				s.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := s.Read(make([]byte, 1)); err == io.EOF {
					closed++
				}
			}
			if want := map[bool]int{false: 0, true: 1}[c.reclaim]; closed != want {
				t.Errorf("%d silent connections closed, want %d", closed, want)
			}
		})
	}
}
