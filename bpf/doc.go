// Package bpf holds hone's eBPF programs: the C sources (one per concern:
// syscalls, procs, sched, sockets, cuda), the vmlinux.h they are compiled
// against, the Go bindings and objects bpf2go generates from them, and a thin
// loader that creates the shared maps once and hands them to every object.
//
// It holds no daemon logic: target selection, map readers and exporters live
// in package daemon.
//
// Every timestamp the programs record is CLOCK_MONOTONIC nanoseconds
// (bpf_ktime_get_ns).
//
// What a host pays: the syscall programs run for every syscall of every
// thread while attached, so a thread that is not a target must cost next
// to nothing. Every hot path checks targets in one bit per process id (one
// inlined read of an mmapable array, hone.h); only a target's thread goes
// on to its direct-mapped slot, where sys_enter counts the call and, for
// one call in Options.SyscallSample, reads the clock that sys_exit closes
// (hone daemon times one in DefaultSyscallSample by default: each timed
// call costs two clock reads). reference.bpf.c holds the floors
// BenchmarkSyscallFloor measures them against (make bench); their loader
// (LoadReference) is in a test file, as only that benchmark loads them.
package bpf
