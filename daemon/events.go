//go:build linux

package daemon

import (
	"sync"

	"github.com/hone-llm/hone/bpf"
)

// eventBuffers holds what the ring buffer's reader appends (closed KV
// bursts, engine steps, HTTP exchanges) and the connections retire moved
// out of the kernel map, for snapshots to read. It has its own lock.
type eventBuffers struct {
	mu         sync.Mutex
	eventsRead uint64
	bursts     map[bpf.ConnKey][]Burst
	steps      kept[Step]     // the latest maxSteps, oldest first
	exchanges  kept[Exchange] // the latest maxExchanges closed, oldest first
	retired    []Connection   // closed connections listed one by one, the latest maxRetired
	folded     ConnectionTotals
}

// maxBurstsPerConn bounds the closed bursts kept per connection (the latest).
const maxBurstsPerConn = 1024

func newEventBuffers() *eventBuffers {
	return &eventBuffers{bursts: map[bpf.ConnKey][]Burst{},
		steps:     kept[Step]{table: KeptTable{MaxKept: maxSteps}},
		exchanges: kept[Exchange]{table: KeptTable{MaxKept: maxExchanges}}}
}

// read counts one event read from the ring buffer.
func (b *eventBuffers) read() {
	b.mu.Lock()
	b.eventsRead++
	b.mu.Unlock()
}

// addBurst keeps a closed burst of connection k.
func (b *eventBuffers) addBurst(k bpf.ConnKey, x Burst) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bs := append(b.bursts[k], x)
	if len(bs) > maxBurstsPerConn { // keep the latest per connection
		bs = bs[len(bs)-maxBurstsPerConn:]
	}
	b.bursts[k] = bs
}

// addStep keeps an engine step.
func (b *eventBuffers) addStep(s Step) {
	b.mu.Lock()
	b.steps.add(s)
	b.mu.Unlock()
}

// addExchange keeps a closed HTTP exchange.
func (b *eventBuffers) addExchange(x Exchange) {
	b.mu.Lock()
	b.exchanges.add(x)
	b.mu.Unlock()
}

// burstsWhile runs read with the buffers locked, so that no burst lands
// while read walks the kernel's connections: of returns a connection's
// closed bursts, drop forgets them.
func (b *eventBuffers) burstsWhile(read func(of func(bpf.ConnKey) []Burst, drop func(bpf.ConnKey))) {
	b.mu.Lock()
	defer b.mu.Unlock()
	read(func(k bpf.ConnKey) []Burst { return b.bursts[k] }, func(k bpf.ConnKey) { delete(b.bursts, k) })
}

// retire lists closed connections one by one, summing the oldest beyond
// maxRetired into the folded totals.
func (b *eventBuffers) retire(conns []Connection) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.retired = append(b.retired, conns...)
	if n := len(b.retired); n > maxRetired {
		for _, c := range b.retired[:n-maxRetired] {
			addConnection(&b.folded, c)
		}
		b.retired = append([]Connection(nil), b.retired[n-maxRetired:]...)
	}
}

// snapshot adds to s the connections (retired ones, then live), the steps,
// the exchanges (closed ones, then open) and the events read.
func (b *eventBuffers) snapshot(s *Snapshot, live []Connection, open []Exchange) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s.ClosedConnections = b.folded
	s.Connections = append(append(s.Connections, b.retired...), live...)
	s.Steps = append([]Step{}, b.steps.items...)
	s.StepTable = b.steps.table
	s.Exchanges = append(append([]Exchange{}, b.exchanges.items...), open...)
	s.ExchangeTable = b.exchanges.table
	s.BPF.EventsRead = b.eventsRead
}

// maxSteps bounds the steps listed (about 100 bytes each): at 100 steps a
// second per GPU, minutes of an 8-GPU host.
const maxSteps = 65536

// maxExchanges bounds the HTTP exchanges listed (about 250 bytes each):
// at 100 requests a second, ten minutes.
const maxExchanges = 65536

// kept holds the latest items of an unbounded stream, oldest first: when
// full it drops the oldest quarter (amortized: no copy per item). The
// caller holds eventBuffers.mu.
type kept[T any] struct {
	items []T
	table KeptTable
}

func (k *kept[T]) add(v T) {
	if len(k.items) >= k.table.MaxKept {
		n := max(1, len(k.items)/4)
		k.items = append(k.items[:0], k.items[n:]...)
		k.table.Evicted += uint64(n)
	}
	k.items = append(k.items, v)
	k.table.Total++
}
