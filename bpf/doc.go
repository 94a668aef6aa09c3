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
package bpf
