package guard

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
)

// heapLimit is the process's soft memory limit as the Guards that called
// LimitHeap want it.
var heapLimit struct {
	mu     sync.Mutex
	base   int64 // the runtime's memory at the first call
	bodies int64 // the sum of those Guards' allowances
	prev   int64 // the limit before the first call
}

// LimitHeap sets the process's soft memory limit (runtime/debug.
// SetMemoryLimit) to the memory the Go runtime held at the first call, plus
// BodyMemory and a sixteenth more (for what requests hold beside their
// bodies: goroutines, buffers, a prompt's ids) for each Guard that called it
// and has not yet called the undo it returned. A server process calls it
// once it is set up.
//
// Without it the garbage collector (GOGC=100) lets the heap grow to twice
// what was live at its last collection before collecting again, so bodies
// released after a burst stay in memory until then: a server whose live
// bodies fill BodyMemory peaks near twice it. With the limit, the collector
// runs as the heap nears it, and hands freed pages back to the system, so
// the process stays near BodyMemory plus what it held before serving. The
// limit is soft: a heap that needs more gets it (the collector then works
// harder, up to half the CPU). A limit set otherwise (GOMEMLIMIT, or the
// program) is left as it is, and undo then does nothing.
func (g *Guard) LimitHeap() (undo func()) {
	allowance := g.lim.BodyMemory + g.lim.BodyMemory/16
	h := &heapLimit
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bodies == 0 {
		cur := debug.SetMemoryLimit(-1)
		if os.Getenv("GOMEMLIMIT") != "" || cur != math.MaxInt64 {
			return func() {}
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		h.base, h.prev = int64(ms.Sys-ms.HeapReleased), cur
	}
	h.bodies += allowance
	debug.SetMemoryLimit(h.base + h.bodies)
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.bodies -= allowance
			if h.bodies == 0 {
				debug.SetMemoryLimit(h.prev)
				return
			}
			debug.SetMemoryLimit(h.base + h.bodies)
		})
	}
}
