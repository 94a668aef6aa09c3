package emulator

import (
	"slices"
	"testing"
)

// newTestEngine is an engine driven by hand, step by step, without a loop.
func newTestEngine(t *testing.T, cfg Config, blocks int) *engine {
	t.Helper()
	prof, err := cfg.resolve()
	if err != nil {
		t.Fatal(err)
	}
	return &engine{cfg: &cfg, prof: prof, scale: 1, kv: newKVCache(blocks, cfg.BlockSize, !cfg.DisablePrefixCaching),
		inbox: make(chan msg, 16), clock: newClock(1), metrics: newMetrics("m"), holds: map[string]*hold{}}
}

func (e *engine) addTest(id string, prompt []int, maxTokens int, at float64) *request {
	r := &request{id: id, prompt: prompt, maxTokens: maxTokens, ignoreEOS: true, arrivalMs: at,
		promptHash: hashTokens(0, prompt), out: newStream()}
	e.handle(msg{kind: msgAdd, req: r})
	return r
}

// step runs one scheduled step to completion and returns what it held:
// request id -> new tokens.
func (e *engine) stepTest() (map[string]int, float64) {
	p, start := e.schedule()
	got := map[string]int{}
	for _, pe := range p.plan {
		got[pe.r.id] = pe.n
	}
	end := start + e.prof.StepMs(p.entries(nil), false)
	e.complete(p, end)
	e.clockMs = end
	return got, end
}

// TestChunkedPrefillSharesStepsWithDecodes: under a 64-token budget a
// running decode keeps its one token per step while a 200-token prompt is
// prefilled in chunks of the remaining 63, and the decode's steps get longer
// while they share.
func TestChunkedPrefillSharesStepsWithDecodes(t *testing.T) {
	e := newTestEngine(t, Config{Profile: "qwen2.5-coder-0.5b-a10", MaxNumBatchedTokens: 64}, 1000)
	a := e.addTest("a", suffix(1, 10), 20, 0)
	if got, _ := e.stepTest(); !maps1(got, map[string]int{"a": 10}) {
		t.Fatalf("step 1: %v", got)
	}
	soloStart := e.clockMs
	e.stepTest()
	solo := e.clockMs - soloStart                                  // one decode alone
	e.addTest("b", suffix(2, 200), 5, e.clockMs-e.prof.FrontendMs) // the engine core has it now
	var chunks []int
	for len(chunks) < 4 {
		got, _ := e.stepTest()
		if got["a"] != 1 {
			t.Fatalf("decode starved in a shared step: %v", got)
		}
		chunks = append(chunks, got["b"])
	}
	// 200 = 63 + 63 + 63 + 11, then b decodes too.
	if !slices.Equal(chunks, []int{63, 63, 63, 11}) {
		t.Errorf("prefill chunks %v, want [63 63 63 11]", chunks)
	}
	if got, _ := e.stepTest(); !maps1(got, map[string]int{"a": 1, "b": 1}) {
		t.Errorf("after prefill: %v", got)
	}
	shared := a.lastMs - a.firstMs
	if !(shared > solo*float64(a.output-1)) {
		t.Errorf("decode of a not slowed by b's chunks: %v over %d tokens, alone %v/token", shared, a.output-1, solo)
	}
}

// TestPreemptionByRecompute: when blocks run out, the newest running
// sequence is preempted, recomputed later, and still produces exactly the
// tokens it would have produced alone.
func TestPreemptionByRecompute(t *testing.T) {
	// 12 blocks of 16: two 60-token prompts (4 blocks each) growing to 100
	// tokens (7 blocks each) cannot both fit.
	e := newTestEngine(t, Config{Profile: "exercise", MaxNumSeqs: 4}, 12)
	a := e.addTest("a", suffix(1, 60), 40, 0)
	b := e.addTest("b", suffix(2, 60), 40, 0)
	for i := 0; i < 500 && !(a.finished && b.finished); i++ {
		e.stepTest()
	}
	if !a.finished || !b.finished {
		t.Fatal("requests did not finish")
	}
	if b.preemptions == 0 || a.preemptions != 0 {
		t.Errorf("preemptions a=%d b=%d, want only the newer (b) preempted", a.preemptions, b.preemptions)
	}
	for _, r := range []*request{a, b} {
		want := make([]int, 40)
		for k := range want {
			want[k] = outputToken(r.promptHash, k)
		}
		toks, res := r.out.take(0)
		if !slices.Equal(toks, want) || res.FinishReason != "length" {
			t.Errorf("%s: tokens after preemption differ from the deterministic output", r.id)
		}
	}
	if e.kv.numFree != 12 {
		t.Errorf("%d of 12 blocks free after both finished", e.kv.numFree)
	}
}

func maps1(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
