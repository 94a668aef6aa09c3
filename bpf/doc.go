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
// to nothing. Every program asks a prefilter first (hone.h: one bit per
// process id in two arrays, the daemon's selections and the children the
// programs follow; two inlined array reads), and only a possible target
// goes on to the targets map, through a verdict its thread caches in
// task-local storage with the map's generation (task_of). A target's
// thread keeps its syscall in flight there too. reference.bpf.c is the
// floor BenchmarkSyscallFloor measures them against (make bench).
package bpf
