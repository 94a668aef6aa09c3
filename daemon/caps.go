//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// What the daemon needs once its programs are attached was established by
// experiment (TestPrivilegeNeeds, on Linux 6.18), each probe run after a
// drop to a chosen set:
//
//   - reading, updating and deleting map entries, reading the ring buffer,
//     program statistics (BPF_OBJ_GET_INFO_BY_FD), closing links: no
//     capability (they work on file descriptors already open);
//   - attaching a uprobe_multi link to a libcuda found later: no capability
//     (BPF_LINK_CREATE on an already-loaded program);
//   - opening and closing a syscall timing window (attaching and detaching
//     raw_tp/sys_exit, setting timing_on): no capability;
//   - attaching a perf-event uprobe (kernels without uprobe_multi):
//     CAP_SYS_ADMIN (perf_event_open of a uprobe with raw samples; with
//     CAP_PERFMON alone it fails with EACCES);
//   - reading /proc/PID/maps of a target run by root or by another user, to
//     find a libcuda it mapped: CAP_PERFMON (mm_access accepts
//     perfmon_capable for read access), or CAP_SYS_ADMIN, which includes
//     it; without either it fails with EACCES even as uid 0;
//   - reading /proc/PID/cmdline, stat, comm and cgroup.procs: none;
//   - re-enabling BPF statistics would need CAP_SYS_ADMIN: the daemon does
//     it once, before the drop.
//
// So on kernels with uprobe_multi links (Linux >= 6.6) the daemon keeps
// CAP_PERFMON alone; elsewhere CAP_SYS_ADMIN alone (which covers both
// needs). CAP_BPF is never needed after attaching.

// StartCapabilities are the fewest capabilities with which the daemon,
// as a user other than root, starts (New, Start) and drops to
// KeptCapabilities, which must be among them. A service manager grants
// them (deploy/systemd's unit: StartCapabilities(true, false), checked by
// TestSystemdUnitCapabilities; TestStartCapabilities shows each one is
// needed and the set enough):
//
//   - CAP_BPF: creating the maps and loading the programs;
//   - CAP_PERFMON: loading tracing programs (raw_tp, tp_btf, uprobe),
//     reading the /proc/PID/maps of root's or other users' targets for the
//     libcuda they map; what is kept with uprobeMulti;
//   - CAP_SYS_ADMIN: BPF_ENABLE_STATS (bpfStats), and perf-event uprobes
//     at every attach without uprobeMulti (kernels before 6.6), where it
//     is what is kept. The kernel accepts it in place of CAP_BPF and
//     CAP_PERFMON, so where it is needed they are not, but for CAP_PERFMON
//     kept with uprobeMulti.
//
// Attaching raw_tp and tp_btf programs and uprobe_multi links needs
// nothing more, and no memlock limit applies on the kernels the daemon
// supports (BPF memory is charged to the cgroup since 5.11).
func StartCapabilities(uprobeMulti, bpfStats bool) []cap.Value {
	switch {
	case !uprobeMulti:
		return []cap.Value{cap.SYS_ADMIN}
	case bpfStats:
		return []cap.Value{cap.SYS_ADMIN, cap.PERFMON}
	}
	return []cap.Value{cap.PERFMON, cap.BPF}
}

// KeptCapabilities are what the daemon keeps after attaching: with
// uprobeMulti (see bpf.Objects.UprobeMulti), only CAP_PERFMON, to read the
// memory maps of targets found later for the libcuda they map; without it,
// only CAP_SYS_ADMIN, which perf-event uprobes need at each attach and
// which also covers reading the maps.
func KeptCapabilities(uprobeMulti bool) []cap.Value {
	if uprobeMulti {
		return []cap.Value{cap.PERFMON}
	}
	return []cap.Value{cap.SYS_ADMIN}
}

// dropSpec says how far DropPrivileges goes.
type dropSpec struct {
	keep     []cap.Value
	uid, gid int  // -1: keep the user and group
	denyPerf bool // seccomp also refuses perf_event_open (uprobe_multi in use)
}

// DropPrivileges reduces the daemon, on every thread, to what it needs
// after attaching:
//
//   - the bounding set, permitted and effective sets to keep; the
//     inheritable and ambient sets emptied;
//   - with root and uid >= 0: supplementary groups cleared and every user
//     and group id (real, effective, saved, filesystem) set to uid and gid,
//     the capabilities in keep surviving the change;
//   - no_new_privs set and the process made non-dumpable;
//   - a seccomp filter refusing, with EPERM, syscalls the daemon never
//     makes and an intruder would want (see seccompDenied).
//
// It returns the resulting capability text.
func dropPrivileges(s dropSpec) (string, error) {
	keep := map[cap.Value]bool{}
	for _, v := range s.keep {
		keep[v] = true
	}
	var drop []cap.Value
	for v := cap.Value(0); v < cap.MaxBits(); v++ {
		if !keep[v] {
			drop = append(drop, v)
		}
	}
	// The bounding set needs CAP_SETPCAP to shrink, and the id changes
	// CAP_SETGID and CAP_SETUID: all before the sets lose them. A non-root
	// daemon given file capabilities may lack CAP_SETPCAP: its bounding set
	// stays, harmless under no_new_privs (execve grants no capabilities).
	if ok, _ := cap.GetProc().GetFlag(cap.Permitted, cap.SETPCAP); ok || os.Geteuid() == 0 {
		if err := cap.DropBound(drop...); err != nil {
			return "", fmt.Errorf("drop bounding capabilities: %w", err)
		}
	}
	if s.uid >= 0 && os.Geteuid() == 0 && (s.uid != 0 || s.gid != 0) {
		if err := cap.SetGroups(s.gid); err != nil {
			return "", fmt.Errorf("set group %d: %w", s.gid, err)
		}
		if err := cap.SetUID(s.uid); err != nil {
			return "", fmt.Errorf("set user %d: %w", s.uid, err)
		}
	}
	c := cap.NewSet()
	if err := c.SetFlag(cap.Permitted, true, s.keep...); err != nil {
		return "", err
	}
	if err := c.SetFlag(cap.Effective, true, s.keep...); err != nil {
		return "", err
	}
	if err := c.SetProc(); err != nil {
		return "", fmt.Errorf("set capabilities %s: %w", c, err)
	}
	if err := cap.ResetAmbient(); err != nil && !errors.Is(err, unix.EINVAL) {
		return "", fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if _, err := cap.Prctlw(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", fmt.Errorf("set no_new_privs: %w", err)
	}
	if _, err := cap.Prctlw(unix.PR_SET_DUMPABLE, 0); err != nil {
		return "", fmt.Errorf("set non-dumpable: %w", err)
	}
	if err := installSeccomp(s.denyPerf); err != nil {
		return "", fmt.Errorf("seccomp: %w", err)
	}
	return cap.GetProc().String(), nil
}

// currentCapabilities describes this process's capabilities.
func currentCapabilities() string { return cap.GetProc().String() }

// capabilityNames lists caps as "CAP_X, CAP_Y".
func capabilityNames(caps []cap.Value) string {
	var out []string
	for _, c := range caps {
		out = append(out, strings.ToUpper(c.String()))
	}
	return strings.Join(out, ", ")
}
