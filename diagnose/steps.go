package diagnose

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
)

// EngineStep is one engine step as the daemon's CUDA probes saw it (its
// snapshot's "steps"): from the first launch to the return of the
// synchronize that closed it, CLOCK_MONOTONIC nanoseconds.
type EngineStep struct {
	StartNs, EndNs int64
}

// StepSplit is an engine's span of one request — its receipt of the
// request to the first token — split by the engine's steps alone, in model
// milliseconds, with vLLM's definitions: Queue is receipt → first
// scheduled (the start of the first step that computed any of the
// request's prompt), Prefill first scheduled → the end of the step that
// produced the first token. On a decode worker of a disaggregated pair the
// same two parts are its queue_time_ms (the KV wait inside) and its
// time_to_first_token_ms.
//
// The token step is the latest step that ended at or before the first
// token was seen; the first scheduled step is chunks steps back from it
// (chunks = the prefill's chunk count, 1 when the uncached prompt fits one
// step's token budget), but never a step that started before the receipt:
// a running step cannot take a new request. QueueSlackMs is the
// uncertainty the step grid leaves: the gap between the previous step's
// end and the first scheduled step's start, during which the request may
// equally have waited or been in flight to the engine.
type StepSplit struct {
	QueueMs      float64
	PrefillMs    float64
	QueueSlackMs float64
	// OutputLagMs runs from the token step's end to the first token's
	// send (the engine's output processing): prefill or hand-out, the
	// grid cannot say, so it bounds the prefill's end.
	OutputLagMs float64
	Steps       int // steps from first scheduled to the token step, inclusive
}

// SplitBySteps splits [receivedNs, firstTokenNs] of one request by steps
// (the steps of the one engine process that served it, any order). scale
// is the record's time scale (model ms = wall ms / scale).
func SplitBySteps(steps []EngineStep, receivedNs, firstTokenNs int64, chunks int, scale float64) (StepSplit, error) {
	if !(scale > 0) {
		scale = 1
	}
	if chunks < 1 {
		chunks = 1
	}
	if firstTokenNs < receivedNs {
		return StepSplit{}, fmt.Errorf("first token at %d before the receipt at %d", firstTokenNs, receivedNs)
	}
	s := steps // ParseKernelEvidence's are sorted by end already
	if !sort.SliceIsSorted(s, func(i, j int) bool { return s[i].EndNs < s[j].EndNs }) {
		s = append([]EngineStep(nil), steps...)
		sort.Slice(s, func(i, j int) bool { return s[i].EndNs < s[j].EndNs })
	}
	// The token step: the latest to end by the first token.
	tok := sort.Search(len(s), func(i int) bool { return s[i].EndNs > firstTokenNs }) - 1
	if tok < 0 || s[tok].StartNs < receivedNs {
		return StepSplit{}, fmt.Errorf("no step started after the receipt at %d and ended by the first token at %d", receivedNs, firstTokenNs)
	}
	first := tok
	for k := 1; k < chunks && first > 0 && s[first-1].StartNs >= receivedNs; k++ {
		first--
	}
	ms := func(ns int64) float64 { return float64(ns) / 1e6 / scale }
	out := StepSplit{
		QueueMs:     ms(s[first].StartNs - receivedNs),
		PrefillMs:   ms(s[tok].EndNs - s[first].StartNs),
		OutputLagMs: ms(firstTokenNs - s[tok].EndNs),
		Steps:       tok - first + 1,
	}
	prevEnd := receivedNs
	if first > 0 && s[first-1].EndNs > prevEnd {
		prevEnd = s[first-1].EndNs
	}
	out.QueueSlackMs = ms(max(s[first].StartNs-prevEnd, 0))
	return out, nil
}

// prefillWork is one request an engine served, for inferChunks: its
// receipt and first-token send (CLOCK_MONOTONIC), the prompt tokens the
// engine computed and the tokens it generated. The rest is the result.
type prefillWork struct {
	received, firstToken int64
	lastSend             int64 // the response's last send
	uncached, output     int
	// placed: inferChunks put the prefill on the step grid, from the
	// start of step first to the end of step tok (chunks steps).
	placed     bool
	first, tok EngineStep
	prevEndNs  int64 // the end of the step before first (0: none)
	chunks     int
	// ambiguousNs is the span of first steps' starts the evidence leaves
	// open (0: one): those consistent with the token step the first-token
	// send points at, and the one the rules admitted it in.
	ambiguousNs int64
}

// inferChunks places each request's prefill on one engine's step grid
// (steps: its CUDA steps; work: every request it served that the
// exchanges joined) by vLLM's scheduler rules under token budget B
// (max_num_batched_tokens) and seats N (max_num_seqs): each step serves
// the running requests first, in the order they were admitted, a decoding
// one a token, a prefilling one as much of its prompt as the budget left
// allows; then it admits waiting requests in arrival order (FCFS) while
// budget and a seat are left. A prefill therefore takes everything left to
// it in each step until it finishes, and a request is admitted in the
// first step, no earlier than its elder's, that starts after the API
// server's front end handed it over and has budget and a seat left (a
// request holds its seat from its first step to the step of its last
// token).
//
// Requests are taken in receipt order, each adding its chunks and its
// output − 1 decode tokens (one a step, in the steps its elders left
// budget in) to what later ones find used. The front end's length is
// learnt first: a pass places each prefill by its first-token send (the
// token step is the latest step to end before it; a first step is
// consistent when, taking all that is left from there, the prefill ends
// exactly there, and the earliest consistent one is taken); of the
// receipt → first-step gaps it finds, the front end's floor is the one
// under which the rules end the most prefills in the step their send
// points at (ties: the nearest to the shortest unambiguous gap). The second pass admits each request by the
// rules, so a first token sent late (the API server's output processing
// lagging the step) does not move its prefill; where the rules place the
// prefill's end after its first token was sent, or the grid ends first,
// the send decides as in the first pass.
//
// B or N unknown (0) is learnt the same way: of the budgets vLLM's users
// set (powers of two from 16 to 65,536, or none) and the seats the
// exchanges suggest (the most requests ever between their first and last
// sends, one fewer, one or two more, or none), the pair under which the rules end
// the most prefills where their sends point (ties: the smaller budget,
// then the seats in that order); where pairs that fit as well place a
// prefill's first step elsewhere, its ambiguity spans them. It returns
// the pair used (N 0: no limit).
// Preemption and requests the exchanges missed are not modelled.
func inferChunks(steps []EngineStep, work []*prefillWork, budget, seats int) (int, int) {
	s := steps
	if !sort.SliceIsSorted(s, func(i, j int) bool { return s[i].EndNs < s[j].EndNs }) {
		s = append([]EngineStep(nil), steps...)
		sort.Slice(s, func(i, j int) bool { return s[i].EndNs < s[j].EndNs })
	}
	sort.SliceStable(work, func(i, j int) bool { return work[i].received < work[j].received })
	g := &stepGrid{s: s, work: work}
	budgets, seatings := candidateLimits(work, budget, seats)
	b, n := budgets[0], seatings[0]
	// Where other pairs fit as well and place a prefill elsewhere, its
	// first step is as open as they leave it: lo..hi, its starts.
	lo, hi := make([]int64, len(work)), make([]int64, len(work))
	if len(budgets)*len(seatings) > 1 {
		b, n = g.bestLimits(budgets, seatings, lo, hi)
	}
	front, _ := g.frontFor(b, n, 64)
	g.pass(b, n, front, true)
	for i, w := range work {
		if w.placed && hi[i] > lo[i] && lo[i] != 0 {
			w.ambiguousNs = max(w.ambiguousNs, hi[i]-lo[i])
		}
	}
	return b, n
}

// stepGrid is what inferChunks places prefills on: one engine's steps,
// sorted by end, and the requests it served, in receipt order.
type stepGrid struct {
	s    []EngineStep
	work []*prefillWork
}

// candidateLimits are the budgets and seats inferChunks tries: the given
// ones, or where one is unknown (0) the budgets vLLM's users set (powers
// of two from 16 to 65,536, or none) and the seats the exchanges suggest
// (the most requests ever between their first and last sends, one fewer,
// one or two more, or none).
func candidateLimits(work []*prefillWork, budget, seats int) (budgets, seatings []int) {
	budgets, seatings = []int{budget}, []int{max(seats, 0)}
	if budget <= 0 {
		budgets = budgets[:0]
		for b := 16; b <= 65536; b *= 2 {
			budgets = append(budgets, b)
		}
		budgets = append(budgets, math.MaxInt32) // no chunking
	}
	if seats <= 0 {
		l := concurrentSends(work)
		seatings = []int{l, max(l-1, 1), l + 1, l + 2, 0}
	}
	return budgets, seatings
}

// bestLimits is the pair of budgets and seatings under which the rules end
// the most prefills where their sends point (ties: the smaller budget,
// then the seats in seatings' order). Each placed request's first-step
// starts under the pairs that fit as well widen lo[i]..hi[i].
func (g *stepGrid) bestLimits(budgets, seatings []int, lo, hi []int64) (int, int) {
	// The budget under the first seats (the sends' suggestion), then
	// the seats under the best budgets: a linear search, not the
	// product, on evidence of thousands of requests.
	type pair struct{ b, n int }
	var tied []pair
	best := -1
	try := func(p pair) {
		if _, m := g.frontFor(p.b, p.n, 16); m > best {
			tied, best = []pair{p}, m
		} else if m == best && !slices.Contains(tied, p) {
			tied = append(tied, p)
		}
	}
	for _, bb := range budgets {
		try(pair{bb, seatings[0]})
	}
	for _, p := range slices.Clone(tied) {
		for _, nn := range seatings[1:] {
			try(pair{p.b, nn})
		}
	}
	slices.SortStableFunc(tied, func(x, y pair) int {
		return cmp.Or(cmp.Compare(x.b, y.b), cmp.Compare(slices.Index(seatings, x.n), slices.Index(seatings, y.n)))
	})
	for k, p := range tied {
		front, _ := g.frontFor(p.b, p.n, 16)
		g.pass(p.b, p.n, front, true)
		for i, w := range g.work {
			if !w.placed {
				continue
			}
			if k == 0 || lo[i] == 0 || w.first.StartNs < lo[i] {
				lo[i] = w.first.StartNs
			}
			hi[i] = max(hi[i], w.first.StartNs)
		}
	}
	return tied[0].b, tied[0].n
}

// frontFor is the front end's floor under (b, n): of the receipt →
// first-step gaps the sends suggest (at most max of them, spread over
// their range), the shortest under which the rules end the most prefills
// in the step their first token's send points at. Shorter admits
// ready-looking requests a step early, longer a step late; a late send
// misleads one request only. It returns the floor and the prefills it
// matched.
func (g *stepGrid) frontFor(b, n, most int) (int64, int) {
	gaps, uniq, _ := g.pass(b, n, 0, false)
	slices.Sort(gaps)
	gaps = slices.Compact(gaps)
	if k := len(gaps); k > most {
		q := make([]int64, most)
		for i := range q {
			q[i] = gaps[i*(k-1)/(most-1)]
		}
		gaps = q
	}
	// Ties (no request tells two floors apart) go to the one nearest the
	// shortest gap of a request with one consistent first step, the first
	// after its receipt: with its send on time, an upper bound that the
	// front end reaches within the step grid's phase.
	hint := int64(0)
	if len(uniq) > 0 {
		hint = slices.Min(uniq)
	}
	front, best := int64(0), -1
	for _, gap := range append([]int64{0}, gaps...) {
		_, _, m := g.pass(b, n, gap, true)
		if m > best || m == best && abs64(gap-hint) < abs64(front-hint) {
			front, best = gap, m
		}
	}
	return front, best
}

// pass places every request under budget b and seats n (0: none);
// byRules admits by the rules (second pass), else by the first-token
// send. It returns the receipt → first-step gaps of the requests with
// one consistent first step, the first after their receipt.
func (g *stepGrid) pass(b, n int, frontNs int64, byRules bool) (gaps, uniq []int64, matched int) {
	s := g.s
	l := &ledger{s: s, b: b, n: n, used: make([]int, len(s)), held: make([]int, len(s))}
	elder := 0 // FCFS: no request is admitted before its elder
	for _, w := range g.work {
		w.placed, w.chunks, w.ambiguousNs = false, 1, 0
		tok := sort.Search(len(s), func(i int) bool { return s[i].EndNs > w.firstToken }) - 1
		if tok < 0 || s[tok].StartNs < w.received {
			continue // no step fits: SplitBySteps will say so
		}
		need := max(w.uncached, 1) // a whole-prompt hit still computes its last token
		lo := sort.Search(tok, func(i int) bool { return s[i].StartNs >= w.received })
		fit := l.bySend(w, lo, tok, need, frontNs)
		first := fit.first
		gaps = append(gaps, s[first].StartNs-w.received)
		if fit.candidates == 1 && first == lo {
			uniq = append(uniq, s[first].StartNs-w.received)
		}
		if byRules {
			if f, t, ok := l.byRules(w, elder, need, frontNs); ok {
				if t == tok {
					matched++
				}
				first, tok = f, t
				if fit.lowest < 0 || f < fit.lowest {
					fit.lowest = f
				}
				fit.highest = max(fit.highest, f)
			}
		}
		if fit.lowest >= 0 && fit.highest > fit.lowest {
			w.ambiguousNs = s[fit.highest].StartNs - s[fit.lowest].StartNs
		}
		elder = first
		l.place(w, first, tok, need)
	}
	return gaps, uniq, matched
}

// ledger is one pass's account of the step grid under budget b and seats
// n (0: none): the budget used and the seats held in each step.
type ledger struct {
	s    []EngineStep
	b, n int
	used []int
	held []int // seats held in each step
}

// left is the budget step k has left.
func (l *ledger) left(k int) int { return max(l.b-l.used[k], 0) }

// free says whether step k has a seat left.
func (l *ledger) free(k int) bool { return l.n <= 0 || l.held[k] < l.n }

// sendFit is where a request's first-token send places its prefill's
// first step: first, the earliest consistent one (after the front end
// where one is); lowest..highest, the consistent ones (-1: none); and
// how many there are.
type sendFit struct{ first, lowest, highest, candidates int }

// bySend places w's first step by its first-token send, in token step tok
// (lo: the first step after its receipt; need: the tokens its prefill
// computes).
func (l *ledger) bySend(w *prefillWork, lo, tok, need int, frontNs int64) sendFit {
	s := l.s
	// The first steps consistent with the token step.
	// Walked back from the token step, got is what steps f..tok-1
	// left: once it reaches need, no earlier step is consistent.
	first, firstAfterFront, last, candidates := -1, -1, -1, 0
	for f, got := tok, 0; f >= lo && got < need; f-- {
		if f < tok {
			got += l.left(f)
		}
		if l.left(f) == 0 || got >= need || got+l.left(tok) < need {
			continue // no budget, done before the token step, or not by it
		}
		candidates++
		first = f // the earliest so far
		if last < 0 {
			last = f
		}
		if s[f].StartNs-w.received >= frontNs {
			firstAfterFront = f
		}
	}
	lowest, highest := first, last
	if firstAfterFront >= 0 {
		first = firstAfterFront
	}
	if first < 0 { // none: the fewest steps back from the token step
		first = tok
		for got := l.left(tok); got < need && first > lo; got += l.left(first) {
			first--
		}
	}
	return sendFit{first: first, lowest: lowest, highest: highest, candidates: candidates}
}

// byRules is where the rules place w's prefill: its first step f and its
// last t, ok when it ends before its first token was sent.
func (l *ledger) byRules(w *prefillWork, elder, need int, frontNs int64) (f, t int, ok bool) {
	s := l.s
	// Admitted in the first step after the front end, not before
	// its elder, with budget and a seat left; done where the
	// budget adds up.
	f = sort.Search(len(s), func(i int) bool { return s[i].StartNs >= w.received+frontNs })
	for f = max(f, elder); f < len(s) && (l.left(f) == 0 || !l.free(f)); f++ {
	}
	got := 0
	for t = f; t < len(s); t++ {
		if got += l.left(t); got >= need {
			break
		}
	}
	return f, t, t < len(s) && s[t].EndNs <= w.firstToken
}

// place records w's prefill in steps first..tok and charges the ledger
// with its chunks, its decodes and its seat.
func (l *ledger) place(w *prefillWork, first, tok, need int) {
	s := l.s
	w.placed, w.first, w.tok, w.chunks = true, s[first], s[tok], tok-first+1
	if first > 0 {
		w.prevEndNs = s[first-1].EndNs
	}
	rest := need
	for k := first; k < tok; k++ {
		rest -= l.left(k)
		l.used[k] += l.left(k)
	}
	l.used[tok] += max(rest, 0)
	// Its decodes: a token in each later step that has budget left
	// after its elders (a younger request's prefill never comes
	// first). It holds its seat to the step of its last token.
	end := tok
	for k, d := tok+1, w.output-1; k < len(s) && d > 0; k++ {
		if l.left(k) > 0 {
			l.used[k]++
			d--
			end = k
		}
	}
	if w.output > 1 && end == tok {
		end = len(s) - 1 // the grid ends before its decode does
	}
	for k := first; k <= end; k++ {
		l.held[k]++
	}
}

// concurrentSends is the most requests of work ever between their
// first-token and last sends at once: the seats an engine used at least.
func concurrentSends(work []*prefillWork) int {
	type edge struct {
		at    int64
		delta int
	}
	var es []edge
	for _, w := range work {
		es = append(es, edge{w.firstToken, 1}, edge{max(w.lastSend, w.firstToken), -1})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].at < es[j].at || es[i].at == es[j].at && es[i].delta < es[j].delta })
	most, now := 0, 0
	for _, e := range es {
		now += e.delta
		most = max(most, now)
	}
	return max(most, 1)
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
