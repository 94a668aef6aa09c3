package proxy

import (
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/hone-llm/hone/schema"
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

// Leg and Timeline are package schema's (schema/timeline.go): the proxy
// writes them, diagnose reads them.
type (
	Leg      = schema.Leg
	Timeline = schema.Timeline
)

// MaxTimelineValue bounds each string a stored timeline keeps: the
// client's X-Request-Id, the path, error texts, worker names. A longer one
// is cut (at a character boundary) to at most this many bytes and marked
// "…(truncated N bytes)", N the bytes cut, so that a client's 60 KB header
// costs the store a few hundred bytes, not 60 KB a request. The live
// request is not cut: workers and the client's response see the whole id.
const MaxTimelineValue = 256

// truncateValue bounds s as MaxTimelineValue says.
func truncateValue(s string) string {
	if len(s) <= MaxTimelineValue {
		return s
	}
	n := MaxTimelineValue
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…(truncated " + strconv.Itoa(len(s)-n) + " bytes)"
}

// bounded returns tl as the store keeps it: every string truncateValue'd,
// copied so that it holds none of the request's (possibly huge) strings.
func bounded(tl *Timeline) Timeline {
	out := *tl
	out.RequestID = strings.Clone(truncateValue(tl.RequestID))
	out.Path = strings.Clone(truncateValue(tl.Path))
	out.Error = strings.Clone(truncateValue(tl.Error))
	if len(tl.Prefill) > 0 {
		out.Prefill = make([]Leg, len(tl.Prefill))
		for i := range tl.Prefill {
			out.Prefill[i] = boundedLeg(&tl.Prefill[i])
		}
	}
	if tl.Decode != nil {
		d := boundedLeg(tl.Decode)
		out.Decode = &d
	}
	return out
}

func boundedLeg(l *Leg) Leg {
	out := *l
	out.Worker = strings.Clone(truncateValue(l.Worker))
	out.Error = strings.Clone(truncateValue(l.Error))
	return out
}

// Sizes timelineBytes counts.
var (
	timelineSize = int64(unsafe.Sizeof(Timeline{}))
	legSize      = int64(unsafe.Sizeof(Leg{}))
	stampSize    = int64(unsafe.Sizeof(Stamp{}))
)

// timelineBytes is the memory a stored timeline holds: the ring's slot, its
// legs and stamps, and the bytes of its strings and engine metrics.
func timelineBytes(tl *Timeline) int64 {
	n := timelineSize + int64(len(tl.RequestID)+len(tl.Path)+len(tl.Outcome)+len(tl.Error))
	for _, s := range []*Stamp{tl.FirstByte, tl.LastByte} {
		if s != nil {
			n += stampSize
		}
	}
	for i := range tl.Prefill {
		n += legSize + legBytes(&tl.Prefill[i])
	}
	if tl.Decode != nil {
		n += legSize + legBytes(tl.Decode)
	}
	return n
}

// legBytes is what a leg holds beyond its struct.
func legBytes(l *Leg) int64 {
	n := int64(len(l.Worker) + len(l.Error) + cap(l.EngineMetrics))
	if l.Answered != nil {
		n += stampSize
	}
	return n
}

// timelines is a ring of the most recent finished timelines: at most
// capacity of them, holding at most budget bytes (timelineBytes); the
// oldest leave first when either would be passed.
type timelines struct {
	mu     sync.Mutex
	buf    []Timeline // ring of len(buf) slots; the oldest is at head
	head   int
	n      int    // timelines held
	bytes  int64  // their timelineBytes
	budget int64  // most bytes held
	next   uint64 // seq of the next timeline stored; seqs start at 1
}

func newTimelines(capacity int, budget int64) *timelines {
	return &timelines{buf: make([]Timeline, capacity), budget: budget, next: 1}
}

func (t *timelines) add(tl *Timeline) {
	b := bounded(tl)
	size := timelineBytes(&b)
	t.mu.Lock()
	defer t.mu.Unlock()
	tl.Seq = t.next
	b.Seq = t.next
	t.next++
	for t.n > 0 && (t.n == len(t.buf) || t.bytes+size > t.budget) {
		t.bytes -= timelineBytes(&t.buf[t.head])
		t.buf[t.head] = Timeline{}
		t.head = (t.head + 1) % len(t.buf)
		t.n--
	}
	if size > t.budget {
		return // larger than the whole budget: counted as dropped, as an evicted one
	}
	t.buf[(t.head+t.n)%len(t.buf)] = b
	t.n++
	t.bytes += size
}

// held is the timelines stored and their bytes, for tests.
func (t *timelines) held() (int, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, t.bytes
}

// since returns up to limit timelines with Seq > after, oldest first, and
// the cursor to pass next time. Timelines that left the ring are gone;
// dropped says how many were skipped for that reason.
func (t *timelines) since(after uint64, limit int) (out []Timeline, cursor uint64, dropped uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := t.next - 1
	oldest := t.next - uint64(t.n) // seq of the oldest held (last+1 when none)
	from := after + 1
	if from < oldest {
		dropped = oldest - from
		from = oldest
	}
	for s := from; s <= last && (limit <= 0 || len(out) < limit); s++ {
		out = append(out, t.buf[(t.head+int(s-oldest))%len(t.buf)])
	}
	cursor = after
	if len(out) > 0 {
		cursor = out[len(out)-1].Seq
	} else if after < oldest-1 {
		cursor = oldest - 1
	}
	return out, cursor, dropped
}
