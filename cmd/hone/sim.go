package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim"
	"github.com/hone-llm/hone/slo"
)

func init() { subcommands = append(subcommands, newSimCmd) }

// simSubcommands holds `hone sim` subcommands defined in other files
// (e.g. `hone sim serve`).
var simSubcommands []func() *cobra.Command

// workloadFlags are the workload flags shared by hone sim, replay,
// predict and optimize.
type workloadFlags struct {
	qps            string
	requests       int
	inputTokens    int
	uncachedTokens int // hone sim has no flag: the exact model's scan has replay.DefaultUncachedTokens
	outputTokens   int
	lengthRatio    float64 // hone sim has no flag: the exact model's requests are all alike
	ttftSLO        float64
	tpotSLO        float64
	sloPreset      string
	goodput        string // hone sim has no flag: the exact model has no per-request records
	flags          *pflag.FlagSet
}

// register adds the workload flags; uncached adds --uncached-tokens,
// which the exact model (hone sim) cannot take.
func (w *workloadFlags) register(c *cobra.Command, uncached bool) {
	f := c.Flags()
	f.StringVar(&w.qps, "qps", "1,2,4,8,16,32", "offered load levels, comma-separated requests/s")
	f.IntVar(&w.requests, "requests", 128, "requests per level, the 8 warm-up requests included")
	if uncached {
		f.IntVar(&w.inputTokens, "input-tokens", 4096, "input tokens per request: its session's shared code prefix, then --uncached-tokens of its own")
		f.IntVar(&w.uncachedTokens, "uncached-tokens", replay.DefaultUncachedTokens,
			"input tokens of a measured request beyond its session's prefix, which the warm-ups cached (the seed workload: 128)")
		f.Float64Var(&w.lengthRatio, "length-ratio", 0,
			"draw each measured request's input and output lengths uniformly from [ratio × L, L] (vllm bench serve --random-range-ratio; the input never shorter than its cached prefix + 1); 0: fixed lengths")
		f.StringVar(&w.goodput, "goodput", "",
			"per-request limits that goodput counts requests against, as vllm bench serve --goodput takes them, model ms: e.g. ttft:500,tpot:50,e2el:3000 (each optional; default: the --ttft-slo-ms and --tpot-slo-ms limits, per request). Every level reports the fraction and rate of measured requests within them")
	} else {
		f.IntVar(&w.inputTokens, "input-tokens", 4096, "input tokens per request (128 of them uncached in the measurement phase)")
		w.uncachedTokens = replay.DefaultUncachedTokens
	}
	f.IntVar(&w.outputTokens, "output-tokens", 128, "output tokens per request")
	f.Float64Var(&w.ttftSLO, "ttft-slo-ms", slo.Default.TTFTMillis, "SLO on p99 time to first token, ms")
	f.Float64Var(&w.tpotSLO, "tpot-slo-ms", slo.Default.TPOTMillis, "SLO on p99 time per output token, ms")
	f.StringVar(&w.sloPreset, "slo", "", "an SLO by name, setting both limits (an explicit --ttft-slo-ms or --tpot-slo-ms overrides its half): "+sloPresetNames())
	w.flags = f
}

// sloPresetNames lists slo.Presets for --slo's help and errors.
func sloPresetNames() string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(slo.Presets)) {
		p := slo.Presets[n]
		out = append(out, fmt.Sprintf("%s (p99 TTFT %g ms, p99 TPOT %g ms)", n, p.TTFTMillis, p.TPOTMillis))
	}
	return strings.Join(out, ", ")
}

// parseQPS parses the --qps list, naming the flag on error.
func parseQPS(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, badInput("--qps: %q is not a number", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, badInput("--qps: want at least one offered rate, got %q", s)
	}
	return out, nil
}

// params validates the workload flags for every level, so a bad value is
// reported with its flag before any work starts.
func (w *workloadFlags) scan(cfg sim.Config) (sim.ScanConfig, error) {
	qps, err := parseQPS(w.qps)
	if err != nil {
		return sim.ScanConfig{}, err
	}
	if err := w.check(qps); err != nil {
		return sim.ScanConfig{}, err
	}
	return sim.ScanConfig{Config: cfg, Requests: w.requests, InputTokens: w.inputTokens, OutputTokens: w.outputTokens,
		QPS: qps, SLO: w.target()}, nil
}

// target is the SLO the flags state, with --goodput's limits (checkSLO
// has validated them).
func (w *workloadFlags) target() slo.SLO {
	t := slo.SLO{TTFTMillis: w.ttftSLO, TPOTMillis: w.tpotSLO}
	if w.goodput != "" {
		t.Goodput, _ = slo.ParsePerRequest(w.goodput)
	}
	return t
}

// check validates the workload flags at every level and the SLO flags,
// naming the flag of the first bad value.
func (w *workloadFlags) check(qps []float64) error {
	for _, q := range qps {
		if err := replay.ParamsOf(w.workload(0), q).Validate(); err != nil {
			return paramErr(err)
		}
	}
	return w.checkSLO()
}

// workload is the replay workload the flags describe, with seed.
func (w *workloadFlags) workload(seed uint64) schema.Workload {
	return schema.Workload{Seed: seed, Requests: w.requests, InputTokens: w.inputTokens, UncachedTokens: w.uncachedTokens, OutputTokens: w.outputTokens, LengthRatio: w.lengthRatio}
}

// checkSLO applies --slo, then checks --ttft-slo-ms and --tpot-slo-ms, in
// that order.
func (w *workloadFlags) checkSLO() error {
	if w.sloPreset != "" {
		p, ok := slo.Preset(w.sloPreset)
		if !ok {
			return badInput("--slo: %q: want one of %s", w.sloPreset, sloPresetNames())
		}
		if w.flags == nil || !w.flags.Changed("ttft-slo-ms") {
			w.ttftSLO = p.TTFTMillis
		}
		if w.flags == nil || !w.flags.Changed("tpot-slo-ms") {
			w.tpotSLO = p.TPOTMillis
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--ttft-slo-ms", w.ttftSLO}, {"--tpot-slo-ms", w.tpotSLO}} {
		if !(f.v > 0) || f.v > 1e300 {
			return badInput("%s: want a positive finite number of milliseconds, got %v", f.name, f.v)
		}
	}
	if w.goodput != "" {
		if _, err := slo.ParsePerRequest(w.goodput); err != nil {
			return badInput("--goodput: %v", err)
		}
	}
	return nil
}

// paramErr turns a replay.ParamError into a usage error naming the flag.
func paramErr(err error) error {
	if pe, ok := err.(*replay.ParamError); ok {
		return replay.ParamUsage(pe)
	}
	return usageError{Err: err}
}

func newSimCmd() *cobra.Command {
	var (
		wf     workloadFlags
		mode   string
		cache  bool
		output outputFormat
	)
	c := withHelp(&cobra.Command{
		Use:   "sim",
		Short: "Run the CPU exercise's exact queueing model over load levels (simulation_only)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			m, err := sim.ParseMode(mode)
			if err != nil {
				return badInput("--mode: %q is invalid: want colocated or disaggregated", mode)
			}
			sc, err := wf.scan(sim.Config{Mode: m, PrefixCache: cache})
			if err != nil {
				return err
			}
			return sim.Command(sim.CommandOptions{Scan: sc, Format: output.value, Out: c.OutOrStdout()})
		},
	}, "sim", nil)
	wf.register(c, false)
	c.Flags().StringVar(&mode, "mode", "colocated", "colocated | disaggregated")
	c.Flags().BoolVar(&cache, "prefix-cache", true, "reuse cached prefix tokens (false: effective cached tokens are 0)")
	output.register(c.Flags(), "table", "", "table", "json")
	for _, add := range simSubcommands {
		c.AddCommand(add())
	}
	return c
}
