package daemon

import "time"

// RunOptions say how `hone daemon` runs around a Daemon.
type RunOptions struct {
	Listen   string        // HTTP address for /metrics and /v1 (""/"off": none)
	Once     bool          // measure for Duration, write the snapshot, exit
	Duration time.Duration // with Once
	Output   string        // snapshot JSON file ("" or "-": stdout with Once; none otherwise)
	Profile  string        // pprof file of traced time (syscalls view) written at the end
	DropCaps bool          // keep only KeptCapabilities after attaching
	Ready    func(*Daemon) // called once attached (tests)
}
