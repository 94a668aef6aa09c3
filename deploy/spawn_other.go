//go:build !linux

package deploy

import "os/exec"

// Outside Linux there is no parent-death signal: an owned deployment's
// processes are stopped by its watchdog (watchdog.go) when the process that
// started them dies. If the watchdog is killed too (kill -9 of both), the
// processes stay up; hone deploy down, or the next hone optimize on the same
// --out, stops them from the state file.

// pdeathsigSupported reports whether startOwned sets a parent-death signal.
const pdeathsigSupported = false

// startOwned starts cmd; see above.
func startOwned(cmd *exec.Cmd) error { return cmd.Start() }
