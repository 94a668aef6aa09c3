// Package exercise_test drives the reconstructed exercise driver
// (driver.py) through exercise/submission.py and hone's bridge on the public
// instance and on private-style instances, and cross-checks the driver's
// independent Python model against hone's Go simulator bit for bit.
package exercise_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hone-llm/hone/sim"
)

// honeBin returns a hone binary: $HONE_BIN (set by `make test`) or one built
// for this test.
func honeBin(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("HONE_BIN"); b != "" {
		return b
	}
	out := filepath.Join(t.TempDir(), "hone")
	cmd := exec.Command("go", "build", "-o", out, "../cmd/hone")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// python3 returns the interpreter. Python is a declared test dependency
// (scripts/ensure-deps.sh installs it), so outside a developer's ad-hoc run
// its absence is a failure.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 not found; scripts/ensure-deps.sh should have installed it")
		}
		t.Skip("python3 not found (run `make deps-test`)")
	}
	// Resolve shims (pyenv) to the interpreter itself, so a test can run it
	// with a bare environment.
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return strings.TrimSpace(string(out))
}

type driverOut struct {
	Kind      string                          `json:"kind"`
	Baseline  struct{ Config map[string]any } `json:"baseline"`
	Candidate struct {
		Config map[string]any  `json:"config"`
		Result json.RawMessage `json:"result"`
	} `json:"candidate"`
	Experiments []struct {
		Kind      string           `json:"kind"`
		Config    map[string]any   `json:"config"`
		Levels    []map[string]any `json:"levels"`
		Objective float64          `json:"objective"`
	} `json:"experiments"`
	Calls        int      `json:"calls"`
	Budget       int      `json:"budget"`
	ChecksPassed bool     `json:"checks_passed"`
	Failures     []string `json:"failures"`
}

func TestDriverInstances(t *testing.T) {
	py, hone := python3(t), honeBin(t)
	for _, tc := range []struct {
		name     string
		args     []string
		modeKey  string
		cacheKey string
		requests int
		input    int
		output   int
		qps      string
	}{
		{"public", nil, "mode", "prefix_cache", 128, 4096, 128, "1,2,4,8,16,32"},
		{"private-96-6144-64", []string{"--requests", "96", "--input-tokens", "6144", "--output-tokens", "64", "--qps", "1,3,7,12,20"}, "mode", "prefix_cache", 96, 6144, 64, "1,3,7,12,20"},
		{"private-192-8192-256", []string{"--requests", "192", "--input-tokens", "8192", "--output-tokens", "256", "--qps", "2,5,11,32"}, "mode", "prefix_cache", 192, 8192, 256, "2,5,11,32"},
		{"private-keys", []string{"--requests", "160", "--qps", "1,4,9,18,27", "--mode-key", "deployment", "--cache-key", "enable_prefix_caching",
			"--extra", `{"model":"Qwen/Qwen2.5-Coder-0.5B-Instruct","seed":7,"stream":true}`}, "deployment", "enable_prefix_caching", 160, 4096, 128, "1,4,9,18,27"},
		{"private-low-rates", []string{"--requests", "100", "--input-tokens", "6144", "--output-tokens", "256", "--qps", "1,1.5,2.5", "--mode-key", "topology", "--cache-key", "kv_cache"}, "topology", "kv_cache", 100, 6144, 256, "1,1.5,2.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "results.json")
			args := append([]string{"driver.py", "--submission", "submission.py", "--output", out}, tc.args...)
			cmd := exec.Command(py, args...)
			cmd.Env = append(os.Environ(), "HONE_BIN="+hone)
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("driver: %v\n%s", err, b)
			}
			var res driverOut
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &res); err != nil {
				t.Fatal(err)
			}
			if res.Kind != "simulation_only" || !res.ChecksPassed || res.Calls > 4 || len(res.Experiments) != res.Calls {
				t.Fatalf("driver result: kind %q checks %v calls %d experiments %d failures %v",
					res.Kind, res.ChecksPassed, res.Calls, len(res.Experiments), res.Failures)
			}
			if res.Candidate.Result == nil || string(res.Candidate.Result) == "null" {
				t.Fatal("no independent replay of the candidate")
			}
			// The selection is the best evaluated config.
			best := -1.0
			var sel float64 = -2
			for _, e := range res.Experiments {
				best = max(best, e.Objective)
				if equalJSON(e.Config, res.Candidate.Config) {
					sel = e.Objective
				}
			}
			if sel != best {
				t.Errorf("selected %v (objective %v), best evaluated objective %v", res.Candidate.Config, sel, best)
			}
			// The driver's Python model and hone's Go model agree bit for bit.
			for _, e := range res.Experiments {
				mode, _ := e.Config[tc.modeKey].(string)
				cache, _ := e.Config[tc.cacheKey].(bool)
				qps := parseList(t, tc.qps)
				g, err := sim.Scan(sim.ScanConfig{Config: sim.Config{Mode: sim.Mode(mode), PrefixCache: cache},
					Requests: tc.requests, InputTokens: tc.input, OutputTokens: tc.output, QPS: qps, SLO: sim.DefaultScan(sim.Config{}).SLO})
				if err != nil {
					t.Fatal(err)
				}
				if g.Objective != e.Objective {
					t.Errorf("%s/%v: Go objective %v, Python %v", mode, cache, g.Objective, e.Objective)
				}
				for i, l := range g.Levels {
					pl := e.Levels[i]
					if l.P99TTFTMs != pl["p99_ttft_ms"] || l.P99TPOTMs != pl["p99_tpot_ms"] || l.EffectiveQPS != pl["effective_qps"] || l.Passed != pl["passed"] {
						t.Errorf("%s/%v level %v: Go %+v, Python %v", mode, cache, l.OfferedQPS, l, pl)
					}
				}
			}
		})
	}
}

// A submission that breaks the rules must make the driver fail: the driver
// itself is tested, not only trusted.
func TestDriverCatchesBadSubmissions(t *testing.T) {
	py := python3(t)
	for name, body := range map[string]string{
		"over budget":      "def optimize(b, ev):\n    log=[ev(b) for _ in range(5)]\n    return b, log\n",
		"fabricated log":   "def optimize(b, ev):\n    r=ev(b)\n    r2=dict(r); r2['objective']=99.0\n    return b, [r2]\n",
		"unevaluated pick": "def optimize(b, ev):\n    r=ev(b)\n    c=dict(b); c['mode']='disaggregated'\n    return c, [r]\n",
		"reordered log":    "def optimize(b, ev):\n    r1=ev(b)\n    c=dict(b); c['mode']='disaggregated'\n    r2=ev(c)\n    return c, [r2, r1]\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			sub := filepath.Join(dir, "bad.py")
			if err := os.WriteFile(sub, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(py, "driver.py", "--submission", sub, "--output", filepath.Join(dir, "r.json"), "--qps", "1,16")
			b, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("driver accepted a bad submission:\n%s", b)
			}
		})
	}
}

// Without hone and without Go, submission.py says what to install.
func TestSubmissionSaysWhatToInstall(t *testing.T) {
	py := python3(t)
	dir := t.TempDir()
	// Copy submission.py away from the repository so it cannot build hone.
	src, err := os.ReadFile("submission.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "submission.py"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", "import submission; submission.optimize({'mode':'colocated','c':True}, lambda c: {})")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/nonexistent", "HOME=" + dir}
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "install Go") || !strings.Contains(string(b), "HONE_BIN") {
		t.Fatalf("want an error naming HONE_BIN and Go, got %v:\n%s", err, b)
	}
}

func parseList(t *testing.T, s string) []float64 {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
