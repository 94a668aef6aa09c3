//go:build !linux

package emulator

import "os/exec"

// setDeathSignal: only Linux has a parent-death signal; a CUDA worker
// (Linux and cgo only) never starts elsewhere.
func setDeathSignal(*exec.Cmd) {}
