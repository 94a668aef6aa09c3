package main

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	var o emulator.ServeOptions
	c := withHelp(&cobra.Command{
		Use:   "serve",
		Short: "Run hone's vLLM-compatible engine emulator (kind: emulated)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Changed, o.Log = c.Flags().Changed, c.ErrOrStderr()
			o.Version, _ = buildVersion()
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return emulator.Serve(ctx, o)
		},
	}, "sim-serve", simServeHelp())
	bindSimServeFlags(c.Flags(), &o)
	return c
}

// bindSimServeFlags registers hone sim serve's flags into o.
func bindSimServeFlags(f *pflag.FlagSet, o *emulator.ServeOptions) {
	f.StringVar(&o.Role, "role", "colocated", "colocated | prefill | decode")
	f.StringVar(&o.Config.Profile, "profile", emulator.DefaultProfile, "cost-model profile: a built-in name ("+strings.Join(emulator.ProfileNames(), " | ")+") or a .yaml profile file")
	f.StringVar(&o.Config.KVCacheDType, "kv-cache-dtype", "auto", "KV cache element type, as vLLM's flag: auto (the model's), bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2; fp8 holds twice the tokens, moves half the bytes and halves the decode KV read")
	f.IntVar(&o.Config.TensorParallelSize, "tensor-parallel-size", 1, "GPUs per worker (1..64): the roofline splits each step across them, adds the all-reduces, and sizes the KV cache per GPU")
	f.StringVar(&o.Config.Host, "host", "127.0.0.1", "address to bind the HTTP API")
	f.IntVar(&o.Config.Port, "port", 8000, "HTTP port (0: any free port)")
	f.StringVar(&o.ModelID, "model", "", "model id, also the API's model name unless --served-model-name is given (default: the profile's model, Qwen/Qwen2.5-Coder-0.5B-Instruct)")
	f.StringVar(&o.Config.Model, "served-model-name", "", "model name in the API (default: --model)")
	f.StringVar(&o.Config.KVHost, "kv-host", "", "prefill role: side-channel bind address (default: $VLLM_NIXL_SIDE_CHANNEL_HOST, else --host)")
	f.IntVar(&o.Config.KVPort, "kv-port", 5600, "prefill role: side-channel port, 0 for any free one ($VLLM_NIXL_SIDE_CHANNEL_PORT when set)")
	f.StringVar(&o.Config.KVAdvertiseHost, "kv-advertise-host", "", "prefill role: remote_host put in kv_transfer_params (default --kv-host)")
	f.StringVar(&o.Config.EngineID, "engine-id", "", "engine id for remote_engine_id (default: random)")
	f.Float64Var(&o.Config.TimeScale, "time-scale", 1, "wall seconds per model second (0.1 runs 10x faster); reported figures stay in model time")
	f.IntVar(&o.Config.BlockSize, "block-size", 16, "KV block size in tokens")
	f.IntVar(&o.Config.MaxNumSeqs, "max-num-seqs", 0, "most sequences in a step (default: the profile's; exercise 1)")
	f.IntVar(&o.Config.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "token budget of a step (default: the profile's)")
	f.IntVar(&o.Config.MaxModelLen, "max-model-len", 0, "longest prompt+output (default: the model's, 32768)")
	f.Float64Var(&o.Config.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "fraction of GPU memory for weights, activations and KV cache")
	f.IntVar(&o.Config.NumGPUBlocksOverride, "num-gpu-blocks-override", 0, "KV cache capacity in blocks, replacing the profile's")
	f.BoolVar(&o.Prefix, "enable-prefix-caching", true, "reuse cached KV blocks across requests")
	f.BoolVar(&o.NoPrefix, "no-enable-prefix-caching", false, "turn prefix caching off (cached_tokens 0)")
	f.BoolVar(&o.Config.EnforceEager, "enforce-eager", false, "model eager execution (no CUDA graphs): per-kernel launch overhead every step")
	f.BoolVar(&o.Config.EnablePromptTokensDetails, "enable-prompt-tokens-details", false, "fill usage.prompt_tokens_details.cached_tokens")
	f.BoolVar(&o.Config.EnablePerRequestMetrics, "enable-per-request-metrics", false, "add the per-request \"metrics\" object")
	f.DurationVar(&o.Config.KVLease, "kv-lease", 480*time.Second, "prefill role: how long (wall) held KV blocks wait for a pull")
	f.StringVar(&o.Config.KVLoadFailurePolicy, "kv-load-failure-policy", "fail", "decode role, when a pull fails: fail (the request errors) | recompute (prefill locally)")
	f.StringArrayVar(&o.Faults, "fault", nil, "inject a fault (repeatable); see above")
	f.StringVar(&o.TraceFile, "trace-file", "", "append one JSON line per request (ground truth) to this file")
	f.BoolVar(&o.CUDAWorker, "cuda-worker", false, "make the --cuda-lib calls from a child process (hone sim cuda-worker) as vLLM's engine core or TP workers do apart from its API server: a daemon then sees the HTTP exchanges and the steps under different PIDs of one process tree; each step waits for the child's answer (tens of microseconds)")
	f.StringVar(&o.Config.CUDALib, "cuda-lib", "", "a libcuda-shaped shared library (cuLaunchKernel, cuGraphLaunch, cuStreamSynchronize) that each engine step calls: cuGraphLaunch (decode-only steps with CUDA graphs, i.e. not --enforce-eager) or cuLaunchKernel (any step with prefill tokens, or eager) at its start and cuStreamSynchronize at its modelled end, so uprobes on that library see step boundaries as on a GPU host; with --trace-file, one \"step\" line per step. For tests and demos, never a real driver (Linux and cgo only)")
	f.StringVar(&o.LogLevel, "log-level", "info", "debug | info | warn | error")
	o.Config.Guard.AddFlags(f)
}
