package proxy

import (
	"encoding/json"
	"sync"
)

// Outcomes: every request ends as exactly one.
const (
	OutcomeSuccess  = "success"  // answered through the planned path
	OutcomeFallback = "fallback" // answered, but the decode worker prefilled (prefill failed twice or had no peer)
	OutcomeFailed   = "failed"   // a clean error went to the client
	OutcomeTimeout  = "timeout"  // a leg ran past its timeout
)

// Outcomes lists every outcome, in a fixed order.
var Outcomes = []string{OutcomeSuccess, OutcomeFallback, OutcomeFailed, OutcomeTimeout}

// Leg is one upstream call.
type Leg struct {
	Worker   string `json:"worker"`
	Sent     Stamp  `json:"sent"`
	Answered *Stamp `json:"answered,omitempty"` // response headers (prefill: the whole reply)
	Status   int    `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
	// EngineMetrics is the prefill reply's per-request "metrics" object
	// (vLLM --enable-per-request-metrics), kept so diagnose can split the
	// prefill leg into the engine's queue, its prefill and the hops.
	EngineMetrics json.RawMessage `json:"engine_metrics,omitempty"`
}

// Timeline is one request's path through the proxy. Colocated requests have
// no Prefill legs; their one streaming leg is Decode.
type Timeline struct {
	Seq       uint64 `json:"seq"` // order of completion, for ?since=
	RequestID string `json:"request_id"`
	Path      string `json:"path"`
	Received  Stamp  `json:"received"`
	Prefill   []Leg  `json:"prefill,omitempty"`
	Decode    *Leg   `json:"decode,omitempty"`
	FirstByte *Stamp `json:"first_byte,omitempty"` // first body byte written to the client
	LastByte  *Stamp `json:"last_byte,omitempty"`
	Outcome   string `json:"outcome"`
	Retries   int    `json:"retries"`
	Status    int    `json:"status"` // HTTP status sent to the client
	Error     string `json:"error,omitempty"`
}

// timelines is a ring of the most recent finished timelines.
type timelines struct {
	mu   sync.Mutex
	buf  []Timeline
	next uint64 // seq of the next timeline stored; seqs start at 1
}

func newTimelines(capacity int) *timelines {
	return &timelines{buf: make([]Timeline, 0, capacity), next: 1}
}

func (t *timelines) add(tl *Timeline) {
	t.mu.Lock()
	tl.Seq = t.next
	t.next++
	if len(t.buf) < cap(t.buf) {
		t.buf = append(t.buf, *tl)
	} else {
		t.buf[int((tl.Seq-1)%uint64(cap(t.buf)))] = *tl
	}
	t.mu.Unlock()
}

// since returns up to limit timelines with Seq > after, oldest first, and
// the cursor to pass next time. Timelines overwritten in the ring are gone;
// dropped says how many were skipped for that reason.
func (t *timelines) since(after uint64, limit int) (out []Timeline, cursor uint64, dropped uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := t.next - 1
	oldest := uint64(1)
	if n := uint64(len(t.buf)); last > n {
		oldest = last - n + 1
	}
	from := after + 1
	if from < oldest {
		dropped = oldest - from
		from = oldest
	}
	for s := from; s <= last && (limit <= 0 || len(out) < limit); s++ {
		out = append(out, t.buf[int((s-1)%uint64(cap(t.buf)))])
	}
	cursor = after
	if len(out) > 0 {
		cursor = out[len(out)-1].Seq
	} else if after < oldest-1 {
		cursor = oldest - 1
	}
	return out, cursor, dropped
}
