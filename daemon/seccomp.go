//go:build linux

package daemon

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is a deny list, built by hand in classic BPF (no
// libseccomp): the Go runtime, cgo's NVML and cilium/ebpf make syscalls
// that no allow list written here could be sure to cover, while the
// syscalls below are ones the daemon never makes after attaching and an
// intruder would want. Each returns EPERM. Syscalls of another ABI (i386
// through int 0x80, x32) are all refused: the daemon makes none, and a
// deny list by number would not cover them.
//
// Denied: ptrace, process_vm_readv/writev (other processes' memory);
// kexec_load, kexec_file_load, init_module, finit_module, delete_module
// (the kernel); mount, umount2, pivot_root, chroot and the new mount API
// (the file tree); setuid, setgid, setreuid, setregid, setresuid,
// setresgid, setfsuid, setfsgid, setgroups (identity); unshare, setns,
// clone with namespace flags (namespaces; clone3, whose flags a filter
// cannot read, answers ENOSYS so that libc falls back to clone); keyctl,
// add_key, request_key (keyrings); userfaultfd, io_uring_* (common kernel
// exploit primitives); open_by_handle_at, name_to_handle_at; reboot,
// swapon, swapoff, acct, quotactl, syslog, vhangup, clock and time setters,
// sethostname, setdomainname, iopl, ioperm, uselib; and perf_event_open
// where uprobe_multi links make it unneeded (CAP_PERFMON, kept for
// /proc/PID/maps, would otherwise allow system-wide perf events).
//
// bpf(2) stays allowed: the daemon reads and updates its maps and attaches
// uprobe_multi links with it; loading programs needs CAP_BPF, which it no
// longer has.

// seccompData offsets (struct seccomp_data: nr, arch, ip, args[6]).
const (
	seccompNR   = 0
	seccompArch = 4
	seccompArg0 = 16 // low 32 bits of args[0] on little-endian
)

// cloneNamespaceFlags are clone(2) flags that create namespaces.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// seccompDenied are the syscall numbers refused with EPERM on this
// architecture.
func seccompDenied(denyPerf bool) []uint32 {
	out := append([]uint32(nil), seccompDeniedArch...)
	if denyPerf {
		out = append(out, unix.SYS_PERF_EVENT_OPEN)
	}
	return out
}

// seccompFilter builds the filter program.
func seccompFilter(denyPerf bool) []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	const (
		ld    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosy = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	denied := seccompDenied(denyPerf)
	var f []unix.SockFilter
	// Another ABI: refuse everything.
	f = append(f, stmt(ld, seccompArch), jump(jeq, seccompAuditArch, 1, 0), stmt(ret, eperm))
	f = append(f, stmt(ld, seccompNR))
	if seccompX32Bit != 0 {
		f = append(f, jump(jge, seccompX32Bit, 0, 1), stmt(ret, eperm))
	}
	// clone3: ENOSYS; clone with namespace flags: EPERM.
	f = append(f, jump(jeq, unix.SYS_CLONE3, 0, 1), stmt(ret, enosy))
	f = append(f, jump(jeq, unix.SYS_CLONE, 0, 4),
		stmt(ld, seccompArg0), jump(jset, cloneNamespaceFlags, 0, 1), stmt(ret, eperm),
		stmt(ld, seccompNR))
	// The deny list: each match jumps to the EPERM at the end.
	for i, nr := range denied {
		f = append(f, jump(jeq, nr, uint8(len(denied)-i), 0))
	}
	return append(f, stmt(ret, allow), stmt(ret, eperm))
}

// installSeccomp installs the filter on every thread (TSYNC). The caller
// has set no_new_privs.
func installSeccomp(denyPerf bool) error {
	if seccompAuditArch == 0 {
		return nil // no table for this architecture: see seccomp_other.go
	}
	if n := len(seccompDenied(denyPerf)); n > 255 {
		return fmt.Errorf("deny list of %d syscalls too long for 8-bit jumps", n)
	}
	f := seccompFilter(denyPerf)
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog))); e != 0 {
		return e
	}
	return nil
}
