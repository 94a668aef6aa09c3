package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hone-llm/hone/calibrate"
)

func newProfileDeriveCmd() *cobra.Command {
	var o calibrate.DeriveOptions
	c := withHelp(&cobra.Command{
		Use:   "derive --model CONFIG.json --gpu NAME --out PROFILE.yaml",
		Short: "Derive a cost profile from a model's config.json and a GPU's per-operation tables (or its roofline)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.DtypeSet, o.HostMsSet = c.Flags().Changed("dtype"), c.Flags().Changed("host-ms")
			o.Stdout, o.Log = c.OutOrStdout(), c.ErrOrStderr()
			return calibrate.DeriveProfile(o)
		},
	}, "profile-derive", nil)
	bindProfileDeriveFlags(c.Flags(), &o)
	return c
}

// bindProfileDeriveFlags registers hone profile derive's flags into o.
func bindProfileDeriveFlags(f *pflag.FlagSet, o *calibrate.DeriveOptions) {
	f.StringVar(&o.Model, "model", "", "the model's Hugging Face config.json")
	f.StringVar(&o.GPU, "gpu", "", "the GPU ("+strings.Join(gpuNames(), ", ")+")")
	f.IntSliceVar(&o.TPs, "tp", []int{1, 2, 4, 8}, "TP sizes to derive from (those the weights fit)")
	f.StringVar(&o.Dtype, "dtype", "bf16", "the weights' type: bf16 or fp8 (the KV cache stays bf16)")
	f.StringVar(&o.Tables, "tables", "", "the GPU's per-operation tables (systems/data/<gpu>/ with gemm/, attention/, comm/ under vllm/VERSION/)")
	f.StringVar(&o.Version, "tables-version", "0.19.0", "the vLLM version folder of --tables")
	f.StringVar(&o.EffFrom, "efficiency-from", "", "without --tables: a table-derived profile of the same model whose efficiencies the roofline takes")
	f.Float64Var(&o.HostMs, "host-ms", calibrate.DefaultHostMs, "host cost per step (scheduler, sampler, launches), hand-made: no table measures it")
	f.StringVar(&o.HostFrom, "host-from", "", "take the host part (per step, per step with prompt chunks, per decode sequence) from a profile fitted to measured steps, e.g. qwen3-32b-b300, instead of --host-ms")
	f.StringVar(&o.Out, "out", "", "write the profile here (.yaml)")
	f.StringVar(&o.Name, "name", "", "the profile's name (default: --out's file name)")
}
