/* Shared definitions for hone's eBPF programs: the maps every program shares
 * (the loader creates them once and hands them to each object), the event
 * layouts read by the daemon, and small helpers. */
#pragma once

/* vmlinux.h is an x86-64 BTF dump, used for the arm64 objects too: kernel
 * structs are read with CO-RE (preserve_access_index), relocated against the
 * running kernel. Its struct pt_regs is x86's, so the programs never read
 * registers: the uprobes take no arguments and BPF_PROG reads the tracepoint
 * arguments from the context array, the same on both. (bpf_tracing.h's
 * PT_REGS_* macros for __TARGET_ARCH_arm64 want struct user_pt_regs, which
 * this vmlinux.h lacks: using them fails to compile rather than misread.) */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define HIST_SLOTS 32
#define MAX_TARGETS 8192
#define MAX_THREADS 32768

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2

/* targets: the processes (tgid) being traced. The daemon adds the ones it
 * selects (value TARGET_SELECTED); sched_process_fork adds their children
 * (TARGET_FOLLOWED) before the child first runs. */
#define TARGET_SELECTED 1
#define TARGET_FOLLOWED 2
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} targets SEC(".maps");

/* events: the one ring buffer, for what needs its own timestamp. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* drops: index DROP_RINGBUF counts events lost to a full ring buffer,
 * DROP_MAP_FULL updates that failed because a map was full. */
#define DROP_RINGBUF 0
#define DROP_MAP_FULL 1
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* inflight: a traced thread's syscall in progress (tid -> start), shared so
 * that sched_process_exit can clear the entry of a thread that never
 * returns (exit, exit_group). */
struct hone_inflight {
	__u64 start_ns;
	__u32 id;
	__u32 tgid;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct hone_inflight);
} inflight SEC(".maps");

enum event_kind {
	EVENT_FORK = 1,
	EVENT_EXEC = 2,
	EVENT_EXIT = 3,
	EVENT_BURST = 4,
};

struct hone_proc_event {
	__u32 kind;
	__u32 tgid;
	__u32 tid;
	__u32 ppid;  /* fork: the parent's tgid */
	__u64 ts_ns; /* CLOCK_MONOTONIC */
	__u32 target; /* exec: the targets value, 0 when not a target */
	__u32 pad;
	char comm[16];
};

struct hone_conn_key {
	__u8 family;
	__u8 pad1;
	__u16 lport; /* host order */
	__u16 rport; /* host order */
	__u16 pad2;
	__u8 laddr[16];
	__u8 raddr[16];
};

#define DIR_TX 0
#define DIR_RX 1

struct hone_burst_event {
	__u32 kind;
	__u32 tgid;
	__u32 dir;
	__u32 pad;
	struct hone_conn_key conn;
	__u64 start_ns;
	__u64 end_ns;
	__u64 bytes;
	__u64 ops;
};

static __always_inline bool is_target(__u32 tgid)
{
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

static __always_inline void count_drop(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &which);
	if (n)
		(*n)++;
}

/* log2_slot: floor(log2(v)), clamped to the histogram. */
static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 r = 0;
	if (v >= (1ULL << 32)) { v >>= 32; r += 32; }
	if (v >= (1ULL << 16)) { v >>= 16; r += 16; }
	if (v >= (1ULL << 8)) { v >>= 8; r += 8; }
	if (v >= (1ULL << 4)) { v >>= 4; r += 4; }
	if (v >= (1ULL << 2)) { v >>= 2; r += 2; }
	if (v >= (1ULL << 1)) { r += 1; }
	if (r >= HIST_SLOTS)
		r = HIST_SLOTS - 1;
	return r;
}

/* lookup_or_init returns the map's value for key, inserting zero first. */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *zero)
{
	void *v = bpf_map_lookup_elem(map, key);
	if (v)
		return v;
	if (bpf_map_update_elem(map, key, zero, BPF_NOEXIST) && bpf_map_lookup_elem(map, key) == NULL) {
		count_drop(DROP_MAP_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(map, key);
}
