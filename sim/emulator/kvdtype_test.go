package emulator

import (
	"context"
	"strings"
	"testing"
)

// TestKVCacheDType: an fp8 KV cache halves a token's KV bytes (so the
// cache holds twice the tokens, to the block) and the decode KV read of
// step costs; the weights, all-reduces and other terms stay; an unknown
// dtype is refused naming the flag.
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
	if q.Steps.DecodeKVMsPerK != p.Steps.DecodeKVMsPerK/2 || q.Steps.WeightsMs != p.Steps.WeightsMs || q.Model.WeightBytes() != p.Model.WeightBytes() {
		t.Errorf("steps: decode KV %v → %v, weights %v → %v", p.Steps.DecodeKVMsPerK, q.Steps.DecodeKVMsPerK, p.Steps.WeightsMs, q.Steps.WeightsMs)
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
