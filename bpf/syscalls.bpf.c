//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Syscalls of target processes: per thread and class, count, total time,
 * slowest call and a log2 latency histogram. Filtered in the kernel by the
 * targets map; a syscall is counted when it is entered (sys_enter: exit and
 * exit_group, which never return, are counted too) and timed when it
 * returns (sys_exit), so sys_exit may be attached only part of the time
 * (timing windows, bpf.Objects.TimeSyscalls) without losing a count. */
#include "hone.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

enum sys_class {
	SYS_FUTEX = 0,
	SYS_POLL = 1,   /* poll, select, epoll */
	SYS_IOCTL = 2,  /* the GPU driver's path */
	SYS_SOCKET = 3, /* send/recv families */
	SYS_FILE = 4,   /* read/write families, on any fd */
	SYS_OTHER = 5,
};

struct hone_thread_key {
	__u32 tgid;
	__u32 tid;
	__u32 class;
	__u32 pad;
};

struct hone_sys_stats {
	__u64 count;    /* calls entered */
	__u64 timed;    /* of which timed: total_ns to hist cover these */
	__u64 total_ns;
	__u64 max_ns;
	__u64 first_ns; /* CLOCK_MONOTONIC at the first timed call's entry */
	__u64 last_ns;  /* CLOCK_MONOTONIC at the last timed call's return */
	__u32 hist[HIST_SLOTS]; /* slot i: latency in [2^i, 2^(i+1)) ns */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS * 2);
	__type(key, struct hone_thread_key);
	__type(value, struct hone_sys_stats);
} sys_stats SEC(".maps");

/* classify maps a syscall number (raw_syscalls' id, the native table of the
 * architecture the object is built for) to its class. arm64 uses the generic
 * table (asm-generic/unistd.h), which has no poll, select or epoll_wait:
 * libc calls ppoll, pselect6 and epoll_pwait there. The futex2 calls
 * (futex_waitv, futex_wake, futex_wait, futex_requeue) share one number on
 * every architecture. */
#if defined(__TARGET_ARCH_x86)
static __always_inline __u32 classify(__u32 id)
{
	switch (id) {
	case 202: /* futex */
	case 449: /* futex_waitv */
	case 454: /* futex_wake */
	case 455: /* futex_wait */
	case 456: /* futex_requeue */
		return SYS_FUTEX;
	case 7:   /* poll */
	case 23:  /* select */
	case 232: /* epoll_wait */
	case 233: /* epoll_ctl */
	case 270: /* pselect6 */
	case 271: /* ppoll */
	case 281: /* epoll_pwait */
	case 441: /* epoll_pwait2 */
		return SYS_POLL;
	case 16: /* ioctl */
		return SYS_IOCTL;
	case 44:  /* sendto */
	case 45:  /* recvfrom */
	case 46:  /* sendmsg */
	case 47:  /* recvmsg */
	case 299: /* recvmmsg */
	case 307: /* sendmmsg */
		return SYS_SOCKET;
	case 0:   /* read */
	case 1:   /* write */
	case 17:  /* pread64 */
	case 18:  /* pwrite64 */
	case 19:  /* readv */
	case 20:  /* writev */
	case 295: /* preadv */
	case 296: /* pwritev */
	case 327: /* preadv2 */
	case 328: /* pwritev2 */
		return SYS_FILE;
	}
	return SYS_OTHER;
}
#elif defined(__TARGET_ARCH_arm64)
static __always_inline __u32 classify(__u32 id)
{
	switch (id) {
	case 98:  /* futex */
	case 449: /* futex_waitv */
	case 454: /* futex_wake */
	case 455: /* futex_wait */
	case 456: /* futex_requeue */
		return SYS_FUTEX;
	case 21:  /* epoll_ctl */
	case 22:  /* epoll_pwait */
	case 72:  /* pselect6 */
	case 73:  /* ppoll */
	case 441: /* epoll_pwait2 */
		return SYS_POLL;
	case 29: /* ioctl */
		return SYS_IOCTL;
	case 206: /* sendto */
	case 207: /* recvfrom */
	case 211: /* sendmsg */
	case 212: /* recvmsg */
	case 243: /* recvmmsg */
	case 269: /* sendmmsg */
		return SYS_SOCKET;
	case 63:  /* read */
	case 64:  /* write */
	case 65:  /* readv */
	case 66:  /* writev */
	case 67:  /* pread64 */
	case 68:  /* pwrite64 */
	case 69:  /* preadv */
	case 70:  /* pwritev */
	case 286: /* preadv2 */
	case 287: /* pwritev2 */
		return SYS_FILE;
	}
	return SYS_OTHER;
}
#else
#error "syscalls.bpf.c: no syscall table for this architecture (bpf2go -target amd64 or arm64)"
#endif

/* slot_stats: the statistics of a thread that holds a slot (hone.h,
 * thread_slots): entry slot * SYS_CLASSES + class. */
#define SYS_CLASSES 6
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, THREAD_SLOTS * SYS_CLASSES);
	__type(key, __u32);
	__type(value, struct hone_sys_stats);
} slot_stats SEC(".maps");

/* record adds one timed call of [start, now) to st (sys_enter counted it).
 * One thread runs on one CPU at a time and its statistics are its own, so
 * plain increments are safe. */
static __always_inline void record(struct hone_sys_stats *st, __u64 start, __u64 now)
{
	__u64 d = now - start;
	if (st->timed == 0)
		st->first_ns = start;
	st->timed++;
	st->total_ns += d;
	if (d > st->max_ns)
		st->max_ns = d;
	st->last_ns = now;
	__u32 slot = log2_slot(d);
	if (slot < HIST_SLOTS)
		st->hist[slot]++;
}

/* sample_mask (the loader's Options.SyscallSample − 1, a power of two
 * less one) makes a thread with a slot time one call in sample_mask + 1
 * and only count the others, reading no clock for them: the clock reads
 * are most of what timing every call costs beyond counting it (~80 ns a
 * pair on a VM's kvm-clock). Which calls are timed follows the slot's
 * xorshift32 sequence, not the call count, so that a thread alternating
 * between calls in a period that divides the rate does not time one kind
 * only. 0 (the default) times every call. Threads on the inflight hash
 * (no slot of their own) time every call. */
volatile const __u32 sample_mask = 0;

/* timing_on is set while sys_exit is attached (bpf.Objects.TimeSyscalls;
 * always, unless Probes.SyscallTimingWindows): outside a timing window
 * sys_enter only counts, reading no clock, and sys_exit does not run at
 * all, for targets and for every other thread on the host alike. */
volatile __u32 timing_on = 1;

static __always_inline bool sample_untimed(struct hone_thread_slot *ts)
{
	if (!sample_mask)
		return false;
	__u32 x = ts->seq;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	ts->seq = x;
	return x & sample_mask;
}

/* slot_stat is the statistics of class for the slot the thread tid holds:
 * an inlined array read, no hash lookup. */
static __always_inline struct hone_sys_stats *slot_stat(__u32 tid, __u32 class)
{
	__u32 idx = (tid & (THREAD_SLOTS - 1)) * SYS_CLASSES + class;
	return bpf_map_lookup_elem(&slot_stats, &idx);
}

/* count_slot adds one call of class to the slot tid holds. */
static __always_inline void count_slot(__u32 tid, __u32 class)
{
	struct hone_sys_stats *st = slot_stat(tid, class);
	if (st)
		st->count++;
}

/* sys_enter and sys_exit run for every syscall of every thread on the host
 * while attached, so what a thread that is not a target pays is the point:
 * the target check's one inlined array read each (maybe_target), nothing
 * else; outside timing windows sys_exit is not attached, and such a thread
 * pays what the counting floor (reference.bpf.c, ref_enter) does. A
 * target's thread adds its count (an inlined array read: its slot's
 * statistics) and, for a timed call, a clock read at each end
 * (sample_mask, timing_on); its slot and statistics are inlined array
 * reads (hone.h, thread_slots): no hash lookup on the hot path. Only a
 * thread without a slot of its own pays the inflight and sys_stats hash
 * lookups. (Per-thread state in task-local storage was measured slower
 * than the hash: +24 ns per exit on Linux 6.18.) */
SEC("raw_tp/sys_enter")
int sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tgid = pt >> 32;
	if (!maybe_target(tgid))
		return 0;
	__u32 tid = (__u32)pt;
	__u32 id = (__u32)ctx->args[1];
	__u32 class = classify(id);
	struct hone_thread_slot *ts = thread_slot(tid);
	if (ts && ts->owner == pt) {
		count_slot(tid, class);
		ts->id = id;
		ts->start_ns = !timing_on || sample_untimed(ts) ? SLOT_UNTIMED : bpf_ktime_get_ns();
		return 0;
	}
	__u64 now = timing_on ? bpf_ktime_get_ns() : SLOT_UNTIMED;
	/* A thread that began on inflight stays there (its statistics so far
	 * are in sys_stats). Its entry stays in the map for the thread's life
	 * (sched_process_exit removes it): writing in place is cheaper than
	 * insert and delete on every call. */
	struct hone_inflight *in = bpf_map_lookup_elem(&inflight, &tid);
	if (!in && ts && ts->owner == 0 && __sync_val_compare_and_swap(&ts->owner, 0, pt) == 0) {
		count_slot(tid, class);
		ts->id = id;
		ts->seq = tid | 1; /* the claim's call is timed (in a window) */
		ts->start_ns = now;
		return 0;
	}
	struct hone_thread_key key = {
		.tgid = tgid,
		.tid = tid,
		.class = class,
	};
	static const struct hone_sys_stats zero;
	struct hone_sys_stats *st = lookup_or_init(&sys_stats, &key, &zero);
	if (st)
		st->count++;
	if (in) {
		in->start_ns = now;
		in->id = id;
		in->tgid = tgid;
		return 0;
	}
	struct hone_inflight fresh = {
		.start_ns = now,
		.id = id,
		.tgid = tgid,
	};
	if (bpf_map_update_elem(&inflight, &tid, &fresh, BPF_ANY))
		count_drop(DROP_MAP_FULL);
	return 0;
}

SEC("raw_tp/sys_exit")
int sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tgid = pt >> 32;
	if (!maybe_target(tgid))
		return 0; /* (a syscall in flight when its process stopped being a target is not timed) */
	__u32 tid = (__u32)pt;
	struct hone_thread_slot *ts = thread_slot(tid);
	if (ts && ts->owner == pt) {
		__u64 start = ts->start_ns;
		if (start == 0)
			return 0; /* entered before it was a target */
		ts->start_ns = 0;
		if (start == SLOT_UNTIMED)
			return 0; /* sampled out, or entered outside a timing window: counted, not timed */
		__u64 now = bpf_ktime_get_ns();
		struct hone_sys_stats *st = slot_stat(tid, classify(ts->id));
		if (st)
			record(st, start, now);
		return 0;
	}
	struct hone_inflight *in = bpf_map_lookup_elem(&inflight, &tid);
	if (!in || in->start_ns == 0)
		return 0; /* entered before it was a target */
	__u64 start = in->start_ns;
	in->start_ns = 0;
	if (start == SLOT_UNTIMED || in->tgid != tgid)
		return 0; /* entered outside a timing window, or a stale entry: the thread id was reused */
	__u64 now = bpf_ktime_get_ns();
	struct hone_thread_key key = {
		.tgid = tgid,
		.tid = tid,
		.class = classify(in->id),
	};
	struct hone_sys_stats *st = bpf_map_lookup_elem(&sys_stats, &key);
	if (st)
		record(st, start, now);
	return 0;
}
