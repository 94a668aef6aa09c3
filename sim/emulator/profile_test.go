package emulator

import (
	"math"
	"os"
	"path/filepath"
	"strings"
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

// TestTensorParallelFigures holds TP 2 on every hardware profile to the
// formula in PROFILES.md, written out here from its terms, and to the
// worked-figures table there.
func TestTensorParallelFigures(t *testing.T) {
	const (
		tp                            = 2.0
		layers, hidden, heads, headDi = 24.0, 896.0, 14.0, 64.0
		params, embed, bytesPerElem   = 494.03e6, 151936 * 896.0, 2.0
		// 2 KV heads split over 2 ranks: one each.
		kvPerGPU = layers * 2 * 1 * headDi * bytesPerElem
	)
	if got := Qwen25Coder05B.KVBytesPerTokenPerGPU(2); got != kvPerGPU {
		t.Errorf("KV bytes per token per GPU at TP 2: %d, want %v", got, kvPerGPU)
	}
	type gpu struct {
		profile                                  string
		peak, bw, mfu, mbu, overheadMs, launchUs float64
		graphMs, icBytesSec, icLatencyUs         float64
		memory, reserve                          float64
		// PROFILES.md's TP 2 row: decode 1 at 4096, eager, decode 64 at
		// 4096, prefill 128 on 3968, prefill 4096 cold; blocks at 0.9.
		table  [5]float64
		blocks int
	}
	for _, g := range []gpu{
		{"qwen2.5-coder-0.5b-a10", 125e12, 600e9, 0.35, 0.70, 1.5, 5, 0.05, 32e9, 15, 23028 * mib, 2 * gib,
			[5]float64{3.51, 5.14, 7.45, 4.41, 55.28}, 194197},
		{"qwen2.5-coder-0.5b-l4", 121e12, 300e9, 0.35, 0.70, 1.5, 5, 0.05, 32e9, 15, 23034 * mib, 2 * gib,
			[5]float64{4.75, 6.38, 12.47, 5.33, 56.66}, 194255},
		{"qwen2.5-coder-0.5b-h200", 989e12, 4.8e12, 0.20, 0.60, 1.0, 4, 0.04, 450e9, 5, 143771 * mib, 4 * gib,
			[5]float64{1.46, 2.76, 2.02, 1.84, 11.49}, 1331485},
	} {
		p, err := LookupProfile(g.profile)
		if err != nil {
			t.Fatal(err)
		}
		p.TP = tp
		// One rank's roofline: FLOPs and bytes halved, KV per GPU, plus
		// 2 ring all-reduces per layer of tokens × hidden × 2 B.
		want := func(tokens, sampled, attn, kvTokens, launchMs float64) float64 {
			flops := (2*(params-embed)*tokens + 2*embed*sampled + 4*layers*heads*headDi*attn) / tp
			bytes := params*bytesPerElem/tp + kvTokens*kvPerGPU
			allReduce := g.icLatencyUs/1000 + 2*(tp-1)/tp*tokens*hidden*bytesPerElem/g.icBytesSec*1000
			return max(flops/(g.peak*g.mfu)*1000, bytes/(g.bw*g.mbu)*1000) + g.overheadMs + launchMs + 2*layers*allReduce
		}
		decode := StepEntry{Tokens: 1, Context: 4096, Decode: true, Samples: true}
		decode64 := make([]StepEntry, 64)
		for i := range decode64 {
			decode64[i] = decode
		}
		piecewise := g.graphMs + layers*2*g.launchUs/1000
		for i, c := range []struct {
			e     []StepEntry
			eager bool
			want  float64
		}{
			{[]StepEntry{decode}, false, want(1, 1, 4097, 4097, g.graphMs)},
			{[]StepEntry{decode}, true, want(1, 1, 4097, 4097, layers*14*g.launchUs/1000)},
			{decode64, false, want(64, 64, 64*4097, 64*4097, g.graphMs)},
			{[]StepEntry{{Tokens: 128, Context: 3968, Samples: true}}, false, want(128, 1, 128*3968+128*129/2, 4096, piecewise)},
			{[]StepEntry{{Tokens: 4096, Samples: true}}, false, want(4096, 1, 4096*4097/2, 4096, piecewise)},
		} {
			got := p.StepMs(c.e, c.eager)
			if math.Abs(got-c.want) > 1e-9 {
				t.Errorf("%s TP 2 case %d: %.6f ms, want %.6f", g.profile, i, got, c.want)
			}
			if math.Abs(got-g.table[i]) > 0.006 {
				t.Errorf("%s TP 2 case %d: %.4f ms, PROFILES.md says %.2f", g.profile, i, got, g.table[i])
			}
		}
		wantBlocks := int((0.9*g.memory - params*bytesPerElem/tp - g.reserve) / (16 * kvPerGPU))
		if got := p.NumBlocks(16, 0.9); got != wantBlocks || got != g.blocks {
			t.Errorf("%s TP 2 blocks %d, want %d (PROFILES.md %d)", g.profile, got, wantBlocks, g.blocks)
		}
	}
	// One all-reduce of one decode token on an A10 pair: 15 µs plus
	// 896 × 2 B, of which 2(2−1)/2 cross the link at 32 GB/s.
	a10, _ := LookupProfile("qwen2.5-coder-0.5b-a10")
	a10.TP = 2
	if got, want := a10.AllReduceMs(1), 0.015+1792.0/32e9*1000; math.Abs(got-want) > 1e-15 {
		t.Errorf("A10 TP 2 all-reduce of one token: %v ms, want %v", got, want)
	}
	a10.TP = 1
	if got := a10.AllReduceMs(4096); got != 0 {
		t.Errorf("TP 1 all-reduce: %v ms, want 0", got)
	}
}

// TestTensorParallelOne: TP 0 and 1 are one GPU, exactly.
func TestTensorParallelOne(t *testing.T) {
	entries := [][]StepEntry{
		{{Tokens: 1, Context: 4096, Decode: true, Samples: true}},
		{{Tokens: 128, Context: 3968, Samples: true}, {Tokens: 1, Context: 100, Decode: true, Samples: true}},
	}
	for _, name := range ProfileNames() {
		p0, _ := LookupProfile(name)
		p1, _ := LookupProfile(name)
		p1.TP = 1
		for _, e := range entries {
			for _, eager := range []bool{false, true} {
				if a, b := p0.StepMs(e, eager), p1.StepMs(e, eager); a != b {
					t.Errorf("%s: TP 0 %v ms, TP 1 %v ms", name, a, b)
				}
			}
		}
		if a, b := p0.NumBlocks(16, 0.9), p1.NumBlocks(16, 0.9); a != b {
			t.Errorf("%s: TP 0 %d blocks, TP 1 %d", name, a, b)
		}
	}
}

func TestKVBytesPerTokenPerGPU(t *testing.T) {
	m := Qwen25Coder05B // 2 KV heads: replicated beyond TP 2
	for tp, want := range map[int]int{0: 12288, 1: 12288, 2: 6144, 4: 6144, 8: 6144} {
		if got := m.KVBytesPerTokenPerGPU(tp); got != want {
			t.Errorf("2 KV heads, TP %d: %d B, want %d", tp, got, want)
		}
	}
	m.KVHeads = 8
	for tp, want := range map[int]int{1: 49152, 2: 24576, 4: 12288, 8: 6144, 16: 6144} {
		if got := m.KVBytesPerTokenPerGPU(tp); got != want {
			t.Errorf("8 KV heads, TP %d: %d B, want %d", tp, got, want)
		}
	}
}

// TestExerciseIgnoresTP: the brief's rates are per engine, whatever it spans.
func TestExerciseIgnoresTP(t *testing.T) {
	ex, _ := LookupProfile("exercise")
	ex.TP = 4
	if got, want := ex.StepMs([]StepEntry{{Tokens: 4096, Samples: true}}, false), 1000+1000.0/2048; got != want {
		t.Errorf("exercise at TP 4: %v ms, want %v", got, want)
	}
	if got := ex.NumBlocks(16, 0.9); got != 1<<16 {
		t.Errorf("exercise at TP 4: %d blocks, want %d", got, 1<<16)
	}
}

func TestLinearCosts(t *testing.T) {
	p, _ := LookupProfile("qwen2.5-coder-0.5b-a10")
	blocks := p.NumBlocks(16, 0.9)
	p.Linear = &LinearCosts{StepBaseMs: 3.5, DecodePerSeqMs: 0.125, PrefillPerTokenMs: 1.0 / 64,
		PrefillPerContextMs: 1.0 / 1024, EagerStepMs: 1.5}
	mixed := []StepEntry{
		{Tokens: 1, Context: 4096, Decode: true, Samples: true},
		{Tokens: 1, Context: 10, Decode: true, Samples: true},
		{Tokens: 128, Context: 3968, Samples: true},
	}
	// 3.5 + 2 × 0.125 + 128/64 + 3968/1024 (+ 1.5 eager)
	for _, tp := range []int{1, 4} {
		p.TP = tp
		if got := p.StepMs(mixed, false); got != 9.625 {
			t.Errorf("TP %d: linear step %v ms, want 9.625", tp, got)
		}
		if got := p.StepMs(mixed, true); got != 11.125 {
			t.Errorf("TP %d: linear eager step %v ms, want 11.125", tp, got)
		}
	}
	if got := p.StepMs(nil, true); got != 0 {
		t.Errorf("empty step %v ms, want 0", got)
	}
	p.TP = 1
	if got := p.NumBlocks(16, 0.9); got != blocks {
		t.Errorf("linear blocks %d, want the roofline's %d", got, blocks)
	}
	if got, want := p.TransferMs(20e6), 1.0+20e6/20e9*1000; got != want {
		t.Errorf("linear transfer %v ms, want %v", got, want)
	}
	if got := p.LinkBytesPerSec(); got != 20e9 {
		t.Errorf("linear link %v B/s, want 20e9", got)
	}
}

func TestConfigTensorParallelSize(t *testing.T) {
	for _, c := range []struct {
		profile string
		tp      int
		wantTP  int
		wantErr string
	}{
		{"qwen2.5-coder-0.5b-h200", 0, 1, ""},
		{"qwen2.5-coder-0.5b-h200", 2, 2, ""},
		{"qwen2.5-coder-0.5b-a10", 64, 64, ""},
		{"exercise", 4, 4, ""},
		{"testdata/profiles/a10-linear.yaml", 2, 2, ""}, // no interconnect: Linear does not need one
		{"qwen2.5-coder-0.5b-a10", 65, 0, "--tensor-parallel-size 65: want 1..64"},
		{"qwen2.5-coder-0.5b-a10", -1, 0, "--tensor-parallel-size -1: want 1..64"},
	} {
		cfg := Config{Profile: c.profile, TensorParallelSize: c.tp}
		p, err := cfg.resolve()
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%s TP %d: error %v, want %q", c.profile, c.tp, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s TP %d: %v", c.profile, c.tp, err)
			continue
		}
		if p.TP != c.wantTP || cfg.TensorParallelSize != c.wantTP {
			t.Errorf("%s TP %d: profile TP %d, config %d, want %d", c.profile, c.tp, p.TP, cfg.TensorParallelSize, c.wantTP)
		}
	}
	// A roofline without an interconnect cannot model the all-reduces.
	path := filepath.Join(t.TempDir(), "nolink.yaml")
	if err := os.WriteFile(path, []byte("base: qwen2.5-coder-0.5b-a10\ngpu:\n  interconnect_bytes_sec: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Profile: path, TensorParallelSize: 2}
	if _, err := cfg.resolve(); err == nil || !strings.Contains(err.Error(), "gpu.interconnect_bytes_sec") {
		t.Errorf("TP 2 without an interconnect: %v, want an error naming gpu.interconnect_bytes_sec", err)
	}
	cfg = Config{Profile: path}
	if _, err := cfg.resolve(); err != nil {
		t.Errorf("TP 1 without an interconnect: %v", err)
	}
}

// TestConfigProfileValue: a profile passed by value is copied, so workers
// of different TP can share one.
func TestConfigProfileValue(t *testing.T) {
	shared, _ := LookupProfile("qwen2.5-coder-0.5b-h200")
	shared.Name = "measured"
	a := Config{ProfileValue: shared, TensorParallelSize: 2}
	b := Config{ProfileValue: shared}
	pa, err := a.resolve()
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if pa.TP != 2 || pb.TP != 1 || shared.TP != 0 || a.Profile != "measured" || pa == shared {
		t.Errorf("TP %d and %d, shared %d, name %q: want a copy each", pa.TP, pb.TP, shared.TP, a.Profile)
	}
	shared.MBU = 0
	c := Config{ProfileValue: shared}
	if _, err := c.resolve(); err == nil || err.Error() != "profile measured: mbu: want a fraction in (0, 1], got 0" {
		t.Errorf("invalid profile value: %v", err)
	}
}
