package replay

import "github.com/hone-llm/hone/internal/monoclock"

// Stamp is one instant on two clocks: wall time for people and
// CLOCK_MONOTONIC nanoseconds for joins with kernel events
// (bpf_ktime_get_ns), the daemon and the emulator's ground truth.
type Stamp = monoclock.Stamp

// timebase converts Go time readings to CLOCK_MONOTONIC nanoseconds,
// measured once per run (see monoclock).
type timebase = monoclock.Base

func newTimebase() timebase { return monoclock.NewBase() }
