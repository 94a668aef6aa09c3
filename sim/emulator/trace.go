package emulator

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// TraceHelp documents the --trace-file lines; hone sim serve --help prints it.
const TraceHelp = `One JSON object per line, written when a request ends ("event":"request") and,
on a prefill worker, when a decode worker's KV pull ends ("event":"kv_send").
Durations are model milliseconds (wall / --time-scale); *_mono_ns are
CLOCK_MONOTONIC nanoseconds of the same instants on this host (the clock of
bpf_ktime_get_ns), *_unix_ns wall time. Instants are the modelled ones: a
token is written to its socket within the step lateness
(hone_emulator_step_lateness_seconds) after its *_mono_ns.
  request: request_id engine_id role profile time_scale prompt_tokens
    cached_tokens (from this engine's prefix cache) kv_pulled_tokens
    kv_bytes_received output_tokens finish_reason error preemptions
    arrival_ms (since engine start) queue_ms (arrival, or KV ready on a decode
    worker, -> first scheduled) prefill_ms (first scheduled -> first token)
    transfer_ms (decode worker: from its receipt of the request until the
    pulled KV is usable, at least the modelled transfer) decode_ms (first ->
    last token)
    ttft_ms e2e_ms stall_ms; arrival_mono_ns scheduled_mono_ns
    first_token_mono_ns finish_mono_ns transfer_start_mono_ns
    transfer_end_mono_ns arrival_unix_ns
  kv_send: request_id engine_id kv_bytes_sent start_mono_ns end_mono_ns
    duration_ms error
With --cuda-lib, also one line per engine step ("event":"step"), written
when the step ends:
  step: engine_id step (1-based count of this engine's steps) call ("graph":
    cuGraphLaunch, a decode-only step with CUDA graphs; "launch":
    cuLaunchKernel, a step with prefill tokens or under --enforce-eager)
    start_mono_ns end_mono_ns (the step's modelled start and end)
    launch_mono_ns (read right before the launch call, at or after the
    start) sync_mono_ns (read right before cuStreamSynchronize, at or after
    the end; with --cuda-worker both are the worker process's readings) requests (request_id prefill_tokens decode, one per sequence in
    the step) stall_ms (injected stall inside the step)`

// TraceRecord is one "request" line of the trace file.
type TraceRecord struct {
	Event           string  `json:"event"`
	RequestID       string  `json:"request_id"`
	EngineID        string  `json:"engine_id"`
	Role            Role    `json:"role"`
	Profile         string  `json:"profile"`
	TimeScale       float64 `json:"time_scale"`
	PromptTokens    int     `json:"prompt_tokens"`
	CachedTokens    int     `json:"cached_tokens"`
	KVPulledTokens  int     `json:"kv_pulled_tokens"`
	KVBytesReceived int64   `json:"kv_bytes_received"`
	OutputTokens    int     `json:"output_tokens"`
	FinishReason    string  `json:"finish_reason"`
	Error           string  `json:"error,omitempty"`
	Preemptions     int     `json:"preemptions"`
	ArrivalMs       float64 `json:"arrival_ms"`
	QueueMs         float64 `json:"queue_ms"`
	PrefillMs       float64 `json:"prefill_ms"`
	TransferMs      float64 `json:"transfer_ms"`
	DecodeMs        float64 `json:"decode_ms"`
	TTFTMs          float64 `json:"ttft_ms"`
	E2EMs           float64 `json:"e2e_ms"`
	StallMs         float64 `json:"stall_ms"`
	ArrivalMono     int64   `json:"arrival_mono_ns"`
	ScheduledMono   int64   `json:"scheduled_mono_ns"`
	FirstTokenMono  int64   `json:"first_token_mono_ns"`
	FinishMono      int64   `json:"finish_mono_ns"`
	TransferFrom    int64   `json:"transfer_start_mono_ns"`
	TransferTo      int64   `json:"transfer_end_mono_ns"`
	ArrivalUnixNano int64   `json:"arrival_unix_ns"`
}

// KVSendRecord is one "kv_send" line of the trace file.
type KVSendRecord struct {
	Event      string  `json:"event"`
	RequestID  string  `json:"request_id"`
	EngineID   string  `json:"engine_id"`
	BytesSent  int64   `json:"kv_bytes_sent"`
	StartMono  int64   `json:"start_mono_ns"`
	EndMono    int64   `json:"end_mono_ns"`
	DurationMs float64 `json:"duration_ms"`
	Error      string  `json:"error,omitempty"`
}

// StepTraceRecord is one "step" line of the trace file (Config.CUDALib).
type StepTraceRecord struct {
	Event      string             `json:"event"`
	EngineID   string             `json:"engine_id"`
	Step       int64              `json:"step"`
	Call       string             `json:"call"` // "graph" or "launch"
	StartMono  int64              `json:"start_mono_ns"`
	EndMono    int64              `json:"end_mono_ns"`
	LaunchMono int64              `json:"launch_mono_ns"`
	SyncMono   int64              `json:"sync_mono_ns"`
	Requests   []StepTraceRequest `json:"requests"`
	StallMs    float64            `json:"stall_ms"`
}

// StepTraceRequest is one sequence of a step line: its prefill tokens in
// the step (prompt or recompute; 0 for a decode) and whether it decoded.
type StepTraceRequest struct {
	RequestID     string `json:"request_id"`
	PrefillTokens int    `json:"prefill_tokens"`
	Decode        bool   `json:"decode"`
}

// traceWriter serialises lines to the trace file; nil writes nothing.
type traceWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (t *traceWriter) write(v any) {
	if t == nil || t.w == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	b = append(b, '\n')
	t.mu.Lock()
	_, _ = t.w.Write(b)
	t.mu.Unlock()
}

func (t *traceWriter) request(e *engine, r *request, res *Result) {
	if t == nil {
		return
	}
	tm := res.Timing
	rec := TraceRecord{Event: "request", RequestID: r.id, EngineID: e.cfg.EngineID, Role: e.cfg.Role,
		Profile: e.prof.Name, TimeScale: e.scale, PromptTokens: res.PromptTokens, CachedTokens: res.CachedTokens,
		KVPulledTokens: tm.KVPulledTokens, KVBytesReceived: tm.KVBytesReceived, OutputTokens: res.OutputTokens,
		FinishReason: res.FinishReason, Preemptions: tm.Preemptions, ArrivalMs: tm.ArrivalMs, QueueMs: tm.QueueMs,
		PrefillMs: tm.PrefillMs, TransferMs: tm.TransferMs, DecodeMs: tm.DecodeMs, TTFTMs: tm.TTFTMs, E2EMs: tm.E2EMs,
		StallMs: tm.StallMs, ArrivalMono: tm.ArrivalMono, ScheduledMono: tm.ScheduledMono,
		FirstTokenMono: tm.FirstTokenMono, FinishMono: tm.FinishMono, TransferFrom: tm.TransferFromMono,
		TransferTo: tm.TransferToMono, ArrivalUnixNano: tm.ArrivalUnixNano}
	if res.Err != nil {
		rec.Error = res.Err.Error()
	}
	t.write(rec)
}

func (t *traceWriter) kvSend(e *engine, id string, sent int64, start time.Time, err error) {
	if t == nil {
		return
	}
	end := time.Now()
	c := e.clock
	rec := KVSendRecord{Event: "kv_send", RequestID: id, EngineID: e.cfg.EngineID, BytesSent: sent,
		StartMono: c.mono(c.modelMs(start)), EndMono: c.mono(c.modelMs(end)),
		DurationMs: float64(end.Sub(start)) / 1e6 / e.scale}
	if err != nil {
		rec.Error = err.Error()
	}
	t.write(rec)
}

// step writes the line of the live step that ran p from model time start
// to end with the probe calls pc; e.steps already counts it.
func (t *traceWriter) step(e *engine, p stepPlan, pc probeCall, start, end float64) {
	if t == nil {
		return
	}
	rec := StepTraceRecord{Event: "step", EngineID: e.cfg.EngineID, Step: e.steps.Load(), Call: "launch",
		StartMono: e.clock.mono(start), EndMono: e.clock.mono(end), LaunchMono: pc.launchMono, SyncMono: pc.syncMono,
		Requests: make([]StepTraceRequest, 0, len(p.plan)), StallMs: p.stallMs}
	if pc.graph {
		rec.Call = "graph"
	}
	for _, pe := range p.plan {
		sr := StepTraceRequest{RequestID: pe.r.id, Decode: pe.decode}
		if !pe.decode {
			sr.PrefillTokens = pe.n
		}
		rec.Requests = append(rec.Requests, sr)
	}
	t.write(rec)
}
