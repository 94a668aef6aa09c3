package calibrate

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/hone-llm/hone/sim/emulator"
)

// TestDeriveFP8KVAttention: the tables' fp8-KV attention rows are read
// as measured (not the bf16 rows halved), and Derive fits an fp8 cache's
// decode KV read and prompt attention from them and nothing else: the
// same derivation without those rows has every other coefficient
// unchanged and no fp8 figure.
func TestDeriveFP8KVAttention(t *testing.T) {
	tabs, err := ReadOpTables(aicSystems+"data/h100_sxm", "0.19.0")
	if err != nil {
		t.Fatal(err)
	}
	if !tabs.HasFP8KV() {
		t.Fatal("the H100 tables have fp8-KV generation rows; none read")
	}
	// Two measured rows of generation_attention_perf.parquet: 64
	// sequences of 8,191 KV tokens, 8 query heads and 1 KV head of 128.
	for _, c := range []struct {
		fn   func(b, kvLen float64, heads, kv, hd int64) (float64, error)
		want float64
	}{{tabs.GenAttnMs, 0.10074667135874431}, {tabs.GenAttnMsFP8, 0.06263466676076253}} {
		got, err := c.fn(64, 8191, 8, 1, 128)
		if err != nil || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("attention at a measured row: %v, %v; want %v", got, err, c.want)
		}
	}
	// And of context_attention_perf.parquet: one fresh 4,096-token prompt,
	// 32 query heads and 4 KV heads of 128 (fp8 is the slower here).
	for _, c := range []struct {
		fn   func(n, ctx float64, heads, kv, hd int64) (float64, error)
		want float64
	}{{tabs.ContextAttnMs, 0.2258239984512329}, {tabs.ContextAttnMsFP8, 0.25253333648045856}} {
		got, err := c.fn(4096, 0, 32, 4, 128)
		if err != nil || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("context attention at a measured row: %v, %v; want %v", got, err, c.want)
		}
	}
	m, err := emulator.ModelFromHFConfig(aicModels+"Qwen--Qwen3-32B_config.json", "Qwen/Qwen3-32B")
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := emulator.LookupGPU("h100_sxm")
	if err != nil {
		t.Fatal(err)
	}
	ar, err := ReadAllReduceTable(aicSystems+"data/h100_sxm/comm/vllm/0.19.0/custom_allreduce_perf.parquet", "h100 all-reduce")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DeriveConfig{Name: "t", Model: m, GPU: gpu, Dtype: "bf16", TPs: []int{2, 4}, Tables: tabs, AllReduce: ar, HostMs: DefaultHostMs}
	with, err := Derive(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := *with.Steps
	if !(w.DecodeKVMsPerKFP8 > 0 && w.DecodeKVMsPerKFP8 < w.DecodeKVMsPerK) || !(w.PrefillAttnMsPerMFP8 > w.PrefillAttnMsPerM) ||
		!strings.Contains(with.Source.Method, "fp8-KV") {
		t.Errorf("fp8 decode KV %v against bf16 %v, prompt attention %v against %v; method %q", w.DecodeKVMsPerKFP8, w.DecodeKVMsPerK,
			w.PrefillAttnMsPerMFP8, w.PrefillAttnMsPerM, with.Source.Method)
	}
	tabs.genFP8 = nil
	without, err := Derive(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.DecodeKVMsPerKFP8, w.PrefillAttnMsPerMFP8 = 0, 0
	if o := *without.Steps; o.DecodeKVMsPerKFP8 != 0 || o.PrefillAttnMsPerMFP8 != 0 || strings.Contains(without.Source.Method, "fp8-KV") ||
		!slices.Equal(o.Coefficients(), w.Coefficients()) {
		t.Errorf("without fp8 rows: %+v; want %+v", o.Coefficients(), w.Coefficients())
	}
}
