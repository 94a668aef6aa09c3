package diagnose

import (
	"fmt"
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
	Steps        int // steps from first scheduled to the token step, inclusive
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
		QueueMs:   ms(s[first].StartNs - receivedNs),
		PrefillMs: ms(s[tok].EndNs - s[first].StartNs),
		Steps:     tok - first + 1,
	}
	prevEnd := receivedNs
	if first > 0 && s[first-1].EndNs > prevEnd {
		prevEnd = s[first-1].EndNs
	}
	out.QueueSlackMs = ms(max(s[first].StartNs-prevEnd, 0))
	return out, nil
}
