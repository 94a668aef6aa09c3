package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/hone-llm/hone/calibrate"
	"github.com/hone-llm/hone/sim/emulator"
)

// stepFlags are hone calibrate --steps' flags.
type stepFlags struct {
	dirs                        []string
	model, gpu, allreduce, name string
	bootstrap                   int
}

func (s *stepFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&s.dirs, "steps", nil, "a step-data directory (fpm_metrics_detail.csv + vllm_metadata.json); repeat for several (fits the step-cost form instead of --records)")
	f.StringVar(&s.model, "model", "", "with --steps: the model's Hugging Face config.json")
	f.StringVar(&s.gpu, "gpu", "", "with --steps: the GPU ("+strings.Join(gpuNames(), ", ")+")")
	f.StringVar(&s.allreduce, "allreduce", "", "with --steps: a measured all-reduce table (custom_allreduce_perf.parquet); default: the GPU's interconnect spec")
	f.StringVar(&s.name, "name", "", "with --steps: the profile's name (default: --out's file name)")
	f.IntVar(&s.bootstrap, "bootstrap", calibrate.DefaultBootstrap, "with --steps: bootstrap replicates for the standard errors")
}

func gpuNames() []string {
	var out []string
	for n := range emulator.GPUs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// loadStepDirs reads step-data directories; errors are bad input.
func loadStepDirs(flag string, dirs []string) ([]*calibrate.StepData, error) {
	var out []*calibrate.StepData
	for _, d := range dirs {
		sd, err := calibrate.ReadStepDir(d)
		if err != nil {
			return nil, badInput("%s: %v", flag, err)
		}
		out = append(out, sd)
	}
	return out, nil
}

func runCalibrateSteps(w io.Writer, st stepFlags, out, format string) error {
	if out == "" {
		return badInput("--out: required: the profile file to write (.yaml)")
	}
	if ext := strings.ToLower(filepath.Ext(out)); ext != ".yaml" && ext != ".yml" {
		return badInput("--out %s: want a .yaml or .yml path", out)
	}
	if st.model == "" {
		return badInput("--model: required with --steps: the model's Hugging Face config.json")
	}
	if st.gpu == "" {
		return badInput("--gpu: required with --steps: want one of %s", strings.Join(gpuNames(), ", "))
	}
	if st.bootstrap < 2 {
		return badInput("--bootstrap: want at least 2, got %d", st.bootstrap)
	}
	gpu, err := emulator.LookupGPU(st.gpu)
	if err != nil {
		return badInput("--gpu: %v", err)
	}
	data, err := loadStepDirs("--steps", st.dirs)
	if err != nil {
		return err
	}
	modelName := data[0].Model
	if modelName == "" {
		modelName = strings.TrimSuffix(filepath.Base(st.model), "_config.json")
	}
	model, err := emulator.ModelFromHFConfig(st.model, modelName)
	if err != nil {
		return badInput("--model: %v", err)
	}
	ar := emulator.AllReduceModel{Source: "spec: " + gpu.Name + " interconnect", LatencyUs: gpu.InterconnectLatencyUs, BusBytesPerSec: gpu.InterconnectBytesSec}
	var refs []emulator.DataRef
	if st.allreduce != "" {
		if ar, err = calibrate.ReadAllReduceTable(st.allreduce, st.allreduce); err != nil {
			return badInput("--allreduce: %v", err)
		}
		refs = append(refs, emulator.DataRef{Path: st.allreduce, What: "measured all-reduce latencies (vllm_graph rows)"})
	}
	refs = append(refs, emulator.DataRef{Path: st.model, What: "model architecture (config.json)"})
	name := st.name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(out), filepath.Ext(out))
	}
	p, fit, err := calibrate.StepProfile(data, calibrate.StepProfileConfig{Name: name, Model: model, GPU: gpu, Data: refs,
		Fit: calibrate.StepFitConfig{AllReduce: ar, Bootstrap: st.bootstrap}})
	if err != nil {
		return badInput("--steps: %v", err)
	}
	if err := emulator.WriteProfileFile(out, p); err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(w, fit)
	}
	fmt.Fprintf(w, "fitted %s to %d steps in %d directories (%d observations, %d mis-booked pairs fitted as one, %d down-weighted)\n",
		p.Name, fit.Steps, len(data), fit.Observations, fit.MergedPairs, fit.Downweighted)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "coefficient\tvalue\t± std err (bootstrap)\tfitted")
	for _, t := range fit.Terms {
		se, fitted := "-", "yes"
		if t.Fitted && !math.IsNaN(t.StdErr) {
			se = fmt.Sprintf("± %.3g", t.StdErr)
		}
		if !t.Fitted {
			fitted = "no: " + t.Why
		}
		fmt.Fprintf(tw, "%s\t%.6g\t%s\t%s\n", t.Name, t.Value, se, fitted)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nresiduals on the fitted steps (APE %, mis-booked pairs scored as one):")
	calibrate.WritePhaseErrors(w, fit.Residuals)
	for _, n := range fit.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "\nprofile %s written to %s (steps, %s): check it on held-out steps with hone profile check %s --steps DIR\n", p.Name, out, p.SourceKind(), out)
	return nil
}
