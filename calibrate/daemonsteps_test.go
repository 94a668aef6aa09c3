package calibrate

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/diagnose"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// TestStepsFromEvidence: two requests on a grid of daemon steps, joined
// into exactly what each step held, and written and read back as a
// step-data directory.
func TestStepsFromEvidence(t *testing.T) {
	const ms = int64(1e6)
	base := int64(1e12)
	var steps []diagnose.EngineStep
	for i := int64(0); i < 6; i++ { // 8 ms of GPU every 10 ms
		steps = append(steps, diagnose.EngineStep{StartNs: base + i*10*ms, EndNs: base + i*10*ms + 8*ms})
	}
	after := func(step int64) int64 { return base + step*10*ms + 9*ms } // a chunk after step's end
	intp := func(v int) *int { return &v }
	a := schema.RequestRecord{Outcome: schema.OutcomeOK, PromptTokens: intp(3000), CachedTokens: intp(0),
		Sent:   schema.Stamp{MonoNs: base - ms},
		Chunks: schema.Chunks{MonoNs: []int64{after(1), after(2), after(3)}, TokenIDs: [][]int{{1}, {2}, {3}}}}
	b := schema.RequestRecord{Outcome: schema.OutcomeOK, PromptTokens: intp(100), CachedTokens: intp(64),
		Sent:   schema.Stamp{MonoNs: base + 10*ms + 1},
		Chunks: schema.Chunks{MonoNs: []int64{after(2), after(3), after(4)}, TokenIDs: [][]int{{1}, {2}, {3}}}}
	failed := schema.RequestRecord{Outcome: schema.OutcomeTimeout, PromptTokens: intp(50), Chunks: schema.Chunks{MonoNs: []int64{after(5)}}}
	spec, err := deploy.LoadSpec("../examples/emulator-colocated-tp2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := json.Marshal(spec)
	var cfg map[string]any
	_ = json.Unmarshal(sb, &cfg)
	rec := &schema.Record{Kind: schema.KindEmulated, Config: cfg, TimeScale: 2, Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{{Requests: []schema.RequestRecord{a, b, failed}}}}}}
	ev := diagnose.KernelEvidence{Steps: map[int][]diagnose.EngineStep{4242: steps}}

	d, err := StepsFromEvidence(ev, 0, rec, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []emulator.StepSummary{
		{PrefillTokens: 2048, PrefillRequests: 1},                                                 // A's first chunk
		{PrefillTokens: 952, PrefillRequests: 1, PrefillKV: 2048},                                 // A's last chunk (B sent during this step)
		{PrefillTokens: 36, PrefillRequests: 1, PrefillKV: 64, DecodeRequests: 1, DecodeKV: 3000}, // B's prompt beyond its cache; A's 2nd token
		{DecodeRequests: 2, DecodeKV: 3001 + 100},
		{DecodeRequests: 1, DecodeKV: 101},
	}
	if d.TP != 2 || len(d.Steps) != len(want) {
		t.Fatalf("TP %d, %d steps: %+v; want TP 2 and %d steps", d.TP, len(d.Steps), d.Steps, len(want))
	}
	for i, s := range d.Steps {
		if s.Summary != want[i] || s.Counter != int64(i) || s.Ms != 4 {
			t.Errorf("step %d: %+v counter %d, %v ms; want %+v, counter %d, 4 ms (8 ms at time scale 2)", i, s.Summary, s.Counter, s.Ms, want[i], i)
		}
	}
	dir := filepath.Join(t.TempDir(), "steps")
	if err := WriteStepDir(dir, d); err != nil {
		t.Fatal(err)
	}
	back, err := ReadStepDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.TP != 2 || len(back.Steps) != len(want) || back.RecordKind != schema.KindEmulated {
		t.Fatalf("read back: TP %d, %d steps, record kind %q", back.TP, len(back.Steps), back.RecordKind)
	}
	for i, s := range back.Steps {
		if s.Summary != want[i] || s.Ms != 4 || s.Phase != want[i].Phase() {
			t.Errorf("read back step %d: %+v %v ms %s", i, s.Summary, s.Ms, s.Phase)
		}
	}

	// Without cached_tokens, the steps that may hold b's prompt (its first
	// token's step and, for a 100-token prompt, no other) are left out.
	rec.Runs[0].Levels[0].Requests[1].CachedTokens = nil
	d, err = StepsFromEvidence(ev, 0, rec, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Steps) != len(want)-1 || d.Steps[2].Summary != want[3] {
		t.Errorf("without b's cached tokens: %+v; want step 2 left out", d.Steps)
	}

	// Two engines' steps and no --pid: which one is ambiguous.
	ev.Steps[77] = steps
	if _, err := StepsFromEvidence(ev, 0, rec, 2048, 0); err == nil {
		t.Error("steps of two processes, no pid: want an error naming them")
	}
}
