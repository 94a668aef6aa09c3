//go:build unix

package guard

import (
	"syscall"
	"testing"
)

// TestNofileRaised: Go (1.19 and later) raises the soft RLIMIT_NOFILE to
// the hard limit (less one) at start, so AutoConnections sees the most the
// process may open.
func TestNofileRaised(t *testing.T) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Skip(err)
	}
	if r.Cur+1 < r.Max {
		t.Errorf("soft RLIMIT_NOFILE %d, hard %d: the runtime did not raise it", r.Cur, r.Max)
	}
	if nofile() != r.Cur {
		t.Errorf("nofile %d, want %d", nofile(), r.Cur)
	}
}
