package finesleep

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// newTimerfd returns a non-blocking CLOCK_MONOTONIC timerfd as an os.File:
// a non-blocking descriptor is registered with the poller, so reads park
// the goroutine instead of blocking its thread.
func newTimerfd() (*os.File, int, bool) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, 0, false
	}
	return os.NewFile(uintptr(fd), "timerfd"), fd, true
}

// armTimerfd makes fd fire once, d from now (at once for d <= 0). Arming
// resets the expiration count.
func armTimerfd(fd int, d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}
	return unix.TimerfdSettime(fd, 0, &spec, nil)
}
