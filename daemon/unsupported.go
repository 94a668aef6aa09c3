//go:build !linux

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
)

// The daemon traces with eBPF, which only Linux has. On other systems the
// package keeps what other code reads (Config, ParsePorts, the Snapshot
// types, Handler, Profile) and what `hone daemon` calls, and Run says why
// it cannot run.

// Daemon is the Linux tracer; on this OS there is nothing to start.
type Daemon struct{}

// New accepts cfg without checking it (its checks read /proc and cgroups);
// Run reports that the daemon needs Linux.
func New(cfg Config, log *slog.Logger) (*Daemon, error) { return &Daemon{}, nil }

// Run returns an error: the daemon needs Linux.
func Run(ctx context.Context, cfg Config, opts RunOptions, log *slog.Logger) error {
	return fmt.Errorf("hone daemon needs Linux (eBPF); this build is for %s", runtime.GOOS)
}
