package calibrate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/sim/emulator"
)

// TestPredictSiliconFixture: three rows on a hand-made profile whose every
// step costs 10 ms (frontend 0), so a closed loop of any size those steps
// hold has TTFT 10 ms (the prompt's one step) and TPOT 10 ms, by hand:
// row 2 (one client; 10 and 8 measured) has APEs 0 and 25; row 3 (four
// clients from silicon_concurrency, though batch_size says 1; 20 and 10
// measured) 50 and 0; row 4 (sglang) is skipped.
func TestPredictSiliconFixture(t *testing.T) {
	rows, err := ReadSilicon("testdata/silicon/three-rows.csv")
	if err != nil {
		t.Fatal(err)
	}
	if rows[1].Concurrency != 4 {
		t.Fatalf("row 3: concurrency %d, want 4 from silicon_concurrency", rows[1].Concurrency)
	}
	fix, err := emulator.LoadProfileFile("testdata/silicon/fixture-tiny-h100.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res := PredictSilicon(rows, SiliconConfig{Profiles: []*emulator.Profile{fix}})
	if len(res.Rows) != 2 || len(res.Skipped) != 1 || res.Skipped[0].Line != 4 || !strings.Contains(res.Skipped[0].Reason, "sglang") {
		t.Fatalf("rows %+v skipped %+v", res.Rows, res.Skipped)
	}
	want := []struct{ ttft, tpot, ttftAPE, tpotAPE float64 }{{10, 10, 0, 25}, {10, 10, 50, 0}}
	for i, w := range want {
		r := res.Rows[i]
		if r.TTFT.Predicted != w.ttft || r.TPOT.Predicted != w.tpot || r.TTFT.APE != w.ttftAPE || r.TPOT.APE != w.tpotAPE || r.Profile != "fixture-tiny-h100" {
			t.Errorf("row %d: %+v, want TTFT %v (APE %v), TPOT %v (APE %v)", r.Line, r, w.ttft, w.ttftAPE, w.tpot, w.tpotAPE)
		}
	}
	s := res.Summary
	if s.Rows != 3 || s.Predicted != 2 || s.TTFT != (APESummary{25, 50}) || s.TPOT != (APESummary{12.5, 25}) {
		t.Errorf("summary %+v", s)
	}
	// Without a profile of its model, a row is skipped saying so.
	res = PredictSilicon(rows[:1], SiliconConfig{})
	if len(res.Rows) != 0 || !strings.Contains(res.Skipped[0].Reason, "no profile of fixture/Tiny-8B") {
		t.Errorf("no profiles: %+v", res)
	}
}

// TestReadSiliconBadInput: the error names the file, the line and the column.
func TestReadSiliconBadInput(t *testing.T) {
	good, err := os.ReadFile("testdata/silicon/three-rows.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(good), "\n")
	for _, c := range []struct {
		name, body string
		want       []string
	}{
		{"missing column", strings.Replace(string(good), "silicon_tpot_ms", "tpot", 1), []string{"line 1", `"silicon_tpot_ms"`}},
		{"non-numeric", lines[0] + "\n" + strings.Replace(lines[1], ",64,5,", ",sixty,5,", 1) + "\n", []string{"line 2", "column isl"}},
		{"negative latency", lines[0] + "\n" + lines[1] + "\n" + strings.Replace(lines[2], ",20,10", ",-20,10", 1) + "\n", []string{"line 3", "column silicon_ttft_ms"}},
		{"NaN latency", lines[0] + "\n" + strings.Replace(lines[1], ",10,8", ",10,NaN", 1) + "\n", []string{"line 2", "column silicon_tpot_ms"}},
		{"empty", lines[0] + "\n", []string{"no rows"}},
	} {
		p := filepath.Join(t.TempDir(), "bad.csv")
		if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadSilicon(p)
		if err == nil {
			t.Errorf("%s: read", c.name)
			continue
		}
		for _, w := range append(c.want, p) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
}

// TestPredictSiliconDisagg: a disaggregated row (no batch_size: its
// clients are the decode pool's batch × workers) is predicted on its pools
// with the KV handoff; with every step 10 ms, TPOT is the decode worker's
// 10 ms exactly and TTFT at least the prefill leg's step plus a decode
// step.
func TestPredictSiliconDisagg(t *testing.T) {
	good, err := os.ReadFile("testdata/silicon/three-rows.csv")
	if err != nil {
		t.Fatal(err)
	}
	head := strings.Split(string(good), "\n")[0]
	cols := strings.Split(head, ",")
	vals := map[string]string{"id": "pd", "silicon_data_source": "fixture", "backend": "vllm", "model_path": "fixture/Tiny-8B", "system": "h100_sxm",
		"mode": "disagg", "isl": "64", "osl": "9", "prefill_batch_size": "1", "prefill_num_workers": "2", "prefill_tp_size": "1",
		"decode_batch_size": "3", "decode_num_workers": "1", "decode_tp_size": "2", "silicon_ttft_ms": "40", "silicon_tpot_ms": "10"}
	row := make([]string, len(cols))
	for i, c := range cols {
		row[i] = vals[c]
	}
	p := filepath.Join(t.TempDir(), "pd.csv")
	if err := os.WriteFile(p, []byte(head+"\n"+strings.Join(row, ",")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := ReadSilicon(p)
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; r.Concurrency != 3 || r.Prefill != (SiliconPool{Workers: 2, TP: 1, Batch: 1}) || r.Decode != (SiliconPool{Workers: 1, TP: 2, Batch: 3}) {
		t.Fatalf("row read as %+v", r)
	}
	fix, err := emulator.LoadProfileFile("testdata/silicon/fixture-tiny-h100.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res := PredictSilicon(rows, SiliconConfig{Profiles: []*emulator.Profile{fix}})
	if len(res.Rows) != 1 {
		t.Fatalf("skipped: %+v", res.Skipped)
	}
	r := res.Rows[0]
	if r.Mode != "disagg" || r.Prefill == nil || r.Decode == nil || r.TPOT.Predicted != 10 || r.TTFT.Predicted < 20 {
		t.Errorf("predicted %+v (TTFT %v, TPOT %v)", r, r.TTFT.Predicted, r.TPOT.Predicted)
	}
}
