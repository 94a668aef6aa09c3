package emulator

import (
	"context"
	"strings"
	"testing"
)

// TestKVCacheDType: an fp8 KV cache halves a token's KV bytes (so the
// cache holds twice the tokens, to the block); the decode KV read of the
// step costs becomes the measured fp8 one where the profile has it
// (derived from tables with fp8-KV attention rows) and half otherwise;
// the weights, all-reduces and other terms stay; an unknown dtype is
// refused naming the flag.
func TestKVCacheDType(t *testing.T) {
	base := Config{Profile: "qwen3-32b-h100", TensorParallelSize: 2}
	p, blocks, err := base.resolveEngine()
	if err != nil {
		t.Fatal(err)
	}
	fp8 := Config{Profile: "qwen3-32b-h100", TensorParallelSize: 2, KVCacheDType: "fp8"}
	q, blocks8, err := fp8.resolveEngine()
	if err != nil {
		t.Fatal(err)
	}
	if p.Model.KVBytesPerToken() != 2*q.Model.KVBytesPerToken() || blocks8 < 2*blocks-1 || blocks8 > 2*blocks+1 {
		t.Errorf("KV bytes/token %d → %d, blocks %d → %d: want half and double", p.Model.KVBytesPerToken(), q.Model.KVBytesPerToken(), blocks, blocks8)
	}
	if p.Steps.DecodeKVMsPerKFP8 <= 0 || q.Steps.DecodeKVMsPerK != p.Steps.DecodeKVMsPerKFP8 || p.Steps.PrefillAttnMsPerMFP8 <= 0 ||
		q.Steps.PrefillAttnMsPerM != p.Steps.PrefillAttnMsPerMFP8 || q.Steps.WeightsMs != p.Steps.WeightsMs || q.Model.WeightBytes() != p.Model.WeightBytes() {
		t.Errorf("steps: decode KV %v → %v (the profile's fp8 figure: %v), weights %v → %v", p.Steps.DecodeKVMsPerK, q.Steps.DecodeKVMsPerK, p.Steps.DecodeKVMsPerKFP8, p.Steps.WeightsMs, q.Steps.WeightsMs)
	}
	// A profile fitted to measured bf16-KV steps has no fp8 figure: half.
	fc := Config{Profile: "qwen3-32b-b300", TensorParallelSize: 2}
	fitted, _, err := fc.resolveEngine()
	if err != nil {
		t.Fatal(err)
	}
	fc.KVCacheDType = "fp8_e4m3"
	fitted8, _, err := fc.resolveEngine()
	if err != nil {
		t.Fatal(err)
	}
	if fitted.Steps.DecodeKVMsPerKFP8 != 0 || fitted8.Steps.DecodeKVMsPerK != fitted.Steps.DecodeKVMsPerK/2 || fitted8.Steps.PrefillAttnMsPerM != fitted.Steps.PrefillAttnMsPerM {
		t.Errorf("fitted profile: decode KV %v → %v, want half", fitted.Steps.DecodeKVMsPerK, fitted8.Steps.DecodeKVMsPerK)
	}
	// The built-in profile itself is not changed.
	if again, _ := LookupProfile("qwen3-32b-h100"); again.Steps.DecodeKVMsPerK != p.Steps.DecodeKVMsPerK || again.Model.KVBytesPerElem != 0 {
		t.Error("WithKVCacheDType changed the built-in profile")
	}
	_, err = Start(context.Background(), Config{Profile: "exercise", KVCacheDType: "int4"})
	if err == nil || !strings.Contains(err.Error(), "--kv-cache-dtype") {
		t.Errorf("int4: %v", err)
	}
}

// KVCacheNote: what a prediction's decode KV read rests on with another
// KV cache: measured fp8 attention, bytes-scaled, or no step cost at all;
// nothing for the model's own cache.
func TestKVCacheNote(t *testing.T) {
	for _, c := range []struct{ profile, dtype, want string }{
		{"qwen3-32b-h100", "fp8", "attention measured with fp8-KV kernels"},
		{"qwen3-32b-b300", "fp8_e5m2", "scaled with the bytes from the model's own (0.05059 → 0.0253"},
		{"qwen3-32b-h100", "", ""},
		{"qwen3-32b-h100", "bfloat16", ""},
		{"qwen2.5-coder-0.5b-h200", "fp8", "the roofline reads fewer KV bytes"},
		{"exercise", "fp8", "step costs do not change with it"},
	} {
		p, err := LookupProfile(c.profile)
		if err != nil {
			t.Fatal(err)
		}
		got := p.KVCacheNote(c.dtype)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s, %q: %q; want %q", c.profile, c.dtype, got, c.want)
		}
	}
}
