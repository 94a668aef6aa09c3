//go:build !linux

package finesleep

import (
	"sync/atomic"
	"time"
)

// Timer is a one-shot timer; off Linux it is a Go timer, no finer than
// the runtime's.
type Timer struct {
	poked atomic.Bool
	wake  chan struct{}
}

// NewTimer returns a Timer.
func NewTimer() *Timer { return &Timer{wake: make(chan struct{}, 1)} }

// Wait blocks until deadline or Wake; it may return early.
func (t *Timer) Wait(deadline time.Time) {
	d := time.Until(deadline)
	if d <= 0 || t.poked.Swap(false) {
		return
	}
	gt := time.NewTimer(d)
	select {
	case <-gt.C:
	case <-t.wake:
		gt.Stop()
	}
}

// Wake ends the current or the next Wait at once.
func (t *Timer) Wake() {
	t.poked.Store(true)
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Close does nothing off Linux.
func (t *Timer) Close() {}
