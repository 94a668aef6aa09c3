package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/sim/emulator"
)

func init() { simSubcommands = append(simSubcommands, newSimServeCmd, newSimCUDAWorkerCmd) }

// newSimCUDAWorkerCmd is the child process hone sim serve --cuda-worker
// starts to make its steps' CUDA calls (emulator.ServeCUDAWorker).
func newSimCUDAWorkerCmd() *cobra.Command {
	var lib string
	c := &cobra.Command{
		Use:    "cuda-worker --cuda-lib PATH",
		Short:  "Make an emulated engine's CUDA calls in a child process (started by hone sim serve --cuda-worker)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if lib == "" {
				return badInput("--cuda-lib: required (the libcuda-shaped library to call)")
			}
			if err := emulator.ServeCUDAWorker(lib, c.InOrStdin(), c.OutOrStdout()); err != nil {
				return badInput("%v", err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&lib, "cuda-lib", "", "the libcuda-shaped library to call")
	return c
}

func newSimServeCmd() *cobra.Command {
	var (
		cfg       emulator.Config
		role      string
		noPrefix  bool
		prefix    bool
		faults    []string
		traceFile string
		logLevel  string
		modelID   string
		worker    bool
	)
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run hone's vLLM-compatible engine emulator (kind: emulated)",
		Long: `hone sim serve runs an engine that speaks vLLM's HTTP API on real sockets and
schedules like vLLM's V1 engine (continuous batching under a token budget,
chunked prefill, FCFS, preemption by recompute, a block-hashed prefix cache
with LRU eviction), with GPU time taken from a cost model. Every duration it
reports (metrics object, /metrics histograms, trace file) is model time:
wall time / --time-scale.

API: POST /v1/completions (prompt as text or token ids; stream, max_tokens,
min_tokens, ignore_eos, temperature, seed, return_token_ids,
stream_options.include_usage, kv_transfer_params), POST /v1/chat/completions
(messages of {role, content}, content a string or text parts joined by "\n";
the same fields, max_completion_tokens over max_tokens, by default the rest
of the context; add_generation_prompt, continue_final_message; the prompt is
Qwen2.5's ChatML, "<|im_start|>{role}\n{content}<|im_end|>\n" per message
then "<|im_start|>assistant\n", special tokens one id each, no default system
message), POST /tokenize, POST /detokenize, POST /reset_prefix_cache,
GET /health, /version, /v1/models, /metrics (vllm:* names). Errors are vLLM's
{"object":"error","message",...,"type":"BadRequestError","code":400}
(an unknown model is vLLM's 404 NotFoundError).

Tokens: the tokenizer splits text into words (with one leading space),
whitespace runs and single other characters, and hashes each piece with
FNV-1a-64 mod 151643. Output token k is a fixed function of the prompt's ids
and k, so temperature-0 outputs agree across configs. Without ignore_eos the
model emits EOS (<|im_end|>) after 256 + (prompt hash mod 1024) tokens.
usage.prompt_tokens_details.cached_tokens (with
--enable-prompt-tokens-details) is exactly the prompt tokens this engine
took from its own prefix cache (on a decode worker: not counting the pulled
ones).

Roles:
  colocated  prefills and decodes; ignores kv_transfer_params
  prefill    a request with kv_transfer_params.do_remote_decode (send it with
             max_tokens 1, stream false) is prefilled, its KV blocks are held,
             and the reply's kv_transfer_params name them (remote_engine_id,
             remote_block_ids, remote_host, remote_port, remote_request_id).
             Blocks are freed after the pull or when --kv-lease expires.
  decode     a request with those params (do_remote_prefill) pulls the prompt
             tokens beyond its own prefix-cache hit over TCP from the prefill
             worker's side channel: (prompt - local hit) tokens x the model's KV
             size (12,288 B/token for Qwen2.5-0.5B), paced to the profile's link,
             then decodes.

Profiles (` + strings.Join(emulator.ProfileNames(), ", ") + `):
  exercise                   the brief's simulator: prefill 4096 tok/s, 1000/2048 ms
                             per sampled token, a batch of one (max-num-seqs 1),
                             8 ms per KV transfer; with it, a batch of one reproduces
                             hone sim's timings
  qwen2.5-coder-0.5b-a10     Qwen2.5-Coder-0.5B-Instruct bf16 on an NVIDIA A10 (24 GB)
  qwen2.5-coder-0.5b-l4      the same on an NVIDIA L4 (24 GB)
  qwen2.5-coder-0.5b-h200    the same on an NVIDIA H200 (141 GB)
  FILE.yaml                  a profile file: a roofline, a linear cost model (as
                             hone calibrate fits it) or exercise rates; "base: NAME"
                             takes every key the file omits from a built-in
  Derivations and the file format: sim/emulator/PROFILES.md.

Tensor parallelism: --tensor-parallel-size N models one worker on N GPUs, as
vLLM's flag does: a roofline profile splits each step's compute and memory
traffic over the N ranks and adds two ring all-reduces per layer over the
GPU's interconnect; the KV cache holds what one rank's memory holds (weights
and KV heads are sharded). Linear and exercise profiles ignore N for step
time.

Time scale: --time-scale 0.1 runs every modelled duration 10x faster in wall
time; figures stay in model time. Replay records store the scale.

Faults (--fault, repeatable):
` + emulator.FaultHelp + `

Per-request metrics (--enable-per-request-metrics), as vLLM defines them: a
top-level "metrics" object on a non-streaming reply; when streaming, only on
the usage chunk (stream_options.include_usage). Model ms:
  time_to_first_token_ms  first scheduled -> first token
  generation_time_ms      first -> last token
  queue_time_ms           arrival -> first scheduled (a decode worker: its
                          wait for the KV included)
  mean_itl_ms             (last - first token) / (tokens - 1)
  tokens_per_second       output tokens / (first scheduled -> last token)
hone's own additions: prefill_time_ms, kv_transfer_time_ms, decode_time_ms,
e2e_time_ms, time_scale.

Trace file (--trace-file):
` + emulator.TraceHelp + `

Limits on clients: a request body over --max-body-bytes gets 413, one not
received within --body-timeout of its headers 408 with the connection
closed; bodies being read and parsed total at most --max-body-memory, further
requests wait for room until their --body-timeout, then get 503; keep-alive
connections idle for --idle-timeout are closed; at most --max-connections
clients are served at once (and as many KV side-channel peers), the rest
wait to be accepted. A side-channel pull request line is at most 1 MiB (more
only if a max-model-len sequence's block ids need it) and must arrive within
10 s; a longer one is answered with an error line and the connection closed.

Exit codes: 0 stopped by SIGINT/SIGTERM; 1 crashed (crash-after fault) or
failed; 2 bad flags.`,
		Example: `  # colocated, the brief's exercise model, 10x faster than model time
  hone sim serve --profile exercise --time-scale 0.1 --port 8000 \
    --enable-prompt-tokens-details --enable-per-request-metrics --trace-file emu.jsonl

  # disaggregated: one prefill and one decode worker
  hone sim serve --role prefill --profile qwen2.5-coder-0.5b-h200 --port 8100 --kv-port 5600
  hone sim serve --role decode  --profile qwen2.5-coder-0.5b-h200 --port 8200

  # two GPUs per worker; a profile from a file
  hone sim serve --profile qwen2.5-coder-0.5b-h200 --tensor-parallel-size 2
  hone sim serve --profile ./h200-measured.yaml

  # faults
  hone sim serve --fault stall=500ms@10 --fault cut-stream-after-tokens=32

  # steps call a fake libcuda's cuGraphLaunch/cuLaunchKernel and
  # cuStreamSynchronize, for the daemon's uprobes (never a real driver)
  hone sim serve --profile exercise --cuda-lib ./fake/libcuda.so.1 --trace-file emu.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r, err := emulator.ParseRole(role)
			if err != nil {
				return badInput("--role: %q is invalid: want colocated, prefill or decode", role)
			}
			cfg.Role = r
			if cfg.Model == "" {
				cfg.Model = modelID
			}
			// Like vLLM's NIXL connector, the side channel's place comes from
			// the environment unless the flags say otherwise.
			if h := os.Getenv("VLLM_NIXL_SIDE_CHANNEL_HOST"); h != "" && !c.Flags().Changed("kv-host") {
				cfg.KVHost = h
			}
			if p := os.Getenv("VLLM_NIXL_SIDE_CHANNEL_PORT"); p != "" && !c.Flags().Changed("kv-port") {
				n, err := strconv.Atoi(p)
				if err != nil || n < 0 || n > 65535 {
					return badInput("VLLM_NIXL_SIDE_CHANNEL_PORT: %q is not a port", p)
				}
				cfg.KVPort = n
			}
			if err := cfg.Guard.Fill(); err != nil {
				return badInput("%v", err)
			}
			if _, err := emulator.LookupProfile(cfg.Profile); err != nil {
				return badInput("--profile: %v", err)
			}
			if cfg.TensorParallelSize < 1 || cfg.TensorParallelSize > 64 {
				return badInput("--tensor-parallel-size: want 1..64, got %d", cfg.TensorParallelSize)
			}
			if !(cfg.TimeScale > 0) || cfg.TimeScale > 1e6 {
				return badInput("--time-scale: want a positive number, got %v", cfg.TimeScale)
			}
			if c.Flags().Changed("enable-prefix-caching") && c.Flags().Changed("no-enable-prefix-caching") && prefix == noPrefix {
				return badInput("--enable-prefix-caching and --no-enable-prefix-caching disagree")
			}
			cfg.DisablePrefixCaching = noPrefix || (c.Flags().Changed("enable-prefix-caching") && !prefix)
			for _, f := range faults {
				if err := cfg.Faults.ParseFault(f); err != nil {
					return badInput("%v", err)
				}
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return badInput("--log-level: %q is invalid: want debug, info, warn or error", logLevel)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			if traceFile != "" {
				f, err := os.OpenFile(traceFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					return badInput("--trace-file: %v", err)
				}
				defer f.Close()
				cfg.Trace = f
			}
			if worker {
				if cfg.CUDALib == "" {
					return badInput("--cuda-worker: needs --cuda-lib (the library the worker calls)")
				}
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--cuda-worker: cannot find this hone binary: %w", err)
				}
				cfg.CUDAWorker = []string{exe, "sim", "cuda-worker", "--cuda-lib", cfg.CUDALib}
			}
			ver, _ := buildVersion()
			cfg.Version = "hone-emulator/" + ver
			cfg.OnCrash = func() {
				cfg.Logger.Error("crash-after fault: exiting with status 1")
				os.Exit(1)
			}
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv, err := emulator.Start(ctx, cfg)
			if err != nil {
				return badInput("%v", err)
			}
			fmt.Fprintf(c.ErrOrStderr(), "hone sim serve: %s role=%s profile=%s engine_id=%s", srv.URL(), cfg.Role, cfg.Profile, srv.EngineID())
			if kv := srv.KVAddr(); kv != "" {
				fmt.Fprintf(c.ErrOrStderr(), " kv_side_channel=%s", kv)
			}
			fmt.Fprintln(c.ErrOrStderr())
			<-srv.Done()
			if traceFile != "" {
				fmt.Fprintf(c.ErrOrStderr(), "hone sim serve: stopped; trace in %s\n", traceFile)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&role, "role", "colocated", "colocated | prefill | decode")
	f.StringVar(&cfg.Profile, "profile", emulator.DefaultProfile, "cost-model profile: a built-in name ("+strings.Join(emulator.ProfileNames(), " | ")+") or a .yaml profile file")
	f.StringVar(&cfg.KVCacheDType, "kv-cache-dtype", "auto", "KV cache element type, as vLLM's flag: auto (the model's), bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2; fp8 holds twice the tokens, moves half the bytes and halves the decode KV read")
	f.IntVar(&cfg.TensorParallelSize, "tensor-parallel-size", 1, "GPUs per worker (1..64): the roofline splits each step across them, adds the all-reduces, and sizes the KV cache per GPU")
	f.StringVar(&cfg.Host, "host", "127.0.0.1", "address to bind the HTTP API")
	f.IntVar(&cfg.Port, "port", 8000, "HTTP port (0: any free port)")
	f.StringVar(&modelID, "model", "", "model id, also the API's model name unless --served-model-name is given (default: the profile's model, Qwen/Qwen2.5-Coder-0.5B-Instruct)")
	f.StringVar(&cfg.Model, "served-model-name", "", "model name in the API (default: --model)")
	f.StringVar(&cfg.KVHost, "kv-host", "", "prefill role: side-channel bind address (default: $VLLM_NIXL_SIDE_CHANNEL_HOST, else --host)")
	f.IntVar(&cfg.KVPort, "kv-port", 5600, "prefill role: side-channel port, 0 for any free one ($VLLM_NIXL_SIDE_CHANNEL_PORT when set)")
	f.StringVar(&cfg.KVAdvertiseHost, "kv-advertise-host", "", "prefill role: remote_host put in kv_transfer_params (default --kv-host)")
	f.StringVar(&cfg.EngineID, "engine-id", "", "engine id for remote_engine_id (default: random)")
	f.Float64Var(&cfg.TimeScale, "time-scale", 1, "wall seconds per model second (0.1 runs 10x faster); reported figures stay in model time")
	f.IntVar(&cfg.BlockSize, "block-size", 16, "KV block size in tokens")
	f.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", 0, "most sequences in a step (default: the profile's; exercise 1)")
	f.IntVar(&cfg.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "token budget of a step (default: the profile's)")
	f.IntVar(&cfg.MaxModelLen, "max-model-len", 0, "longest prompt+output (default: the model's, 32768)")
	f.Float64Var(&cfg.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "fraction of GPU memory for weights, activations and KV cache")
	f.IntVar(&cfg.NumGPUBlocksOverride, "num-gpu-blocks-override", 0, "KV cache capacity in blocks, replacing the profile's")
	f.BoolVar(&prefix, "enable-prefix-caching", true, "reuse cached KV blocks across requests")
	f.BoolVar(&noPrefix, "no-enable-prefix-caching", false, "turn prefix caching off (cached_tokens 0)")
	f.BoolVar(&cfg.EnforceEager, "enforce-eager", false, "model eager execution (no CUDA graphs): per-kernel launch overhead every step")
	f.BoolVar(&cfg.EnablePromptTokensDetails, "enable-prompt-tokens-details", false, "fill usage.prompt_tokens_details.cached_tokens")
	f.BoolVar(&cfg.EnablePerRequestMetrics, "enable-per-request-metrics", false, "add the per-request \"metrics\" object")
	f.DurationVar(&cfg.KVLease, "kv-lease", 480*time.Second, "prefill role: how long (wall) held KV blocks wait for a pull")
	f.StringVar(&cfg.KVLoadFailurePolicy, "kv-load-failure-policy", "fail", "decode role, when a pull fails: fail (the request errors) | recompute (prefill locally)")
	f.StringArrayVar(&faults, "fault", nil, "inject a fault (repeatable); see above")
	f.StringVar(&traceFile, "trace-file", "", "append one JSON line per request (ground truth) to this file")
	f.BoolVar(&worker, "cuda-worker", false, "make the --cuda-lib calls from a child process (hone sim cuda-worker) as vLLM's engine core or TP workers do apart from its API server: a daemon then sees the HTTP exchanges and the steps under different PIDs of one process tree; each step waits for the child's answer (tens of microseconds)")
	f.StringVar(&cfg.CUDALib, "cuda-lib", "", "a libcuda-shaped shared library (cuLaunchKernel, cuGraphLaunch, cuStreamSynchronize) that each engine step calls: cuGraphLaunch (decode-only steps with CUDA graphs, i.e. not --enforce-eager) or cuLaunchKernel (any step with prefill tokens, or eager) at its start and cuStreamSynchronize at its modelled end, so uprobes on that library see step boundaries as on a GPU host; with --trace-file, one \"step\" line per step. For tests and demos, never a real driver (Linux and cgo only)")
	f.StringVar(&logLevel, "log-level", "info", "debug | info | warn | error")
	cfg.Guard.AddFlags(f)
	return c
}
