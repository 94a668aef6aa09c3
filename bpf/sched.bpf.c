//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Scheduling of target threads: time on CPU, time off CPU (from switch-out
 * to switch-in, run-queue wait included) and run-queue delay (from wakeup
 * or preemption to switch-in). */
#include "hone.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* slot_sched: the scheduling times of a thread that holds a slot (hone.h,
 * thread_slots), entry = slot; a thread without one is in sched_stats. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, THREAD_SLOTS);
	__type(key, __u32);
	__type(value, struct hone_sched_stats);
} slot_sched SEC(".maps");

/* thread returns a target thread's scheduling times: its slot's, claimed
 * here if free and the thread is on neither hash yet, else its entry in
 * sched_stats. */
static __always_inline struct hone_sched_stats *thread(__u32 tid, __u32 tgid)
{
	__u64 owner = (__u64)tgid << 32 | tid;
	__u32 slot = tid & (THREAD_SLOTS - 1);
	struct hone_thread_slot *ts = bpf_map_lookup_elem(&thread_slots, &slot);
	/* An exited thread's slot stays its own for its last switch out. */
	if (ts && (ts->owner & ~SLOT_EXITED) == owner)
		return bpf_map_lookup_elem(&slot_sched, &slot);
	struct hone_sched_stats *s = bpf_map_lookup_elem(&sched_stats, &tid);
	if (s)
		return s;
	if (ts && ts->owner == 0 && !bpf_map_lookup_elem(&inflight, &tid) &&
	    __sync_val_compare_and_swap(&ts->owner, 0, owner) == 0) {
		s = bpf_map_lookup_elem(&slot_sched, &slot);
		if (s)
			s->tgid = tgid;
		return s;
	}
	struct hone_sched_stats zero = { .tgid = tgid };
	return lookup_or_init(&sched_stats, &tid, &zero);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	__u32 ptgid = prev->tgid;
	__u32 ntgid = next->tgid;
	bool pt = ptgid && maybe_target(ptgid);
	bool nt = ntgid && maybe_target(ntgid);
	if (!pt && !nt)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (pt) {
		struct hone_sched_stats *s = thread(prev->pid, ptgid);
		if (s) {
			if (s->on_since_ns)
				s->on_cpu_ns += now - s->on_since_ns;
			s->on_since_ns = 0;
			s->off_since_ns = now;
			s->switches++;
			if (prev_state == 0) { /* TASK_RUNNING: preempted, still runnable */
				s->rq_since_ns = now;
				s->preemptions++;
			}
		}
	}
	if (nt) {
		struct hone_sched_stats *s = thread(next->pid, ntgid);
		if (s) {
			if (s->off_since_ns)
				s->off_cpu_ns += now - s->off_since_ns;
			if (s->rq_since_ns)
				s->run_queue_ns += now - s->rq_since_ns;
			s->off_since_ns = 0;
			s->rq_since_ns = 0;
			s->on_since_ns = now;
		}
	}
	return 0;
}

static __always_inline int woken(struct task_struct *p)
{
	__u32 tgid = p->tgid;
	if (!maybe_target(tgid))
		return 0;
	struct hone_sched_stats *s = thread(p->pid, tgid);
	if (s && s->rq_since_ns == 0)
		s->rq_since_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p)
{
	return woken(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
	return woken(p);
}
