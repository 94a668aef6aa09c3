package guard

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Listener serves at most max connections at once: with every slot taken,
// Accept holds the next connection unserved until one closes, and takes no
// more from the kernel's queue meanwhile, so that clients beyond the cap
// wait to be served (their connects succeed up to the listen backlog)
// instead of the process running out of descriptors. It holds max + 1
// descriptors at most.
type Listener struct {
	net.Listener
	slots   chan struct{}
	done    chan struct{}
	close   sync.Once
	newIdle chan struct{} // a connection went idle

	mu         sync.Mutex
	idle       map[net.Conn]time.Time // keep-alive connections between requests, since when
	open       atomic.Int64
	reclaimNew atomic.Bool // connections that have sent nothing count as idle (ReclaimNew)
}

// Listener wraps ln with the connection cap. When srv is not nil, its
// ConnState hook (kept, and called first) also tracks idle keep-alive
// connections: while a client waits for a slot, idle ones are closed, the
// longest idle first, rather than the client waiting up to IdleTimeout
// behind connections that send nothing.
func (g *Guard) Listener(ln net.Listener, srv *http.Server) *Listener {
	return newListener(ln, g.lim.MaxConnections, srv)
}

// Limit wraps ln with a cap of max connections and no idle tracking, for
// listeners that are not HTTP (the emulator's KV side channel).
func Limit(ln net.Listener, max int) *Listener { return newListener(ln, max, nil) }

func newListener(ln net.Listener, max int, srv *http.Server) *Listener {
	l := &Listener{Listener: ln, slots: make(chan struct{}, max), done: make(chan struct{}),
		newIdle: make(chan struct{}, 1), idle: map[net.Conn]time.Time{}}
	if srv != nil {
		prev := srv.ConnState
		srv.ConnState = func(c net.Conn, s http.ConnState) {
			if prev != nil {
				prev(c, s)
			}
			l.track(c, s)
		}
	}
	return l
}

// ReclaimNew makes connections that have not sent a byte yet (net/http's
// StateNew) reclaimable as idle keep-alive ones are: with every slot
// taken, the next client is served by closing the connection silent the
// longest. For servers whose clients send their request as they connect
// (scrapers, command-line calls), where a silent connection is a stalled
// one. Call it before serving.
func (l *Listener) ReclaimNew() { l.reclaimNew.Store(true) }

func (l *Listener) track(c net.Conn, s http.ConnState) {
	idle := s == http.StateIdle || s == http.StateNew && l.reclaimNew.Load()
	l.mu.Lock()
	if idle {
		l.idle[c] = time.Now()
	} else {
		delete(l.idle, c)
	}
	l.mu.Unlock()
	if idle {
		select {
		case l.newIdle <- struct{}{}:
		default:
		}
	}
}

// reclaim closes the longest idle keep-alive connection, if any.
func (l *Listener) reclaim() {
	l.mu.Lock()
	var oldest net.Conn
	var since time.Time
	for c, t := range l.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	delete(l.idle, oldest)
	l.mu.Unlock()
	if oldest != nil {
		oldest.Close()
	}
}

// Accept takes the next connection, then waits for a free slot to serve
// it, closing idle connections to make one.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for acquired := false; !acquired; {
		select {
		case l.slots <- struct{}{}:
			acquired = true
			continue
		default:
		}
		l.reclaim()
		select {
		case l.slots <- struct{}{}:
			acquired = true
		case <-l.newIdle:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
	l.open.Add(1)
	return &conn{Conn: c, l: l}, nil
}

// Close closes the listener and stops a waiting Accept.
func (l *Listener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open is the number of connections served and not yet closed.
func (l *Listener) Open() int { return int(l.open.Load()) }

type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		c.l.open.Add(-1)
		<-c.l.slots
	})
	return err
}

// CloseWrite half-closes the connection where the underlying one can (a
// TCP connection), as net/http does before closing after an error.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
