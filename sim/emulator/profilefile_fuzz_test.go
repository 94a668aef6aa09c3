package emulator

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParseProfile: any bytes as a profile file either fail with an error
// or give a valid profile that writes and reads back identical and whose
// steps and transfers cost a finite, non-negative time.
func FuzzParseProfile(f *testing.F) {
	for _, name := range []string{"a10-linear.yaml", "h200-mfu30.yaml"} {
		if b, err := os.ReadFile(filepath.Join("testdata", "profiles", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("base: qwen2.5-coder-0.5b-l4\nmfu: 0.5\n"))
	f.Add([]byte("base: exercise\n"))
	f.Add([]byte("name: x\nlinear: {step_base_ms: 1}\n"))
	f.Add([]byte("---\n---\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseProfileFile(b, "fuzz.yaml")
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("loaded an invalid profile: %v", err)
		}
		steps := [][]StepEntry{
			{{Tokens: 1, Context: 4096, Decode: true, Samples: true}},
			{{Tokens: 2048, Context: 0}, {Tokens: 1, Context: 100, Decode: true, Samples: true}},
		}
		for _, st := range steps {
			for _, eager := range []bool{false, true} {
				if ms := p.StepMs(st, eager); math.IsNaN(ms) || math.IsInf(ms, 0) || ms < 0 {
					t.Fatalf("StepMs = %v for %+v (eager %v)", ms, st, eager)
				}
			}
		}
		if ms := p.TransferMs(1 << 20); math.IsNaN(ms) || math.IsInf(ms, 0) || ms < 0 {
			t.Fatalf("TransferMs = %v", ms)
		}
		path := filepath.Join(dir, "round.yaml")
		if err := WriteProfileFile(path, p); err != nil {
			t.Fatalf("a loaded profile does not write: %v", err)
		}
		back, err := LoadProfileFile(path)
		if err != nil {
			t.Fatalf("written profile does not load: %v", err)
		}
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("round trip changed the profile:\n%+v\n%+v", p, back)
		}
	})
}
