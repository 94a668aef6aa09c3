//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* CUDA driver calls of target processes, by uprobes on libcuda.so: counts and
 * inter-call gaps per thread and call kind, and for the calls in which the
 * host waits (synchronizes, synchronous copies) the time spent waiting
 * (uprobe + uretprobe). */
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
	__u64 d = bpf_ktime_get_ns() - e->start_ns;
	struct hone_cuda_key key = { .tgid = pt >> 32, .tid = tid, .call = e->call };
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
