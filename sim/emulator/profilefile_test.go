package emulator

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestProfileFileRoundTrip: every built-in profile, written and read back,
// is the profile LookupProfile returns.
func TestProfileFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, name := range ProfileNames() {
		want, err := LookupProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := want.Validate(); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
		path := filepath.Join(dir, name+".yaml")
		if err := WriteProfileFile(path, want); err != nil {
			t.Fatal(err)
		}
		got, err := LookupProfile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			b, _ := os.ReadFile(path)
			t.Errorf("%s: read back\n%+v\nwant\n%+v\nfile:\n%s", name, got, want, b)
		}
	}
	// A Linear profile too, and TP stays the deployment's.
	p, _ := LookupProfile("qwen2.5-coder-0.5b-h200")
	p.Name = "fitted"
	p.Linear = &LinearCosts{StepBaseMs: 1.234, DecodePerSeqMs: 0.0123, PrefillPerTokenMs: 0.00457,
		PrefillPerContextMs: 1e-6, EagerStepMs: 1.3}
	p.TP = 4
	path := filepath.Join(dir, "fitted.yml")
	if err := WriteProfileFile(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := LoadProfileFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p.TP = 0
	if !reflect.DeepEqual(got, p) {
		t.Errorf("linear profile read back\n%+v\nwant\n%+v", got, p)
	}
}

func TestProfileFileExamples(t *testing.T) {
	// base fills what the file omits; only name and mfu differ.
	got, err := LookupProfile("testdata/profiles/h200-mfu30.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := LookupProfile("qwen2.5-coder-0.5b-h200")
	want.Name, want.MFU = "qwen2.5-coder-0.5b-h200-mfu30", 0.30
	if !reflect.DeepEqual(got, want) {
		t.Errorf("h200-mfu30.yaml:\n%+v\nwant\n%+v", got, want)
	}

	lin, err := LookupProfile("testdata/profiles/a10-linear.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a10, _ := LookupProfile("qwen2.5-coder-0.5b-a10")
	if lin.Model != a10.Model {
		t.Errorf("a10-linear.yaml model %+v, want %+v", lin.Model, a10.Model)
	}
	if got, want := lin.NumBlocks(16, 0.9), a10.NumBlocks(16, 0.9); got != want {
		t.Errorf("a10-linear.yaml: %d blocks, want the A10's %d", got, want)
	}
	step := []StepEntry{{Tokens: 1, Context: 4096, Decode: true, Samples: true}, {Tokens: 128, Context: 3968, Samples: true}}
	if got, want := lin.StepMs(step, true), 3.9+0.12+0.0204*128+0.00003*3968+1.63; got != want {
		t.Errorf("a10-linear.yaml step %v ms, want %v", got, want)
	}
}

// TestProfileFileBase: a nested mapping overrides only the keys it names;
// null removes a base's cost form.
func TestProfileFileBase(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p, err := LoadProfileFile(write("slow-link.yaml", "base: exercise\nexercise:\n  transfer_ms: 20\n"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := LookupProfile("exercise")
	want.Name, want.Exercise.TransferMs = "slow-link", 20
	if !reflect.DeepEqual(p, want) {
		t.Errorf("exercise with transfer_ms 20:\n%+v %+v\nwant\n%+v %+v", p, p.Exercise, want, want.Exercise)
	}
	if base, _ := LookupProfile("exercise"); base.Exercise.TransferMs != 8 {
		t.Errorf("loading a file changed the built-in exercise: transfer %v ms", base.Exercise.TransferMs)
	}
	p, err = LoadProfileFile(write("l.yaml", "base: exercise\nexercise: null\nlinear: {step_base_ms: 2}\ngpu: {memory_bytes: 1e10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Exercise != nil || p.Linear == nil || p.Linear.StepBaseMs != 2 || p.GPU.MemoryBytes != 1e10 {
		t.Errorf("exercise replaced by linear: %+v", p)
	}
}

func TestProfileFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, body, want string }{
		{"unknown-key.yaml", "base: exercise\nmfu_typo: 0.3\n", "field mfu_typo not found"},
		{"nested-unknown.yaml", "base: exercise\ngpu:\n  memory: 1\n", "field memory not found"},
		{"memory.yaml", "base: qwen2.5-coder-0.5b-a10\ngpu:\n  memory_bytes: 0\n", "memory.yaml: gpu.memory_bytes: want > 0, got 0"},
		{"mfu.yaml", "base: qwen2.5-coder-0.5b-a10\nmfu: 1.5\n", "mfu.yaml: mfu: want a fraction in (0, 1], got 1.5"},
		{"base.yaml", "base: qwen-7b\n", `base.yaml: base: unknown built-in profile "qwen-7b"`},
		{"both.yaml", "base: exercise\nlinear: {step_base_ms: 1}\n", "both.yaml: linear: a profile is exercise or linear, not both"},
		{"empty.yaml", "", "empty.yaml: empty"},
		{"type.yaml", "base: exercise\nmax_num_seqs: many\n", "cannot unmarshal !!str `many` into int"},
		{"two.yaml", "base: exercise\n---\nbase: exercise\n", "more than one YAML document"},
		{"nomodel.yaml", "linear: {step_base_ms: 1}\n", "nomodel.yaml: model.name: want a non-empty string"},
		{"negative.yaml", "base: qwen2.5-coder-0.5b-l4\nlinear: {decode_per_seq_ms: -0.1}\n", "negative.yaml: linear.decode_per_seq_ms: want >= 0, got -0.1"},
		{"nan.yaml", "base: qwen2.5-coder-0.5b-l4\nstep_overhead_ms: .nan\n", "nan.yaml: step_overhead_ms: want >= 0, got NaN"},
		{"roofline.yaml", "base: qwen2.5-coder-0.5b-l4\ngpu: {peak_flops: 0}\n", "roofline.yaml: gpu.peak_flops: want > 0, got 0"},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LookupProfile(path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "profile file "+path+": ") {
			t.Errorf("%s: error %v, want \"profile file %s: ...%s...\"", c.name, err, path, c.want)
		}
	}
	if _, err := LookupProfile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LookupProfile("h100"); err == nil || !strings.Contains(err.Error(), "or a .yaml profile file") {
		t.Errorf("unknown name: %v", err)
	}
	p, _ := LookupProfile("exercise")
	p.MaxNumSeqs = 0
	if err := WriteProfileFile(filepath.Join(dir, "bad.yaml"), p); err == nil || !strings.Contains(err.Error(), "max_num_seqs: want > 0") {
		t.Errorf("writing an invalid profile: %v", err)
	}
}
