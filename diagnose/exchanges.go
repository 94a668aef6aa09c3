package diagnose

import (
	"fmt"
	"math"
	"sort"

	"github.com/hone-llm/hone/schema"
)

// KernelExchange is one HTTP request and its response as the daemon saw
// them on the server's end of a connection to an engine's API port (its
// snapshot's "exchanges", schema.Exchange), CLOCK_MONOTONIC nanoseconds.
type KernelExchange struct {
	PID          int
	Local        string // the engine's API address
	Remote       string // the client's (the proxy's or replay's) address
	ReceivedNs   int64  // the request's first receive
	FirstSendNs  int64  // the response's first send
	SecondSendNs int64  // its second, 0 if none
	LastSendNs   int64
	Sends        int
	Open         bool // the response may still grow
}

// HeadSend says how an engine's HTTP server writes a streamed response's
// status line and headers, which decides which send carries the first
// token.
type HeadSend int

const (
	// HeadSeparate: the head is its own send, written when the handler
	// returns the stream, before the first token (vLLM's API server:
	// Starlette's StreamingResponse sends http.response.start first and
	// uvicorn writes it at once). The first token is the second send.
	HeadSeparate HeadSend = iota
	// HeadWithFirstToken: the head goes out with the first token's chunk
	// (hone sim serve, Go's net/http buffering the head until the first
	// write). The first token is the first send.
	HeadWithFirstToken
)

// FirstTokenNs is the send that carried the exchange's first token, 0 when
// the response has not sent it.
func (x KernelExchange) FirstTokenNs(head HeadSend) int64 {
	if head == HeadWithFirstToken {
		return x.FirstSendNs
	}
	return x.SecondSendNs
}

// KernelEvidence is what the kernel split reads of a daemon snapshot.
type KernelEvidence struct {
	Exchanges []KernelExchange     // oldest request first
	Steps     map[int][]EngineStep // per process, by end
	Processes []KernelProcess      // the traced processes (the snapshot's targets)
}

// ReadKernelEvidence reads a daemon snapshot file (ParseKernelEvidence).
func ReadKernelEvidence(path string) (KernelEvidence, error) {
	s, err := readSnapshot(path)
	if err != nil {
		return KernelEvidence{}, err
	}
	return evidenceOf(s)
}

// ParseKernelEvidence decodes a daemon snapshot's HTTP exchanges, engine
// steps and traced processes.
func ParseKernelEvidence(b []byte) (KernelEvidence, error) {
	s, err := parseSnapshot(b)
	if err != nil {
		return KernelEvidence{}, err
	}
	return evidenceOf(s)
}

// evidenceOf is the HTTP exchanges, engine steps and traced processes
// of snapshot s.
func evidenceOf(s *schema.Snapshot) (KernelEvidence, error) {
	xs := make([]KernelExchange, 0, len(s.Exchanges))
	for _, e := range s.Exchanges {
		xs = append(xs, KernelExchange{PID: e.PID, Local: e.Local, Remote: e.Remote, ReceivedNs: int64(e.RequestStartMonotonicNS),
			FirstSendNs: int64(e.FirstSendMonotonicNS), SecondSendNs: int64(e.SecondSendMonotonicNS),
			LastSendNs: int64(e.LastSendMonotonicNS), Sends: int(e.ResponseSends), Open: e.Open})
	}
	sort.SliceStable(xs, func(i, j int) bool { return xs[i].ReceivedNs < xs[j].ReceivedNs })
	steps := map[int][]EngineStep{}
	for _, st := range s.Steps {
		start, end := int64(st.StartMonotonicNS), int64(st.EndMonotonicNS)
		if end < start {
			return KernelEvidence{}, fmt.Errorf("daemon snapshot: step of pid %d ends at %d before its start at %d", st.PID, end, start)
		}
		steps[st.PID] = append(steps[st.PID], EngineStep{StartNs: start, EndNs: end})
	}
	for _, ss := range steps {
		sort.Slice(ss, func(i, j int) bool { return ss[i].EndNs < ss[j].EndNs })
	}
	var procs []KernelProcess
	if s.Targets != nil {
		procs = make([]KernelProcess, 0, len(s.Targets))
	}
	for _, t := range s.Targets {
		procs = append(procs, KernelProcess{PID: t.PID, PPID: t.PPID, RootPID: t.RootPID, Comm: t.Comm})
	}
	return KernelEvidence{Exchanges: xs, Steps: steps, Processes: procs}, nil
}

// KernelSplit is one request's span on an engine split from kernel
// evidence alone: the exchange on the engine's API socket and the engine's
// steps, in model milliseconds. Queue and prefill are SplitBySteps's;
// DecodeMs runs from the first token's send to the response's last send.
type KernelSplit struct {
	StepSplit
	DecodeMs float64
}

// split is exchange x (the one w came from) split where inferChunks
// placed w's prefill.
func (w *prefillWork) split(x KernelExchange, head HeadSend, scale float64) KernelSplit {
	ms := func(ns int64) float64 { return float64(ns) / 1e6 / scale }
	ft := x.FirstTokenNs(head)
	return KernelSplit{StepSplit: StepSplit{QueueMs: ms(w.first.StartNs - x.ReceivedNs), PrefillMs: ms(w.tok.EndNs - w.first.StartNs),
		QueueSlackMs: ms(max(w.first.StartNs-max(w.prevEndNs, x.ReceivedNs), 0)), OutputLagMs: ms(ft - w.tok.EndNs), Steps: w.chunks},
		DecodeMs: ms(x.LastSendNs - ft)}
}

// SplitExchange splits exchange x by the steps of the engine process that
// served it. chunks is the prefill's chunk count (1 when the uncached
// prompt fits one step's token budget); scale the time scale.
func SplitExchange(x KernelExchange, steps []EngineStep, head HeadSend, chunks int, scale float64) (KernelSplit, error) {
	if !(scale > 0) {
		scale = 1
	}
	ft := x.FirstTokenNs(head)
	if ft == 0 {
		return KernelSplit{}, fmt.Errorf("exchange %s→%s received at %d: no send carried a first token (%d sends)", x.Remote, x.Local, x.ReceivedNs, x.Sends)
	}
	if x.LastSendNs < ft {
		return KernelSplit{}, fmt.Errorf("exchange %s→%s: last send at %d before the first token's at %d", x.Remote, x.Local, x.LastSendNs, ft)
	}
	ss, err := SplitBySteps(steps, x.ReceivedNs, ft, chunks, scale)
	if err != nil {
		return KernelSplit{}, fmt.Errorf("exchange %s→%s: %w", x.Remote, x.Local, err)
	}
	return KernelSplit{StepSplit: ss, DecodeMs: float64(x.LastSendNs-ft) / 1e6 / scale}, nil
}

// exchangeJoin is one completed request (a warm-up too: att -1) to join
// to its exchanges: window is the answering engine's leg sent .. its first
// token at the client; prefill, when disagg, its answered prefill leg's
// sent .. answered. uncached and output feed inferChunks.
type exchangeJoin struct {
	att              int
	window, prefill  [2]int64
	disagg           bool
	uncached, output int
}

// joinExchanges gives each request the exchange that fits its window best:
// received inside the window, its first token sent by the window's end,
// the sum of the two gaps (send → receipt, first-token send → the client's
// first chunk) smallest; requests in the order they were sent, each
// exchange to one request, and as many requests joined as the evidence
// allows (matchWindows). A disaggregated request also gets the prefill
// worker's exchange, answered whole inside its prefill window, and needs
// its KV connection (joinKernel) for a kernel split. Each prefill's step
// count comes from inferChunks over every request its engine served. It
// fills Kernel with SplitExchange's parts. Each exchange's steps are
// those of its API server's stepping process (StepOwners).
func joinExchanges(atts []Attribution, joins []exchangeJoin, ev Evidence, scale float64) error {
	owners, err := StepOwners(ev.Exchanges, ev.Steps, ev.Processes, ev.StepPIDs)
	if err != nil {
		return err
	}
	k := kernelJoin{head: ev.Head, scale: scale, owners: owners, steps: ev.Steps}
	k.xs = ev.Exchanges
	if !sort.SliceIsSorted(k.xs, func(i, j int) bool { return k.xs[i].ReceivedNs < k.xs[j].ReceivedNs }) {
		k.xs = append([]KernelExchange(nil), k.xs...)
		sort.SliceStable(k.xs, func(i, j int) bool { return k.xs[i].ReceivedNs < k.xs[j].ReceivedNs })
	}
	order := make([]int, len(joins))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return joins[order[x]].window[0] < joins[order[y]].window[0] })
	split, dec := k.match(joins, order)
	works, work := k.prefillWorks(joins, order, split, dec)
	k.chunksFrom = k.chunkSources(work, ev.TokenBudget, ev.MaxNumSeqs)
	for i := range atts {
		atts[i].KernelUnjoined = UnjoinedNoWindow // until a join below says otherwise
	}
	for i, j := range joins {
		if j.att >= 0 {
			k.fill(&atts[j.att], j, split[i], dec[i], works[i])
		}
	}
	return nil
}

// kernelJoin is what joinExchanges joins requests to: the exchanges in
// receipt order, the engines' steps by process and each API server's step
// owner, and each engine's note on its prefills' step counts.
type kernelJoin struct {
	xs         []KernelExchange
	head       HeadSend
	scale      float64
	owners     map[int]StepOwner
	steps      map[int][]EngineStep
	chunksFrom map[int]string // by engine process
}

// stepsOf is the steps of the process that steps for API server apiPID.
func (k *kernelJoin) stepsOf(apiPID int) []EngineStep {
	if o, ok := k.owners[apiPID]; ok {
		return k.steps[o.StepPID]
	}
	return nil
}

func (k *kernelJoin) ms(ns int64) float64 { return float64(ns) / 1e6 / k.scale }

// match gives each request, taken in order, the exchanges it got (-1:
// none): the one split by the engine's steps (split: the prefill worker's
// when disaggregated) and the decode worker's (dec). The prefill legs'
// first: a prefill exchange, answered whole inside its leg, fits few
// windows, while a decode window could take a prefill exchange received
// inside it.
func (k *kernelJoin) match(joins []exchangeJoin, order []int) (split, dec []int) {
	used := make([]bool, len(k.xs))
	wins := make([]window, len(joins))
	for i, j := range joins {
		if j.disagg {
			wins[i] = window{span: j.prefill, whole: true}
		}
	}
	pre := matchWindows(k.xs, k.head, wins, order, used)
	for i, j := range joins {
		wins[i] = window{span: j.window}
	}
	dec = matchWindows(k.xs, k.head, wins, order, used)
	split = make([]int, len(joins))
	for _, i := range order {
		split[i], dec[i] = dec[i], -1
		if joins[i].disagg {
			split[i], dec[i] = pre[i], split[i]
		}
	}
	return split, dec
}

// prefillWorks is each request's prefill work on the engine process whose
// exchange is split (nil when none), and every engine's work by process:
// every request an engine served is in its scheduler's work, split or not
// (a disaggregated one needs its decode exchange too).
func (k *kernelJoin) prefillWorks(joins []exchangeJoin, order, split, dec []int) ([]*prefillWork, map[int][]*prefillWork) {
	work := map[int][]*prefillWork{} // by engine process
	works := make([]*prefillWork, len(joins))
	for _, i := range order {
		j := joins[i]
		out := j.output
		if j.disagg {
			out = 1 // a prefill leg generates its one token
		}
		if s := split[i]; s >= 0 {
			x := k.xs[s]
			works[i] = &prefillWork{received: x.ReceivedNs, firstToken: x.FirstTokenNs(k.head), lastSend: x.LastSendNs, uncached: j.uncached, output: out}
			work[x.PID] = append(work[x.PID], works[i])
		}
	}
	return works, work
}

// chunkSources places each engine's prefills in its steps (inferChunks)
// and says, by engine process, how their step counts were found.
func (k *kernelJoin) chunkSources(work map[int][]*prefillWork, tokenBudget, maxNumSeqs int) map[int]string {
	chunksFrom := map[int]string{} // by engine process
	for pid, w := range work {
		b, n := inferChunks(k.stepsOf(pid), w, tokenBudget, maxNumSeqs)
		budget, seats := fmt.Sprintf("token budget %d", b), fmt.Sprintf("max-num-seqs %d", n)
		switch {
		case b == math.MaxInt32:
			budget = "no chunking"
		case tokenBudget <= 0:
			budget = fmt.Sprintf("token budget %d, inferred (--max-num-batched-tokens)", b)
		}
		switch {
		case n == 0:
			seats = "no seat limit"
		case maxNumSeqs <= 0:
			seats = fmt.Sprintf("max-num-seqs %d, inferred (--max-num-seqs)", n)
		}
		chunksFrom[pid] = fmt.Sprintf("steps per prefill inferred by the scheduler's rules (%s, %s; running requests first, FCFS)", budget, seats)
	}
	return chunksFrom
}

// fill gives request a (join j) its kernel split from exchange split (its
// prefill work w) and, when disaggregated, the decode exchange dec; or
// says why it has none.
func (k *kernelJoin) fill(a *Attribution, j exchangeJoin, split, dec int, w *prefillWork) {
	if split < 0 {
		a.KernelUnjoined = UnjoinedNoExchange
		if j.disagg {
			a.KernelUnjoined = UnjoinedNoPrefillExchange
		}
		return
	}
	px := k.xs[split]
	var ps KernelSplit
	var err error
	if w.placed {
		ps = w.split(px, k.head, k.scale)
	} else if ps, err = SplitExchange(px, k.stepsOf(px.PID), k.head, 1, k.scale); err != nil {
		a.KernelUnjoined = UnjoinedNoStep
		return
	}
	amb := k.ms(w.ambiguousNs)
	unc := map[string]float64{Queueing: amb, Prefill: amb + ps.OutputLagMs, Decode: 0}
	if !j.disagg {
		a.Kernel = &KernelParts{Engine: px.Local, QueueMs: ps.QueueMs, PrefillMs: ps.PrefillMs, DecodeMs: ps.DecodeMs,
			QueueSlackMs: ps.QueueSlackMs, UncertaintyMs: unc, Steps: ps.Steps, ChunksFrom: k.chunksFrom[px.PID]}
		a.Sources["kernel_split"] = "daemon: the HTTP exchange on the engine's API socket (sock_recv_length/sock_send_length) " +
			"and its CUDA steps (launch/graph-launch to synchronize uprobes; " + k.owners[px.PID].String() + "), CLOCK_MONOTONIC"
		a.KernelUnjoined = ""
		return
	}
	k.fillDisaggregated(a, px, ps, dec, unc)
}

// fillDisaggregated adds to a disaggregated request's prefill split ps (of
// exchange px) the decode worker's span: receipt → KV usable → first
// token, from its exchange dec and its KV connection.
func (k *kernelJoin) fillDisaggregated(a *Attribution, px KernelExchange, ps KernelSplit, dec int, unc map[string]float64) {
	if dec < 0 {
		a.KernelUnjoined = UnjoinedNoExchange
		return
	}
	x := k.xs[dec]
	ft := x.FirstTokenNs(k.head)
	if a.kvLastNs == 0 || a.kvLastNs < x.ReceivedNs || a.kvLastNs > ft || x.LastSendNs < ft {
		a.KernelUnjoined = UnjoinedNoKV
		return
	}
	a.KernelUnjoined = ""
	unc[Transfer], unc[DecodeQ] = 0, 0
	a.Kernel = &KernelParts{Engine: x.Local, PrefillEngine: px.Local, QueueMs: ps.QueueMs, PrefillMs: ps.PrefillMs,
		TransferMs: k.ms(a.kvLastNs - x.ReceivedNs), DecodeQueueMs: k.ms(ft - a.kvLastNs), DecodeMs: k.ms(x.LastSendNs - ft),
		QueueSlackMs: ps.QueueSlackMs, UncertaintyMs: unc, Steps: ps.Steps, ChunksFrom: k.chunksFrom[px.PID]}
	a.Sources["kernel_split"] = "daemon: the HTTP exchanges on the prefill and decode workers' API sockets " +
		"(sock_recv_length/sock_send_length), the prefill worker's CUDA steps (launch/graph-launch to synchronize uprobes; " +
		k.owners[px.PID].String() + ") and the decode worker's KV connection, CLOCK_MONOTONIC"
}

// window is a request's span to match to one exchange: received inside
// it, its first token sent by its end, and when whole its last send too
// (a prefill leg's answer; an open exchange, its connection idle since,
// counts as answered when its last send came by then). A zero span asks
// for nothing.
type window struct {
	span  [2]int64
	whole bool
}

// maxAugmentVisits bounds the exchanges one augmenting search visits, so
// evidence with many exchanges missing cannot make matching quadratic.
const maxAugmentVisits = 4096

// matchWindows gives each window, in order, the unused exchange that fits
// it best (the sum of the two gaps, send → receipt and first-token send →
// the window's end, smallest) and marks it used. A window left without one
// then takes one back along an augmenting path (Kuhn's): a request that
// took another's exchange moves to its next fit, so that every request
// whose own exchange the daemon saw gets one, where the greedy order alone
// can leave one out under a long queue. It returns each window's exchange,
// -1 for none.
func matchWindows(xs []KernelExchange, head HeadSend, wins []window, order []int, used []bool) []int {
	got := make([]int, len(wins))
	cands := make([][]int, len(wins)) // by gap, best first
	for i, w := range wins {
		got[i] = -1
		if w.span == [2]int64{} {
			continue
		}
		gap := func(k int) int64 { return (xs[k].ReceivedNs - w.span[0]) + (w.span[1] - xs[k].FirstTokenNs(head)) }
		for k := sort.Search(len(xs), func(k int) bool { return xs[k].ReceivedNs >= w.span[0] }); k < len(xs) && xs[k].ReceivedNs <= w.span[1]; k++ {
			x := xs[k]
			ft := x.FirstTokenNs(head)
			if used[k] || ft == 0 || ft > w.span[1] || w.whole && x.LastSendNs > w.span[1] {
				continue
			}
			cands[i] = append(cands[i], k)
		}
		sort.SliceStable(cands[i], func(a, b int) bool { return gap(cands[i][a]) < gap(cands[i][b]) })
	}
	owner := map[int]int{} // exchange → window
	for _, i := range order {
		for _, k := range cands[i] {
			if _, taken := owner[k]; !taken {
				owner[k], got[i] = i, k
				break
			}
		}
	}
	for _, i := range order {
		if got[i] >= 0 || len(cands[i]) == 0 {
			continue
		}
		visited := map[int]bool{}
		var augment func(i int) bool
		augment = func(i int) bool {
			for _, k := range cands[i] {
				if visited[k] || len(visited) >= maxAugmentVisits {
					continue
				}
				visited[k] = true
				if o, taken := owner[k]; !taken || augment(o) {
					owner[k], got[i] = i, k
					return true
				}
			}
			return false
		}
		augment(i)
	}
	for k := range owner {
		used[k] = true
	}
	return got
}
