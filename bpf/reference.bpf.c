//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The floors hone's syscall programs are measured against (make bench,
 * BenchmarkSyscallFloor), built like the others; the daemon never loads
 * them. ref_enter is the least a raw sys_enter program that counts one
 * process's syscalls can do: a PID filter on a load-time constant and a
 * per-CPU counter. lat_enter and lat_exit are the least a pair that times
 * them can do: the same filter, a clock read at each end, the entry time in
 * an array slot by thread id, and a per-CPU count and total. */
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

/* lat_start: the entry time by thread id (tid % LAT_SLOTS; the benchmark's
 * process is one thread). */
#define LAT_SLOTS 1024
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LAT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} lat_start SEC(".maps");

struct lat_total {
	__u64 count;
	__u64 total_ns;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lat_total);
} lat_total SEC(".maps");

SEC("raw_tp/sys_enter")
int lat_enter(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 pt = bpf_get_current_pid_tgid();
	if ((__u32)(pt >> 32) != ref_tgid)
		return 0;
	__u32 k = (__u32)pt & (LAT_SLOTS - 1);
	__u64 *start = bpf_map_lookup_elem(&lat_start, &k);
	if (start)
		*start = bpf_ktime_get_ns();
	return 0;
}

SEC("raw_tp/sys_exit")
int lat_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 pt = bpf_get_current_pid_tgid();
	if ((__u32)(pt >> 32) != ref_tgid)
		return 0;
	__u32 k = (__u32)pt & (LAT_SLOTS - 1);
	__u64 *start = bpf_map_lookup_elem(&lat_start, &k);
	if (!start || *start == 0)
		return 0;
	__u64 d = bpf_ktime_get_ns() - *start;
	*start = 0;
	__u32 z = 0;
	struct lat_total *t = bpf_map_lookup_elem(&lat_total, &z);
	if (t) {
		t->count++;
		t->total_ns += d;
	}
	return 0;
}
