package deploy

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// On Linux an owned deployment's processes are started with a parent-death
// signal (PR_SET_PDEATHSIG, SIGKILL): the kernel kills each of them when
// the process that started it dies, even by SIGKILL.
//
// The kernel's "parent" there is the OS thread that forked, not the
// process: the signal fires when that thread exits. Go retires a thread
// when a goroutine locked to it ends without unlocking, so a child forked
// from an arbitrary goroutine could be killed while hone lives on. Every
// such child is therefore forked from one goroutine locked to its thread
// for the life of the process (the spawner), which never returns.
//
// The signal reaches only the direct child. Its descendants (vLLM's engine
// and worker processes, the test worker's grandchild) stay in its process
// group; the deployment's watchdog (watchdog.go) kills the whole groups.

// pdeathsigSupported reports whether startOwned sets a parent-death signal.
const pdeathsigSupported = true

var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// startOwned starts cmd from the spawner's thread with a parent-death
// signal of SIGKILL.
func startOwned(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		go func() {
			// Never unlocked, never returns: this thread lives as long as
			// the process, so the children's parent-death signal fires only
			// when the process dies.
			runtime.LockOSThread()
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd, done}
	return <-done
}
