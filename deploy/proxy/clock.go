package proxy

import (
	"time"

	"golang.org/x/sys/unix"
)

// Stamp is one instant on two clocks: wall time for people, and
// CLOCK_MONOTONIC nanoseconds for joins with kernel events (bpf_ktime_get_ns)
// and the engines' ground truth.
type Stamp struct {
	UnixNs int64 `json:"unix_ns"`
	MonoNs int64 `json:"mono_ns"`
}

// On Linux Go's monotonic reading is CLOCK_MONOTONIC, so the two differ by a
// constant, measured once here instead of a clock_gettime call per event.
var (
	baseTime time.Time
	baseMono int64
)

func init() {
	var ts unix.Timespec
	a := time.Now()
	err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	b := time.Now()
	baseTime = a.Add(b.Sub(a) / 2)
	if err == nil {
		baseMono = ts.Nano()
	}
}

func stampOf(t time.Time) Stamp {
	return Stamp{UnixNs: t.UnixNano(), MonoNs: baseMono + int64(t.Sub(baseTime))}
}

func now() Stamp { return stampOf(time.Now()) }

// Sub is s - o in nanoseconds of the monotonic clock.
func (s Stamp) Sub(o Stamp) time.Duration { return time.Duration(s.MonoNs - o.MonoNs) }
