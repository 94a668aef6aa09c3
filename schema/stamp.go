package schema

import "time"

// Stamp is one instant on two clocks: wall time for people and
// CLOCK_MONOTONIC nanoseconds for joins with kernel events
// (bpf_ktime_get_ns), the daemon and the emulator's ground truth. Package
// monoclock takes the readings.
type Stamp struct {
	UnixNs int64 `json:"unix_ns"`
	MonoNs int64 `json:"mono_ns"`
}

// Sub is s − o on the monotonic clock.
func (s Stamp) Sub(o Stamp) time.Duration { return time.Duration(s.MonoNs - o.MonoNs) }
