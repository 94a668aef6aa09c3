package replay

import (
	"time"

	"golang.org/x/sys/unix"
)

// Stamp is one instant on two clocks: wall time for people and
// CLOCK_MONOTONIC nanoseconds for joins with kernel events
// (bpf_ktime_get_ns), the daemon and the emulator's ground truth.
type Stamp struct {
	UnixNs int64 `json:"unix_ns"`
	MonoNs int64 `json:"mono_ns"`
}

// timebase converts Go time readings to CLOCK_MONOTONIC nanoseconds. On
// Linux Go's monotonic clock reading is CLOCK_MONOTONIC (the runtime reads it
// through the vDSO), so the two differ by a constant: it is measured once
// with unix.ClockGettime, bracketed by two time.Now calls, instead of one
// clock_gettime syscall per streamed token on the hot path.
type timebase struct {
	t0   time.Time
	mono int64 // CLOCK_MONOTONIC ns at t0
}

func newTimebase() timebase {
	// The kernel reads the clock somewhere between a and b; keep the
	// tightest of a few brackets so a preempted syscall cannot skew the
	// offset by more than a microsecond or so.
	var best timebase
	bestSpan := time.Duration(-1)
	for range 16 {
		var ts unix.Timespec
		a := time.Now()
		err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		b := time.Now()
		if err != nil {
			// No CLOCK_MONOTONIC (not Linux): mono stays relative to t0.
			return timebase{t0: a}
		}
		if span := b.Sub(a); bestSpan < 0 || span < bestSpan {
			bestSpan = span
			best = timebase{t0: a.Add(span / 2), mono: ts.Nano()}
		}
	}
	return best
}

// stamp returns t on both clocks.
func (tb timebase) stamp(t time.Time) Stamp {
	return Stamp{UnixNs: t.UnixNano(), MonoNs: tb.mono + int64(t.Sub(tb.t0))}
}

// monoNs returns t as CLOCK_MONOTONIC nanoseconds.
func (tb timebase) monoNs(t time.Time) int64 { return tb.mono + int64(t.Sub(tb.t0)) }
