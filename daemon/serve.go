package daemon

import (
	"net"
	"net/http"
	"time"

	"github.com/hone-llm/hone/internal/guard"
)

// Limits on the API's clients, as hone's other servers have (package
// guard), sized for what the API serves: a few scrapers and command-line
// calls, each a GET without a body whose answer is rendered in memory.
const (
	// DefaultAPIConnections caps the API's open connections (at most
	// guard.AutoConnections, half the descriptors the process may open):
	// enough for every scraper there is, few enough that a flood of
	// stalled clients holds a bounded number of descriptors and goroutines.
	DefaultAPIConnections = 1024
	// APIHeaderTimeout is how long a request's headers may take.
	APIHeaderTimeout = 5 * time.Second
	// APIWriteTimeout bounds an answer's writing, from the request's
	// headers on: a client that stops reading is dropped. A snapshot of
	// tens of MB takes milliseconds on loopback.
	APIWriteTimeout = 30 * time.Second
	// APIIdleTimeout closes keep-alive connections idle this long; with
	// every slot taken the idle ones are closed first (guard.Listener).
	APIIdleTimeout = 60 * time.Second
	// APIMaxHeaderBytes bounds a request's headers: a bearer token and
	// a scraper's few headers are well under 1 KiB.
	APIMaxHeaderBytes = 16 << 10
)

// apiSilentGrace is how long a connection may stay silent before, with
// every slot taken, it is closed for the next client (guard's
// ReclaimNew): a scraper's request follows its connect within
// milliseconds.
const apiSilentGrace = time.Second

// APILimits fills the zero fields of l, the API's limits, with the
// defaults above.
func APILimits(l guard.Limits) guard.Limits {
	if l.MaxConnections == 0 {
		l.MaxConnections = min(DefaultAPIConnections, guard.AutoConnections())
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = APIHeaderTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = APIIdleTimeout
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = APIMaxHeaderBytes
	}
	return l
}

// apiServer is the API served on a listener under its limits.
type apiServer struct {
	srv *http.Server
	ln  *guard.Listener
	lim guard.Limits
}

// serveAPI serves h on ln under lim (APILimits fills its zero fields):
// at most MaxConnections served at once, headers within
// ReadHeaderTimeout, answers written within APIWriteTimeout, keep-alive
// connections closed after IdleTimeout, and no request body (refuseBody).
// A client beyond the cap waits in the kernel's accept queue, rather than
// the daemon running out of descriptors, until a connection closes; with
// every slot taken, the connection idle or silent the longest is closed
// to make room. Close stops it.
func serveAPI(ln net.Listener, h http.Handler, lim guard.Limits) (*apiServer, error) {
	g, err := guard.New(APILimits(lim))
	if err != nil {
		return nil, err
	}
	srv := g.Server(refuseBody(h))
	srv.WriteTimeout = APIWriteTimeout
	a := &apiServer{srv: srv, ln: g.Listener(ln, srv), lim: g.Limits()}
	// The API's clients send their request as they connect: one silent
	// for apiSilentGrace is stalled, and gives its slot to the next client
	// rather than hold it until the header timeout (a flood of them would
	// otherwise keep a scrape waiting behind the whole accept queue).
	a.ln.ReclaimNew(apiSilentGrace)
	go srv.Serve(a.ln)
	return a, nil
}

// Close closes the listener and every connection.
func (a *apiServer) Close() error { return a.srv.Close() }

// bodyDrain is how long what a refused body has already sent is read and
// dropped before its connection is closed: closing with unread data would
// reset the connection, and the client could lose the 413 to the reset.
const bodyDrain = 100 * time.Millisecond

// refuseBody answers 413 to a request that carries or announces a body:
// the API takes none. The connection is closed after the answer, having
// drained for at most bodyDrain what had arrived of the body: net/http
// would otherwise wait for up to 256 KiB of it, with no deadline, so that
// a client that announced a body and stalled held its connection, and a
// descriptor, for ever.
func refuseBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 { // -1: chunked
			w.Header().Set("Connection", "close")
			http.Error(w, "the daemon's API takes no request body", http.StatusRequestEntityTooLarge)
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyDrain))
			return
		}
		h.ServeHTTP(w, r)
	})
}
