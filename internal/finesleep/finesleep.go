// Package finesleep waits for an instant to within tens of microseconds
// without holding a processor while it waits.
//
// An idle Go runtime waits for its next timer in epoll_pwait, whose timeout
// is whole milliseconds, so a timer due in under a millisecond fires about a
// millisecond late and longer ones up to a millisecond late (measured on the
// development host: time.Sleep(100µs) takes 1.03 ms at the median, a 5 ms
// sleep 0.25 ms more). That error is the size of a decode step.
//
// Sleeping in the kernel (nanosleep) is precise but keeps the goroutine's P
// for the whole sleep, and sysmon, which polls the network when every P is
// busy, sleeps up to 10 ms when idle: two goroutines napping on a two-P
// runtime starve every connection for that long. Spinning with
// runtime.Gosched has the same effect, since the scheduler looks at the
// global run queue before the network.
//
// A Timer is a Linux timerfd registered with Go's network poller: a wait
// parks the goroutine like a socket read, and the poller's thread wakes
// when the timerfd fires, at nanosecond resolution. Until uses a Go timer
// for all but the last Margin of a wait and a pooled Timer for the rest.
// Off Linux, or without timerfd, Timer falls back to a Go timer.
package finesleep

import (
	"context"
	"sync"
	"time"
)

// Margin is how long before the deadline a wait moves from a Go timer to a
// Timer: the runtime's millisecond rounding plus a little. Shorter waits
// use the Timer throughout.
const Margin = 1200 * time.Microsecond

// pool keeps idle Timers; each holds a file descriptor.
var pool struct {
	sync.Mutex
	free []*Timer
}

const maxPooled = 64

func getTimer() *Timer {
	pool.Lock()
	if n := len(pool.free); n > 0 {
		t := pool.free[n-1]
		pool.free = pool.free[:n-1]
		pool.Unlock()
		return t
	}
	pool.Unlock()
	return NewTimer()
}

func putTimer(t *Timer) {
	pool.Lock()
	if len(pool.free) < maxPooled {
		pool.free = append(pool.free, t)
		pool.Unlock()
		return
	}
	pool.Unlock()
	t.Close()
}

// Until blocks until deadline and reports true, or reports false as soon as
// ctx ends.
func Until(ctx context.Context, deadline time.Time) bool {
	if d := time.Until(deadline); d > Margin {
		gt := time.NewTimer(d - Margin)
		select {
		case <-gt.C:
		case <-ctx.Done():
			gt.Stop()
			return false
		}
	}
	if time.Until(deadline) <= 0 {
		return ctx.Err() == nil
	}
	t := getTimer()
	defer putTimer(t)
	stop := context.AfterFunc(ctx, t.Wake)
	defer stop()
	for ctx.Err() == nil && time.Until(deadline) > 0 {
		t.Wait(deadline)
	}
	return ctx.Err() == nil
}
