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

/* target_bits: one bit per process id (bit tgid%64 of word tgid/64), set
 * while the process is in targets: the target check of every hot path, in
 * one inlined array read. Both sides change it only with atomic or/and on a
 * word: the programs at fork (follow) and exit (untarget), the daemon
 * through a shared mapping of the array (BPF_F_MMAPABLE) when it selects or
 * drops a process. A process's exit clears its bit in the kernel, at once,
 * whichever added it. The loader sizes it to the host's pid_max; a process
 * id beyond it (pid_max raised since) is checked in targets instead. */
#define TARGET_WORDS_MAX (4194304 / 64) /* PID_MAX_LIMIT on 64-bit */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TARGET_WORDS_MAX);
	__type(key, __u32);
	__type(value, __u64);
} target_bits SEC(".maps");

/* inflight: a target thread's syscall in progress (tid -> entry), shared
 * so that sched_process_exit can clear the entry of a thread that never
 * returns (exit, exit_group). Only threads of targets have one. */
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

/* thread_slots: a target thread's syscall state, direct-mapped by thread id
 * (slot tid % THREAD_SLOTS), so that the syscall programs' hot path reads
 * inlined array slots where a hash lookup cost ~60 ns (BenchmarkSyscallFloor).
 * A thread claims its free slot at its first traced syscall (atomic compare
 * and swap of the owner: tgid << 32 | tid, bpf_get_current_pid_tgid's form)
 * and keeps it for life; sched_process_exit marks it
 * SLOT_EXITED, and the daemon frees it (zeroing its statistics first) when it
 * retires the process. A thread whose slot another thread holds, or that
 * began on the inflight hash, stays on inflight and sys_stats: exact either
 * way, the daemon sums the two. */
#define THREAD_SLOTS 8192
#define SLOT_EXITED (1ULL << 63)
struct hone_thread_slot {
	__u64 owner;    /* tgid << 32 | tid; 0: free; | SLOT_EXITED once it exited */
	__u64 start_ns; /* the entry of the syscall in flight, 0 when none,
			 * SLOT_UNTIMED when it is counted but not timed */
	__u32 id;       /* that syscall */
	__u32 seq;      /* the thread's sampling sequence (xorshift32, seeded
			 * with tid | 1 when claimed; syscalls.bpf.c) */
};
#define SLOT_UNTIMED 1
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, THREAD_SLOTS);
	__type(key, __u32);
	__type(value, struct hone_thread_slot);
} thread_slots SEC(".maps");

static __always_inline struct hone_thread_slot *thread_slot(__u32 tid)
{
	__u32 s = tid & (THREAD_SLOTS - 1);
	return bpf_map_lookup_elem(&thread_slots, &s);
}

/* slot_exited marks a thread's slot exited, if it holds one: with compare
 * and swap, so that a slot the daemon freed and another thread claimed
 * meanwhile stays the other's. */
static __always_inline void slot_exited(__u32 tgid, __u32 tid)
{
	__u64 owner = (__u64)tgid << 32 | tid;
	struct hone_thread_slot *ts = thread_slot(tid);
	if (ts && ts->owner == owner &&
	    __sync_val_compare_and_swap(&ts->owner, owner, owner | SLOT_EXITED) == owner)
		ts->start_ns = 0;
}

enum event_kind {
	EVENT_FORK = 1,
	EVENT_EXEC = 2,
	EVENT_EXIT = 3,
	EVENT_BURST = 4,
	EVENT_STEP = 5,
	EVENT_EXCHANGE = 6,
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

/* One HTTP/1.1 request/response exchange on the server's end of a
 * connection (sockets.bpf.c), CLOCK_MONOTONIC. */
struct hone_exchange {
	__u64 rx_start_ns;  /* the request's first receive */
	__u64 rx_end_ns;    /* its last receive before the response */
	__u64 rx_bytes;
	__u64 tx_first_ns;  /* the response's first send */
	__u64 tx_second_ns; /* its second send, 0 if none */
	__u64 tx_last_ns;   /* its last send so far */
	__u64 tx_bytes;
	__u32 tx_first_bytes;
	__u32 tx_second_bytes;
	__u32 rx_ops;
	__u32 tx_ops;
};

struct hone_exchange_event {
	__u32 kind;
	__u32 tgid;
	struct hone_conn_key conn;
	struct hone_exchange ex;
};

static __always_inline bool is_target(__u32 tgid)
{
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

/* maybe_target is the target check of the hot paths (target_bits). */
static __always_inline bool maybe_target(__u32 tgid)
{
	__u32 w = tgid >> 6;
	__u64 *bits = bpf_map_lookup_elem(&target_bits, &w);
	if (!bits)
		return is_target(tgid); /* beyond the bitmap */
	return *bits & (1ULL << (tgid & 63));
}

/* follow sets, and untarget clears, a process's bit in target_bits. */
static __always_inline void follow(__u32 tgid)
{
	__u32 w = tgid >> 6;
	__u64 *bits = bpf_map_lookup_elem(&target_bits, &w);
	if (bits)
		__sync_fetch_and_or(bits, 1ULL << (tgid & 63));
}

static __always_inline void untarget(__u32 tgid)
{
	__u32 w = tgid >> 6;
	__u64 *bits = bpf_map_lookup_elem(&target_bits, &w);
	if (bits)
		__sync_fetch_and_and(bits, ~(1ULL << (tgid & 63)));
}

/* current_is_target: maybe_target for the running thread's process. */
static __always_inline bool current_is_target(void)
{
	return maybe_target(bpf_get_current_pid_tgid() >> 32);
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
