//go:build !(linux && cgo)

package proof

import (
	"errors"
	"runtime"
)

// Without cgo (CGO_ENABLED=0, a cross build) or off Linux hone cannot load
// libcuda: the workload says so, and the proof fails rather than skips, since
// whether there is a driver is unknown.

func cudaOpen(string) (status, reason, loaded string, driverVersion int) {
	if runtime.GOOS != "linux" {
		return "unsupported", "the GPU proof needs Linux (eBPF); this build is for " + runtime.GOOS, "", 0
	}
	return "unsupported", "hone was built without cgo (CGO_ENABLED=0 or a cross build), so it cannot load libcuda: " +
		"build hone with cgo on the GPU host", "", 0
}

func cudaSetup(string) (Device, error) { return Device{}, errors.New("unsupported") }

func cudaProcAddresses() ProcAddress { return ProcAddress{} }

func cudaPhase(string, workloadConfig) (map[string]uint64, string, error) {
	return nil, "", errors.New("unsupported")
}

func cudaCleanup() {}
