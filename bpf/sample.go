package bpf

import "fmt"

// MaxSyscallSample is the largest Options.SyscallSample.
const MaxSyscallSample = 1 << 16

// CheckSyscallSample says what is wrong with a syscall sampling rate
// (Options.SyscallSample), if anything: 0 and 1 both time every call.
func CheckSyscallSample(n uint32) error {
	if n > MaxSyscallSample || n&(n-1) != 0 {
		return fmt.Errorf("%d is not a power of two from 1 to %d", n, MaxSyscallSample)
	}
	return nil
}
