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
	var (
		model, gpuName, dtype, tables, version, effFrom, out, name, hostFrom string
		tps                                                                  []int
		hostMs                                                               float64
	)
	c := withHelp(&cobra.Command{
		Use:   "derive --model CONFIG.json --gpu NAME --out PROFILE.yaml",
		Short: "Derive a cost profile from a model's config.json and a GPU's per-operation tables (or its roofline)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if model == "" {
				return badInput("--model: required: the model's Hugging Face config.json")
			}
			if out == "" {
				return badInput("--out: required: the profile file to write (.yaml)")
			}
			if ext := strings.ToLower(filepath.Ext(out)); ext != ".yaml" && ext != ".yml" {
				return badInput("--out %s: want a .yaml or .yml path", out)
			}
			if _, ok := calibrate.Dtypes[dtype]; !ok {
				return badInput("--dtype %q: want bf16 or fp8", dtype)
			}
			// A checkpoint that states fp8 weights is derived as fp8.
			if q := emulator.HFQuantMethod(model); q == "fp8" && dtype != "fp8" {
				if c.Flags().Changed("dtype") {
					return badInput("--dtype %s: %s says quantization_config.quant_method fp8 (fp8 weights): want --dtype fp8", dtype, model)
				}
				dtype = "fp8"
				fmt.Fprintf(c.ErrOrStderr(), "%s states fp8 weights (quantization_config.quant_method): deriving as --dtype fp8\n", model)
			}
			for _, tp := range tps {
				if tp < 1 || tp > 64 {
					return badInput("--tp %d: want 1..64", tp)
				}
			}
			if !(hostMs >= 0) {
				return badInput("--host-ms %v: want >= 0", hostMs)
			}
			var host *calibrate.HostCosts
			if hostFrom != "" {
				if c.Flags().Changed("host-ms") {
					return badInput("--host-from: the host part comes from --host-from or --host-ms, not both")
				}
				hp, err := emulator.LookupProfile(hostFrom)
				if err != nil {
					return badInput("--host-from: %v", err)
				}
				if host, err = calibrate.HostFrom(hp); err != nil {
					return badInput("--host-from: %v", err)
				}
			}
			gpu, err := emulator.LookupGPU(gpuName)
			if err != nil {
				return badInput("--gpu: %v", err)
			}
			m, err := emulator.ModelFromHFConfig(model, hfID(model))
			if err != nil {
				return badInput("--model: %v", err)
			}
			if name == "" {
				name = strings.TrimSuffix(filepath.Base(out), filepath.Ext(out))
			}
			cfg := calibrate.DeriveConfig{Name: name, Model: m, GPU: gpu, Dtype: dtype, TPs: tps, HostMs: hostMs, Host: host,
				AllReduce: emulator.AllReduceModel{Source: "spec: " + gpu.Name + " interconnect", LatencyUs: gpu.InterconnectLatencyUs, BusBytesPerSec: gpu.InterconnectBytesSec},
				Data:      []emulator.DataRef{{Path: model, What: "model architecture (config.json)"}}}
			if tables != "" {
				if cfg.Tables, err = calibrate.ReadOpTables(tables, version); err != nil {
					return badInput("--tables: %v", err)
				}
				cfg.Data = append(cfg.Data, emulator.DataRef{Path: filepath.Join(tables, "{gemm,attention}", "vllm", version), What: "per-operation tables (GEMM, context and generation attention)"})
				ar := filepath.Join(tables, "comm", "vllm", version, "custom_allreduce_perf.parquet")
				if _, err := os.Stat(ar); err == nil {
					if cfg.AllReduce, err = calibrate.ReadAllReduceTable(ar, ar); err != nil {
						return badInput("--tables: %v", err)
					}
					cfg.Data = append(cfg.Data, emulator.DataRef{Path: ar, What: "measured all-reduce latencies (vllm_graph rows)"})
				}
			} else {
				if effFrom == "" {
					return badInput("--efficiency-from: required without --tables: a profile derived from per-operation tables of the same model on another GPU, whose efficiencies the roofline takes")
				}
				ref, err := emulator.LookupProfile(effFrom)
				if err != nil {
					return badInput("--efficiency-from: %v", err)
				}
				if ref.Steps == nil || ref.SourceKind() != emulator.SourceDerivedTable {
					return badInput("--efficiency-from %s: want a profile derived from per-operation tables, got %s", effFrom, ref.SourceKind())
				}
				cfg.Efficiency = calibrate.FitEfficiency(ref, dtype)
			}
			p, err := calibrate.Derive(cfg)
			if err != nil {
				return badInput("%v", err)
			}
			if err := emulator.WriteProfileFile(out, p); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "profile %s written to %s (%s): %s\n", p.Name, out, p.SourceKind(), p.Source.Method)
			writePhaseErrors(c.OutOrStdout(), p.Source.Residuals)
			return nil
		},
	}, "profile-derive", nil)
	f := c.Flags()
	f.StringVar(&model, "model", "", "the model's Hugging Face config.json")
	f.StringVar(&gpuName, "gpu", "", "the GPU ("+strings.Join(gpuNames(), ", ")+")")
	f.IntSliceVar(&tps, "tp", []int{1, 2, 4, 8}, "TP sizes to derive from (those the weights fit)")
	f.StringVar(&dtype, "dtype", "bf16", "the weights' type: bf16 or fp8 (the KV cache stays bf16)")
	f.StringVar(&tables, "tables", "", "the GPU's per-operation tables (systems/data/<gpu>/ with gemm/, attention/, comm/ under vllm/VERSION/)")
	f.StringVar(&version, "tables-version", "0.19.0", "the vLLM version folder of --tables")
	f.StringVar(&effFrom, "efficiency-from", "", "without --tables: a table-derived profile of the same model whose efficiencies the roofline takes")
	f.Float64Var(&hostMs, "host-ms", calibrate.DefaultHostMs, "host cost per step (scheduler, sampler, launches), hand-made: no table measures it")
	f.StringVar(&hostFrom, "host-from", "", "take the host part (per step, per step with prompt chunks, per decode sequence) from a profile fitted to measured steps, e.g. qwen3-32b-b300, instead of --host-ms")
	f.StringVar(&out, "out", "", "write the profile here (.yaml)")
	f.StringVar(&name, "name", "", "the profile's name (default: --out's file name)")
	return c
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
