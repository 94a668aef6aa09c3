//go:build linux && !amd64 && !arm64

package daemon

// No syscall table here: installSeccomp installs nothing on this
// architecture (the daemon's eBPF objects exist for amd64 and arm64 only).
const (
	seccompAuditArch = 0
	seccompX32Bit    = 0
)

var seccompDeniedArch []uint32
