package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hone-llm/hone/engine"
)

// fuzzVLLMVersions are the vLLM versions FuzzParseSpec renders a parsed
// spec for: unknown, the table's floor, and releases on either side of the
// features the engine adapts to (engine.Adapter).
var fuzzVLLMVersions = []string{"", engine.FactsOf(EngineVLLM).Versions.Floor, "0.14.0", "0.17.0", "0.27.1"}

// FuzzParseSpec feeds deployment spec YAML to ParseSpec. Seeds: the specs
// in examples/ and deploy/testdata/specs/ and the test suite's own.
// Properties:
//   - every error is the YAML's ("spec: ...") or names a field
//     ("spec.<field>: ...");
//   - a spec that parses validates again and renders for every vLLM
//     version in fuzzVLLMVersions, or the render's error names a field;
//   - a rendered plan keeps the spec's promises: every worker has TP GPUs
//     out of spec.gpus.ids, no GPU or port is handed out twice, every port
//     is in 1..65535, and the plan's script renders;
//   - the spec survives the JSON round trip of a deployment state file
//     (state.json) and renders the same plan from it.
func FuzzParseSpec(f *testing.F) {
	for _, glob := range []string{"../examples/*.yaml", "testdata/specs/*.yaml"} {
		files, err := filepath.Glob(glob)
		if err != nil || len(files) == 0 {
			f.Fatalf("seed specs %s: %v (%d files)", glob, err, len(files))
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte(validColocated))
	f.Add([]byte(validDisagg))
	f.Add([]byte(validDisagg + "kv_connector: {name: P2pNcclConnector, kv_port: 9000, discovery_port: 9100, buffer_size: 2e9}\n"))
	f.Add([]byte(validColocated + "knobs: {prefix_caching: false, speculative_ngram: {num_speculative_tokens: 3, prompt_lookup_max: 4}, extra_args: [--seed, \"1\"]}\nrouting: {prefill_timeout: 30s, stream_idle_timeout: 1m}\nnetwork: {host: \"::1\"}\n"))
	f.Add([]byte(validDisagg + "emulator: {profile: exercise, faults: [prefill-0=crash-after=5], time_scale: 0.5}\n"))
	f.Add([]byte(""))
	f.Add([]byte("name: [\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpec(b)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "spec: ") && !strings.HasPrefix(msg, "spec.") {
				t.Fatalf("error names no field: %v", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("a parsed spec does not validate again: %v", err)
		}
		plans := make([]*Plan, len(fuzzVLLMVersions))
		for i, v := range fuzzVLLMVersions {
			p, err := Render(s, RenderOptions{VLLMVersion: v})
			if err != nil {
				if !strings.HasPrefix(err.Error(), "spec.") {
					t.Fatalf("render for vLLM %q: error names no field: %v", v, err)
				}
				continue
			}
			checkPlan(t, s, p)
			plans[i] = p
		}

		// A deployment's state file holds the spec as JSON.
		j, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal a parsed spec: %v", err)
		}
		var back Spec
		if err := json.Unmarshal(j, &back); err != nil {
			t.Fatalf("the spec's JSON %s does not read back: %v", j, err)
		}
		if j2, err := json.Marshal(&back); err != nil || string(j2) != string(j) {
			t.Fatalf("JSON round trip changed the spec:\n got %s (%v)\nwant %s", j2, err, j)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("the spec read back from JSON does not validate: %v", err)
		}
		for i, v := range fuzzVLLMVersions {
			p, err := Render(&back, RenderOptions{VLLMVersion: v})
			if (err == nil) != (plans[i] != nil) {
				t.Fatalf("render for vLLM %q after the JSON round trip: %v", v, err)
			}
			if err == nil && !reflect.DeepEqual(p.Workers, plans[i].Workers) {
				t.Fatalf("render for vLLM %q after the JSON round trip differs:\n got %+v\nwant %+v", v, p.Workers, plans[i].Workers)
			}
		}
	})
}

// checkPlan checks what a rendered plan promises about GPUs and ports.
func checkPlan(t *testing.T, s *Spec, p *Plan) {
	t.Helper()
	if len(p.Workers) == 0 {
		t.Fatal("a rendered plan has no workers")
	}
	ids := map[int]bool{}
	for _, id := range s.GPUs.IDs {
		ids[id] = true
	}
	gpus := map[int]string{}
	ports := map[int]string{s.Network.ProxyPort: "proxy"}
	port := func(who string, n int) {
		if n < 1 || n > 65535 {
			t.Fatalf("%s: port %d outside 1..65535", who, n)
		}
		if o, ok := ports[n]; ok {
			t.Fatalf("%s: port %d already %s's", who, n, o)
		}
		ports[n] = who
	}
	used := 0
	for _, w := range p.Workers {
		port(w.Name, w.Port)
		for _, k := range w.KVPorts {
			port(w.Name+" KV", k)
		}
		if s.Topology.Kind == Disaggregated && len(w.KVPorts) != len(w.GPUs) {
			t.Fatalf("%s: %d KV ports for %d GPUs", w.Name, len(w.KVPorts), len(w.GPUs))
		}
		if len(w.GPUs) == 0 {
			t.Fatalf("%s: no GPUs", w.Name)
		}
		for _, g := range w.GPUs {
			if !ids[g] {
				t.Fatalf("%s: GPU %d is not in spec.gpus.ids %v", w.Name, g, s.GPUs.IDs)
			}
			if o, ok := gpus[g]; ok {
				t.Fatalf("%s: GPU %d already %s's", w.Name, g, o)
			}
			gpus[g] = w.Name
		}
		used += len(w.GPUs)
	}
	if used != s.GPUsNeeded() || used > s.GPUs.Budget {
		t.Fatalf("workers use %d GPUs; the topology needs %d, the budget is %d", used, s.GPUsNeeded(), s.GPUs.Budget)
	}
	_ = p.Script([]string{"hone", "proxy", "--config", "proxy.json"})
}
