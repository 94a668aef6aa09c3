package calibrate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadStepDir: any step file is read or refused with an error naming
// the file; a file that is read has only finite, non-negative figures and
// positive latencies.
func FuzzReadStepDir(f *testing.F) {
	meta, err := os.ReadFile(goldenDir + "tp1/" + MetadataFile)
	if err != nil {
		f.Fatal(err)
	}
	golden, err := os.ReadFile(goldenDir + "tp1/" + StepsFile)
	if err != nil {
		f.Fatal(err)
	}
	lines := strings.SplitN(string(golden), "\n", 6)
	f.Add(strings.Join(lines[:5], "\n"))
	f.Add(lines[0] + "\ncontext,sweep,1,128,1,0,0,0,0,0,0,0,0,0,0,0,0,0,-1\n")
	f.Add(lines[0] + "\ncontext,sweep,1,128,1,0,NaN,0,0,0,0,0,0,0,0,0,0,0,12\n")
	f.Add("phase,latency_ms\nx,1\n")
	f.Fuzz(func(t *testing.T, csv string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, MetadataFile), meta, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, StepsFile), []byte(csv), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := ReadStepDir(dir)
		if err != nil {
			if !strings.Contains(err.Error(), StepsFile) {
				t.Errorf("error %q does not name %s", err, StepsFile)
			}
			return
		}
		for _, s := range d.Steps {
			x := s.Summary
			if !(s.Ms > 0) || x.PrefillTokens < 0 || x.PrefillRequests < 0 || x.PrefillKV < 0 || x.DecodeRequests < 0 || x.DecodeKV < 0 || !(x.PrefillLenVar >= 0) {
				t.Errorf("line %d read as %+v, %v ms", s.Line, x, s.Ms)
			}
			if s.Phase == "" {
				t.Errorf("line %d: an empty step was read", s.Line)
			}
		}
	})
}
