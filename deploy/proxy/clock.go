package proxy

import "github.com/hone-llm/hone/internal/monoclock"

// Stamp is one instant on two clocks: wall time for people, and
// CLOCK_MONOTONIC nanoseconds for joins with kernel events (bpf_ktime_get_ns)
// and the engines' ground truth.
type Stamp = monoclock.Stamp

func now() Stamp { return monoclock.Now() }
