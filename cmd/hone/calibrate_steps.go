package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/hone-llm/hone/calibrate"
)

// bindCalibrateStepsFlags registers hone calibrate --steps' flags into s.
func bindCalibrateStepsFlags(f *pflag.FlagSet, s *calibrate.StepsOptions) {
	f.StringArrayVar(&s.Dirs, "steps", nil, "a step-data directory (fpm_metrics_detail.csv + vllm_metadata.json); repeat for several (fits the step-cost form instead of --records)")
	f.StringVar(&s.Model, "model", "", "with --steps: the model's Hugging Face config.json")
	f.StringVar(&s.GPU, "gpu", "", "with --steps: the GPU ("+strings.Join(gpuNames(), ", ")+")")
	f.StringVar(&s.AllReduce, "allreduce", "", "with --steps: a measured all-reduce table (custom_allreduce_perf.parquet); default: the GPU's interconnect spec")
	f.StringVar(&s.Name, "name", "", "with --steps: the profile's name (default: --out's file name)")
	f.IntVar(&s.Bootstrap, "bootstrap", calibrate.DefaultBootstrap, "with --steps: bootstrap replicates for the standard errors")
}

// gpuNames are the GPUs --gpu takes (profile derive uses it too).
func gpuNames() []string { return calibrate.GPUNames() }
