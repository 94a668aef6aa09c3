//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Process lifetimes: children of targets become targets at fork, before
 * they first run; exec and exit are reported to the daemon. */
#include "hone.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Referenced so that the type is in the BTF bpf2go reads. */
const struct hone_proc_event *unused_proc_event __attribute__((unused));

static __always_inline void emit(__u32 kind, __u32 tgid, __u32 tid, __u32 ppid, __u32 target)
{
	struct hone_proc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(DROP_RINGBUF);
		return;
	}
	e->kind = kind;
	e->tgid = tgid;
	e->tid = tid;
	e->ppid = ppid;
	e->ts_ns = bpf_ktime_get_ns();
	e->target = target;
	e->pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;
	if (ctgid == ptgid || !maybe_target(ptgid))
		return 0; /* a new thread, or not ours */
	__u32 v = TARGET_FOLLOWED;
	if (bpf_map_update_elem(&targets, &ctgid, &v, BPF_NOEXIST) == 0) {
		follow(ctgid);
		emit(EVENT_FORK, ctgid, child->pid, ptgid, v);
	} else if (!is_target(ctgid)) {
		count_drop(DROP_MAP_FULL);
	} else {
		follow(ctgid);
	}
	return 0;
}

/* Every exec is reported, target or not, so that the daemon can match a new
 * command line at once instead of at its next /proc scan. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	__u32 *t = bpf_map_lookup_elem(&targets, &tgid);
	emit(EVENT_EXEC, tgid, p->pid, 0, t ? *t : 0);
	/* A thread other than the leader that execs takes the leader's id,
	 * and no exit is reported for its old one: its syscall state under
	 * that id (the execve in flight) must not pass for a later thread's. */
	__u32 old = old_pid;
	if (old != p->pid) {
		slot_exited(tgid, old);
		bpf_map_delete_elem(&inflight, &old);
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u32 tid = p->pid;
	__u32 tgid = p->tgid;
	/* Before the target check: a process that stopped being a target
	 * keeps its threads' slots, and a slot left unmarked would pass for a
	 * later thread of the same id. */
	slot_exited(tgid, tid);
	if (!maybe_target(tgid))
		return 0;
	bpf_map_delete_elem(&inflight, &tid);
	if (!is_target(tgid))
		return 0;
	/* do_exit decrements signal->live before this tracepoint: zero means
	 * the last thread of the process is leaving. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	bpf_map_delete_elem(&targets, &tgid);
	untarget(tgid); /* selected or followed: the daemon need not */
	emit(EVENT_EXIT, tgid, tid, 0, 0);
	return 0;
}
