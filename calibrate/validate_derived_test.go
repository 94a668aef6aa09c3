package calibrate

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/sim/emulator"
)

// derivedProfiles are the shipped profiles made by hone profile derive,
// each regenerated from testdata/ by TestValidateDerivedProfiles.
var derivedProfiles = []struct {
	name, config, gpu, dtype string
	effFrom                  string // roofline: the table-derived profile whose efficiencies it takes
}{
	{"qwen3-32b-h100", "Qwen--Qwen3-32B", "h100_sxm", "bf16", ""},
	{"qwen3-32b-h200", "Qwen--Qwen3-32B", "h200_sxm", "bf16", ""},
	{"llama-3.1-8b-h100", "meta-llama--Meta-Llama-3.1-8B", "h100_sxm", "bf16", ""},
	{"llama-3.1-8b-h200", "meta-llama--Meta-Llama-3.1-8B", "h200_sxm", "bf16", ""},
	{"llama-3.1-8b-fp8-h100", "meta-llama--Meta-Llama-3.1-8B", "h100_sxm", "fp8", ""},
	{"llama-3.1-8b-fp8-h200", "meta-llama--Meta-Llama-3.1-8B", "h200_sxm", "fp8", ""},
	{"llama-3.1-70b-h100", "meta-llama--Meta-Llama-3.1-70B", "h100_sxm", "bf16", ""},
	{"llama-3.1-70b-h200", "meta-llama--Meta-Llama-3.1-70B", "h200_sxm", "bf16", ""},
	{"llama-3.1-70b-fp8-h100", "nvidia--Llama-3.1-70B-Instruct-FP8", "h100_sxm", "fp8", ""},
	{"llama-3.1-70b-fp8-h200", "nvidia--Llama-3.1-70B-Instruct-FP8", "h200_sxm", "fp8", ""},
	{"qwen3-32b-fp8-h100", "Qwen--Qwen3-32B-FP8", "h100_sxm", "fp8", ""},
	// Qwen3-32B on B300 derived without its step data, to be judged on it:
	// from B300's tables, and from the roofline at H100's efficiencies.
	{"qwen3-32b-b300-tables", "Qwen--Qwen3-32B", "b300_sxm", "bf16", ""},
	{"qwen3-32b-b300-roofline", "Qwen--Qwen3-32B", "b300_sxm", "bf16", "qwen3-32b-h100"},
}

// derivedGuards bound the derived profiles' errors on measured steps
// (median, p90 APE %): today's figures plus about a tenth. A derivation
// is no fit: these are far from the fitted profile's and say how far.
var derivedGuards = map[string][2]float64{
	"qwen3-32b-b300-tables/tp1/all":   {9.4, 14.0},
	"qwen3-32b-b300-tables/tp2/all":   {3.3, 12.4},
	"qwen3-32b-b300-tables/tp4/all":   {6.5, 13.0},
	"qwen3-32b-b300-roofline/tp1/all": {22.0, 25.8},
	"qwen3-32b-b300-roofline/tp2/all": {18.1, 27.1},
	"qwen3-32b-b300-roofline/tp4/all": {14.7, 25.5},
}

func deriveShipped(t *testing.T, name, config, gpuKey, dtype, effFrom string, derived map[string]*emulator.Profile) *emulator.Profile {
	t.Helper()
	cfgPath := aicModels + config + "_config.json"
	m, err := emulator.ModelFromHFConfig(cfgPath, strings.Replace(config, "--", "/", 1))
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := emulator.LookupGPU(gpuKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := aicSystems + "data/" + gpuKey
	rel := func(p string) string { return strings.TrimPrefix(p, "../") }
	arPath := dir + "/comm/vllm/0.19.0/custom_allreduce_perf.parquet"
	ar, err := ReadAllReduceTable(arPath, rel(arPath))
	if err != nil {
		t.Fatal(err)
	}
	fitted, err := emulator.LookupProfile("qwen3-32b-b300")
	if err != nil {
		t.Fatal(err)
	}
	host, err := HostFrom(fitted)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DeriveConfig{Name: name, Model: m, GPU: gpu, Dtype: dtype, TPs: []int{1, 2, 4, 8}, AllReduce: ar, Host: host,
		Data: []emulator.DataRef{{Path: rel(cfgPath), What: "model architecture (config.json)"},
			{Path: rel(arPath), What: "measured all-reduce latencies (vllm_graph rows)"}}}
	if effFrom == "" {
		if cfg.Tables, err = ReadOpTables(dir, "0.19.0"); err != nil {
			t.Fatal(err)
		}
		cfg.Data = append(cfg.Data, emulator.DataRef{Path: rel(dir) + "/{gemm,attention}/vllm/0.19.0", What: "per-operation tables (GEMM, context and generation attention)"})
	} else {
		ref := derived[effFrom]
		if ref == nil {
			t.Fatalf("%s: efficiencies from %s, not derived yet", name, effFrom)
		}
		cfg.Efficiency = FitEfficiency(ref, dtype)
		cfg.Efficiency.Source += " (profile " + effFrom + ")"
	}
	p, err := Derive(cfg)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

func TestValidateDerivedProfiles(t *testing.T) {
	derived := map[string]*emulator.Profile{}
	var b strings.Builder
	for _, d := range derivedProfiles {
		p := deriveShipped(t, d.name, d.config, d.gpu, d.dtype, d.effFrom, derived)
		derived[d.name] = p
		// Judged on measured steps where there are some (B300, Qwen3-32B).
		if d.gpu == "b300_sxm" {
			for _, tp := range []string{"tp1", "tp2", "tp4"} {
				sd, err := ReadStepDir(goldenDir + tp)
				if err != nil {
					t.Fatal(err)
				}
				sd.Dir = strings.TrimPrefix(sd.Dir, "../")
				c, err := CheckSteps(p, sd)
				if err != nil {
					t.Fatal(err)
				}
				errs := CheckResultErrors(c)
				p.Source.Checks = append(p.Source.Checks, errs...)
				for _, e := range errs {
					fmt.Fprintf(&b, "%-24s %s %-8s %5d steps  median %6.2f%%  p90 %6.2f%%\n", d.name, tp, e.Phase, e.Steps, e.MedianAPE, e.P90APE)
					if g, ok := derivedGuards[d.name+"/"+tp+"/"+e.Phase]; ok && (e.MedianAPE > g[0] || e.P90APE > g[1]) {
						t.Errorf("%s on %s %s: median %.2f%%, p90 %.2f%%: worse than the guard (%.1f%%, %.1f%%)", d.name, tp, e.Phase, e.MedianAPE, e.P90APE, g[0], g[1])
					}
				}
			}
		}
		path := filepath.Join("..", "sim", "emulator", "profiles", d.name+".yaml")
		if *update {
			if err := emulator.WriteProfileFile(path, p); err != nil {
				t.Fatal(err)
			}
		}
		sameAsShipped(t, path, p)
	}
	t.Logf("derived profiles against measured B300 steps (Qwen3-32B, vLLM 0.20.1):\n%s", b.String())
}
