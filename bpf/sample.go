package bpf

import "fmt"

// MaxSyscallSample is the largest Options.SyscallSample.
const MaxSyscallSample = 1 << 16

// DefaultSyscallSample is hone daemon's --syscall-sample unless told
// otherwise (Options' zero value still times every call). Timing a call
// costs two clock reads and sys_exit's work; on a VM whose clock is
// kvm-clock that was ~140 ns a call, which put the added cost per traced
// syscall at ~2x the counting floor's (BenchmarkSyscallFloor), against
// issue 17's 1.5x. One in 16 timed brings it within it, counts stay exact,
// and the mean latency (total_ns / timed) stays an unbiased estimate; the
// maximum and the histogram become those of a sample.
const DefaultSyscallSample = 16

// CheckSyscallSample says what is wrong with a syscall sampling rate
// (Options.SyscallSample), if anything: 0 and 1 both time every call.
func CheckSyscallSample(n uint32) error {
	if n > MaxSyscallSample || n&(n-1) != 0 {
		return fmt.Errorf("%d is not a power of two from 1 to %d", n, MaxSyscallSample)
	}
	return nil
}
