package calibrate

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/sim/emulator"
)

// DeriveOptions is what hone profile derive takes: the flags, by name.
type DeriveOptions struct {
	Model     string // --model: the model's Hugging Face config.json (required)
	GPU       string // --gpu
	TPs       []int  // --tp
	Dtype     string // --dtype: bf16 or fp8
	DtypeSet  bool   // --dtype was given (not its default)
	Tables    string // --tables: the GPU's per-operation tables
	Version   string // --tables-version
	EffFrom   string // --efficiency-from: without --tables
	HostMs    float64
	HostMsSet bool   // --host-ms was given
	HostFrom  string // --host-from
	Out, Name string // --out (required), --name
	// Stdout gets the report, Log the notes on the side.
	Stdout, Log io.Writer
}

// DeriveProfile is hone profile derive: it checks o, derives a profile
// from the model's architecture and the GPU's tables (Derive), writes it to
// o.Out and reports its fit. Bad input is a usage.Error.
func DeriveProfile(o DeriveOptions) error {
	host, err := o.check()
	if err != nil {
		return err
	}
	gpu, err := emulator.LookupGPU(o.GPU)
	if err != nil {
		return usage.Errorf("--gpu: %v", err)
	}
	m, err := emulator.ModelFromHFConfig(o.Model, HFID(o.Model))
	if err != nil {
		return usage.Errorf("--model: %v", err)
	}
	if o.Name == "" {
		o.Name = strings.TrimSuffix(filepath.Base(o.Out), filepath.Ext(o.Out))
	}
	cfg := DeriveConfig{Name: o.Name, Model: m, GPU: gpu, Dtype: o.Dtype, TPs: o.TPs, HostMs: o.HostMs, Host: host,
		AllReduce: emulator.AllReduceModel{Source: "spec: " + gpu.Name + " interconnect", LatencyUs: gpu.InterconnectLatencyUs, BusBytesPerSec: gpu.InterconnectBytesSec},
		Data:      []emulator.DataRef{{Path: o.Model, What: "model architecture (config.json)"}}}
	if err := o.costs(&cfg); err != nil {
		return err
	}
	p, err := Derive(cfg)
	if err != nil {
		return usage.Errorf("%v", err)
	}
	if err := emulator.WriteProfileFile(o.Out, p); err != nil {
		return err
	}
	fmt.Fprintf(o.Stdout, "profile %s written to %s (%s): %s\n", p.Name, o.Out, p.SourceKind(), p.Source.Method)
	WritePhaseErrors(o.Stdout, p.Source.Residuals)
	return nil
}

// check checks o's flags, in the order the command always checked them,
// and reads --host-from's host part.
func (o *DeriveOptions) check() (*HostCosts, error) {
	if o.Model == "" {
		return nil, usage.Errorf("--model: required: the model's Hugging Face config.json")
	}
	if o.Out == "" {
		return nil, usage.Errorf("--out: required: the profile file to write (.yaml)")
	}
	if ext := strings.ToLower(filepath.Ext(o.Out)); ext != ".yaml" && ext != ".yml" {
		return nil, usage.Errorf("--out %s: want a .yaml or .yml path", o.Out)
	}
	if _, ok := Dtypes[o.Dtype]; !ok {
		return nil, usage.Errorf("--dtype %q: want bf16 or fp8", o.Dtype)
	}
	// A checkpoint that states fp8 weights is derived as fp8.
	if q := emulator.HFQuantMethod(o.Model); q == "fp8" && o.Dtype != "fp8" {
		if o.DtypeSet {
			return nil, usage.Errorf("--dtype %s: %s says quantization_config.quant_method fp8 (fp8 weights): want --dtype fp8", o.Dtype, o.Model)
		}
		o.Dtype = "fp8"
		fmt.Fprintf(o.Log, "%s states fp8 weights (quantization_config.quant_method): deriving as --dtype fp8\n", o.Model)
	}
	for _, tp := range o.TPs {
		if tp < 1 || tp > 64 {
			return nil, usage.Errorf("--tp %d: want 1..64", tp)
		}
	}
	if !(o.HostMs >= 0) {
		return nil, usage.Errorf("--host-ms %v: want >= 0", o.HostMs)
	}
	if o.HostFrom == "" {
		return nil, nil
	}
	if o.HostMsSet {
		return nil, usage.Errorf("--host-from: the host part comes from --host-from or --host-ms, not both")
	}
	hp, err := emulator.LookupProfile(o.HostFrom)
	if err != nil {
		return nil, usage.Errorf("--host-from: %v", err)
	}
	host, err := HostFrom(hp)
	if err != nil {
		return nil, usage.Errorf("--host-from: %v", err)
	}
	return host, nil
}

// costs gives cfg its operation costs: the per-operation tables (and the
// measured all-reduce, when they have it), else the efficiencies of a
// table-derived profile of the same model (--efficiency-from).
func (o *DeriveOptions) costs(cfg *DeriveConfig) error {
	var err error
	if o.Tables != "" {
		if cfg.Tables, err = ReadOpTables(o.Tables, o.Version); err != nil {
			return usage.Errorf("--tables: %v", err)
		}
		cfg.Data = append(cfg.Data, emulator.DataRef{Path: filepath.Join(o.Tables, "{gemm,attention}", engine.VLLM, o.Version), What: "per-operation tables (GEMM, context and generation attention)"})
		ar := filepath.Join(o.Tables, "comm", engine.VLLM, o.Version, "custom_allreduce_perf.parquet")
		if _, err := os.Stat(ar); err == nil {
			if cfg.AllReduce, err = ReadAllReduceTable(ar, ar); err != nil {
				return usage.Errorf("--tables: %v", err)
			}
			cfg.Data = append(cfg.Data, emulator.DataRef{Path: ar, What: "measured all-reduce latencies (vllm_graph rows)"})
		}
		return nil
	}
	if o.EffFrom == "" {
		return usage.Errorf("--efficiency-from: required without --tables: a profile derived from per-operation tables of the same model on another GPU, whose efficiencies the roofline takes")
	}
	ref, err := emulator.LookupProfile(o.EffFrom)
	if err != nil {
		return usage.Errorf("--efficiency-from: %v", err)
	}
	if ref.Steps == nil || ref.SourceKind() != emulator.SourceDerivedTable {
		return usage.Errorf("--efficiency-from %s: want a profile derived from per-operation tables, got %s", o.EffFrom, ref.SourceKind())
	}
	cfg.Efficiency = FitEfficiency(ref, o.Dtype)
	return nil
}

// HFID is the Hugging Face id a config file's name says, the way
// aiconfigurator names them (org--name_config.json), else the file name.
func HFID(path string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".json"), "_config")
	if org, name, ok := strings.Cut(base, "--"); ok {
		return org + "/" + name
	}
	return base
}

// WritePhaseErrors writes a fit's error per data set, TP and phase.
func WritePhaseErrors(w io.Writer, errs []emulator.PhaseError) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "data\ttp\tphase\tsteps\tmedian APE\tp90 APE")
	for _, e := range errs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.2f%%\t%.2f%%\n", e.Data, e.TP, e.Phase, e.Steps, e.MedianAPE, e.P90APE)
	}
	tw.Flush()
}
