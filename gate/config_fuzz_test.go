package gate

import (
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadConfig feeds gate config files (YAML or JSON, as `hone gate check
// --config` reads them) to ReadConfig. Seeds: the example in `hone gate
// check --help`, its JSON spelling and the single-field overrides.
// Properties:
//   - every error names the file;
//   - a config that reads has an alpha Check can use (0, the default, or
//     in (0, 0.5)) and known metrics with finite thresholds >= 0;
//   - a check under it, of candidates against a baseline over every metric,
//     gives a report that writes in every format (JSON has no NaN or Inf).
func FuzzReadConfig(f *testing.F) {
	f.Add([]byte("alpha: 0.05\nmetrics:\n  p99_ttft_ms: {fail: 0.15, warn: 0.08}\ncompare_fingerprint: [kind, engine, model, revision, precision, gpu_model, gpu_count, workload, slo, time_scale, cache]\n"))
	f.Add([]byte(`{"alpha":0.01,"metrics":{"effective_qps":{"fail":0.1},"p99_tpot_ms":{"warn":0}},"compare_fingerprint":["kind","model"]}`))
	f.Add([]byte("metrics:\n  objective: {fail: 0.02}\n  passed: {fail: 0}\n"))
	f.Add([]byte("compare_fingerprint: []\n"))
	f.Add([]byte("alpha: 0.2\n"))
	f.Add([]byte("alpha: 0.5\n"))
	f.Add([]byte("metrics: {p99_ttft_ms: {fail: -0.1}}\n"))
	f.Add([]byte("metrics: {ttft: {fail: 0.1}}\n"))
	f.Add([]byte("thresholds: {}\n"))
	f.Add([]byte(""))
	dir := f.TempDir()
	// Few runs and one level: the check runs on every input, and the
	// fuzzer minimizes what it finds by running it thousands of times.
	bl, err := NewBaseline("fuzz", fuzzRuns(5, 10, 500), DefaultCompared)
	if err != nil {
		f.Fatal(err)
	}
	cands := fuzzRuns(3, 9, 600)
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "gate.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := ReadConfig(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error names no file: %v", err)
			}
			return
		}
		if !(cfg.Alpha >= 0 && cfg.Alpha < 0.5) {
			t.Fatalf("alpha %v accepted", cfg.Alpha)
		}
		for name, th := range cfg.Metrics {
			if _, ok := Metrics[name]; !ok {
				t.Fatalf("unknown metric %q accepted", name)
			}
			for _, v := range []*float64{th.Fail, th.Warn} {
				if v != nil && !(*v >= 0 && !math.IsInf(*v, 0)) {
					t.Fatalf("metrics.%s: threshold %v accepted", name, *v)
				}
			}
		}
		rep := Check(bl, cands, cfg)
		for _, format := range Formats {
			if err := rep.Write(io.Discard, format); err != nil {
				t.Fatalf("%s report under the config: %v", format, err)
			}
		}
	})
}

// fuzzRuns is n emulated runs of one level that set every metric of
// Metrics, drawn around the given throughput and p99 TTFT with a fixed
// seed.
func fuzzRuns(n int, qps, ttft float64) []Run {
	r := rand.New(rand.NewPCG(uint64(n), uint64(ttft)))
	draw := func(c float64) float64 { return c * math.Exp(0.03*r.NormFloat64()) }
	var runs []Run
	for range n {
		var levels []LevelRun
		for _, offered := range []float64{16} {
			q := draw(min(qps, offered))
			levels = append(levels, LevelRun{OfferedQPS: offered, Passed: true, Metrics: map[string]float64{
				"effective_qps": q, "p50_ttft_ms": draw(ttft / 2), "p99_ttft_ms": draw(ttft),
				"p50_tpot_ms": draw(10), "p99_tpot_ms": draw(20), "gpu_seconds_per_request": draw(0.5),
				"cache_hit_rate": min(1, draw(0.6)),
			}})
		}
		runs = append(runs, Run{Kind: "emulated", Scenario: "disagg", Fingerprint: emuFP, Objective: draw(qps), Levels: levels})
	}
	return runs
}
