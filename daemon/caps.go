//go:build linux

package daemon

import (
	"fmt"

	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// KeptCapabilities are what the daemon still needs once its programs are
// attached, each proven by TestOnceDroppedCapabilities (which runs the
// daemon with exactly this set and probes a libcuda found only afterwards,
// in a process of another user):
//   - CAP_BPF and CAP_PERFMON: attaching programs to new uprobes, reading
//     program statistics;
//   - CAP_SYS_ADMIN: on Linux 6.18, perf_event_open of a uprobe PMU event
//     with a raw sample (how cilium/ebpf attaches uprobes) fails with EACCES
//     without it, so libcuda files mapped after the drop could not be probed.
//
// Reading /proc/PID/maps of a target running as another user needed no
// CAP_SYS_PTRACE on this kernel (the test's workload runs as nobody), so it
// is not kept.
var KeptCapabilities = []cap.Value{cap.BPF, cap.PERFMON, cap.SYS_ADMIN}

// DropCapabilities reduces the process, every thread of it, to
// KeptCapabilities (permitted and effective; inheritable and the bounding set
// emptied of the rest), so that nothing it execs regains them. It returns
// the resulting capability text.
func DropCapabilities() (string, error) {
	c := cap.NewSet()
	if err := c.SetFlag(cap.Permitted, true, KeptCapabilities...); err != nil {
		return "", err
	}
	if err := c.SetFlag(cap.Effective, true, KeptCapabilities...); err != nil {
		return "", err
	}
	// The bounding set needs CAP_SETPCAP to shrink: do it before the set
	// loses that capability.
	keep := map[cap.Value]bool{}
	for _, v := range KeptCapabilities {
		keep[v] = true
	}
	var drop []cap.Value
	for v := cap.Value(0); v < cap.MaxBits(); v++ {
		if !keep[v] {
			drop = append(drop, v)
		}
	}
	if err := cap.DropBound(drop...); err != nil {
		return "", fmt.Errorf("drop bounding capabilities: %w", err)
	}
	if err := c.SetProc(); err != nil {
		return "", fmt.Errorf("set capabilities %s: %w", c, err)
	}
	return cap.GetProc().String(), nil
}

// currentCapabilities describes this process's capabilities.
func currentCapabilities() string { return cap.GetProc().String() }
