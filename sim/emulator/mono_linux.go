//go:build linux

package emulator

import (
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// monotonicNow reads CLOCK_MONOTONIC in nanoseconds.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// bootID names this boot: two processes that see the same one share
// CLOCK_MONOTONIC. Empty when unknown.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})
