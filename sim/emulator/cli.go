package emulator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/hone-llm/hone/internal/usage"
)

// ServeOptions is what hone sim serve takes: the engine's Config as its
// flags fill it, and the flags that are not the Config's, by name.
type ServeOptions struct {
	Config    Config
	Role      string   // --role: colocated, prefill or decode
	ModelID   string   // --model: the API's model name unless --served-model-name
	Prefix    bool     // --enable-prefix-caching
	NoPrefix  bool     // --no-enable-prefix-caching
	Faults    []string // --fault, each ParseFault's
	LogLevel  string   // --log-level
	TraceFile string   // --trace-file: append the ground truth here
	// CUDAWorker (--cuda-worker) makes the --cuda-lib calls from a child
	// process, this binary's hone sim cuda-worker.
	CUDAWorker bool
	// Changed says whether a flag was given on the command line.
	Changed func(flag string) bool
	// Version is hone's, for the engine's /version.
	Version string
	// Log gets the engine's log and the serving notes.
	Log io.Writer
}

// Serve is hone sim serve: it checks o, starts the engine (Start) and
// serves until ctx ends. Bad input is a usage.Error.
func Serve(ctx context.Context, o ServeOptions) error {
	if err := o.config(); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return usage.Errorf("--log-level: %q is invalid: want debug, info, warn or error", o.LogLevel)
	}
	o.Config.Logger = slog.New(slog.NewTextHandler(o.Log, &slog.HandlerOptions{Level: lvl}))
	if o.TraceFile != "" {
		f, err := os.OpenFile(o.TraceFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return usage.Errorf("--trace-file: %v", err)
		}
		defer f.Close()
		o.Config.Trace = f
	}
	if o.CUDAWorker {
		if o.Config.CUDALib == "" {
			return usage.Errorf("--cuda-worker: needs --cuda-lib (the library the worker calls)")
		}
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--cuda-worker: cannot find this hone binary: %w", err)
		}
		o.Config.CUDAWorker = []string{exe, "sim", "cuda-worker", "--cuda-lib", o.Config.CUDALib}
	}
	o.Config.Version = "hone-emulator/" + o.Version
	o.Config.OnCrash = func() {
		o.Config.Logger.Error("crash-after fault: exiting with status 1")
		os.Exit(1)
	}
	srv, err := Start(ctx, o.Config)
	if err != nil {
		return usage.Errorf("%v", err)
	}
	fmt.Fprintf(o.Log, "hone sim serve: %s role=%s profile=%s engine_id=%s", srv.URL(), o.Config.Role, o.Config.Profile, srv.EngineID())
	if kv := srv.KVAddr(); kv != "" {
		fmt.Fprintf(o.Log, " kv_side_channel=%s", kv)
	}
	fmt.Fprintln(o.Log)
	<-srv.Done()
	if o.TraceFile != "" {
		fmt.Fprintf(o.Log, "hone sim serve: stopped; trace in %s\n", o.TraceFile)
	}
	return nil
}

// config checks the flags and states the engine's Config: its role, model,
// KV side channel (the flags, else vLLM's NIXL environment), profile,
// scale, prefix caching and faults.
func (o *ServeOptions) config() error {
	r, err := ParseRole(o.Role)
	if err != nil {
		return usage.Errorf("--role: %q is invalid: want colocated, prefill or decode", o.Role)
	}
	o.Config.Role = r
	if o.Config.Model == "" {
		o.Config.Model = o.ModelID
	}
	// Like vLLM's NIXL connector, the side channel's place comes from
	// the environment unless the flags say otherwise.
	if h := os.Getenv("VLLM_NIXL_SIDE_CHANNEL_HOST"); h != "" && !o.Changed("kv-host") {
		o.Config.KVHost = h
	}
	if p := os.Getenv("VLLM_NIXL_SIDE_CHANNEL_PORT"); p != "" && !o.Changed("kv-port") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return usage.Errorf("VLLM_NIXL_SIDE_CHANNEL_PORT: %q is not a port", p)
		}
		o.Config.KVPort = n
	}
	if err := o.Config.Guard.Fill(); err != nil {
		return usage.Errorf("%v", err)
	}
	if _, err := LookupProfile(o.Config.Profile); err != nil {
		return usage.Errorf("--profile: %v", err)
	}
	if o.Config.TensorParallelSize < 1 || o.Config.TensorParallelSize > 64 {
		return usage.Errorf("--tensor-parallel-size: want 1..64, got %d", o.Config.TensorParallelSize)
	}
	if !(o.Config.TimeScale > 0) || o.Config.TimeScale > 1e6 {
		return usage.Errorf("--time-scale: want a positive number, got %v", o.Config.TimeScale)
	}
	if o.Changed("enable-prefix-caching") && o.Changed("no-enable-prefix-caching") && o.Prefix == o.NoPrefix {
		return usage.Errorf("--enable-prefix-caching and --no-enable-prefix-caching disagree")
	}
	o.Config.DisablePrefixCaching = o.NoPrefix || (o.Changed("enable-prefix-caching") && !o.Prefix)
	for _, f := range o.Faults {
		if err := o.Config.Faults.ParseFault(f); err != nil {
			return usage.Errorf("%v", err)
		}
	}
	return nil
}

// ResolveProfile is the profile a prediction uses: the one named by the
// --profile flag, else the spec's emulator.profile, else DefaultProfile.
// An unknown name is bad input naming where it came from.
func ResolveProfile(flag, specProfile string) (*Profile, error) {
	name, from := flag, "--profile"
	if name == "" {
		name, from = specProfile, "spec.emulator.profile"
	}
	if name == "" {
		name = DefaultProfile
	}
	p, err := LookupProfile(name)
	if err != nil {
		return nil, usage.Errorf("%s: %v", from, err)
	}
	return p, nil
}

// ProfileLabel is a profile's name and how it was made (its source kind:
// fitted to measured steps, derived, calibrated, hand-made), so that every
// predicted figure says what its cost model rests on.
func ProfileLabel(p *Profile) string {
	return fmt.Sprintf("%s (%s)", p.Name, p.SourceKind())
}
