// Package emulator is hone's vLLM-compatible engine emulator, the backend
// of kind "emulated" (hone sim serve). It serves the part of vLLM's HTTP API
// hone uses on real sockets and behaves like vLLM's V1 scheduler and KV
// cache; only GPU time is modelled, by a named cost Profile.
//
//   - Scheduler (engine.go): one goroutine runs engine steps. Each step
//     takes running sequences first (one decode token each, or the next
//     chunk of an unfinished prefill) and then waiting requests in FCFS
//     order, under --max-num-seqs and the --max-num-batched-tokens budget;
//     a long prompt is chunked across steps and shares them with decodes.
//     When blocks run out, the newest running sequence is preempted by
//     recompute. A step's duration is Profile.StepMs of its entries; the
//     step's tokens are released at its modelled end. The model clock
//     advances by modelled durations while the engine is busy and jumps to
//     the next arrival when idle, so wall-clock jitter in one step never
//     accumulates into the next (hone_emulator_step_lateness_seconds shows
//     the jitter). The last 1.2 ms of each wait is on a timerfd served by
//     Go's network poller (internal/finesleep): Go's own timers wake up to
//     a millisecond late on an idle runtime, two exercise decode steps.
//   - KV cache (kvcache.go): blocks of --block-size tokens, reference
//     counts, chained block hashes for prefix caching, LRU eviction of
//     unreferenced blocks, capacity from the profile's memory.
//   - Tokenizer (tokenizer.go): deterministic and byte-pair-free; outputs
//     are a function of the prompt and the position only.
//   - Routes (server.go, api.go, chat.go): POST /v1/completions and
//     POST /v1/chat/completions (one shared path: a chat request is the
//     completion of its messages rendered as Qwen2.5's ChatML, see
//     ChatTemplate), POST /tokenize, /detokenize, /reset_prefix_cache,
//     GET /health, /version, /v1/models, /metrics.
//   - P/D (transfer.go): vLLM's NIXL proxy protocol with a real TCP side
//     channel carrying the model's KV bytes, paced to the profile's link.
//   - Ground truth (trace.go), Prometheus metrics under vLLM's names
//     (metrics.go), faults (fault.go).
//   - CUDA probe points (cudaprobe*.go, --cuda-lib): each live step calls
//     a libcuda-shaped library loaded with dlopen, cuGraphLaunch (a
//     decode-only step with CUDA graphs) or cuLaunchKernel at its start
//     and cuStreamSynchronize at its modelled end, so the daemon's uprobes
//     see step boundaries as on a GPU host; the trace's "step" lines are
//     their ground truth. With --cuda-worker (cudaworker.go) a child
//     process makes the calls, as vLLM's engine core or TP workers do
//     apart from its API server.
//
// All reported durations are model time: wall time / --time-scale.
//
// The emulator is not a model: its text is meaningless, and it does not
// emulate speculative decoding, LoRA, multimodal inputs, logprobs or
// tensor parallelism.
package emulator
