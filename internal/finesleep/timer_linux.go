package finesleep

import (
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Timer is a one-shot timer served by the network poller. Wait and Wake may
// be called from different goroutines; Wait from one at a time.
type Timer struct {
	f     *os.File // nil: timerfd unavailable, Wait uses a Go timer
	fd    int
	poked atomic.Bool
	wake  chan struct{} // the fallback's Wake
}

// NewTimer returns a Timer; it never fails, falling back to a Go timer.
func NewTimer() *Timer {
	t := &Timer{wake: make(chan struct{}, 1)}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return t
	}
	// A non-blocking descriptor is registered with the poller, so reads
	// park the goroutine instead of blocking its thread.
	t.f, t.fd = os.NewFile(uintptr(fd), "timerfd"), fd
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
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
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
	spec := unix.ItimerSpec{Value: unix.Timespec{Nsec: 1}}
	_ = unix.TimerfdSettime(t.fd, 0, &spec, nil)
}

// Close releases the descriptor.
func (t *Timer) Close() {
	if t.f != nil {
		t.f.Close()
	}
}
