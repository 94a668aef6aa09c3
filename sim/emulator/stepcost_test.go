package emulator

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func TestAllReduceModel(t *testing.T) {
	a := AllReduceModel{Points: map[int][]ARPoint{2: {{Elements: 1000, Ms: 0.01}, {Elements: 3000, Ms: 0.03}}}, LatencyUs: 10, BusBytesPerSec: 1e9}
	for _, c := range []struct {
		tp       int
		elements float64
		want     float64
	}{
		{1, 5000, 0},                         // one GPU: none
		{2, 10, 0.01},                        // below the table: its first point
		{2, 2000, 0.02},                      // interpolated
		{2, 5000, 0.05},                      // beyond: the last segment's slope
		{4, 1000, 0.01 + 1.5*1000*2/1e9*1e3}, // no points for TP 4: the spec, 2(4−1)/4 of 2 bytes each
	} {
		if got := a.Ms(c.tp, c.elements); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Ms(%d, %v) = %v, want %v", c.tp, c.elements, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	// A chunk continuing on 4,095 cached tokens, a cold prompt, two decodes.
	s := Summarize([]StepEntry{{Tokens: 1, Context: 4095}, {Tokens: 4096}, {Tokens: 1, Context: 4096, Decode: true}, {Tokens: 1, Context: 4097, Decode: true}})
	want := StepSummary{PrefillTokens: 4097, PrefillRequests: 2, PrefillKV: 4095, PrefillLenVar: 0, DecodeRequests: 2, DecodeKV: 8195}
	if s != want {
		t.Fatalf("Summarize = %+v, want %+v", s, want)
	}
	if s.Phase() != "mixed" || s.Tokens() != 4099 {
		t.Errorf("phase %q tokens %d", s.Phase(), s.Tokens())
	}
	// Exact when the cached tokens are one sequence's: 1×4095 + 1/2 + 4096²/2.
	if got, want := s.AttentionPairs(), (2*4096.0*4096-4095.0*4095)/2; got != want {
		t.Errorf("AttentionPairs = %v, want %v", got, want)
	}
}

// TestStepsProfileFile: a steps profile survives its file, and costs a
// step as its parts say: host, GPU split by TP on the right side of the
// knee, and the all-reduces.
func TestStepsProfileFile(t *testing.T) {
	p, err := LookupProfile("qwen3-32b-b300")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := WriteProfileFile(path, p); err != nil {
		t.Fatal(err)
	}
	q, err := LoadProfileFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := q.Steps
	if c == nil {
		t.Fatal("steps lost in the file")
	}
	decode := []StepEntry{{Tokens: 1, Context: 4095, Decode: true, Samples: true}}
	q.TP = 4
	want := c.FixedMs + c.DecodeSeqMs + (c.WeightsMs+c.DecodeKVMsPerK*4096/1e3)/4 + float64(c.AllReduces)*c.AllReduce.Ms(4, float64(q.Model.Hidden))
	if got := q.StepMs(decode, false); math.Abs(got-want) > 1e-9 {
		t.Errorf("decode step at TP 4: %v ms, want %v", got, want)
	}
	if q.SourceKind() != SourceFittedSteps || len(q.Source.Data) == 0 || q.Source.StdErr["weights_ms"] <= 0 {
		t.Errorf("source %+v: want fitted to measured steps, with data and standard errors", q.Source)
	}
	if k := c.Knee(); !(k > 100 && k < 1000) {
		t.Errorf("knee %v tokens: want where a bf16 GEMM turns compute-bound (hundreds)", k)
	}
}

func TestStepCostsHoldFor(t *testing.T) {
	one := &StepCosts{AllReduces: 2, AllReduce: AllReduceModel{BusBytesPerSec: 1e11}, TPs: []int{2}}
	if err := one.HoldsFor(2); err != nil {
		t.Errorf("TP 2 of a TP-2 fit: %v", err)
	}
	if err := one.HoldsFor(4); err == nil || !strings.Contains(err.Error(), "TP [2] only") {
		t.Errorf("TP 4 of a TP-2 fit: %v, want refused", err)
	}
	none := &StepCosts{AllReduces: 2}
	if err := none.HoldsFor(1); err != nil {
		t.Errorf("TP 1 needs no all-reduce: %v", err)
	}
	if err := none.HoldsFor(2); err == nil {
		t.Error("TP 2 without all-reduce figures: want refused")
	}
	// hone sim serve takes a TP the costs hold for, and no other.
	c := Config{Profile: "qwen3-32b-b300", TensorParallelSize: 4}
	if _, err := c.resolve(); err != nil {
		t.Errorf("qwen3-32b-b300 at TP 4: %v", err)
	}
	path := filepath.Join(t.TempDir(), "tp2-only.yaml")
	p, _ := LookupProfile("qwen3-32b-b300")
	p.Steps.TPs = []int{2}
	if err := WriteProfileFile(path, p); err != nil {
		t.Fatal(err)
	}
	c = Config{Profile: path, TensorParallelSize: 4}
	if _, err := c.resolve(); err == nil || !strings.Contains(err.Error(), "--tensor-parallel-size 4") {
		t.Errorf("a TP-2 fit at TP 4: %v, want refused naming the flag", err)
	}
}
