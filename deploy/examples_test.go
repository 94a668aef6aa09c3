package deploy

import (
	"slices"
	"strconv"
	"testing"
)

// argAfter is the value following flag in argv, "" when absent.
func argAfter(argv []string, flag string) string {
	if i := slices.Index(argv, flag); i >= 0 && i+1 < len(argv) {
		return argv[i+1]
	}
	return ""
}

// TestBriefExamples renders the brief's deployments in examples/ — the
// colocated baseline (`vllm serve Qwen/Qwen2.5-Coder-0.5B-Instruct
// --tensor-parallel-size 2 --enable-prefix-caching --max-model-len 8192`)
// and the disaggregated primary (1P1D NixlConnector on the same two GPUs),
// each on vLLM and as its emulated twin — and checks the argv that makes
// them what the brief says.
func TestBriefExamples(t *testing.T) {
	for _, c := range []struct {
		file, engine, kind string
		workers            [][]int // GPUs per worker
	}{
		{"../examples/vllm-colocated-tp2.yaml", EngineVLLM, Colocated, [][]int{{0, 1}}},
		{"../examples/vllm-disagg-nixl-1p1d.yaml", EngineVLLM, Disaggregated, [][]int{{0}, {1}}},
		{"../examples/emulator-colocated-tp2.yaml", EngineEmulator, Colocated, [][]int{{0, 1}}},
		{"../examples/emulator-disagg-nixl-1p1d.yaml", EngineEmulator, Disaggregated, [][]int{{0}, {1}}},
	} {
		s, err := LoadSpec(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if s.Engine != c.engine || s.Topology.Kind != c.kind || s.GPUs.Budget != 2 || s.Model.ID != "Qwen/Qwen2.5-Coder-0.5B-Instruct" {
			t.Errorf("%s: %s %s budget %d model %s", c.file, s.Engine, s.Topology.Kind, s.GPUs.Budget, s.Model.ID)
		}
		p, err := Render(s, RenderOptions{VLLMVersion: "0.27.1"})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if len(p.Workers) != len(c.workers) {
			t.Fatalf("%s: %d workers", c.file, len(p.Workers))
		}
		for i, w := range p.Workers {
			a := w.Argv
			if !slices.Equal(w.GPUs, c.workers[i]) || argAfter(a, "--max-model-len") != "8192" || slices.Contains(a, "--no-enable-prefix-caching") {
				t.Errorf("%s %s: GPUs %v argv %v", c.file, w.Name, w.GPUs, a)
			}
			if c.engine == EngineVLLM {
				if a[0] != "vllm" || a[1] != "serve" || a[2] != "Qwen/Qwen2.5-Coder-0.5B-Instruct" ||
					argAfter(a, "--tensor-parallel-size") != strconv.Itoa(len(c.workers[i])) ||
					!slices.Contains(a, "--enable-prefix-caching") || argAfter(a, "--dtype") != "bfloat16" {
					t.Errorf("%s %s: argv %v", c.file, w.Name, a)
				}
			} else if argAfter(a, "--profile") != "qwen2.5-coder-0.5b-l4" || argAfter(a, "--role") != w.Role {
				t.Errorf("%s %s: argv %v", c.file, w.Name, a)
			}
			if c.kind == Disaggregated {
				if c.engine == EngineVLLM && argAfter(a, "--kv-transfer-config") != `{"kv_connector":"NixlConnector","kv_role":"kv_both"}` {
					t.Errorf("%s %s: kv config %q", c.file, w.Name, argAfter(a, "--kv-transfer-config"))
				}
				if want := []string{"18420", "18421"}[i]; envOf(w, "VLLM_NIXL_SIDE_CHANNEL_PORT") != want {
					t.Errorf("%s %s: side channel %q, want %s", c.file, w.Name, envOf(w, "VLLM_NIXL_SIDE_CHANNEL_PORT"), want)
				}
			}
		}
		if want := []string{RolePrefill, RoleDecode}; c.kind == Disaggregated && (p.Workers[0].Role != want[0] || p.Workers[1].Role != want[1]) {
			t.Errorf("%s: roles %s, %s", c.file, p.Workers[0].Role, p.Workers[1].Role)
		}
	}
}
