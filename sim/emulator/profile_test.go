package emulator

import (
	"math"
	"testing"
)

func TestProfileFigures(t *testing.T) {
	if got := Qwen25Coder05B.KVBytesPerToken(); got != 12288 {
		t.Errorf("KV bytes per token %d, want 12288", got)
	}
	ex, _ := LookupProfile("exercise")
	d := 1000.0 / 2048
	for _, c := range []struct {
		name    string
		entries []StepEntry
		want    float64
	}{
		{"colocated prefill step samples the first token", []StepEntry{{Tokens: 128, Context: 3968, Samples: true}}, 31.25 + d},
		{"prefill worker's remote-decode sample is free", []StepEntry{{Tokens: 128, Context: 3968, Samples: true, RemoteDecode: true}}, 31.25},
		{"decode step", []StepEntry{{Tokens: 1, Context: 4100, Decode: true, Samples: true}}, d},
		{"chunk that does not finish the prompt", []StepEntry{{Tokens: 2048, Context: 0}}, 500},
	} {
		if got := ex.StepMs(c.entries, false); got != c.want {
			t.Errorf("%s: %v ms, want %v", c.name, got, c.want)
		}
	}
	if got := ex.TransferMs(1 << 30); got != 8 {
		t.Errorf("exercise transfer %v ms, want 8", got)
	}
	// Worked figures in PROFILES.md, to 0.01 ms.
	a10, _ := LookupProfile("qwen2.5-coder-0.5b-a10")
	h200, _ := LookupProfile("qwen2.5-coder-0.5b-h200")
	for _, c := range []struct {
		p     *Profile
		e     []StepEntry
		eager bool
		want  float64
	}{
		{a10, []StepEntry{{Tokens: 1, Context: 4096, Decode: true, Samples: true}}, false, 4.02},
		{a10, []StepEntry{{Tokens: 1, Context: 4096, Decode: true, Samples: true}}, true, 5.65},
		{a10, []StepEntry{{Tokens: 4096, Samples: true}}, false, 85.31},
		{h200, []StepEntry{{Tokens: 128, Context: 3968, Samples: true}}, false, 1.92},
	} {
		if got := c.p.StepMs(c.e, c.eager); math.Abs(got-c.want) > 0.006 {
			t.Errorf("%s %+v eager=%v: %.4f ms, want %.2f", c.p.Name, c.e, c.eager, got, c.want)
		}
	}
	if got := a10.NumBlocks(16, 0.9); got != 94586 {
		t.Errorf("A10 blocks %d, want 94586", got)
	}
	if got := h200.NumBlocks(16, 0.9); got != 663229 {
		t.Errorf("H200 blocks %d, want 663229", got)
	}
}
