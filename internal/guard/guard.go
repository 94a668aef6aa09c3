// Package guard holds the size, time and connection limits that hone's
// HTTP servers, the proxy (deploy/proxy) and the engine emulator
// (sim/emulator), put on what unauthenticated clients send, so that no
// client can make either hold unbounded memory, connections or file
// descriptors:
//
//   - request bodies: at most MaxBodyBytes each (413 above it), read within
//     BodyTimeout of the request's headers, or of the moment room was made
//     for it when it waited (408 after it, the connection closed), and at
//     most BodyMemory bytes of them held at once (ReadBody
//     to release; a request whose body would exceed it waits for room until
//     its BodyTimeout, then gets 503, its body read and discarded first,
//     within a further BodyTimeout, so that a client still writing it reads
//     the 503 rather than a connection reset). The bodies' memory is thus
//     at most BodyMemory, whatever the number of connections, the copies a
//     server makes of them while it holds them included (ReadBodyDecoded),
//     and LimitHeap keeps the garbage collector from letting released
//     bodies pile up to twice that;
//   - headers: MaxHeaderBytes, received within ReadHeaderTimeout;
//   - keep-alive: an idle connection is closed after IdleTimeout;
//   - connections: at most MaxConnections open at once. Further clients wait
//     in the kernel's accept queue rather than the process failing with
//     EMFILE; when every slot is taken, idle keep-alive connections are
//     closed first to make room.
//
// ReadTimeout and WriteTimeout stay 0: a response streams for as long as
// generation takes, and net/http cancels a request's context when a
// ReadTimeout fires during the response (the background read that watches
// for the client's close fails). The body deadline is therefore set per
// request, on the connection, and cleared once the body has been read.
package guard

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
)

// Defaults for zero Limits fields.
const (
	// DefaultMaxBodyBytes bounds one request body. A 128k-token coding
	// prompt sent as token ids is about 1 MiB of JSON (up to 7 bytes an id
	// with its comma), and 1M tokens, the longest context of current open
	// models, about 7 MiB; a 128k-token text prompt is about 0.5 MiB, 3 MiB
	// if every character were \u-escaped. 32 MiB is 4x the largest of these.
	DefaultMaxBodyBytes = 32 << 20
	// DefaultBodyMemory bounds the request bodies held by all requests in
	// flight together: 32 maximal bodies, or about 5,000 requests of a
	// 200 KiB coding prompt. A load that needs more in flight at once
	// raises it.
	DefaultBodyMemory = 1 << 30
	// DefaultBodyTimeout is how long a body may take to arrive after its
	// headers: 32 MiB at under 10 Mbit/s. Clients on loopback take
	// milliseconds.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultReadHeaderTimeout is how long a request's headers may take.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes keep-alive connections idle this long.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxHeaderBytes bounds a request's headers; hone's clients
	// send a few hundred bytes (authorization, trace context, request and
	// session ids).
	DefaultMaxHeaderBytes = 64 << 10
	// MaxAutoConnections caps the automatic MaxConnections, which is
	// otherwise half of RLIMIT_NOFILE less a reserve (AutoConnections).
	MaxAutoConnections = 16384
)

// fdReserve is the descriptors left for everything but client connections
// (listeners, files, health checks, metrics scrapes).
const fdReserve = 512

// Limits are a server's limits on clients. Zero fields take the defaults
// above; Fill fills them.
type Limits struct {
	MaxBodyBytes      int64         `json:"max_body_bytes,omitempty"`
	BodyMemory        int64         `json:"max_body_memory,omitempty"`
	BodyTimeout       time.Duration `json:"body_timeout_ns,omitempty"`
	ReadHeaderTimeout time.Duration `json:"read_header_timeout_ns,omitempty"`
	IdleTimeout       time.Duration `json:"idle_timeout_ns,omitempty"`
	MaxHeaderBytes    int           `json:"max_header_bytes,omitempty"`
	// MaxConnections is the most connections served at once; 0 is
	// AutoConnections().
	MaxConnections int `json:"max_connections,omitempty"`
}

// AutoConnections is the default connection cap: half the process's soft
// RLIMIT_NOFILE less a reserve of 512 (each client connection may hold a
// second descriptor: the proxy's upstream leg, a decode worker's KV pull,
// a prefill worker's side-channel peer), at most MaxAutoConnections and at
// least 64. Go (1.19 and later) has already raised the soft limit to the
// hard one at start (syscall's init), so this is the most the process can
// open.
func AutoConnections() int {
	n := nofile()
	if n <= 0 {
		return 4096 // no RLIMIT_NOFILE on this system
	}
	if n > 2*MaxAutoConnections+fdReserve {
		return MaxAutoConnections
	}
	return max(64, (int(n)-fdReserve)/2)
}

// Fill validates l and sets its zero fields to the defaults. Errors name
// the flags (AddFlags); a proxy config's keys are their JSON names.
func (l *Limits) Fill() error {
	switch {
	case l.MaxBodyBytes < 0:
		return fmt.Errorf("--max-body-bytes %d: want > 0", l.MaxBodyBytes)
	case l.BodyMemory < 0:
		return fmt.Errorf("--max-body-memory %d: want > 0", l.BodyMemory)
	case l.BodyTimeout < 0:
		return fmt.Errorf("--body-timeout %v: want > 0", l.BodyTimeout)
	case l.ReadHeaderTimeout < 0:
		return fmt.Errorf("--read-header-timeout %v: want > 0", l.ReadHeaderTimeout)
	case l.IdleTimeout < 0:
		return fmt.Errorf("--idle-timeout %v: want > 0", l.IdleTimeout)
	case l.MaxHeaderBytes < 0:
		return fmt.Errorf("--max-header-bytes %d: want > 0", l.MaxHeaderBytes)
	case l.MaxConnections < 0:
		return fmt.Errorf("--max-connections %d: want > 0 (0: automatic)", l.MaxConnections)
	}
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.BodyMemory == 0 {
		l.BodyMemory = max(DefaultBodyMemory, l.MaxBodyBytes)
	}
	if l.BodyMemory < l.MaxBodyBytes {
		return fmt.Errorf("--max-body-memory %d is below --max-body-bytes %d: a largest body could never be read", l.BodyMemory, l.MaxBodyBytes)
	}
	if l.BodyTimeout == 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = AutoConnections()
	}
	return nil
}

// AddFlags binds l's fields to flags on f, their defaults documented.
func (l *Limits) AddFlags(f *pflag.FlagSet) {
	f.Int64Var(&l.MaxBodyBytes, "max-body-bytes", DefaultMaxBodyBytes, "largest request body, in bytes; larger ones get 413 (a 128k-token prompt as token ids is about 1 MiB)")
	f.Int64Var(&l.BodyMemory, "max-body-memory", DefaultBodyMemory, "most bytes of request bodies, and of the copies the server makes of them, held by all requests in flight; past it a request waits up to --body-timeout, then gets 503")
	f.DurationVar(&l.BodyTimeout, "body-timeout", DefaultBodyTimeout, "longest time a request body may take to arrive after its headers; later, 408 and the connection is closed")
	f.DurationVar(&l.ReadHeaderTimeout, "read-header-timeout", DefaultReadHeaderTimeout, "longest time a request's headers may take")
	f.DurationVar(&l.IdleTimeout, "idle-timeout", DefaultIdleTimeout, "close keep-alive connections idle this long")
	f.IntVar(&l.MaxHeaderBytes, "max-header-bytes", DefaultMaxHeaderBytes, "largest request header block, in bytes")
	f.IntVar(&l.MaxConnections, "max-connections", 0, fmt.Sprintf("most client connections open at once; more wait to be accepted (0: half of RLIMIT_NOFILE less 512, at most %d; here %d)", MaxAutoConnections, AutoConnections()))
}

// Changed copies into dst the fields of src whose flags (AddFlags) were
// set on the command line.
func Changed(f *pflag.FlagSet, src Limits, dst *Limits) {
	for name, set := range map[string]func(){
		"max-body-bytes":      func() { dst.MaxBodyBytes = src.MaxBodyBytes },
		"max-body-memory":     func() { dst.BodyMemory = src.BodyMemory },
		"body-timeout":        func() { dst.BodyTimeout = src.BodyTimeout },
		"read-header-timeout": func() { dst.ReadHeaderTimeout = src.ReadHeaderTimeout },
		"idle-timeout":        func() { dst.IdleTimeout = src.IdleTimeout },
		"max-header-bytes":    func() { dst.MaxHeaderBytes = src.MaxHeaderBytes },
		"max-connections":     func() { dst.MaxConnections = src.MaxConnections },
	} {
		if f.Changed(name) {
			set()
		}
	}
}

// Guard applies one server's Limits.
type Guard struct {
	lim    Limits
	budget *budget
}

// New fills l's defaults and returns its Guard.
func New(l Limits) (*Guard, error) {
	if err := l.Fill(); err != nil {
		return nil, err
	}
	return &Guard{lim: l, budget: &budget{size: l.BodyMemory}}, nil
}

// Limits are the limits in force, defaults filled.
func (g *Guard) Limits() Limits { return g.lim }

// Server is an http.Server for h with the header, idle and size limits.
// ReadTimeout and WriteTimeout stay 0 (see the package comment); bodies
// are bounded by Handler.
func (g *Guard) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: g.lim.ReadHeaderTimeout,
		IdleTimeout:       g.lim.IdleTimeout,
		MaxHeaderBytes:    g.lim.MaxHeaderBytes,
	}
}

// Error is a request refused by a limit: the HTTP status to answer and a
// message that names the limit. Servers write it in their own error shape.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// Handler puts every request's body under the limits: at most MaxBodyBytes
// (http.MaxBytesReader), and received within BodyTimeout of the headers (a
// read deadline on the connection, cleared when the body ends, so the
// response may stream for as long as it takes). Requests without a body
// are untouched.
func (g *Guard) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.wrap(w, r)
		h.ServeHTTP(w, r)
	})
}

// wrap puts r.Body under the limits once.
func (g *Guard) wrap(w http.ResponseWriter, r *http.Request) *body {
	if b, ok := r.Body.(*body); ok {
		return b
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b := &body{rc: http.MaxBytesReader(w, r.Body, g.lim.MaxBodyBytes), ctl: http.NewResponseController(w),
		deadline: time.Now().Add(g.lim.BodyTimeout), lim: g.lim}
	if err := b.ctl.SetReadDeadline(b.deadline); err != nil {
		b.ctl = nil // not a net/http connection (a test recorder): no deadline to clear
	}
	r.Body = b
	return b
}

// body is a request body under the limits.
type body struct {
	rc       io.ReadCloser
	ctl      *http.ResponseController
	deadline time.Time
	lim      Limits
	eof      bool
	err      atomic.Pointer[Error] // the first failure, classified
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		if !b.eof && b.ctl != nil {
			// The body is in: the connection's reads are now only the
			// server's watch for the client's close, which must not time
			// out while the response streams.
			_ = b.ctl.SetReadDeadline(time.Time{})
		}
		b.eof = true
	case err != nil:
		b.err.CompareAndSwap(nil, b.classify(err))
	}
	return n, err
}

func (b *body) Close() error { return b.rc.Close() }

func (b *body) classify(err error) *Error {
	var mb *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mb):
		return tooLarge(b.lim.MaxBodyBytes, -1)
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return &Error{Status: http.StatusRequestTimeout,
			Message: fmt.Sprintf("request body not received within %s of its headers (the server's --body-timeout)", b.lim.BodyTimeout)}
	}
	return &Error{Status: http.StatusBadRequest, Message: "read request body: " + err.Error()}
}

func tooLarge(limit, size int64) *Error {
	what := "request body"
	if size >= 0 {
		what += " of " + strconv.FormatInt(size, 10) + " bytes"
	}
	return &Error{Status: http.StatusRequestEntityTooLarge,
		Message: fmt.Sprintf("%s exceeds the limit of %d bytes (%s, the server's --max-body-bytes)", what, limit, human(limit))}
}

// BodyError is the limit r's body ran into while someone else read it (a
// body streamed upstream), or nil.
func BodyError(r *http.Request) *Error {
	if b, ok := r.Body.(*body); ok {
		return b.err.Load()
	}
	return nil
}

// Refuse answers e's status with its message as the body, for servers
// that have no error shape of their own. Connection: close goes with every
// refusal but a 503 whose body ReadBody drained, since the rest of the body
// is not read.
func Refuse(w http.ResponseWriter, e *Error) {
	if e.Status != http.StatusServiceUnavailable {
		w.Header().Set("Connection", "close")
	}
	http.Error(w, e.Message, e.Status)
}

// ReadBody reads r's body whole under the limits, into one buffer sized by
// its Content-Length (or grown to its size when it is chunked). The body's
// bytes count against BodyMemory until release is called: call it when
// the request no longer holds the body or anything of its size (at the
// handler's end). On error, release is a no-op, and the caller answers
// err.Status with err.Message. A 503 (no room in BodyMemory) comes after
// the rest of the body has been read and discarded, so the connection
// stays open; after any other error, or a drain that failed, it is closed
// after the answer, since the rest of the body is not read (w's Connection
// header says so).
func (g *Guard) ReadBody(w http.ResponseWriter, r *http.Request) (data []byte, release func(), err *Error) {
	return g.ReadBodyDecoded(w, r, 0)
}

// ReadBodyDecoded is ReadBody for a handler that, until it calls release,
// makes up to copies more objects of the body's size from it (a decoded
// prompt, a rendered one): 1+copies times the body's size is reserved from
// BodyMemory, so that what the handler holds is under the budget too, not
// only the body. A reservation that would pass BodyMemory takes all of it:
// that request is then alone.
func (g *Guard) ReadBodyDecoded(w http.ResponseWriter, r *http.Request, copies int) (data []byte, release func(), err *Error) {
	release = func() {}
	b := g.wrap(w, r)
	if b == nil {
		return nil, release, nil
	}
	fail := func(e *Error) ([]byte, func(), *Error) {
		if e.Status != http.StatusServiceUnavailable || !b.drain() {
			w.Header().Set("Connection", "close")
		}
		return nil, release, e
	}
	n := r.ContentLength
	if n > g.lim.MaxBodyBytes {
		return fail(tooLarge(g.lim.MaxBodyBytes, n))
	}
	ctx, cancel := context.WithDeadline(r.Context(), b.deadline)
	defer cancel()
	var held int64
	reserve := func(k int64) *Error {
		k = min(k*int64(1+max(copies, 0)), g.lim.BodyMemory-held)
		if g.budget.tryAcquire(k) {
			held += k
			return nil
		}
		if err := g.budget.acquire(ctx, k); err != nil {
			g.budget.release(held)
			return &Error{Status: http.StatusServiceUnavailable,
				Message: fmt.Sprintf("server busy: request bodies in flight hold its %s budget (the server's --max-body-memory); retry", human(g.lim.BodyMemory))}
		}
		held += k
		// The wait was the server's, not the client's: the body gets its
		// whole BodyTimeout from now, or a request let in just before its
		// deadline would get 408 (and a reset) for the server's delay.
		b.deadline = time.Now().Add(g.lim.BodyTimeout)
		if b.ctl != nil {
			_ = b.ctl.SetReadDeadline(b.deadline)
		}
		return nil
	}
	if n >= 0 {
		if e := reserve(n); e != nil {
			return fail(e)
		}
		data = make([]byte, n)
		if _, err := io.ReadFull(b, data); err != nil {
			g.budget.release(held)
			return fail(b.failure(err))
		}
		// Read on to EOF (none is left): it clears the body deadline.
		if _, err := b.Read(make([]byte, 1)); err != io.EOF {
			g.budget.release(held)
			return fail(b.failure(err))
		}
	} else {
		// Chunked: grow by doubling, reserving each growth first.
		const first = 64 << 10
		if e := reserve(min(first, g.lim.MaxBodyBytes+1)); e != nil {
			return fail(e)
		}
		data = make([]byte, 0, min(first, g.lim.MaxBodyBytes+1))
		for {
			if len(data) == cap(data) {
				grow := min(int64(cap(data)), g.lim.MaxBodyBytes+1-int64(cap(data)))
				if grow <= 0 {
					g.budget.release(held)
					return fail(tooLarge(g.lim.MaxBodyBytes, -1))
				}
				if e := reserve(grow); e != nil {
					return fail(e)
				}
				nd := make([]byte, len(data), int64(cap(data))+grow)
				copy(nd, data)
				data = nd
			}
			k, err := b.Read(data[len(data):cap(data)])
			data = data[:len(data)+k]
			if err == io.EOF {
				break
			}
			if err != nil {
				g.budget.release(held)
				return fail(b.failure(err))
			}
		}
	}
	var once sync.Once
	return data, func() { once.Do(func() { g.budget.release(held) }) }, nil
}

// drain reads and discards the rest of a body refused for want of room
// (503), within a fresh BodyTimeout, and reports whether it reached the
// end. Most clients (curl without Expect, Python's, any that send the whole
// request before reading) are still writing the body: closing the
// connection on them with bytes unread makes the kernel answer with a reset,
// which destroys the 503 before they read it. Draining costs only the
// transfer, at most MaxBodyBytes (http.MaxBytesReader), in a small buffer,
// and leaves the connection fit for the client's retry.
func (b *body) drain() bool {
	if b.eof {
		return true
	}
	if b.ctl != nil {
		if err := b.ctl.SetReadDeadline(time.Now().Add(b.lim.BodyTimeout)); err != nil {
			return false
		}
	}
	var buf [32 << 10]byte
	for {
		_, err := b.Read(buf[:])
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
}

func (b *body) failure(err error) *Error {
	if e := b.err.Load(); e != nil {
		return e
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return b.classify(err)
}

// human spells a byte count in the largest binary unit that divides it.
func human(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// budget is a FIFO weighted semaphore of body bytes.
type budget struct {
	mu      sync.Mutex
	size    int64
	used    int64
	waiters list.List // of *waiter
}

type waiter struct {
	n     int64
	ready chan struct{}
}

// tryAcquire takes n at once if it is free and no one waits.
func (b *budget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.size-b.used >= n && b.waiters.Len() == 0 {
		b.used += n
		return true
	}
	return false
}

func (b *budget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if b.size-b.used >= n && b.waiters.Len() == 0 {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready: // granted as the context ended: give it back
			b.used -= n
		default:
			b.waiters.Remove(e)
		}
		b.notify()
		return ctx.Err()
	}
}

func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.notify()
	b.mu.Unlock()
}

// notify grants waiters in order while they fit.
func (b *budget) notify() {
	for {
		e := b.waiters.Front()
		if e == nil {
			return
		}
		w := e.Value.(*waiter)
		if b.size-b.used < w.n {
			return
		}
		b.used += w.n
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// InUse is the body bytes held now, for tests and metrics.
func (g *Guard) InUse() int64 {
	g.budget.mu.Lock()
	defer g.budget.mu.Unlock()
	return g.budget.used
}
