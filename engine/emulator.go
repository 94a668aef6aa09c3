package engine

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// EmulatorVersionPrefix starts the GET /version answer of hone's engine
// emulator ("hone-emulator", optionally followed by more); nothing else
// answers so.
const EmulatorVersionPrefix = "hone-emulator"

// emulatorRequestKeys are the keys of the emulator's per-request metrics
// object: vLLM's five, then hone's extensions (sim/emulator RequestMetrics).
var emulatorRequestKeys = append(append([]string(nil), vllmRequestKeys...),
	"prefill_time_ms", "kv_transfer_time_ms", "kv_transfer_late_ms", "decode_time_ms", "e2e_time_ms", "time_scale")

// emulator is hone's engine emulator, `hone sim serve`: vLLM's HTTP API,
// metrics and NIXL side channel, on no GPU, with emulated numbers.
type emulator struct{}

func init() { Register(emulator{}) }

func (emulator) Name() string { return Emulator }

func (emulator) Facts() Facts {
	v := vllm{}.Facts() // it speaks vLLM's API: its names, route and heads
	return Facts{
		Title: "hone's engine emulator", Binary: "hone", Emulated: true,
		Connectors: []string{NixlConnector},
		Metrics: Metrics{
			// vLLM's current names (sim/emulator/metrics.go).
			Prefix: v.Metrics.Prefix, PrefixCache: v.Metrics.PrefixCache[:1],
			RequestKeys: emulatorRequestKeys,
		},
		Cache: Cache{ResetRoute: "POST /reset_prefix_cache"},
		HTTP:  v.HTTP,
		// The range of its prefill-to-decode KV stream.
		KVPorts:        "5700-5763",
		ProcessPattern: emulatorProcesses,
		// It takes vLLM's --kv-cache-dtype values (sim/emulator's
		// KVCacheDTypes: their bytes per element).
		KVCacheDTypes: v.KVCacheDTypes,
	}
}

func (emulator) Recognise(version string) bool {
	return strings.HasPrefix(version, EmulatorVersionPrefix)
}

// emulatorProcesses matches `hone sim serve` (by its argv; argv[0] may
// be a path ending in hone).
const emulatorProcesses = `hone sim serve`

var emulatorProcessRE = regexp.MustCompile(emulatorProcesses)

func (emulator) MatchProcess(_ string, cmdline []string) bool {
	return emulatorProcessRE.MatchString(strings.Join(cmdline, " "))
}

// Render spells `hone sim serve` (cmd/hone/simserve.go) with the same role
// and knobs. The emulator reads VLLM_NIXL_SIDE_CHANNEL_HOST/PORT like vLLM
// does, so its KV side channel is placed the same way.
func (emulator) Render(l Launch) (Command, error) {
	w := l.Worker
	model := l.Model.ID
	if model == "" {
		model = l.Model.Served
	}
	argv := []string{l.Bin, "sim", "serve",
		"--role", w.Role,
		"--host", w.Host,
		"--port", strconv.Itoa(w.Port),
		"--model", model,
	}
	if l.Model.ServedName != "" {
		argv = append(argv, "--served-model-name", l.Model.ServedName)
	}
	argv = append(argv,
		"--profile", l.Emulation.Profile,
		"--time-scale", strconv.FormatFloat(l.Emulation.TimeScale, 'f', -1, 64),
	)
	if tp := len(w.GPUs); tp > 1 {
		argv = append(argv, "--tensor-parallel-size", strconv.Itoa(tp))
	}
	if d := l.KVCacheDType; d != "" {
		argv = append(argv, "--kv-cache-dtype", d)
	}
	k := l.Knobs
	if k.PrefixCaching != nil && !*k.PrefixCaching {
		argv = append(argv, "--no-enable-prefix-caching")
	}
	argv = append(argv, "--enable-prompt-tokens-details", "--enable-per-request-metrics")
	argv = SizeArgs(argv, k)
	if k.EnforceEager || k.CUDAGraphMode == "NONE" {
		argv = append(argv, "--enforce-eager")
	}
	if l.KV != nil && w.Role == RoleDecode && l.KV.LoadFailurePolicy != "" {
		argv = append(argv, "--kv-load-failure-policy", l.KV.LoadFailurePolicy)
	}
	if f := l.Emulation.TraceFile; f != "" {
		argv = append(argv, "--trace-file", f)
	}
	for _, f := range l.Emulation.Faults {
		argv = append(argv, "--fault", f)
	}
	env := []string{w.VisibleDevices()}
	if l.KV != nil && l.KV.Connector == NixlConnector {
		env = append(env,
			"VLLM_NIXL_SIDE_CHANNEL_HOST="+w.Host,
			"VLLM_NIXL_SIDE_CHANNEL_PORT="+strconv.Itoa(w.KVPorts[0]))
	}
	return Command{Argv: argv, Env: env}, nil
}

// TraceFile is an emulated worker's trace file in dir.
func TraceFile(dir, worker string) string { return filepath.Join(dir, worker+".jsonl") }
