//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Socket traffic of target processes, per connection (local view of the
 * 4-tuple): bytes, operations and first/last timestamps. On connections with
 * a port in the KV-transfer set, sends and receives are grouped into bursts
 * separated by more than burst_gap_ns of silence, and each burst is sent to
 * the ring buffer when the next one starts or the connection closes.
 *
 * On connections whose local port is in the HTTP set (a serving engine's
 * API port: the server's end), each request/response exchange of HTTP/1.1
 * is recorded: the request's receives until the first send, then the
 * response's sends until the next receive (the next request on a keep-alive
 * connection) or the close, which sends the exchange to the ring buffer.
 * The first and second sends are kept apart: a vLLM API server (uvicorn)
 * writes the status line and headers when a streamed response starts,
 * before the first token, whose chunk is the second send. Pipelined
 * requests are not told apart (no client of an engine pipelines). */
#include "hone.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Referenced so that the type is in the BTF bpf2go reads. */
const struct hone_burst_event *unused_burst_event __attribute__((unused));
const struct hone_exchange_event *unused_exchange_event __attribute__((unused));

const volatile __u64 burst_gap_ns = 100000000; /* set by the loader */

struct hone_burst {
	__u64 start_ns;
	__u64 last_ns;
	__u64 bytes;
	__u64 ops;
};

struct hone_conn_stats {
	__u32 tgid; /* the last target process that used it; 0 before any */
	__u32 kv;   /* a port is in the KV-transfer set */
	__u64 tx_bytes;
	__u64 rx_bytes;
	__u64 tx_ops;
	__u64 rx_ops;
	__u64 first_ns;
	__u64 last_ns;
	__u64 established_ns;
	__u64 closed_ns;
	struct hone_burst tx; /* the burst in progress, if ops > 0 */
	struct hone_burst rx;
	__u64 bursts; /* bursts sent to the ring buffer */
	struct hone_exchange ex; /* the HTTP exchange in progress, if rx_ops > 0 */
	__u64 exchanges; /* exchanges sent to the ring buffer */
	__u32 http; /* the local port is in the HTTP set */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct hone_conn_key);
	__type(value, struct hone_conn_stats);
} conns SEC(".maps");

/* port_class[port]: PORT_KV when the port is in the KV-transfer set,
 * PORT_HTTP when in the HTTP set, or both. */
#define PORT_KV 1
#define PORT_HTTP 2
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} port_class SEC(".maps");

static __always_inline __u8 class_of(__u32 port)
{
	__u8 *v = bpf_map_lookup_elem(&port_class, &port);
	return v ? *v : 0;
}

static __always_inline bool is_kv(__u32 port)
{
	return class_of(port) & PORT_KV;
}

static __always_inline bool is_http(__u32 port)
{
	return class_of(port) & PORT_HTTP;
}

static __always_inline bool read_key(const struct sock *sk, struct hone_conn_key *k)
{
	__u16 family = sk->__sk_common.skc_family;
	if (family == AF_INET) {
		__builtin_memcpy(k->laddr, &sk->__sk_common.skc_rcv_saddr, 4);
		__builtin_memcpy(k->raddr, &sk->__sk_common.skc_daddr, 4);
	} else if (family == AF_INET6) {
		BPF_CORE_READ_INTO(&k->laddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&k->raddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		return false;
	}
	k->family = family;
	/* inet_sport, not skc_num: TCP clears skc_num (inet_put_port) before
	 * the TCP_CLOSE transition is traced. */
	k->lport = bpf_ntohs(BPF_CORE_READ((const struct inet_sock *)sk, inet_sport));
	k->rport = bpf_ntohs(sk->__sk_common.skc_dport);
	return true;
}

static __always_inline void flush(const struct hone_conn_key *k, struct hone_conn_stats *c, struct hone_burst *b, __u32 dir)
{
	if (b->ops == 0)
		return;
	struct hone_burst_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		e->kind = EVENT_BURST;
		e->tgid = c->tgid;
		e->dir = dir;
		e->pad = 0;
		__builtin_memcpy(&e->conn, k, sizeof(*k));
		e->start_ns = b->start_ns;
		e->end_ns = b->last_ns;
		e->bytes = b->bytes;
		e->ops = b->ops;
		bpf_ringbuf_submit(e, 0);
		c->bursts++;
	} else {
		count_drop(DROP_RINGBUF);
	}
	b->start_ns = 0;
	b->last_ns = 0;
	b->bytes = 0;
	b->ops = 0;
}

static __always_inline void flush_exchange(const struct hone_conn_key *k, struct hone_conn_stats *c)
{
	if (c->ex.rx_ops == 0)
		return;
	struct hone_exchange_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		e->kind = EVENT_EXCHANGE;
		e->tgid = c->tgid;
		__builtin_memcpy(&e->conn, k, sizeof(*k));
		__builtin_memcpy(&e->ex, &c->ex, sizeof(c->ex));
		bpf_ringbuf_submit(e, 0);
		c->exchanges++;
	} else {
		count_drop(DROP_RINGBUF);
	}
	__builtin_memset(&c->ex, 0, sizeof(c->ex));
}

/* exchange_io adds one send or receive to the connection's HTTP exchange. */
static __always_inline void exchange_io(const struct hone_conn_key *k, struct hone_conn_stats *c, int ret, __u32 dir,
					__u64 now)
{
	struct hone_exchange *x = &c->ex;
	if (dir == DIR_RX) {
		if (x->tx_ops)
			flush_exchange(k, c); /* the next request */
		if (x->rx_ops == 0)
			x->rx_start_ns = now;
		x->rx_end_ns = now;
		x->rx_bytes += ret;
		x->rx_ops++;
		return;
	}
	if (x->rx_ops == 0)
		return; /* a send with no request before it: not an exchange */
	if (x->tx_ops == 0) {
		x->tx_first_ns = now;
		x->tx_first_bytes = ret;
	} else if (x->tx_ops == 1) {
		x->tx_second_ns = now;
		x->tx_second_bytes = ret;
	}
	x->tx_last_ns = now;
	x->tx_bytes += ret;
	x->tx_ops++;
}

static __always_inline int on_io(struct sock *sk, int ret, int flags, __u32 dir)
{
	if (ret <= 0)
		return 0;
	if (dir == DIR_RX && (flags & MSG_PEEK))
		return 0;
	if (!current_is_target())
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct hone_conn_key k = {};
	if (!read_key(sk, &k))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct hone_conn_stats zero = {
		.kv = is_kv(k.lport) || is_kv(k.rport),
		.http = is_http(k.lport),
		.first_ns = now,
	};
	struct hone_conn_stats *c = lookup_or_init(&conns, &k, &zero);
	if (!c)
		return 0;
	c->tgid = tgid;
	if (c->first_ns == 0)
		c->first_ns = now;
	c->last_ns = now;
	struct hone_burst *b;
	if (dir == DIR_TX) {
		__sync_fetch_and_add(&c->tx_bytes, ret);
		__sync_fetch_and_add(&c->tx_ops, 1);
		b = &c->tx;
	} else {
		__sync_fetch_and_add(&c->rx_bytes, ret);
		__sync_fetch_and_add(&c->rx_ops, 1);
		b = &c->rx;
	}
	if (c->http)
		exchange_io(&k, c, ret, dir, now);
	if (!c->kv)
		return 0;
	if (b->ops && now - b->last_ns > burst_gap_ns)
		flush(&k, c, b, dir);
	if (b->ops == 0)
		b->start_ns = now;
	b->last_ns = now;
	b->bytes += ret;
	b->ops++;
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_send, struct sock *sk, int ret, int flags)
{
	return on_io(sk, ret, flags, DIR_TX);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_recv, struct sock *sk, int ret, int flags)
{
	return on_io(sk, ret, flags, DIR_RX);
}

#define TCP_ESTABLISHED_STATE 1
#define TCP_CLOSE_STATE 7

/* Connection lifetimes. Server-side transitions run in softirq, where the
 * current task means nothing: a connection is recorded at ESTABLISHED when
 * its port is in the KV-transfer set or the current task is a target. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_state, const struct sock *sk, int oldstate, int newstate)
{
	if (newstate != TCP_ESTABLISHED_STATE && newstate != TCP_CLOSE_STATE)
		return 0;
	struct hone_conn_key k = {};
	if (!read_key(sk, &k))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (newstate == TCP_ESTABLISHED_STATE) {
		bool kv = is_kv(k.lport) || is_kv(k.rport);
		if (!kv && !current_is_target())
			return 0;
		struct hone_conn_stats zero = { .kv = kv, .http = is_http(k.lport) };
		struct hone_conn_stats *c = lookup_or_init(&conns, &k, &zero);
		if (c && c->established_ns == 0)
			c->established_ns = now;
		return 0;
	}
	struct hone_conn_stats *c = bpf_map_lookup_elem(&conns, &k);
	if (!c)
		return 0;
	c->closed_ns = now;
	flush(&k, c, &c->tx, DIR_TX);
	flush(&k, c, &c->rx, DIR_RX);
	flush_exchange(&k, c);
	return 0;
}
