package gate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoodputIsGated: a record's per-level goodput is read as two metrics,
// its limits join the SLO in the fingerprint, and a goodput that fell
// fails.
func TestGoodputIsGated(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("..", "replay", "testdata", "record.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(good, &doc); err != nil {
		t.Fatal(err)
	}
	doc["slo"].(map[string]any)["goodput"] = map[string]any{"ttft_ms": 500, "e2e_ms": 3000}
	l0 := doc["runs"].([]any)[0].(map[string]any)["levels"].([]any)[0].(map[string]any)
	l0["goodput"] = map[string]any{"limits": map[string]any{"ttft_ms": 500, "e2e_ms": 3000}, "good": 3, "measured": 4, "fraction": 0.75, "qps": 1.5}
	b, _ := json.Marshal(doc)
	runs, err := ParseRuns(b)
	if err != nil {
		t.Fatal(err)
	}
	m := runs[0].Levels[0].Metrics
	if m["goodput_fraction"] != 0.75 || m["goodput_qps"] != 1.5 {
		t.Errorf("metrics %v, want goodput_fraction 0.75 and goodput_qps 1.5", m)
	}
	if fp := runs[0].Fingerprint["slo"]; !strings.HasSuffix(fp, " goodput=ttft:500,e2el:3000") {
		t.Errorf("slo fingerprint %q does not name the goodput limits", fp)
	}
	l0["goodput"].(map[string]any)["fraction"] = 1.5
	b, _ = json.Marshal(doc)
	if _, err := ParseRuns(b); err == nil || !strings.Contains(err.Error(), "goodput") {
		t.Errorf("a goodput fraction of 1.5: %v", err)
	}

	withGoodput := func(r Run, frac, qps float64) Run {
		for i := range r.Levels {
			m := map[string]float64{}
			for k, v := range r.Levels[i].Metrics {
				m[k] = v
			}
			m["goodput_fraction"], m["goodput_qps"] = frac, qps*r.Levels[i].OfferedQPS
			r.Levels[i].Metrics = m
		}
		return r
	}
	bl := mustBaseline(t, []Run{withGoodput(healthy(1), 0.99, 0.99), withGoodput(healthy(1.01), 0.98, 0.98), withGoodput(healthy(0.99), 0.99, 0.99)})
	same := Check(bl, []Run{withGoodput(healthy(1), 0.99, 0.99), withGoodput(healthy(1.005), 0.98, 0.98), withGoodput(healthy(0.995), 0.99, 0.99)}, Config{})
	if v := verdictOf(t, same, "goodput_fraction", 8).Verdict; v != Pass {
		t.Errorf("unchanged goodput: %s", v)
	}
	fell := Check(bl, []Run{withGoodput(healthy(1), 0.80, 0.80), withGoodput(healthy(1.005), 0.82, 0.82), withGoodput(healthy(0.995), 0.81, 0.81)}, Config{})
	for _, metric := range []string{"goodput_fraction", "goodput_qps"} {
		if r := verdictOf(t, fell, metric, 8); r.Verdict != Fail {
			t.Errorf("goodput down ~18%%: %s %s (%s)", metric, r.Verdict, r.Reason)
		}
	}
}
