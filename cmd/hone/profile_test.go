package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const (
	goldenSteps = "../../testdata/aiconfigurator/fpm-qwen3-32b-b300/"
	qwen32Cfg   = "../../testdata/aiconfigurator/model_configs/Qwen--Qwen3-32B_config.json"
	b300AR      = "../../testdata/aiconfigurator/systems/data/b300_sxm/comm/vllm/0.19.0/custom_allreduce_perf.parquet"
)

// stepDir writes a step-data directory: the TP 1 golden run's metadata and
// its step file's first lines, edited by edit (header and rows as lines).
func stepDir(t *testing.T, edit func(lines []string) []string) string {
	t.Helper()
	dir := t.TempDir()
	meta, err := os.ReadFile(goldenSteps + "tp1/vllm_metadata.json")
	if err != nil {
		t.Fatal(err)
	}
	csv, err := os.ReadFile(goldenSteps + "tp1/fpm_metrics_detail.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.ReplaceAll(string(csv), "\r\n", "\n"), "\n")[:200]
	if err := os.WriteFile(filepath.Join(dir, "vllm_metadata.json"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fpm_metrics_detail.csv"), []byte(strings.Join(edit(lines), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// setField sets a column of a CSV line by the header's name.
func setField(lines []string, line int, col, val string) []string {
	head := strings.Split(lines[0], ",")
	f := strings.Split(lines[line-1], ",")
	for i, h := range head {
		if h == col {
			f[i] = val
		}
	}
	lines[line-1] = strings.Join(f, ",")
	return lines
}

// wantBadInput runs hone with args and wants exit 2, a message saying
// every one of want, and nothing written to out (when out is set).
func wantBadInput(t *testing.T, name, out string, want []string, args ...string) {
	t.Helper()
	_, stderr, code := runHone(context.Background(), args...)
	if code != exitBadInput {
		t.Errorf("%s: exit %d, want 2; stderr %q", name, code, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("%s: stderr %q does not say %q", name, stderr, w)
		}
	}
	if out != "" {
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: %s written (or unreadable: %v); want nothing written", name, out, err)
		}
	}
}

func TestCalibrateStepsBadInput(t *testing.T) {
	tmp := t.TempDir()
	noLayers := filepath.Join(tmp, "config.json")
	if err := os.WriteFile(noLayers, []byte(`{"hidden_size": 5120, "num_attention_heads": 64, "intermediate_size": 25600, "vocab_size": 151936, "max_position_embeddings": 40960}`), 0o644); err != nil {
		t.Fatal(err)
	}
	good := stepDir(t, func(l []string) []string { return l })
	dropLatency := stepDir(t, func(l []string) []string {
		for i := range l {
			if k := strings.LastIndex(l[i], ","); k >= 0 {
				l[i] = l[i][:k]
			}
		}
		return l
	})
	negative := stepDir(t, func(l []string) []string { return setField(l, 3, "latency_ms", "-4.5") })
	nan := stepDir(t, func(l []string) []string { return setField(l, 7, "latency_ms", "NaN") })
	for name, c := range map[string]struct {
		args []string
		want []string
	}{
		"missing column": {[]string{"--steps", dropLatency, "--model", qwen32Cfg, "--gpu", "b300_sxm"}, []string{"--steps", "fpm_metrics_detail.csv", "line 1", `missing column "latency_ms"`}},
		"negative":       {[]string{"--steps", negative, "--model", qwen32Cfg, "--gpu", "b300_sxm"}, []string{"fpm_metrics_detail.csv", "line 3", "latency_ms", "-4.5"}},
		"NaN":            {[]string{"--steps", nan, "--model", qwen32Cfg, "--gpu", "b300_sxm"}, []string{"fpm_metrics_detail.csv", "line 7", "latency_ms", "NaN"}},
		"no layers":      {[]string{"--steps", good, "--model", noLayers, "--gpu", "b300_sxm"}, []string{"--model", noLayers, "num_hidden_layers: missing"}},
		"unknown GPU":    {[]string{"--steps", good, "--model", qwen32Cfg, "--gpu", "l4_pcie"}, []string{"--gpu", `unknown GPU "l4_pcie"`, "b300_sxm"}},
		"no model":       {[]string{"--steps", good, "--gpu", "b300_sxm"}, []string{"--model: required"}},
		"no dir":         {[]string{"--steps", filepath.Join(tmp, "nope"), "--model", qwen32Cfg, "--gpu", "b300_sxm"}, []string{"--steps", "nope"}},
		"both sources":   {[]string{"--steps", good, "--records", "r.json", "--model", qwen32Cfg, "--gpu", "b300_sxm"}, []string{"--steps and --records"}},
	} {
		out := filepath.Join(tmp, strings.ReplaceAll(name, " ", "-")+".yaml")
		wantBadInput(t, name, out, c.want, append([]string{"calibrate", "--out", out, "--bootstrap", "2"}, c.args...)...)
	}
}

func TestProfileCheckBadInput(t *testing.T) {
	tmp := t.TempDir()
	badMeta := stepDir(t, func(l []string) []string { return l })
	if err := os.WriteFile(filepath.Join(badMeta, "vllm_metadata.json"), []byte(`{"effective_config": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		args []string
		want []string
	}{
		"unknown profile": {[]string{"no-such-profile", "--steps", goldenSteps + "tp4"}, []string{"PROFILE", `unknown profile "no-such-profile"`}},
		"no steps flag":   {[]string{"qwen3-32b-b300"}, []string{"--steps: required"}},
		"missing dir":     {[]string{"qwen3-32b-b300", "--steps", filepath.Join(tmp, "nope")}, []string{"--steps", "nope"}},
		"no TP":           {[]string{"qwen3-32b-b300", "--steps", badMeta}, []string{"vllm_metadata.json", "tensor_parallel_size"}},
		"two profiles":    {[]string{"a", "b", "--steps", goldenSteps + "tp4"}, []string{"want one PROFILE"}},
	} {
		wantBadInput(t, name, "", c.want, append([]string{"profile", "check"}, c.args...)...)
	}
}

// TestProfileCheckJSON: the JSON is the shape, key for key, with
// the figures of the shipped profile on the held-out TP 4.
func TestProfileCheckJSON(t *testing.T) {
	stdout, stderr, code := runHone(context.Background(), "profile", "check", "qwen3-32b-b300", "--steps", goldenSteps+"tp4", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var k []string
		for s := range m {
			k = append(k, s)
		}
		sort.Strings(k)
		return k
	}
	if k := keys(got); !reflect.DeepEqual(k, []string{"all", "data", "misbooked_pairs", "phases", "profile", "profile_source", "tp"}) {
		t.Errorf("top-level keys %v", k)
	}
	if got["tp"] != 4.0 || got["profile_source"] != "fitted to measured steps" {
		t.Errorf("tp %v, profile_source %v; want 4, fitted to measured steps", got["tp"], got["profile_source"])
	}
	phases := got["phases"].(map[string]any)
	if k := keys(phases); !reflect.DeepEqual(k, []string{"context", "decode", "mixed"}) {
		t.Errorf("phases %v", k)
	}
	steps := 0.0
	for _, ph := range []string{"context", "decode", "mixed"} {
		st := phases[ph].(map[string]any)
		if k := keys(st); !reflect.DeepEqual(k, []string{"median_ape", "p90_ape", "steps"}) {
			t.Errorf("%s keys %v", ph, k)
		}
		if !(st["median_ape"].(float64) > 0 && st["p90_ape"].(float64) >= st["median_ape"].(float64)) {
			t.Errorf("%s: %v: want 0 < median <= p90", ph, st)
		}
		steps += st["steps"].(float64)
	}
	// TP 4's file has 6,899 steps, one line each after the header; a
	// mis-booked pair is scored as one.
	all := got["all"].(map[string]any)
	if all["steps"].(float64) != steps || steps+got["misbooked_pairs"].(float64) != 6899 {
		t.Errorf("all steps %v, phases %v, pairs %v: want all = Σ phases = 6899 − pairs", all["steps"], steps, got["misbooked_pairs"])
	}
}

func TestProfileDeriveBadInput(t *testing.T) {
	tmp := t.TempDir()
	noLayers := filepath.Join(tmp, "config.json")
	if err := os.WriteFile(noLayers, []byte(`{"hidden_size": 5120, "num_attention_heads": 64, "intermediate_size": 25600, "vocab_size": 151936, "max_position_embeddings": 40960}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tables := "../../testdata/aiconfigurator/systems/data/b300_sxm"
	for name, c := range map[string]struct {
		args []string
		want []string
	}{
		"no layers":      {[]string{"--model", noLayers, "--gpu", "b300_sxm", "--tables", tables}, []string{"--model", noLayers, "num_hidden_layers: missing"}},
		"unknown GPU":    {[]string{"--model", qwen32Cfg, "--gpu", "a100_pcie", "--tables", tables}, []string{"--gpu", `unknown GPU "a100_pcie"`}},
		"dtype":          {[]string{"--model", qwen32Cfg, "--gpu", "b300_sxm", "--dtype", "int4", "--tables", tables}, []string{"--dtype", "want bf16 or fp8"}},
		"no tables":      {[]string{"--model", qwen32Cfg, "--gpu", "b300_sxm"}, []string{"--efficiency-from: required without --tables"}},
		"missing tables": {[]string{"--model", qwen32Cfg, "--gpu", "b300_sxm", "--tables", filepath.Join(tmp, "none")}, []string{"--tables", "gemm_perf.parquet"}},
		"bad tp":         {[]string{"--model", qwen32Cfg, "--gpu", "b300_sxm", "--tables", tables, "--tp", "0"}, []string{"--tp 0"}},
		"host from derived": {[]string{"--model", qwen32Cfg, "--gpu", "b300_sxm", "--tables", tables, "--host-from", "qwen3-32b-h100"},
			[]string{"--host-from", "want one fitted to measured steps"}},
		"host twice": {[]string{"--model", qwen32Cfg, "--gpu", "b300_sxm", "--tables", tables, "--host-from", "qwen3-32b-b300", "--host-ms", "2"},
			[]string{"--host-from", "not both"}},
		"fp8 as bf16": {[]string{"--model", "../../testdata/aiconfigurator/model_configs/Qwen--Qwen3-32B-FP8_config.json", "--gpu", "h200_sxm",
			"--tables", "../../testdata/aiconfigurator/systems/data/h200_sxm", "--dtype", "bf16"}, []string{"--dtype bf16", "quant_method fp8"}},
		"weights fit nowhere": {[]string{"--model", "../../testdata/aiconfigurator/model_configs/meta-llama--Meta-Llama-3.1-70B_config.json", "--gpu", "h100_sxm",
			"--tables", "../../testdata/aiconfigurator/systems/data/h100_sxm", "--tp", "1"}, []string{"leave no room", "TP [1]"}},
	} {
		out := filepath.Join(tmp, strings.ReplaceAll(name, " ", "-")+".yaml")
		wantBadInput(t, name, out, c.want, append([]string{"profile", "derive", "--out", out}, c.args...)...)
	}
}

func TestProfileStepsBadInput(t *testing.T) {
	tmp := t.TempDir()
	notJSON := filepath.Join(tmp, "snap.json")
	if err := os.WriteFile(notJSON, []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "steps")
	for name, c := range map[string]struct {
		args []string
		want []string
	}{
		"no daemon":     {[]string{"--record", "r.json", "--out", out}, []string{"--daemon: required"}},
		"no record":     {[]string{"--daemon", notJSON, "--out", out}, []string{"--record: required"}},
		"no out":        {[]string{"--daemon", notJSON, "--record", "r.json"}, []string{"--out: required"}},
		"bad snapshot":  {[]string{"--daemon", notJSON, "--record", "r.json", "--out", out}, []string{"--daemon " + notJSON, "daemon snapshot"}},
		"missing files": {[]string{"--daemon", filepath.Join(tmp, "none.json"), "--record", "r.json", "--out", out}, []string{"--daemon", "none.json"}},
	} {
		wantBadInput(t, name, out, c.want, append([]string{"profile", "steps"}, c.args...)...)
	}
}
