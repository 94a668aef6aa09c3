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
	var o simServeFlags
	c := withHelp(&cobra.Command{
		Use:   "serve",
		Short: "Run hone's vLLM-compatible engine emulator (kind: emulated)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}, "sim-serve", simServeHelp())
	o.bind(c)
	return c
}

// simServeFlags are hone sim serve's flags; run carries the command out.
type simServeFlags struct {
	cfg       emulator.Config
	role      string
	noPrefix  bool
	prefix    bool
	faults    []string
	traceFile string
	logLevel  string
	modelID   string
	worker    bool
}

// bind registers the flags on c.
func (o *simServeFlags) bind(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&o.role, "role", "colocated", "colocated | prefill | decode")
	f.StringVar(&o.cfg.Profile, "profile", emulator.DefaultProfile, "cost-model profile: a built-in name ("+strings.Join(emulator.ProfileNames(), " | ")+") or a .yaml profile file")
	f.StringVar(&o.cfg.KVCacheDType, "kv-cache-dtype", "auto", "KV cache element type, as vLLM's flag: auto (the model's), bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2; fp8 holds twice the tokens, moves half the bytes and halves the decode KV read")
	f.IntVar(&o.cfg.TensorParallelSize, "tensor-parallel-size", 1, "GPUs per worker (1..64): the roofline splits each step across them, adds the all-reduces, and sizes the KV cache per GPU")
	f.StringVar(&o.cfg.Host, "host", "127.0.0.1", "address to bind the HTTP API")
	f.IntVar(&o.cfg.Port, "port", 8000, "HTTP port (0: any free port)")
	f.StringVar(&o.modelID, "model", "", "model id, also the API's model name unless --served-model-name is given (default: the profile's model, Qwen/Qwen2.5-Coder-0.5B-Instruct)")
	f.StringVar(&o.cfg.Model, "served-model-name", "", "model name in the API (default: --model)")
	f.StringVar(&o.cfg.KVHost, "kv-host", "", "prefill role: side-channel bind address (default: $VLLM_NIXL_SIDE_CHANNEL_HOST, else --host)")
	f.IntVar(&o.cfg.KVPort, "kv-port", 5600, "prefill role: side-channel port, 0 for any free one ($VLLM_NIXL_SIDE_CHANNEL_PORT when set)")
	f.StringVar(&o.cfg.KVAdvertiseHost, "kv-advertise-host", "", "prefill role: remote_host put in kv_transfer_params (default --kv-host)")
	f.StringVar(&o.cfg.EngineID, "engine-id", "", "engine id for remote_engine_id (default: random)")
	f.Float64Var(&o.cfg.TimeScale, "time-scale", 1, "wall seconds per model second (0.1 runs 10x faster); reported figures stay in model time")
	f.IntVar(&o.cfg.BlockSize, "block-size", 16, "KV block size in tokens")
	f.IntVar(&o.cfg.MaxNumSeqs, "max-num-seqs", 0, "most sequences in a step (default: the profile's; exercise 1)")
	f.IntVar(&o.cfg.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "token budget of a step (default: the profile's)")
	f.IntVar(&o.cfg.MaxModelLen, "max-model-len", 0, "longest prompt+output (default: the model's, 32768)")
	f.Float64Var(&o.cfg.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "fraction of GPU memory for weights, activations and KV cache")
	f.IntVar(&o.cfg.NumGPUBlocksOverride, "num-gpu-blocks-override", 0, "KV cache capacity in blocks, replacing the profile's")
	f.BoolVar(&o.prefix, "enable-prefix-caching", true, "reuse cached KV blocks across requests")
	f.BoolVar(&o.noPrefix, "no-enable-prefix-caching", false, "turn prefix caching off (cached_tokens 0)")
	f.BoolVar(&o.cfg.EnforceEager, "enforce-eager", false, "model eager execution (no CUDA graphs): per-kernel launch overhead every step")
	f.BoolVar(&o.cfg.EnablePromptTokensDetails, "enable-prompt-tokens-details", false, "fill usage.prompt_tokens_details.cached_tokens")
	f.BoolVar(&o.cfg.EnablePerRequestMetrics, "enable-per-request-metrics", false, "add the per-request \"metrics\" object")
	f.DurationVar(&o.cfg.KVLease, "kv-lease", 480*time.Second, "prefill role: how long (wall) held KV blocks wait for a pull")
	f.StringVar(&o.cfg.KVLoadFailurePolicy, "kv-load-failure-policy", "fail", "decode role, when a pull fails: fail (the request errors) | recompute (prefill locally)")
	f.StringArrayVar(&o.faults, "fault", nil, "inject a fault (repeatable); see above")
	f.StringVar(&o.traceFile, "trace-file", "", "append one JSON line per request (ground truth) to this file")
	f.BoolVar(&o.worker, "cuda-worker", false, "make the --cuda-lib calls from a child process (hone sim cuda-worker) as vLLM's engine core or TP workers do apart from its API server: a daemon then sees the HTTP exchanges and the steps under different PIDs of one process tree; each step waits for the child's answer (tens of microseconds)")
	f.StringVar(&o.cfg.CUDALib, "cuda-lib", "", "a libcuda-shaped shared library (cuLaunchKernel, cuGraphLaunch, cuStreamSynchronize) that each engine step calls: cuGraphLaunch (decode-only steps with CUDA graphs, i.e. not --enforce-eager) or cuLaunchKernel (any step with prefill tokens, or eager) at its start and cuStreamSynchronize at its modelled end, so uprobes on that library see step boundaries as on a GPU host; with --trace-file, one \"step\" line per step. For tests and demos, never a real driver (Linux and cgo only)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug | info | warn | error")
	o.cfg.Guard.AddFlags(f)
}

// config checks the flags and states the engine's config in o.cfg: its
// role, model, KV side channel (the flags, else vLLM's NIXL environment),
// profile, scale, prefix caching and faults.
func (o *simServeFlags) config(c *cobra.Command) error {
	r, err := emulator.ParseRole(o.role)
	if err != nil {
		return badInput("--role: %q is invalid: want colocated, prefill or decode", o.role)
	}
	o.cfg.Role = r
	if o.cfg.Model == "" {
		o.cfg.Model = o.modelID
	}
	// Like vLLM's NIXL connector, the side channel's place comes from
	// the environment unless the flags say otherwise.
	if h := os.Getenv("VLLM_NIXL_SIDE_CHANNEL_HOST"); h != "" && !c.Flags().Changed("kv-host") {
		o.cfg.KVHost = h
	}
	if p := os.Getenv("VLLM_NIXL_SIDE_CHANNEL_PORT"); p != "" && !c.Flags().Changed("kv-port") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return badInput("VLLM_NIXL_SIDE_CHANNEL_PORT: %q is not a port", p)
		}
		o.cfg.KVPort = n
	}
	if err := o.cfg.Guard.Fill(); err != nil {
		return badInput("%v", err)
	}
	if _, err := emulator.LookupProfile(o.cfg.Profile); err != nil {
		return badInput("--profile: %v", err)
	}
	if o.cfg.TensorParallelSize < 1 || o.cfg.TensorParallelSize > 64 {
		return badInput("--tensor-parallel-size: want 1..64, got %d", o.cfg.TensorParallelSize)
	}
	if !(o.cfg.TimeScale > 0) || o.cfg.TimeScale > 1e6 {
		return badInput("--time-scale: want a positive number, got %v", o.cfg.TimeScale)
	}
	if c.Flags().Changed("enable-prefix-caching") && c.Flags().Changed("no-enable-prefix-caching") && o.prefix == o.noPrefix {
		return badInput("--enable-prefix-caching and --no-enable-prefix-caching disagree")
	}
	o.cfg.DisablePrefixCaching = o.noPrefix || (c.Flags().Changed("enable-prefix-caching") && !o.prefix)
	for _, f := range o.faults {
		if err := o.cfg.Faults.ParseFault(f); err != nil {
			return badInput("%v", err)
		}
	}
	return nil
}

// run is hone sim serve: it serves until SIGINT or SIGTERM.
func (o *simServeFlags) run(c *cobra.Command) error {
	if err := o.config(c); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return badInput("--log-level: %q is invalid: want debug, info, warn or error", o.logLevel)
	}
	o.cfg.Logger = slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
	if o.traceFile != "" {
		f, err := os.OpenFile(o.traceFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return badInput("--trace-file: %v", err)
		}
		defer f.Close()
		o.cfg.Trace = f
	}
	if o.worker {
		if o.cfg.CUDALib == "" {
			return badInput("--cuda-worker: needs --cuda-lib (the library the worker calls)")
		}
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--cuda-worker: cannot find this hone binary: %w", err)
		}
		o.cfg.CUDAWorker = []string{exe, "sim", "cuda-worker", "--cuda-lib", o.cfg.CUDALib}
	}
	ver, _ := buildVersion()
	o.cfg.Version = "hone-emulator/" + ver
	o.cfg.OnCrash = func() {
		o.cfg.Logger.Error("crash-after fault: exiting with status 1")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := emulator.Start(ctx, o.cfg)
	if err != nil {
		return badInput("%v", err)
	}
	fmt.Fprintf(c.ErrOrStderr(), "hone sim serve: %s role=%s profile=%s engine_id=%s", srv.URL(), o.cfg.Role, o.cfg.Profile, srv.EngineID())
	if kv := srv.KVAddr(); kv != "" {
		fmt.Fprintf(c.ErrOrStderr(), " kv_side_channel=%s", kv)
	}
	fmt.Fprintln(c.ErrOrStderr())
	<-srv.Done()
	if o.traceFile != "" {
		fmt.Fprintf(c.ErrOrStderr(), "hone sim serve: stopped; trace in %s\n", o.traceFile)
	}
	return nil
}
