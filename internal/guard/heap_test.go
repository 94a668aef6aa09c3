package guard

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// TestLimitHeap: each Guard that limits the heap adds its BodyMemory and a
// sixteenth to the soft memory limit, its undo takes them off, and the last
// undo restores the limit there was.
func TestLimitHeap(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Skip("a memory limit is already set; LimitHeap leaves it")
	}
	a, _ := New(Limits{BodyMemory: 1 << 30})
	b, _ := New(Limits{BodyMemory: 64 << 20})
	undoA := a.LimitHeap()
	withA := debug.SetMemoryLimit(-1)
	undoB := b.LimitHeap()
	if got := debug.SetMemoryLimit(-1) - withA; got != 68<<20 {
		t.Errorf("the second guard added %d bytes, want %d (64 MiB and a sixteenth)", got, 68<<20)
	}
	undoB()
	undoB() // once only
	if got := debug.SetMemoryLimit(-1); got != withA {
		t.Errorf("after the second's undo: %d, want %d", got, withA)
	}
	if base := withA - (1<<30 + 64<<20); base <= 0 || base > 1<<30 {
		t.Errorf("the base under the first guard's allowance: %d bytes", base)
	}
	undoA()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("after the last undo: %d, want no limit", got)
	}
}
