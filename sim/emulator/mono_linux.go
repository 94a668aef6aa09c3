//go:build linux

package emulator

import (
	"os"
	"strings"
	"sync"

	"github.com/hone-llm/hone/internal/monoclock"
)

// monotonicNow reads CLOCK_MONOTONIC in nanoseconds (0 if unreadable).
func monotonicNow() int64 {
	ns, _ := monoclock.Read()
	return ns
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
