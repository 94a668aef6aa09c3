package diagnose

import (
	"fmt"
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
// engine computed and the tokens it generated. chunks is the result.
type prefillWork struct {
	received, firstToken int64
	uncached, output     int
	chunks               int
	// ambiguousNs is the span of first steps' starts the rules found
	// consistent (0: one): the evidence cannot place the prefill's start
	// closer than that.
	ambiguousNs int64
}

// inferChunks decides how many steps each request's prefill took on one
// engine (steps: its CUDA steps; work: every request it served that the
// exchanges joined), by vLLM's scheduler rules under token budget B
// (max_num_batched_tokens): each step serves the running requests first,
// in the order they were admitted (FCFS), a decoding one a token, a
// prefilling one as much of its prompt as the budget left allows; then it
// admits waiting requests, FCFS, while any budget is left. A prefill
// therefore takes everything left to it in each step until it finishes.
//
// Requests are taken in receipt order. For each, every step from its
// receipt to its token step (the one its first token came from, as
// SplitBySteps finds it) that had budget left is a candidate first step;
// it is consistent when, taking all that is left from there on, the
// request's uncached tokens are done exactly in the token step. The
// earliest consistent one is taken — FCFS admits a ready request in the
// first step with budget left — but not before the API server's front end
// could have handed the request over: the shortest receipt → first-step
// gap among the requests admitted unambiguously in the first step after
// their receipt (a first pass finds them; none: no floor). The request then adds its chunks and its output −
// 1 decode tokens (one a step, in the steps its elders left budget in) to
// what later ones find used. Where no candidate is consistent (a request the exchanges
// missed, a preemption: neither is modelled) the fewest steps that could
// hold its tokens are taken. Steps before the receipt never count.
func inferChunks(steps []EngineStep, work []*prefillWork, budget int) {
	s := steps
	if !sort.SliceIsSorted(s, func(i, j int) bool { return s[i].EndNs < s[j].EndNs }) {
		s = append([]EngineStep(nil), steps...)
		sort.Slice(s, func(i, j int) bool { return s[i].EndNs < s[j].EndNs })
	}
	sort.SliceStable(work, func(i, j int) bool { return work[i].received < work[j].received })
	// pass allocates every request's steps, first steps no earlier than
	// frontNs after the receipt where one such is consistent; it returns
	// the receipt → first-step gaps of the requests with one candidate,
	// the first step after their receipt.
	pass := func(frontNs int64) []int64 {
		used := make([]int, len(s))
		left := func(k int) int { return max(budget-used[k], 0) }
		var gaps []int64
		for _, w := range work {
			w.chunks = 1
			tok := sort.Search(len(s), func(i int) bool { return s[i].EndNs > w.firstToken }) - 1
			if tok < 0 || s[tok].StartNs < w.received {
				continue // SplitBySteps will say no step fits
			}
			need := max(w.uncached, 1) // a whole-prompt hit still computes its last token
			lo := sort.Search(tok, func(i int) bool { return s[i].StartNs >= w.received })
			first, firstAfterFront, last, candidates := -1, -1, -1, 0
			for f := lo; f <= tok; f++ {
				if left(f) == 0 {
					continue
				}
				got := 0
				for k := f; k < tok; k++ {
					got += left(k)
				}
				if got >= need || got+left(tok) < need {
					continue // done before the token step, or not by it
				}
				candidates++
				last = f
				if first < 0 {
					first = f
				}
				if firstAfterFront < 0 && s[f].StartNs-w.received >= frontNs {
					firstAfterFront = f
				}
			}
			w.ambiguousNs = 0
			if candidates > 1 {
				w.ambiguousNs = s[last].StartNs - s[first].StartNs
			}
			if firstAfterFront >= 0 {
				first = firstAfterFront
			}
			if first < 0 { // the fewest steps back from the token step
				first = tok
				for got := left(tok); got < need && first > lo; got += left(first) {
					first--
				}
			}
			if candidates == 1 && first == lo {
				gaps = append(gaps, s[first].StartNs-w.received)
			}
			w.chunks = tok - first + 1
			rest := need
			for k := first; k < tok; k++ {
				rest -= left(k)
				used[k] += left(k)
			}
			used[tok] += max(rest, 0)
			// Its decodes: a token in each later step that has budget left
			// after its elders (a younger request's prefill never comes first).
			for k, n := tok+1, w.output-1; k < len(s) && n > 0; k++ {
				if left(k) > 0 {
					used[k]++
					n--
				}
			}
		}
		return gaps
	}
	if gaps := pass(0); len(gaps) > 0 {
		pass(slices.Min(gaps))
	}
}
