package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/sim/emulator"
)

func newProfileDeriveCmd() *cobra.Command {
	var o profileDeriveFlags
	c := withHelp(&cobra.Command{
		Use:   "derive --model CONFIG.json --gpu NAME --out PROFILE.yaml",
		Short: "Derive a cost profile from a model's config.json and a GPU's per-operation tables (or its roofline)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}, "profile-derive", nil)
	o.bind(c)
	return c
}

// profileDeriveFlags are hone profile derive's flags; run carries the command out.
type profileDeriveFlags struct {
	model, gpuName, dtype, tables, version, effFrom, out, name, hostFrom string
	tps                                                                  []int
	hostMs                                                               float64
}

// bind registers the flags on c.
func (o *profileDeriveFlags) bind(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&o.model, "model", "", "the model's Hugging Face config.json")
	f.StringVar(&o.gpuName, "gpu", "", "the GPU ("+strings.Join(gpuNames(), ", ")+")")
	f.IntSliceVar(&o.tps, "tp", []int{1, 2, 4, 8}, "TP sizes to derive from (those the weights fit)")
	f.StringVar(&o.dtype, "dtype", "bf16", "the weights' type: bf16 or fp8 (the KV cache stays bf16)")
	f.StringVar(&o.tables, "tables", "", "the GPU's per-operation tables (systems/data/<gpu>/ with gemm/, attention/, comm/ under vllm/VERSION/)")
	f.StringVar(&o.version, "tables-version", "0.19.0", "the vLLM version folder of --tables")
	f.StringVar(&o.effFrom, "efficiency-from", "", "without --tables: a table-derived profile of the same model whose efficiencies the roofline takes")
	f.Float64Var(&o.hostMs, "host-ms", calibrate.DefaultHostMs, "host cost per step (scheduler, sampler, launches), hand-made: no table measures it")
	f.StringVar(&o.hostFrom, "host-from", "", "take the host part (per step, per step with prompt chunks, per decode sequence) from a profile fitted to measured steps, e.g. qwen3-32b-b300, instead of --host-ms")
	f.StringVar(&o.out, "out", "", "write the profile here (.yaml)")
	f.StringVar(&o.name, "name", "", "the profile's name (default: --out's file name)")
}

// run is hone profile derive.
func (o *profileDeriveFlags) run(c *cobra.Command) error {
	if o.model == "" {
		return badInput("--model: required: the model's Hugging Face config.json")
	}
	if o.out == "" {
		return badInput("--out: required: the profile file to write (.yaml)")
	}
	if ext := strings.ToLower(filepath.Ext(o.out)); ext != ".yaml" && ext != ".yml" {
		return badInput("--out %s: want a .yaml or .yml path", o.out)
	}
	if _, ok := calibrate.Dtypes[o.dtype]; !ok {
		return badInput("--dtype %q: want bf16 or fp8", o.dtype)
	}
	// A checkpoint that states fp8 weights is derived as fp8.
	if q := emulator.HFQuantMethod(o.model); q == "fp8" && o.dtype != "fp8" {
		if c.Flags().Changed("dtype") {
			return badInput("--dtype %s: %s says quantization_config.quant_method fp8 (fp8 weights): want --dtype fp8", o.dtype, o.model)
		}
		o.dtype = "fp8"
		fmt.Fprintf(c.ErrOrStderr(), "%s states fp8 weights (quantization_config.quant_method): deriving as --dtype fp8\n", o.model)
	}
	for _, tp := range o.tps {
		if tp < 1 || tp > 64 {
			return badInput("--tp %d: want 1..64", tp)
		}
	}
	if !(o.hostMs >= 0) {
		return badInput("--host-ms %v: want >= 0", o.hostMs)
	}
	var host *calibrate.HostCosts
	if o.hostFrom != "" {
		if c.Flags().Changed("host-ms") {
			return badInput("--host-from: the host part comes from --host-from or --host-ms, not both")
		}
		hp, err := emulator.LookupProfile(o.hostFrom)
		if err != nil {
			return badInput("--host-from: %v", err)
		}
		if host, err = calibrate.HostFrom(hp); err != nil {
			return badInput("--host-from: %v", err)
		}
	}
	gpu, err := emulator.LookupGPU(o.gpuName)
	if err != nil {
		return badInput("--gpu: %v", err)
	}
	m, err := emulator.ModelFromHFConfig(o.model, hfID(o.model))
	if err != nil {
		return badInput("--model: %v", err)
	}
	if o.name == "" {
		o.name = strings.TrimSuffix(filepath.Base(o.out), filepath.Ext(o.out))
	}
	cfg := calibrate.DeriveConfig{Name: o.name, Model: m, GPU: gpu, Dtype: o.dtype, TPs: o.tps, HostMs: o.hostMs, Host: host,
		AllReduce: emulator.AllReduceModel{Source: "spec: " + gpu.Name + " interconnect", LatencyUs: gpu.InterconnectLatencyUs, BusBytesPerSec: gpu.InterconnectBytesSec},
		Data:      []emulator.DataRef{{Path: o.model, What: "model architecture (config.json)"}}}
	if o.tables != "" {
		if cfg.Tables, err = calibrate.ReadOpTables(o.tables, o.version); err != nil {
			return badInput("--tables: %v", err)
		}
		cfg.Data = append(cfg.Data, emulator.DataRef{Path: filepath.Join(o.tables, "{gemm,attention}", "vllm", o.version), What: "per-operation tables (GEMM, context and generation attention)"})
		ar := filepath.Join(o.tables, "comm", "vllm", o.version, "custom_allreduce_perf.parquet")
		if _, err := os.Stat(ar); err == nil {
			if cfg.AllReduce, err = calibrate.ReadAllReduceTable(ar, ar); err != nil {
				return badInput("--tables: %v", err)
			}
			cfg.Data = append(cfg.Data, emulator.DataRef{Path: ar, What: "measured all-reduce latencies (vllm_graph rows)"})
		}
	} else {
		if o.effFrom == "" {
			return badInput("--efficiency-from: required without --tables: a profile derived from per-operation tables of the same model on another GPU, whose efficiencies the roofline takes")
		}
		ref, err := emulator.LookupProfile(o.effFrom)
		if err != nil {
			return badInput("--efficiency-from: %v", err)
		}
		if ref.Steps == nil || ref.SourceKind() != emulator.SourceDerivedTable {
			return badInput("--efficiency-from %s: want a profile derived from per-operation tables, got %s", o.effFrom, ref.SourceKind())
		}
		cfg.Efficiency = calibrate.FitEfficiency(ref, o.dtype)
	}
	p, err := calibrate.Derive(cfg)
	if err != nil {
		return badInput("%v", err)
	}
	if err := emulator.WriteProfileFile(o.out, p); err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "profile %s written to %s (%s): %s\n", p.Name, o.out, p.SourceKind(), p.Source.Method)
	writePhaseErrors(c.OutOrStdout(), p.Source.Residuals)
	return nil
}

// hfID is the Hugging Face id a config file's name says, the way
// aiconfigurator names them (org--name_config.json), else the file name.
func hfID(path string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".json"), "_config")
	if org, name, ok := strings.Cut(base, "--"); ok {
		return org + "/" + name
	}
	return base
}
