package emulator

import (
	"strings"
	"testing"
)

// TestValidationNote: a profile predicted on measured rows states their
// errors, one figure per way of drawing lengths; a hand-made one says it
// was never compared.
func TestValidationNote(t *testing.T) {
	vs := ProfileValidation("qwen3-32b-h100")
	if len(vs) != 3 || vs[0].Rows == 0 || vs[0].LengthRatio != 0 || vs[1].LengthRatio != 0.8 || vs[2].KVCacheDType != "fp8" || !(vs[0].TPOTMedian > 0) {
		t.Fatalf("qwen3-32b-h100: %+v", vs)
	}
	n := ValidationNote("qwen3-32b-h100")
	for _, w := range []string{"validated on", "silicon_h100_vllm.csv", "exact lengths", "[0.8 L, L]", "fp8 KV cache"} {
		if !strings.Contains(n, w) {
			t.Errorf("note %q does not say %q", n, w)
		}
	}
	if n := ValidationNote("qwen2.5-coder-0.5b-l4"); n != "not validated against measured requests" {
		t.Errorf("hand-made: %q", n)
	}
}
