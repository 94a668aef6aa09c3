//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Scheduling of target threads: time on CPU, time off CPU (from switch-out
 * to switch-in, run-queue wait included) and run-queue delay (from wakeup
 * or preemption to switch-in). */
#include "hone.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct hone_sched_stats {
	__u32 tgid;
	__u32 pad;
	__u64 on_since_ns;  /* 0 when off CPU */
	__u64 off_since_ns; /* 0 when on CPU or never seen off */
	__u64 rq_since_ns;  /* 0 when not waiting in a run queue */
	__u64 on_cpu_ns;
	__u64 off_cpu_ns;
	__u64 run_queue_ns;
	__u64 switches;     /* times switched out */
	__u64 preemptions;  /* times switched out while runnable */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32); /* tid */
	__type(value, struct hone_sched_stats);
} sched_stats SEC(".maps");

static __always_inline struct hone_sched_stats *thread(__u32 tid, __u32 tgid)
{
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
