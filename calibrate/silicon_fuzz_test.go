package calibrate

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadSilicon: any silicon file is read or refused with an error
// naming the file; rows that are read have positive finite latencies,
// non-negative sizes and a line number past the header.
func FuzzReadSilicon(f *testing.F) {
	good, err := os.ReadFile("testdata/silicon/three-rows.csv")
	if err != nil {
		f.Fatal(err)
	}
	lines := strings.Split(string(good), "\n")
	f.Add(string(good))
	f.Add(lines[0] + "\n" + strings.Replace(lines[1], ",10,8", ",10,-1", 1) + "\n")
	f.Add(lines[0] + "\n" + strings.Replace(lines[1], "silicon_concurrency=1", "silicon_concurrency=99999999999999999999", 1) + "\n")
	f.Add(lines[0] + "\n\"unterminated,\n")
	f.Add("id\n")
	f.Fuzz(func(t *testing.T, body string) {
		p := filepath.Join(t.TempDir(), "s.csv")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		rows, err := ReadSilicon(p)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, r := range rows {
			if r.Line < 2 || !(r.TTFTMs > 0) || !(r.TPOTMs > 0) || math.IsInf(r.TTFTMs+r.TPOTMs, 0) ||
				r.ISL < 0 || r.OSL < 0 || r.TP < 0 || r.PP < 0 || r.Concurrency < 0 {
				t.Fatalf("row read with bad figures: %+v", r)
			}
		}
	})
}
