//go:build unix

package guard

import "syscall"

// nofile is the soft RLIMIT_NOFILE, 0 when unknown.
func nofile() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}
