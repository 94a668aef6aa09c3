package guardtest_test

import (
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/guard"
	"github.com/hone-llm/hone/internal/guard/guardtest"
)

// serve runs a bare server under l, as the proxy and the emulator do: the
// guard's server, handler and listener, Health answered, other bodies read
// with ReadBody.
func serve(t *testing.T, l guard.Limits) string {
	t.Helper()
	g, err := guard.New(l)
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server(g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == guardtest.Health {
			return
		}
		_, release, err := g.ReadBody(w, r)
		defer release()
		if err != nil {
			guard.Refuse(w, err)
		}
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(g.Listener(ln, srv))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestChecksPass: a server under the limits passes every check.
func TestChecksPass(t *testing.T) {
	addr := serve(t, guard.Limits{BodyTimeout: 300 * time.Millisecond, IdleTimeout: 200 * time.Millisecond})
	guardtest.CheckIdleTimeout(t, addr, 200*time.Millisecond)
	guardtest.CheckTrickledBody(t, addr, "/", 300*time.Millisecond)
	guardtest.CheckConnectionCap(t, serve(t, guard.Limits{MaxConnections: 2, ReadHeaderTimeout: time.Minute}), 2)
	guardtest.CheckCapReclaimsIdle(t, serve(t, guard.Limits{MaxConnections: 2}), 2)
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)); runtime.Goexit() }

// fails runs check against a recorder and returns its failures.
func fails(t *testing.T, check func(testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); check(r) }()
	<-done
	return strings.Join(r.failed, "\n")
}

// TestChecksFail: each check fails on a server whose limit is off from
// what the check is told (the fast ways to fail; the others wait out the
// checks' generous bounds).
func TestChecksFail(t *testing.T) {
	uncapped := serve(t, guard.Limits{ReadHeaderTimeout: time.Minute})
	if got := fails(t, func(t testing.TB) { guardtest.CheckConnectionCap(t, uncapped, 2) }); !strings.Contains(got, "past the cap of 2") {
		t.Errorf("cap check on an uncapped server: %q", got)
	}
	if got := fails(t, func(t testing.TB) { guardtest.CheckCapReclaimsIdle(t, uncapped, 2) }); !strings.Contains(got, "0 idle connections closed") {
		t.Errorf("reclaim check on an uncapped server: %q", got)
	}
	quick := serve(t, guard.Limits{IdleTimeout: 10 * time.Millisecond, BodyTimeout: 100 * time.Millisecond})
	if got := fails(t, func(t testing.TB) { guardtest.CheckIdleTimeout(t, quick, time.Second) }); !strings.Contains(got, "before the idle timeout") {
		t.Errorf("idle check on a server that closes at once: %q", got)
	}
	if got := fails(t, func(t testing.TB) { guardtest.CheckTrickledBody(t, quick, "/", time.Second) }); !strings.Contains(got, "before the 1s deadline") || !strings.Contains(got, "trickled body: 408") {
		t.Errorf("trickle check on a server with a shorter deadline: %q", got)
	}
}
