//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* CUDA driver calls of target processes, by uprobes on libcuda.so: counts and
 * inter-call gaps per thread and call kind, and for the calls in which the
 * host waits (synchronizes, synchronous copies) the time spent waiting
 * (uprobe + uretprobe). And engine steps: a process's step opens at its
 * first kernel or graph launch after its previous step and closes when a
 * wait returns (the host has the step's results); each closed step is one
 * EVENT_STEP in the ring buffer. A wait with no launch since the previous
 * step closes nothing. Kernel launches count only while they are probed
 * (the daemon's --cuda-launches window); graph launches always. */
#include "hone.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

enum cuda_call {
	CUDA_LAUNCH = 0,      /* cuLaunchKernel* */
	CUDA_GRAPH = 1,       /* cuGraphLaunch* */
	CUDA_STREAM_SYNC = 2, /* cuStreamSynchronize* */
	CUDA_CTX_SYNC = 3,    /* cuCtxSynchronize* */
	CUDA_MEMCPY = 4,      /* cuMemcpy*Async* */
	CUDA_EVENT_SYNC = 5,  /* cuEventSynchronize */
	CUDA_MEMCPY_SYNC = 6, /* cuMemcpy, cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, ...: synchronous copies */
};

/* waits says whether the host waits in a call kind: those get a uretprobe. */
static __always_inline bool waits(__u32 call)
{
	return call == CUDA_STREAM_SYNC || call == CUDA_CTX_SYNC || call == CUDA_EVENT_SYNC ||
	       call == CUDA_MEMCPY_SYNC;
}

struct hone_cuda_key {
	__u32 tgid;
	__u32 tid;
	__u32 call;
	__u32 pad;
};

struct hone_cuda_stats {
	__u64 count;
	__u64 first_ns; /* CLOCK_MONOTONIC at the first call's entry */
	__u64 last_ns;  /* ... at the last call's entry */
	__u64 gap_count;
	__u64 gap_sum_ns;
	__u64 gap_min_ns;
	__u64 gap_max_ns;
	__u64 wait_count; /* synchronize calls that returned */
	__u64 wait_sum_ns;
	__u64 wait_min_ns;
	__u64 wait_max_ns;
	__u32 gap_hist[HIST_SLOTS];  /* log2 ns between entries of calls */
	__u32 wait_hist[HIST_SLOTS]; /* log2 ns from entry to return */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, struct hone_cuda_key);
	__type(value, struct hone_cuda_stats);
} cuda_stats SEC(".maps");

struct hone_sync_entry {
	__u64 start_ns;
	__u32 call;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32); /* tid */
	__type(value, struct hone_sync_entry);
} cuda_sync SEC(".maps");

/* cuda_step: per process, the step now open (start_ns 0: none). */
struct hone_step_open {
	__u64 start_ns;
	__u32 graphs;
	__u32 launches;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32); /* tgid */
	__type(value, struct hone_step_open);
} cuda_step SEC(".maps");

struct hone_step_event {
	__u32 kind; /* EVENT_STEP */
	__u32 tgid;
	__u32 tid;  /* the thread whose wait closed the step */
	__u32 call; /* the wait's kind */
	__u64 start_ns; /* CLOCK_MONOTONIC at the step's first launch's entry */
	__u64 sync_ns;  /* ... at the closing wait's entry */
	__u64 end_ns;   /* ... at its return */
	__u32 graphs;   /* graph launches in the step */
	__u32 launches; /* kernel launches in the step (while probed) */
};

const struct hone_step_event *unused_step_event __attribute__((unused));

static __always_inline void open_step(__u32 tgid, __u32 call, __u64 now)
{
	static const struct hone_step_open none;
	struct hone_step_open *o = lookup_or_init(&cuda_step, &tgid, &none);
	if (!o)
		return;
	if (o->start_ns == 0)
		o->start_ns = now;
	if (call == CUDA_GRAPH)
		__sync_fetch_and_add(&o->graphs, 1);
	else
		__sync_fetch_and_add(&o->launches, 1);
}

static __always_inline void close_step(__u32 tgid, __u32 tid, __u32 call, __u64 sync_ns, __u64 now)
{
	struct hone_step_open *o = bpf_map_lookup_elem(&cuda_step, &tgid);
	if (!o || o->start_ns == 0)
		return;
	struct hone_step_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		e->kind = EVENT_STEP;
		e->tgid = tgid;
		e->tid = tid;
		e->call = call;
		e->start_ns = o->start_ns;
		e->sync_ns = sync_ns;
		e->end_ns = now;
		e->graphs = o->graphs;
		e->launches = o->launches;
		bpf_ringbuf_submit(e, 0);
	} else {
		count_drop(DROP_RINGBUF);
	}
	o->start_ns = 0;
	o->graphs = 0;
	o->launches = 0;
}

static __always_inline int record(__u32 call)
{
	if (!current_is_target())
		return 0;
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tgid = pt >> 32;
	__u64 now = bpf_ktime_get_ns();
	struct hone_cuda_key key = { .tgid = tgid, .tid = (__u32)pt, .call = call };
	static const struct hone_cuda_stats zero;
	struct hone_cuda_stats *s = lookup_or_init(&cuda_stats, &key, &zero);
	if (!s)
		return 0;
	if (s->count == 0) {
		s->first_ns = now;
	} else {
		__u64 gap = now - s->last_ns;
		s->gap_count++;
		s->gap_sum_ns += gap;
		if (s->gap_min_ns == 0 || gap < s->gap_min_ns)
			s->gap_min_ns = gap;
		if (gap > s->gap_max_ns)
			s->gap_max_ns = gap;
		__u32 slot = log2_slot(gap);
		if (slot < HIST_SLOTS)
			s->gap_hist[slot]++;
	}
	s->count++;
	s->last_ns = now;
	if (call == CUDA_LAUNCH || call == CUDA_GRAPH)
		open_step(tgid, call, now);
	if (waits(call)) {
		__u32 tid = (__u32)pt;
		struct hone_sync_entry e = { .start_ns = now, .call = call };
		bpf_map_update_elem(&cuda_sync, &tid, &e, BPF_ANY);
	}
	return 0;
}

SEC("uprobe")
int cuda_launch(struct pt_regs *ctx) { return record(CUDA_LAUNCH); }

SEC("uprobe")
int cuda_graph(struct pt_regs *ctx) { return record(CUDA_GRAPH); }

SEC("uprobe")
int cuda_stream_sync(struct pt_regs *ctx) { return record(CUDA_STREAM_SYNC); }

SEC("uprobe")
int cuda_ctx_sync(struct pt_regs *ctx) { return record(CUDA_CTX_SYNC); }

SEC("uprobe")
int cuda_memcpy(struct pt_regs *ctx) { return record(CUDA_MEMCPY); }

SEC("uprobe")
int cuda_event_sync(struct pt_regs *ctx) { return record(CUDA_EVENT_SYNC); }

SEC("uprobe")
int cuda_memcpy_sync(struct pt_regs *ctx) { return record(CUDA_MEMCPY_SYNC); }

SEC("uretprobe")
int cuda_sync_return(struct pt_regs *ctx)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pt;
	struct hone_sync_entry *e = bpf_map_lookup_elem(&cuda_sync, &tid);
	if (!e)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 d = now - e->start_ns;
	struct hone_cuda_key key = { .tgid = pt >> 32, .tid = tid, .call = e->call };
	close_step(pt >> 32, tid, e->call, e->start_ns, now);
	bpf_map_delete_elem(&cuda_sync, &tid);
	struct hone_cuda_stats *s = bpf_map_lookup_elem(&cuda_stats, &key);
	if (!s)
		return 0;
	s->wait_count++;
	s->wait_sum_ns += d;
	if (s->wait_min_ns == 0 || d < s->wait_min_ns)
		s->wait_min_ns = d;
	if (d > s->wait_max_ns)
		s->wait_max_ns = d;
	__u32 slot = log2_slot(d);
	if (slot < HIST_SLOTS)
		s->wait_hist[slot]++;
	return 0;
}
