package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/schema"
)

// predictSpec writes an emulated spec on two GPUs: colocated, one replica,
// or disaggregated 1P1D.
func predictSpec(t *testing.T, kind string) string {
	t.Helper()
	topo := "topology: {kind: colocated, replicas: 1, tp: 1}\n"
	if kind == "disaggregated" {
		topo = "topology:\n  kind: disaggregated\n  prefill: {replicas: 1, tp: 1}\n  decode: {replicas: 1, tp: 1}\n" +
			"kv_connector: {name: NixlConnector, side_channel_port: 18420}\n"
	}
	p := filepath.Join(t.TempDir(), "spec.yaml")
	body := fmt.Sprintf(`name: p-%s
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: 2}
%sknobs: {max_model_len: 8192}
routing: {policy: session_affinity}
network: {proxy_port: 18400, worker_port: 18410}
emulator: {profile: qwen2.5-coder-0.5b-l4, time_scale: 1}
`, kind, topo)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// On the exercise profile the engine in virtual time is the brief's exact
// model, so hone predict prints hone sim's objectives to the bit.
func TestPredictExerciseProfileIsTheExactModel(t *testing.T) {
	for _, tc := range []struct{ kind, objective string }{
		{"colocated", "objective: 8.01670146137787 req/s"},
		{"disaggregated", "objective: 15.91670258978015 req/s"},
	} {
		out, errs, code := runCLI(t, "", "predict", "--profile", "exercise", predictSpec(t, tc.kind))
		if code != exitOK || !strings.Contains(out, tc.objective) {
			t.Errorf("%s: exit %d (%s), want %q in\n%s", tc.kind, code, errs, tc.objective, out)
		}
		sim, _, _ := runCLI(t, "", "sim", "--mode", tc.kind)
		if !strings.Contains(sim, tc.objective) {
			t.Errorf("hone sim --mode %s no longer prints %q:\n%s", tc.kind, tc.objective, sim)
		}
	}
}

func TestPredictTable(t *testing.T) {
	spec := predictSpec(t, "colocated")
	out, errs, code := runCLI(t, "", "predict", "--qps", "1,4", "--requests", "24", spec)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d lines, want header, validation, columns, 2 levels, objective, note:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[0], "kind: predicted  profile: qwen2.5-coder-0.5b-l4 (hand-made)  spec: p-colocated  gpus: 1  SLO") {
		t.Errorf("header %q", lines[0])
	}
	if lines[1] != "profile qwen2.5-coder-0.5b-l4: not validated against measured requests" {
		t.Errorf("validation line %q", lines[1])
	}
	lines = append(lines[:1], lines[2:]...)
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "offered_qps p50_ttft_ms p90_ttft_ms p99_ttft_ms p50_tpot_ms p90_tpot_ms p99_tpot_ms effective_qps gpu_s_per_req hit_rate passed" {
		t.Errorf("columns %q", lines[1])
	}
	for i, q := range []string{"1", "4"} {
		if f := strings.Fields(lines[2+i]); len(f) != 11 || f[0] != q {
			t.Errorf("level %s: %q", q, lines[2+i])
		}
	}
	if !strings.HasPrefix(lines[4], "objective: ") || lines[5] != predict.Note {
		t.Errorf("footer:\n%s\n%s", lines[4], lines[5])
	}

	// --profile overrides the spec's.
	out, errs, code = runCLI(t, "", "predict", "--qps", "1", "--requests", "24", "--profile", "qwen2.5-coder-0.5b-h200", spec)
	if code != exitOK || !strings.Contains(out, "profile: qwen2.5-coder-0.5b-h200 ") {
		t.Errorf("--profile: exit %d (%s)\n%s", code, errs, out)
	}
	// ... with a built-in one or a profile file.
	prof := filepath.Join(t.TempDir(), "mine.yaml")
	if err := os.WriteFile(prof, []byte("base: qwen2.5-coder-0.5b-h200\nname: h200-slower\nmfu: 0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code = runCLI(t, "", "predict", "--qps", "1", "--requests", "24", "--profile", prof, spec)
	if code != exitOK || !strings.Contains(out, "profile: h200-slower ") {
		t.Errorf("--profile %s: exit %d (%s)\n%s", prof, code, errs, out)
	}
}

// -o json prints the record's summaries; --out writes the whole record.
func TestPredictJSONAndOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pred.json")
	out, errs, code := runCLI(t, "", "predict", "--qps", "1,4", "--requests", "24", "-o", "json", "--out", path, predictSpec(t, "disaggregated"))
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rec schema.Record
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if rec.Kind != "predicted" || len(rec.Runs) != 1 || len(rec.Runs[0].Levels) != 2 || rec.Runs[0].Levels[1].OfferedQPS != 4 {
		t.Fatalf("record kind %q, runs %+v", rec.Kind, rec.Runs)
	}
	for _, l := range rec.Runs[0].Levels {
		if l.Requests != nil {
			t.Errorf("-o json: %g req/s carries its requests", l.OfferedQPS)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var full schema.Record
	if err := json.Unmarshal(b, &full); err != nil {
		t.Fatal(err)
	}
	if full.Kind != "predicted" || len(full.Runs) != 1 || len(full.Runs[0].Levels[0].Requests) != 24 {
		t.Errorf("--out record: kind %q, %d runs", full.Kind, len(full.Runs))
	}
	if full.Runs[0].Objective != rec.Runs[0].Objective {
		t.Errorf("--out objective %v, -o json %v", full.Runs[0].Objective, rec.Runs[0].Objective)
	}
}

func TestPredictGrid(t *testing.T) {
	spec := predictSpec(t, "colocated")
	// Budget 2 on one knob point, caching on and off: colocated dp1-tp1,
	// dp1-tp2 and 1P1D (one worker per pool) 2 each; dp2-tp1 also both
	// routings: 4. 10 specs.
	args := []string{"predict", "--grid", "--qps", "1,4", "--requests", "24", "--grid-max-num-seqs", "256",
		"--grid-max-num-batched-tokens", "2048", "--grid-enforce-eager", "false", "--grid-prefix-caching", "true,false"}
	out, errs, code := runCLI(t, "", append(args, "--top", "3", spec)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	for _, want := range []string{"kind: predicted  profile: qwen2.5-coder-0.5b-l4 (hand-made)  base: p-colocated  grid: 10 specs within 2 GPUs",
		"top 3 of 10 (--top;", "ranked by objective (largest effective QPS", "Pareto front", predict.Note} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "predict: 10 specs in ") {
		t.Errorf("stderr %q: want the progress summary", errs)
	}

	path := filepath.Join(t.TempDir(), "grid.json")
	out, errs, code = runCLI(t, "", append(args, "--top", "3", "-o", "json", "--out", path, spec)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res predict.GridResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if res.Kind != "predicted" || res.Specs != 10 || len(res.Ranked) != 3 || len(res.Points) != 0 || res.Failed != 0 {
		t.Fatalf("kind %q, %d specs, %d ranked, %d points, %d failed", res.Kind, res.Specs, len(res.Ranked), len(res.Points), res.Failed)
	}
	for i, r := range res.Ranked {
		if r.Rank != i+1 || r.Spec == nil || r.Spec.Name != r.Name {
			t.Errorf("row %d: rank %d, name %s", i, r.Rank, r.Name)
		}
		if i > 0 && r.Objective > res.Ranked[i-1].Objective {
			t.Errorf("rank %d has objective %v above rank %d's %v", r.Rank, r.Objective, i, res.Ranked[i-1].Objective)
		}
	}
	for _, r := range res.Pareto {
		if !r.Pareto || r.Objective <= 0 || r.Cost == nil {
			t.Errorf("front row %+v", r)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var all predict.GridResult
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	if len(all.Points) != 10 || all.Points[0].Spec.Name != res.Ranked[0].Name || all.Points[0].Record == nil {
		t.Errorf("--out: %d points", len(all.Points))
	}
}

// A prediction whose objective rests on a p99 within 2% of an SLO limit
// says so: the table's line, and the grid's ~ column, legend and JSON
// edge (the 4-GPU regret grid's colocated DP3 without a cache: p99 TTFT
// 496.5 ms at 16 req/s against 500 ms).
func TestPredictEdge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dp3.yaml")
	body := `name: dp3
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct, revision: emulated}
gpus: {budget: 3}
topology: {kind: colocated, replicas: 3, tp: 1}
knobs: {prefix_caching: false}
routing: {policy: round_robin}
network: {proxy_port: 18400, worker_port: 18410}
emulator: {profile: qwen2.5-coder-0.5b-l4, time_scale: 1}
`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"predict", "--qps", "4,8,16,32", "--requests", "40", "--ttft-slo-ms", "500", "--tpot-slo-ms", "30",
		"--input-tokens", "8192", "--uncached-tokens", "1024"}
	out, errs, code := runCLI(t, "", append(args, p)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	if want := "too close to call: p99 TTFT 496.5 ms at 16 req/s passes within 2% under the 500 ms limit; a measurement may land one level higher or lower"; !strings.Contains(out, want) {
		t.Errorf("no %q in\n%s", want, out)
	}
	grid := append(args, "--grid", "--grid-tp", "1", "--grid-max-num-seqs", "0", "--grid-max-num-batched-tokens", "0", "--grid-enforce-eager", "false",
		"--grid-gpu-memory-utilization", "0", "--grid-prefix-caching", "false", "--grid-routing", "round_robin")
	out, errs, code = runCLI(t, "", append(grid, "-o", "json", p)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res predict.GridResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	edges := map[string]string{}
	for _, r := range res.Ranked {
		edges[r.Name] = r.Edge
	}
	if e := edges["colo-dp3-tp1-nocache-rr-graphs"]; !strings.Contains(e, "496.5 ms at 16 req/s") {
		t.Errorf("grid edges %v: want DP3's 16 req/s level named", edges)
	}
	out, _, _ = runCLI(t, "", append(grid, p)...)
	if !strings.Contains(out, "pareto  edge") || !strings.Contains(out, "~ too close to call (") {
		t.Errorf("the grid table has no edge column or legend:\n%s", out)
	}
}

// --uncached-tokens shapes the workload predicted: the record states it,
// and with the prefix cache on, the measured requests' hit rate is the
// cached share the flags give, to the 16-token block (vLLM caches whole
// blocks): 3072 of 4096 tokens, not the brief's 3968.
func TestPredictUncachedTokens(t *testing.T) {
	out, errs, code := runCLI(t, "", "predict", "--qps", "2", "--requests", "16", "--input-tokens", "4096", "--uncached-tokens", "1024",
		"-o", "json", predictSpec(t, "colocated"))
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rec schema.Record
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if w := rec.Workload; w.InputTokens != 4096 || w.UncachedTokens != 1024 {
		t.Fatalf("workload %+v", w)
	}
	if h := rec.Runs[0].Levels[0].HitRateCachedTokens; h == nil || *h != 3072.0/4096 {
		t.Errorf("measured hit rate %v, want %v", h, 3072.0/4096)
	}
}

func TestPredictBadInput(t *testing.T) {
	spec := predictSpec(t, "colocated")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{spec, "--profile", "no-such-gpu"}, "--profile"},
		{[]string{spec, "--qps", "0"}, "--qps"},
		{[]string{spec, "--requests", "8"}, "--requests"},
		{[]string{spec, "--uncached-tokens", "0"}, "--uncached-tokens"},
		{[]string{spec, "--uncached-tokens", "5000"}, "--input-tokens"},
		{[]string{spec, "--ttft-slo-ms", "-1"}, "--ttft-slo-ms"},
		{[]string{spec, "-o", "xml"}, "-o/--output"},
		{[]string{spec, "--top", "5"}, "--top: only with --grid"},
		{[]string{spec, "--grid-max-num-seqs", "64"}, "--grid-max-num-seqs: only with --grid"},
		{[]string{spec, "--grid", "--top", "0"}, "--top"},
		{[]string{spec, "--grid", "--grid-routing", "random"}, "--grid-routing"},
		{[]string{spec, "--grid", "--grid-tp", "1,1"}, "--grid-tp"},
		{[]string{spec, "--grid", "--grid-gpu-memory-utilization", "2"}, "--grid-gpu-memory-utilization"},
		{[]string{spec, "--grid", "--grid-max-num-seqs", "4096", "--grid-max-num-batched-tokens", "2048"}, "--grid"},
		{[]string{filepath.Join(t.TempDir(), "missing.yaml")}, "missing.yaml"},
		{[]string{}, "accepts 1 arg(s), received 0"},
	} {
		_, errs, code := runCLI(t, "", append([]string{"predict"}, tc.args...)...)
		if code != exitBadInput || !strings.Contains(errs, tc.want) {
			t.Errorf("hone predict %v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, errs, tc.want)
		}
	}
}

func TestPredictHelp(t *testing.T) {
	out, errs, code := runCLI(t, "", "predict", "--help")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"virtual time", "not a measurement", "cost model", "--grid", "Pareto front",
		"Exit codes", "--grid-max-num-seqs", "hone predict --grid"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}
