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
// to nothing. Every hot path checks targets in one bit per process id (two
// inlined array reads: the daemon's selections and the children the
// programs follow, hone.h); only a target's thread goes on to its
// syscall in flight (a hash entry by thread id). reference.bpf.c is the floor BenchmarkSyscallFloor
// measures them against (make bench).
package bpf
