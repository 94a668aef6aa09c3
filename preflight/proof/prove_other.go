//go:build !linux

package proof

import (
	"context"
	"runtime"
	"time"
)

// Prove fails off Linux: the daemon it checks traces with eBPF.
func Prove(ctx context.Context, o Options) *Result {
	start := time.Now()
	o, override := o.withDefaults()
	return &Result{SchemaVersion: SchemaVersion, Verdict: Fail, Status: "unsupported",
		Reason:  "the GPU proof needs Linux (the daemon traces with eBPF); this build is for " + runtime.GOOS,
		LibCUDA: LibCUDA{Requested: o.LibCUDA, Override: override}, ElapsedS: seconds(time.Since(start))}
}
