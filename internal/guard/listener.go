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

	mu     sync.Mutex
	idle   map[net.Conn]time.Time // keep-alive connections between requests, since when
	silent map[net.Conn]time.Time // with ReclaimNew: connections that have sent nothing, since when
	grace  time.Duration          // ReclaimNew's
	open   atomic.Int64
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
		newIdle: make(chan struct{}, 1), idle: map[net.Conn]time.Time{}, silent: map[net.Conn]time.Time{}}
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

// ReclaimNew makes connections that have sent nothing for grace since
// they were accepted (net/http's StateNew) reclaimable as idle keep-alive
// ones are: with every slot taken, the next client is served by closing
// the connection idle or silent the longest. For servers whose clients
// send their request as they connect (scrapers, command-line calls),
// where a connection silent that long is a stalled one; grace keeps a
// client whose request is on its way from being taken for one. Call it
// before serving.
func (l *Listener) ReclaimNew(grace time.Duration) {
	l.mu.Lock()
	l.grace = max(grace, time.Nanosecond)
	l.mu.Unlock()
}

func (l *Listener) track(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	if s == http.StateIdle {
		l.idle[c] = time.Now()
	} else {
		delete(l.idle, c)
	}
	if s == http.StateNew && l.grace > 0 {
		l.silent[c] = time.Now()
	} else {
		delete(l.silent, c)
	}
	l.mu.Unlock()
	if s == http.StateIdle {
		select {
		case l.newIdle <- struct{}{}:
		default:
		}
	}
}

// reclaim closes the connection idle longest, or silent longest past the
// grace (ReclaimNew), if any; if none is, it says when the next silent one
// will be (0: none).
func (l *Listener) reclaim() (next time.Duration) {
	now := time.Now()
	l.mu.Lock()
	var oldest net.Conn
	var since time.Time
	for c, t := range l.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	for c, t := range l.silent {
		if wait := l.grace - now.Sub(t); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
		} else if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	delete(l.idle, oldest)
	delete(l.silent, oldest)
	l.mu.Unlock()
	if oldest != nil {
		oldest.Close()
		return 0
	}
	return next
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
		var due *time.Timer // a silent connection passes its grace
		var silentDue <-chan time.Time
		if next := l.reclaim(); next > 0 {
			due = time.NewTimer(next)
			silentDue = due.C
		}
		select {
		case l.slots <- struct{}{}:
			acquired = true
		case <-l.newIdle:
		case <-silentDue:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
		if due != nil {
			due.Stop()
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
		delete(c.l.silent, c)
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
