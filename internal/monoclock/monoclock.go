// Package monoclock stamps instants on two clocks: wall time for people and
// CLOCK_MONOTONIC nanoseconds, the clock of bpf_ktime_get_ns, so the
// client's, the proxy's and the kernel's timestamps join without guessing
// offsets.
//
// On Linux Go's monotonic reading is CLOCK_MONOTONIC (read through the
// vDSO), so the two differ by a constant: it is measured once with
// clock_gettime, bracketed by two time.Now calls, instead of one syscall per
// streamed token on hot paths.
package monoclock

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/schema"
)

// Stamp is one instant on both clocks; its wire form is package schema's.
type Stamp = schema.Stamp

// Read returns CLOCK_MONOTONIC nanoseconds from clock_gettime itself, one
// syscall a reading: for code that joins a reading with kernel timestamps
// taken before it and must not see it earlier than them, which a Stamp can
// be by its offset's few µs of measurement error. It returns 0 and the
// error where the clock cannot be read.
func Read() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return ts.Nano(), nil
}

// Base converts Go time readings to CLOCK_MONOTONIC nanoseconds.
type Base struct {
	T0   time.Time
	mono int64 // CLOCK_MONOTONIC ns at T0
}

// NewBase measures the offset. The kernel reads the clock somewhere between
// the two time.Now calls; the tightest of a few brackets is kept, so a
// preempted syscall cannot skew the offset by more than a microsecond or so.
// Where there is no CLOCK_MONOTONIC (not Linux), readings stay relative to
// T0.
func NewBase() Base {
	var best Base
	bestSpan := time.Duration(-1)
	for range 16 {
		a := time.Now()
		mono, err := Read()
		b := time.Now()
		if err != nil {
			return Base{T0: a}
		}
		if span := b.Sub(a); bestSpan < 0 || span < bestSpan {
			bestSpan = span
			best = Base{T0: a.Add(span / 2), mono: mono}
		}
	}
	return best
}

// Stamp returns t on both clocks.
func (b Base) Stamp(t time.Time) Stamp {
	return Stamp{UnixNs: t.UnixNano(), MonoNs: b.MonoNs(t)}
}

// MonoNs returns t as CLOCK_MONOTONIC nanoseconds.
func (b Base) MonoNs(t time.Time) int64 { return b.mono + int64(t.Sub(b.T0)) }

var process = NewBase()

// Now stamps the present with the process-wide base.
func Now() Stamp { return process.Stamp(time.Now()) }
