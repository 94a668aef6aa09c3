package diagnose

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/hone-llm/hone/deploy/proxy"
	"github.com/hone-llm/hone/schema"
)

// Components of a request's time to first token, in the order they happen.
const (
	Client   = "client"       // dispatch lag, client↔proxy↔engine hops and the proxy's hand-off, first-byte delivery: nothing an engine does
	Queueing = "queueing"     // waiting in an engine's queue (prefill or colocated; decode side in DecodeQ), failed prefill legs
	Prefill  = "prefill"      // computing the prompt (incl. the first token on a colocated engine)
	Transfer = "transfer"     // the decode worker waiting for KV blocks: to the KV pull's end where its timing is known (SplitKVWait), else its whole queue_time_ms
	DecodeQ  = "decode_queue" // the decode worker's queue after the KV and its first step
	Decode   = "decode"       // first → last token (not part of TTFT)
)

// TTFTComponents are the parts that add up to TTFT.
var TTFTComponents = []string{Client, Queueing, Prefill, Transfer, DecodeQ}

// Attribution is one request's latency split, in model milliseconds.
type Attribution struct {
	Run        int                `json:"run"`
	OfferedQPS float64            `json:"offered_qps"`
	ID         int                `json:"id"`
	RequestID  string             `json:"request_id"`
	TTFTMs     float64            `json:"ttft_ms"` // scheduled arrival → first token, as the client saw it
	E2EMs      float64            `json:"e2e_ms"`
	Parts      map[string]float64 `json:"parts_ms"`
	// Sources says which evidence each part came from.
	Sources  map[string]string `json:"sources"`
	Retries  int               `json:"retries,omitempty"`
	Fallback bool              `json:"fallback,omitempty"`
	// Timeline says the request was joined to its proxy timeline.
	Timeline bool `json:"timeline,omitempty"`
	// EngineMetrics says the engine that streamed the answer reported
	// vLLM's per-request metrics (queue_time_ms and time_to_first_token_ms)
	// and the split used them; PrefillEngineMetrics the same of the prefill
	// worker, through the proxy. Without them that engine's span is one
	// client- or proxy-timed block.
	EngineMetrics        bool `json:"engine_metrics,omitempty"`
	PrefillEngineMetrics bool `json:"prefill_engine_metrics,omitempty"`
	// Invalid holds the reason codes of the request's level (run, offered
	// rate) when that level's verdict is invalid: such a request is shown
	// but never decides the bottleneck. Empty: the level is valid.
	Invalid []string `json:"invalid,omitempty"`
	// KernelKVBytes and KernelTransferMs are the KV pull the daemon saw on
	// the decode worker's socket (bytes received, first to last byte, model
	// ms), when a snapshot was given: the kernel's view of Transfer.
	KernelKVBytes    uint64  `json:"kernel_kv_bytes,omitempty"`
	KernelTransferMs float64 `json:"kernel_transfer_ms,omitempty"`
	// Kernel is the request's split from kernel evidence alone (the
	// daemon's HTTP exchanges and CUDA steps, and its KV connection when
	// disaggregated), when a snapshot with them was given and the request
	// joined its exchanges.
	Kernel *KernelParts `json:"kernel_split,omitempty"`
	// KernelUnjoined says why a request has no kernel split when kernel
	// evidence was given (one of the Unjoined* reasons).
	KernelUnjoined string `json:"kernel_unjoined,omitempty"`
	// SplitBy says which evidence Parts came from: "engine" (the engines'
	// per-request metrics, with the proxy's timeline), "kernel" (Kernel:
	// Evidence.Source chose it, or the engine reported no metrics),
	// "client" (neither: the engine's span is client- or proxy-timed) or
	// SplitUnjoined (neither, and kernel evidence was given but did not
	// join: KernelUnjoined says why).
	SplitBy string `json:"split_by"`
	// EngineParts keeps the engine-metrics split when the kernel split
	// took its place in Parts, so the two can still be compared.
	EngineParts map[string]float64 `json:"engine_parts_ms,omitempty"`

	kvLastNs int64 // the joined KV connection's last operation (the decode worker's ack: KV usable)
	// kvSplit says the decode worker's wait was split at the KV pull's
	// end (splitKVWait), and by which evidence.
	kvSplit string
	// tpot is the request's TPOT as the record has it (0: none), for the
	// stall rule's p99 without the stalled requests.
	tpot float64
	// life is the request's sent .. last chunk and chunks its chunks'
	// arrivals, model ms on its level's clock (run, level), for the stall
	// rule's freeze.
	life   [2]float64
	chunks []float64
	// seat is first token .. last token on the same clock: the request
	// held one of the engine's max-num-seqs seats at least then.
	seat [2]float64
}

// KernelParts is a request's split from kernel evidence alone, model ms
// (SplitExchange). Colocated: Queue runs from the answering engine's API
// socket receiving the request (its front end inside) to its first
// scheduled step, Prefill from there to the end of the step whose result
// the first token's send carried. Disaggregated: Queue and Prefill are the
// prefill worker's, split the same way on its exchange; Transfer runs from
// the decode worker's API socket receiving the request to the last
// operation on its KV connection (the pull's acknowledgement: the blocks
// are usable), DecodeQueue from there to the decode worker's first-token
// send (its queue after the KV and its first step). Decode runs from the
// first-token send to the response's last. QueueSlackMs is the step grid's
// uncertainty on Queue.
type KernelParts struct {
	Engine        string  `json:"engine"`                   // the answering engine's API address
	PrefillEngine string  `json:"prefill_engine,omitempty"` // disaggregated: the prefill worker's
	QueueMs       float64 `json:"queue_ms"`
	PrefillMs     float64 `json:"prefill_ms"`
	TransferMs    float64 `json:"transfer_ms,omitempty"`
	DecodeQueueMs float64 `json:"decode_queue_ms,omitempty"`
	DecodeMs      float64 `json:"decode_ms"`
	QueueSlackMs  float64 `json:"queue_slack_ms"`
	// UncertaintyMs says per part how far the evidence lets its bounds
	// move: queueing and prefill by the span of first steps the
	// scheduler's rules found consistent, prefill also by the output lag
	// (token step's end → first-token send); the other parts' bounds are
	// kernel instants (0).
	UncertaintyMs map[string]float64 `json:"uncertainty_ms"`
	Steps         int                `json:"steps"` // the prefill's steps, first scheduled to first token
	// ChunksFrom says how Steps was decided: by the scheduler's rules
	// under the token budget, or one step assumed.
	ChunksFrom string `json:"chunks_from,omitempty"`
}

// parts is k keyed by the attribution's part names (transfer and
// decode_queue only when disaggregated).
func (k *KernelParts) parts() map[string]float64 {
	p := map[string]float64{Queueing: k.QueueMs, Prefill: k.PrefillMs, Decode: k.DecodeMs}
	if k.PrefillEngine != "" {
		p[Transfer], p[DecodeQ] = k.TransferMs, k.DecodeQueueMs
	}
	return p
}

// Evidence a split may use (Evidence.Source).
const (
	// EvidenceAuto: per request, the engines' metrics where they reported
	// them, else the kernel split where the request has one, else client
	// timing.
	EvidenceAuto = "auto"
	// EvidenceEngine: the engines' metrics or client timing; the kernel
	// split is shown beside, never used.
	EvidenceEngine = "engine"
	// EvidenceKernel: the kernel split for every request that has one,
	// engine metrics or not.
	EvidenceKernel = "kernel"
)

// Evidence is everything attribution may use beyond the record.
type Evidence struct {
	Timelines []proxy.Timeline
	// KV are the daemon's KV-transfer connections (ReadKVConns); each is
	// joined to at most one disaggregated request.
	KV []KVConn
	// Exchanges and Steps are the daemon's HTTP exchanges on the engines'
	// API sockets and their CUDA steps by process (ReadKernelEvidence);
	// Head says how the engines write a streamed response's head.
	Exchanges []KernelExchange
	Steps     map[int][]EngineStep
	Head      HeadSend
	// Processes are the traced processes (the snapshot's targets): on
	// vLLM the steps are another process's than the exchanges (the engine
	// core's or a worker's), found in this tree (StepOwners). StepPIDs
	// (API server PID → stepping PID, --step-pid) overrides that choice.
	Processes []KernelProcess
	StepPIDs  map[int]int
	// Source chooses the evidence of each request's split: EvidenceAuto
	// (""), EvidenceEngine or EvidenceKernel.
	Source string
	// TokenBudget is the engines' max_num_batched_tokens (vLLM's
	// --max-num-batched-tokens): with it the kernel split infers how many
	// steps each prefill took by the scheduler's rules (inferChunks); 0
	// (unknown): inferred from the evidence (inferChunks).
	TokenBudget int
	// Daemon says a daemon snapshot was given: without the engines'
	// metrics a request it could not split is named (KernelUnjoined), not
	// split by client timing, even when the snapshot has no exchanges.
	Daemon bool
	// MaxNumSeqs is the engines' max_num_seqs (vLLM's --max-num-seqs),
	// which delays admission when the seats are full; 0 (unknown):
	// inferred from the evidence.
	MaxNumSeqs int
}

// engineMetrics are the keys attribution reads of vLLM's per-request
// "metrics" object (vllm serve --enable-per-request-metrics; in a stream on
// the final usage chunk). vLLM computes them from the engine core's
// timestamps of the request (build_per_request_timing_metrics in
// vllm/entrypoints/generate/base/serving.py), in ms (model ms on hone's
// emulator, which follows the same definitions):
//
//	queue_time_ms           queued (the engine core took the request in) →
//	                        first scheduled. A decode worker schedules a
//	                        remote-prefill request only when its KV has
//	                        arrived: there the KV wait is inside it.
//	time_to_first_token_ms  first scheduled → first token. Not from
//	                        arrival: the queue is not inside it, so the
//	                        prefill is this figure itself, never it − queue.
//	generation_time_ms      first → last token.
//	mean_itl_ms             generation_time_ms / (output tokens − 1).
//	e2e_time_ms             hone's emulator only: arrival at the API server
//	                        → last token. With generation_time_ms it gives
//	                        the server's arrival → first token, whose part
//	                        before queue_time_ms is the API server's own
//	                        work (frontend_ms): queueing on the server, not
//	                        the client's. vLLM reports no such key; there
//	                        that part stays in the client residual.
type engineMetrics schema.EngineMetrics

// decodeEngineMetrics reads a request's per-request metrics; absent keys
// stay nil.
func decodeEngineMetrics(raw json.RawMessage) engineMetrics {
	m, _ := schema.DecodeEngineMetrics(raw)
	return engineMetrics(m)
}

// frontend is the API server's work before the engine core took the
// request in (arrival → queued), when the engine reports it (hone's
// emulator: e2e_time_ms); 0 otherwise.
func (em engineMetrics) frontend() float64 {
	if !em.split() || em.E2ETimeMs == nil || em.GenerationTimeMs == nil {
		return 0
	}
	return max(*em.E2ETimeMs-*em.GenerationTimeMs-*em.QueueTimeMs-*em.TimeToFirstTokenMs, 0)
}

// split says the engine reported both halves of its receipt → first token.
func (em engineMetrics) split() bool { return em.QueueTimeMs != nil && em.TimeToFirstTokenMs != nil }

// Attribute splits every measured, successful request of rec (every one
// after the warm-ups, rec.Warmups(): all of a trace's).
func Attribute(rec *schema.Record, ev Evidence) ([]Attribution, error) {
	if rec == nil {
		return nil, fmt.Errorf("no record")
	}
	scale := rec.TimeScale
	if !(scale > 0) {
		scale = 1
	}
	tl := map[string]*proxy.Timeline{}
	for i := range ev.Timelines {
		tl[ev.Timelines[i].RequestID] = &ev.Timelines[i]
	}
	var out []Attribution
	windows := map[string][2]int64{} // disaggregated request → decode leg sent .. first token
	// request → the answering engine's leg sent .. first token at the
	// client (the decode leg when disaggregated, else the request itself)
	// Every completed request, the warm-ups too (their steps share the
	// engine with the measured ones), for the kernel's exchange join.
	var joins []exchangeJoin
	for _, run := range rec.Runs {
		for _, lvl := range run.Levels {
			for _, rq := range lvl.Requests {
				if rq.Outcome != "ok" || rq.FirstMs == nil || rq.FinishMs == nil {
					continue
				}
				a, window, ok := attributeRequest(rq, tl[rq.RequestID], scale)
				if !ok {
					continue // no decode leg: the request failed in the proxy
				}
				j := exchangeJoin{att: -1, uncached: uncachedTokens(rq), output: rq.OutputTokens}
				if window[1] != 0 {
					j.window = window
					if l := answeredPrefill(tl[rq.RequestID]); l != nil {
						j.prefill, j.disagg = [2]int64{l.Sent.MonoNs, l.Answered.MonoNs}, true
					}
				} else if rq.Sent.MonoNs != 0 {
					j.window = [2]int64{rq.Sent.MonoNs, rq.Sent.MonoNs + int64((*rq.FirstMs-rq.SentMs)*scale*1e6)}
				}
				if rq.ID >= rec.Warmups() {
					a.Run, a.OfferedQPS, a.Invalid = run.Run, lvl.OfferedQPS, invalidCodes(lvl.Verdict)
					if window[1] != 0 {
						windows[a.RequestID] = window
					}
					j.att = len(out)
					out = append(out, a)
				}
				if j.window[0] != 0 {
					joins = append(joins, j)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no measured request completed: nothing to attribute")
	}
	if len(ev.KV) > 0 {
		joinKernel(out, windows, ev.KV, scale)
	}
	if len(ev.Exchanges) > 0 {
		if err := joinExchanges(out, joins, ev, scale); err != nil {
			return nil, err
		}
	} else if ev.Daemon {
		for i := range out {
			out[i].KernelUnjoined = UnjoinedNoExchange
		}
	}
	for i := range out {
		chooseSplit(&out[i], ev.Source)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Run != out[j].Run {
			return out[i].Run < out[j].Run
		}
		if out[i].OfferedQPS != out[j].OfferedQPS {
			return out[i].OfferedQPS < out[j].OfferedQPS
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// chooseSplit sets a's SplitBy and, where source says the kernel split
// decides, puts it in Parts (the engine's split kept in EngineParts when
// there was one). Auto takes the kernel split where the engines reported
// no metrics for the span it splits (disaggregated: either worker); a
// request with neither, whose kernel evidence did not join, is
// SplitUnjoined: its engine span is not split (Joined leaves it out).
func chooseSplit(a *Attribution, source string) {
	_, disagg := a.Parts[Transfer] // a prefill worker's KV was used
	engine := a.EngineMetrics && (!disagg || a.PrefillEngineMetrics)
	a.SplitBy = "client"
	if engine {
		a.SplitBy = "engine"
	}
	if a.Kernel == nil && !engine && a.KernelUnjoined != "" && source != EvidenceEngine {
		a.SplitBy = SplitUnjoined
		for _, k := range []string{Queueing, Prefill} {
			a.Sources[k] = "not split: no engine metrics, and its kernel evidence did not join (" + a.KernelUnjoined + ")"
		}
		return
	}
	if a.Kernel == nil || source == EvidenceEngine || source != EvidenceKernel && engine {
		return
	}
	if engine {
		a.EngineParts = map[string]float64{}
		for _, k := range append(TTFTComponents, Decode) {
			a.EngineParts[k] = a.Parts[k]
		}
	}
	attributed := 0.0
	for k, v := range a.Kernel.parts() {
		a.Parts[k] = v
		a.Sources[k] = "kernel split: " + kernelSources[k]
		if k != Decode {
			attributed += v
		}
	}
	a.Parts[Client] = a.TTFTMs - attributed
	a.SplitBy = "kernel"
}

// kernelSources says where each part of a kernel split comes from.
var kernelSources = map[string]string{
	Queueing: "the engine's API socket receiving the request (the prefill worker's when disaggregated) → the start of its first scheduled CUDA step",
	Prefill:  "first scheduled step → the end of the step whose result the first-token send carried",
	Transfer: "the decode worker's API socket receiving the request → the last operation on its KV connection (the pull acknowledged)",
	DecodeQ:  "the KV pull's end → the decode worker's first-token send",
	Decode:   "the first-token send → the response's last send",
}

// answeredPrefill is the prefill leg whose answer the decode leg used
// (the last that succeeded), nil when none did.
func answeredPrefill(p *proxy.Timeline) *proxy.Leg {
	if p == nil {
		return nil
	}
	var ok *proxy.Leg
	for i := range p.Prefill {
		if p.Prefill[i].Answered != nil && p.Prefill[i].Error == "" && p.Prefill[i].Status/100 == 2 {
			ok = &p.Prefill[i]
		}
	}
	return ok
}

// engineSpan is what the engine that streamed the answer says about its
// receipt → first token. With per-request metrics: queue is vLLM's
// queue_time_ms (receipt → first scheduled) and run its
// time_to_first_token_ms (first scheduled → first token); the two follow
// each other, so neither is subtracted from the other. Without: run is the
// whole span from when the engine was sent the request, as the client or
// proxy saw it, and queue is 0.
type engineSpan struct {
	queue, run float64
	metrics    bool
}

// spanOf reads the streaming engine's span: from its metrics when it
// reports queue_time_ms and time_to_first_token_ms, else the client's view
// from sentMono to the first token.
func spanOf(em engineMetrics, sentMono, firstMono int64, toMs func(int64) float64) engineSpan {
	if em.split() {
		return engineSpan{queue: *em.QueueTimeMs + em.frontend(), run: *em.TimeToFirstTokenMs, metrics: true}
	}
	return engineSpan{run: toMs(firstMono - sentMono)}
}

// attributeRequest splits one completed request's TTFT with its proxy
// timeline p (nil: no proxy). It returns the decode leg's window (sent ..
// first token, CLOCK_MONOTONIC) of a disaggregated request, for the
// kernel's KV join, and false when the request has no decode leg.
func attributeRequest(rq schema.RequestRecord, p *proxy.Timeline, scale float64) (Attribution, [2]int64, bool) {
	toMs := func(ns int64) float64 { return float64(ns) / 1e6 / scale }
	a := Attribution{ID: rq.ID, RequestID: rq.RequestID, TTFTMs: ttft(rq), E2EMs: *rq.FinishMs - rq.ScheduledMs,
		Parts: map[string]float64{}, Sources: map[string]string{}}
	firstMono := rq.Sent.MonoNs + int64((*rq.FirstMs-rq.SentMs)*scale*1e6)
	if rq.TPOTMs != nil {
		a.tpot = *rq.TPOTMs
	}
	a.life = [2]float64{rq.SentMs, *rq.FinishMs}
	a.seat = [2]float64{*rq.FirstMs, *rq.FinishMs}
	if rq.Sent.MonoNs != 0 {
		for _, c := range rq.Chunks.Columns().MonoNs { // packed as replay.ReadRecord returns them
			a.chunks = append(a.chunks, rq.SentMs+toMs(c-rq.Sent.MonoNs))
		}
	}
	em := decodeEngineMetrics(rq.EngineMetrics)
	a.Parts[Decode], a.Sources[Decode] = decodeMs(rq, em)
	a.Timeline = p != nil
	var window [2]int64
	switch {
	case p == nil:
		// No proxy: the engine's own metrics, the rest is client.
		attributeColocated(&a, spanOf(em, rq.Sent.MonoNs, firstMono, toMs))
	case len(p.Prefill) == 0 && p.Decode != nil:
		attributeColocated(&a, spanOf(em, p.Decode.Sent.MonoNs, firstMono, toMs))
	case p.Decode != nil:
		if attributeDisaggregated(&a, p, spanOf(em, p.Decode.Sent.MonoNs, firstMono, toMs), em, toMs) {
			window = [2]int64{p.Decode.Sent.MonoNs, firstMono}
		}
	default:
		return a, window, false
	}
	a.EngineMetrics = em.split()
	attributed := 0.0
	for _, k := range []string{Queueing, Prefill, Transfer, DecodeQ} {
		attributed += a.Parts[k]
	}
	a.Parts[Client] = a.TTFTMs - attributed
	a.Sources[Client] = "residual: TTFT − the other parts (dispatch lag, hops, proxy hand-off, delivery)"
	return a, window, true
}

// attributeColocated attributes a request one engine served whole: its
// queue (receipt → first scheduled) and its prefill (first scheduled →
// first token, vLLM's time_to_first_token_ms as it is).
func attributeColocated(a *Attribution, sp engineSpan) {
	a.Parts[Queueing], a.Parts[Prefill] = sp.queue, sp.run
	if sp.metrics {
		a.Sources[Queueing] = "engine per-request metrics (queue_time_ms: receipt → first scheduled, with the API server's frontend work where the engine reports e2e_time_ms)"
		a.Sources[Prefill] = "engine per-request metrics (time_to_first_token_ms: first scheduled → first token)"
		return
	}
	a.Sources[Queueing] = noMetrics
	a.Sources[Prefill] = noMetrics
}

// attributeDisaggregated attributes a request through the P/D proxy: the prefill
// leg(s), the hand-off (the proxy's own time: it stays in the client
// residual), then the decode worker. It reports whether the KV came from a
// prefill worker (false: a fallback, the decode engine prefilled).
func attributeDisaggregated(a *Attribution, p *proxy.Timeline, sp engineSpan, em engineMetrics, toMs func(int64) float64) bool {
	a.Retries = p.Retries
	a.Fallback = p.Outcome == proxy.OutcomeFallback
	ok := answeredPrefill(p)
	if ok == nil || a.Fallback {
		// Decode-side prefill: the time before the decode leg was spent
		// waiting for a prefill; then the decode engine did the prefill.
		a.Parts[Queueing] = toMs(p.Decode.Sent.MonoNs-p.Received.MonoNs) + sp.queue
		a.Parts[Prefill] = sp.run
		a.Sources[Prefill] = "decode engine (fallback: decode-side prefill)"
		return false
	}
	// Failed legs and retries before the good one are time spent waiting
	// for a prefill; without them the gap is the proxy's own (client
	// residual).
	if ok != &p.Prefill[0] {
		a.Parts[Queueing] += toMs(ok.Sent.MonoNs - p.Prefill[0].Sent.MonoNs)
	}
	pm := decodeEngineMetrics(ok.EngineMetrics)
	if pm.split() {
		// vLLM's TTFT runs from the first scheduling: it is the prefill.
		a.Parts[Queueing] += *pm.QueueTimeMs + pm.frontend()
		a.Parts[Prefill] = *pm.TimeToFirstTokenMs
		a.Sources[Prefill] = "prefill engine's per-request metrics via the proxy (time_to_first_token_ms: first scheduled → first token)"
		a.PrefillEngineMetrics = true
	} else {
		a.Parts[Prefill] = toMs(ok.Answered.MonoNs - ok.Sent.MonoNs)
		a.Sources[Prefill] = "proxy prefill leg (engine queue + prefill + hops; no engine metrics)"
	}
	if sp.metrics {
		// vLLM's decode worker schedules a remote-prefill request only
		// once its pulled KV is usable (the request waits in
		// WAITING_FOR_REMOTE_KVS until then), so its queue_time_ms
		// (receipt → first scheduled) is the KV wait plus any queue after
		// the KV arrived, and its time_to_first_token_ms is its first
		// step. vLLM does not report the queue after the KV apart: it
		// stays in transfer.
		a.Parts[Transfer] = sp.queue
		a.Parts[DecodeQ] = sp.run
		a.Sources[Transfer] = "decode engine's queue_time_ms (receipt → first scheduled: vLLM schedules it once the KV is there; " +
			"with no timing of the KV pull, any queue after the KV stays inside)"
		a.Sources[DecodeQ] = "decode engine's time_to_first_token_ms (first scheduled → first token: its first step)"
		if em.KVTransferTimeMs != nil {
			splitKVWait(a, em.frontend()+*em.KVTransferTimeMs, "decode engine's kv_transfer_time_ms (hone's emulator: its KV pull)")
		}
		return true
	}
	// No engine metrics: the decode engine's sent → first token is KV
	// wait + its queue + one step; one mean inter-token time stands for
	// the step when known (never more than the span), the rest is
	// transfer.
	step := 0.0
	if em.MeanITLMs != nil {
		step = *em.MeanITLMs
	}
	step = math.Max(0, math.Min(step, sp.run))
	a.Parts[DecodeQ] = step
	a.Parts[Transfer] = sp.run - step
	a.Sources[Transfer] = "proxy decode leg (sent → first token, less one step; no engine metrics)"
	a.Sources[DecodeQ] = noMetrics
	return true
}

// splitKVWait splits the decode worker's wait (a's transfer part as
// attributeDisaggregated set it: the whole span that holds the KV wait)
// at the KV pull's end, waitMs after the wait began (clamped to the
// span): transfer up to there, the rest — the scheduler's queue after the
// KV, for a seat (max-num-seqs) or a step — goes to decode_queue.
// Transfer + decode_queue, and so the client residual, do not change.
func splitKVWait(a *Attribution, waitMs float64, from string) {
	total := a.Parts[Transfer]
	w := math.Min(math.Max(waitMs, 0), total)
	a.Parts[Transfer] = w
	a.Parts[DecodeQ] += total - w
	a.kvSplit = from
	a.Sources[Transfer] = "the decode worker's receipt → its KV pull's end, by " + from
	a.Sources[DecodeQ] = "the decode worker's queue after the KV pull's end (" + from + ") and its first step"
}

// decodeMs is the first → last token span: the engine that streamed the
// answer knows it (vLLM's generation_time_ms, first → last token; or
// mean_itl_ms × (output tokens − 1), the same figure, as vLLM divides
// generation_time_ms by the request's output tokens − 1) without the
// client's read lateness, which a busy host adds to every chunk; without
// engine metrics the client's span.
func decodeMs(rq schema.RequestRecord, em engineMetrics) (float64, string) {
	switch {
	case em.GenerationTimeMs != nil:
		return *em.GenerationTimeMs, "engine per-request metrics (generation_time_ms: first → last token)"
	case em.MeanITLMs != nil && rq.OutputTokens > 1:
		return *em.MeanITLMs * float64(rq.OutputTokens-1), "engine per-request metrics (mean_itl_ms × (output tokens − 1))"
	}
	return *rq.FinishMs - *rq.FirstMs, "client (first → last chunk)"
}

// RecordTokenBudget is the max_num_batched_tokens a record's config states
// (a deploy spec's knobs, as the optimizer records it), 0 when it states
// none.
func RecordTokenBudget(rec *schema.Record) int {
	if k, err := rec.Config.Knobs(); err == nil && k.MaxNumBatchedTokens >= 1 {
		return k.MaxNumBatchedTokens
	}
	return 0
}

// uncachedTokens is the prompt tokens the engine computed for rq: usage's
// prompt_tokens less its cached_tokens (the answering engine's; for a
// prefill worker an estimate), else the replay's whole input.
func uncachedTokens(rq schema.RequestRecord) int {
	n := rq.InputTokens
	if rq.PromptTokens != nil {
		n = *rq.PromptTokens
	}
	if rq.CachedTokens != nil {
		n -= *rq.CachedTokens
	}
	return n
}

// ttft is the record's TTFT: from the scheduled send (never from the
// actual send, TTFTFromSentMs), so attribution and the record's
// percentiles read one quantity and the dispatch lag is part of it.
func ttft(rq schema.RequestRecord) float64 {
	if rq.TTFTMs != nil {
		return *rq.TTFTMs
	}
	return *rq.FirstMs - rq.ScheduledMs
}

// invalidCodes lists an invalid verdict's reason codes (nil when valid). A
// verdict that is invalid without a reason was never judged.
func invalidCodes(v schema.Verdict) []string {
	if v.Valid {
		return nil
	}
	var c []string
	for _, r := range v.Reasons {
		c = append(c, string(r.Code))
	}
	if len(c) == 0 {
		c = []string{unjudged}
	}
	sort.Strings(c)
	return c
}

// unjudged marks a level whose record carries no verdict at all.
const unjudged = "unjudged"

// noMetrics is the source of a part the engine's metrics would have split.
const noMetrics = "client timing (no engine metrics: run vLLM with --enable-per-request-metrics; " +
	"a stream carries them on its usage chunk, so the request needs stream_options.include_usage)"
