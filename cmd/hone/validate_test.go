package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hone validate silicon: the fixture's JSON has the documented shape; bad
// input exits 2 naming the line and column, the flag or the folder.
func TestValidateSiliconCLI(t *testing.T) {
	fix := filepath.Join("..", "..", "calibrate", "testdata", "silicon")
	stdout, stderr, code := runHone(context.Background(), "validate", "silicon", filepath.Join(fix, "three-rows.csv"), "--profiles", fix, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Rows []struct {
			ID   string             `json:"id"`
			TP   int                `json:"tp"`
			TTFT map[string]float64 `json:"ttft_ms"`
			TPOT map[string]float64 `json:"tpot_ms"`
		} `json:"rows"`
		Skipped []struct{ ID, Reason string } `json:"skipped"`
		Summary struct {
			Rows, Predicted int
			TTFT            map[string]float64 `json:"ttft"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(res.Rows) != 2 || res.Rows[1].TP != 2 || res.Rows[1].TTFT["ape"] != 50 || res.Rows[0].TPOT["measured"] != 8 ||
		len(res.Skipped) != 1 || res.Summary.Rows != 3 || res.Summary.Predicted != 2 || res.Summary.TTFT["median_ape"] != 25 {
		t.Errorf("JSON: %s", stdout)
	}
	// --by: one group per TP, each the one row's errors, signed.
	stdout, stderr, code = runHone(context.Background(), "validate", "silicon", filepath.Join(fix, "three-rows.csv"), "--profiles", fix, "--by", "tp", "-o", "json")
	var by struct {
		Rows []struct {
			TTFT map[string]float64 `json:"ttft_ms"`
		} `json:"rows"`
		Breakdown []struct {
			By   map[string]string  `json:"by"`
			Rows int                `json:"rows"`
			TTFT map[string]float64 `json:"ttft"`
		} `json:"breakdown"`
	}
	if err := json.Unmarshal([]byte(stdout), &by); code != 0 || err != nil || len(by.Rows) != 2 || len(by.Breakdown) != 2 {
		t.Fatalf("--by tp: exit %d, %v: %s%s", code, err, stdout, stderr)
	}
	for i, g := range by.Breakdown {
		r := by.Rows[i].TTFT
		signed := 100 * (r["predicted"] - r["measured"]) / r["measured"]
		if g.By["tp"] != []string{"1", "2"}[i] || g.Rows != 1 || g.TTFT["median_ape"] != r["ape"] || math.Abs(g.TTFT["median_error"]-signed) > 1e-3 {
			t.Errorf("--by tp group %d: %+v, row %v", i, g, r)
		}
	}
	wantBadInput(t, "bad --by", "", []string{"--by", "gpu"}, "validate", "silicon", filepath.Join(fix, "three-rows.csv"), "--by", "gpu")
	bad := filepath.Join(t.TempDir(), "bad.csv")
	body, _ := os.ReadFile(filepath.Join(fix, "three-rows.csv"))
	os.WriteFile(bad, []byte(strings.Replace(string(body), ",64,5,", ",64,five,", 1)), 0o644)
	wantBadInput(t, "non-numeric osl", "", []string{"line 2", "column osl"}, "validate", "silicon", bad)
	wantBadInput(t, "no such file", "", []string{"nope.csv"}, "validate", "silicon", "nope.csv")
	wantBadInput(t, "bad --profiles", "", []string{"--profiles"}, "validate", "silicon", filepath.Join(fix, "three-rows.csv"), "--profiles", bad)
	wantBadInput(t, "bad --requests-per-client", "", []string{"--requests-per-client"}, "validate", "silicon", filepath.Join(fix, "three-rows.csv"), "--requests-per-client", "0")
}
