//go:build !linux

package emulator

import "time"

var processStart = time.Now()

// monotonicNow approximates CLOCK_MONOTONIC off Linux: nanoseconds since
// the process started. Joins with kernel timestamps need Linux.
func monotonicNow() int64 { return int64(time.Since(processStart)) }

// bootID is unknown off Linux: no two processes are known to share a clock.
func bootID() string { return "" }
