package replay

import "github.com/hone-llm/hone/internal/monoclock"

// timebase converts Go time readings to CLOCK_MONOTONIC nanoseconds,
// measured once per run (see monoclock).
type timebase = monoclock.Base

func newTimebase() timebase { return monoclock.NewBase() }
