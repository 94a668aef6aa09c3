//go:build linux && cgo

package main

/*
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

// soak_fork_wave forks n children with raw clone(SIGCHLD) (no libc fork:
// no atfork handlers, no set_robust_list in the child), so a child makes
// exactly the syscalls below and nothing else:
//   getppid  k = 1 + (first+i) % 10 times      (class "other")
//   close    its copy of wfd, once              (class "other")
//   read     rfd, once: it returns 0 when every copy of wfd is closed,
//            so the wave's children exit together   (class "file")
//   exit_group, which never returns (counted: a syscall is counted when
//            it is entered)
// The return from clone in the child is not counted either: the child was
// not in a syscall when it became a target. Signals are blocked around the
// forks so that no Go handler ever runs in a child. pids[i] receives the
// children's PIDs; the number forked is returned (fewer on error, errno in
// *err).
static int soak_fork_wave(int n, long first, int rfd, int wfd, int *pids, int *err) {
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int i;
	for (i = 0; i < n; i++) {
		long pid = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
		if (pid == 0) {
			long k = 1 + (first + i) % 10;
			for (long j = 0; j < k; j++)
				syscall(SYS_getppid);
			syscall(SYS_close, (long)wfd);
			char c;
			syscall(SYS_read, (long)rfd, &c, 1L);
			syscall(SYS_exit_group, 0L);
			for (;;) {}
		}
		if (pid < 0) {
			*err = errno;
			break;
		}
		pids[i] = (int)pid;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return i;
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// childSyscalls returns the syscalls child number i (0-based over the whole
// churn) makes, by the daemon's class: see soak_fork_wave.
func childSyscalls(i int) (other, file uint64) {
	return uint64(1+i%10) + 2, 1
}

// forkWave forks n children numbered first.. and reaps them once they have
// all exited.
func forkWave(n, first int) error {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return err
	}
	pids := make([]C.int, n)
	var cerr C.int
	got := int(C.soak_fork_wave(C.int(n), C.long(first), C.int(p[0]), C.int(p[1]), (*C.int)(unsafe.Pointer(&pids[0])), &cerr))
	// Closing our write end lets the children's reads return once each has
	// closed its own copy.
	syscall.Close(p[1])
	syscall.Close(p[0])
	for i := range got {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(int(pids[i]), &ws, 0, nil)
			if err != syscall.EINTR {
				if err != nil {
					return fmt.Errorf("wait4 %d: %w", pids[i], err)
				}
				break
			}
		}
		if !ws.Exited() || ws.ExitStatus() != 0 {
			return fmt.Errorf("child %d ended with %v", pids[i], ws)
		}
	}
	if got < n {
		return fmt.Errorf("forked %d of %d children: %v", got, n, syscall.Errno(cerr))
	}
	return nil
}
