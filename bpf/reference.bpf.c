//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The floor hone's syscall programs are measured against (make bench,
 * BenchmarkSyscallFloor): the least a raw sys_enter program that counts
 * one process's syscalls can do, a PID filter on a load-time constant and
 * a per-CPU counter. Built like the others; the daemon never loads it. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

volatile const __u32 ref_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ref_count SEC(".maps");

SEC("raw_tp/sys_enter")
int ref_enter(struct bpf_raw_tracepoint_args *ctx)
{
	if ((__u32)(bpf_get_current_pid_tgid() >> 32) != ref_tgid)
		return 0;
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&ref_count, &k);
	if (n)
		(*n)++;
	return 0;
}
