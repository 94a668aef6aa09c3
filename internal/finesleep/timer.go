package finesleep

import (
	"os"
	"sync/atomic"
	"time"
)

// Timer is a one-shot timer served by the network poller (a Linux timerfd);
// where there is none, a Go timer, no finer than the runtime's. Wait and
// Wake may be called from different goroutines; Wait from one at a time.
type Timer struct {
	f     *os.File // nil: no timerfd, Wait uses a Go timer
	fd    int
	poked atomic.Bool
	wake  chan struct{} // the Go timer's Wake
}

// NewTimer returns a Timer; it never fails.
func NewTimer() *Timer {
	t := &Timer{wake: make(chan struct{}, 1)}
	if f, fd, ok := newTimerfd(); ok {
		t.f, t.fd = f, fd
	}
	return t
}

// Wait blocks until deadline, or until Wake is called (before or during
// the wait). It may return early; callers loop on their deadline.
func (t *Timer) Wait(deadline time.Time) {
	d := time.Until(deadline)
	if d <= 0 || t.poked.Swap(false) {
		return
	}
	if t.f == nil {
		gt := time.NewTimer(d)
		select {
		case <-gt.C:
		case <-t.wake:
			gt.Stop()
		}
		return
	}
	// Arming resets the expiration count, so an old expiry cannot end
	// this wait; a Wake between the check above and here is caught by
	// the second check.
	if err := armTimerfd(t.fd, d); err != nil {
		time.Sleep(d)
		return
	}
	if t.poked.Swap(false) {
		return
	}
	var buf [8]byte
	_, _ = t.f.Read(buf[:])
}

// Wake ends the current or the next Wait at once.
func (t *Timer) Wake() {
	t.poked.Store(true)
	if t.f == nil {
		select {
		case t.wake <- struct{}{}:
		default:
		}
		return
	}
	_ = armTimerfd(t.fd, 0)
}

// Close releases the descriptor.
func (t *Timer) Close() {
	if t.f != nil {
		t.f.Close()
	}
}
