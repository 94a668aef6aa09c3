package calibrate

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/hone-llm/hone/internal/jsonout"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/sim/emulator"
)

// GPUNames are the GPUs --gpu takes (emulator.GPUs), sorted.
func GPUNames() []string {
	var out []string
	for n := range emulator.GPUs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ReadStepDirs reads step-data directories (ReadStepDir); an error is a
// usage.Error naming flag.
func ReadStepDirs(flag string, dirs []string) ([]*StepData, error) {
	var out []*StepData
	for _, d := range dirs {
		sd, err := ReadStepDir(d)
		if err != nil {
			return nil, usage.Errorf("%s: %v", flag, err)
		}
		out = append(out, sd)
	}
	return out, nil
}

// checkSteps checks --steps' flags, in the order the command always
// checked them, and looks up the GPU.
func (o RunOptions) checkSteps() (emulator.GPU, error) {
	st := o.Steps
	if o.Out == "" {
		return emulator.GPU{}, usage.Errorf("--out: required: the profile file to write (.yaml)")
	}
	if ext := strings.ToLower(filepath.Ext(o.Out)); ext != ".yaml" && ext != ".yml" {
		return emulator.GPU{}, usage.Errorf("--out %s: want a .yaml or .yml path", o.Out)
	}
	if st.Model == "" {
		return emulator.GPU{}, usage.Errorf("--model: required with --steps: the model's Hugging Face config.json")
	}
	if st.GPU == "" {
		return emulator.GPU{}, usage.Errorf("--gpu: required with --steps: want one of %s", strings.Join(GPUNames(), ", "))
	}
	if st.Bootstrap < 2 {
		return emulator.GPU{}, usage.Errorf("--bootstrap: want at least 2, got %d", st.Bootstrap)
	}
	gpu, err := emulator.LookupGPU(st.GPU)
	if err != nil {
		return emulator.GPU{}, usage.Errorf("--gpu: %v", err)
	}
	return gpu, nil
}

// runSteps is hone calibrate --steps: it fits the step-cost form to the
// step-data directories, writes the profile and reports the fit.
func (o RunOptions) runSteps() error {
	st := o.Steps
	gpu, err := o.checkSteps()
	if err != nil {
		return err
	}
	data, err := ReadStepDirs("--steps", st.Dirs)
	if err != nil {
		return err
	}
	modelName := data[0].Model
	if modelName == "" {
		modelName = strings.TrimSuffix(filepath.Base(st.Model), "_config.json")
	}
	model, err := emulator.ModelFromHFConfig(st.Model, modelName)
	if err != nil {
		return usage.Errorf("--model: %v", err)
	}
	ar := emulator.AllReduceModel{Source: "spec: " + gpu.Name + " interconnect", LatencyUs: gpu.InterconnectLatencyUs, BusBytesPerSec: gpu.InterconnectBytesSec}
	var refs []emulator.DataRef
	if st.AllReduce != "" {
		if ar, err = ReadAllReduceTable(st.AllReduce, st.AllReduce); err != nil {
			return usage.Errorf("--allreduce: %v", err)
		}
		refs = append(refs, emulator.DataRef{Path: st.AllReduce, What: "measured all-reduce latencies (vllm_graph rows)"})
	}
	refs = append(refs, emulator.DataRef{Path: st.Model, What: "model architecture (config.json)"})
	name := st.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(o.Out), filepath.Ext(o.Out))
	}
	p, fit, err := StepProfile(data, StepProfileConfig{Name: name, Model: model, GPU: gpu, Data: refs,
		Fit: StepFitConfig{AllReduce: ar, Bootstrap: st.Bootstrap}})
	if err != nil {
		return usage.Errorf("--steps: %v", err)
	}
	if err := emulator.WriteProfileFile(o.Out, p); err != nil {
		return err
	}
	if o.Format == "json" {
		return jsonout.Write(o.Stdout, fit)
	}
	o.writeStepsTable(p, fit, len(data))
	return nil
}

// writeStepsTable writes hone calibrate --steps' table: the fitted terms,
// the residuals by phase and the notes.
func (o RunOptions) writeStepsTable(p *emulator.Profile, fit *StepFit, dirs int) {
	w := o.Stdout
	fmt.Fprintf(w, "fitted %s to %d steps in %d directories (%d observations, %d mis-booked pairs fitted as one, %d down-weighted)\n",
		p.Name, fit.Steps, dirs, fit.Observations, fit.MergedPairs, fit.Downweighted)
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
	WritePhaseErrors(w, fit.Residuals)
	for _, n := range fit.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "\nprofile %s written to %s (steps, %s): check it on held-out steps with hone profile check %s --steps DIR\n", p.Name, o.Out, p.SourceKind(), o.Out)
}
