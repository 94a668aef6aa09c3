//go:build linux

package emulator

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills a CUDA worker when the engine's thread that started
// it ends with the process (a killed engine leaves no worker behind).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
