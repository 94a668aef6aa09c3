package deploy

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestRenderGolden renders every example spec (every topology, both engines,
// both connectors) and compares the exact argv and environment with
// testdata/golden; run with -update after a deliberate change.
func TestRenderGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/specs/*.yaml")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			s, err := LoadSpec(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Render(s, RenderOptions{Hone: "hone"})
			if err != nil {
				t.Fatal(err)
			}
			got := p.Script([]string{"hone", "proxy", "--spec", f})
			golden := filepath.Join("testdata/golden", name+".sh")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./deploy -run TestRenderGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("render of %s differs from %s:\n--- got\n%s\n--- want\n%s", f, golden, got, want)
			}
		})
	}
}

func envOf(w Worker, key string) string {
	for _, e := range w.Env {
		if k, v, _ := strings.Cut(e, "="); k == key {
			return v
		}
	}
	return ""
}

// TestRenderInvariants states the rules the goldens must obey, so a careless
// -update cannot bless a broken render.
func TestRenderInvariants(t *testing.T) {
	files, _ := filepath.Glob("testdata/specs/*.yaml")
	for _, f := range files {
		s, err := LoadSpec(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Render(s, RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Workers) == 0 {
			t.Fatalf("%s: no workers", f)
		}
		ports, gpus, side := map[int]bool{}, map[string]bool{}, map[string]bool{}
		for _, w := range p.Workers {
			if ports[w.Port] {
				t.Errorf("%s: port %d used twice", f, w.Port)
			}
			ports[w.Port] = true
			for _, g := range strings.Split(envOf(w, "CUDA_VISIBLE_DEVICES"), ",") {
				if gpus[g] {
					t.Errorf("%s: GPU %s given twice", f, g)
				}
				gpus[g] = true
			}
			if sc := envOf(w, "VLLM_NIXL_SIDE_CHANNEL_PORT"); sc != "" {
				if side[sc] {
					t.Errorf("%s: side channel port %s used twice", f, sc)
				}
				side[sc] = true
			}
			if s.Engine == EngineVLLM {
				if !slices.Contains(w.Argv, "--enable-prompt-tokens-details") {
					t.Errorf("%s %s: no --enable-prompt-tokens-details", f, w.Name)
				}
				off := s.Knobs.PrefixCaching != nil && !*s.Knobs.PrefixCaching
				if slices.Contains(w.Argv, "--no-enable-prefix-caching") != off {
					t.Errorf("%s %s: prefix caching flag wrong: %v", f, w.Name, w.Argv)
				}
				if (s.Topology.Kind == Disaggregated) != slices.Contains(w.Argv, "--kv-transfer-config") {
					t.Errorf("%s %s: --kv-transfer-config presence wrong", f, w.Name)
				}
				if s.Topology.Kind == Disaggregated && s.KV.Name == NixlConnector && envOf(w, "VLLM_NIXL_SIDE_CHANNEL_PORT") == "" {
					t.Errorf("%s %s: no side channel port", f, w.Name)
				}
			} else if i := slices.Index(w.Argv, "--role"); i < 0 || w.Argv[i+1] != w.Role {
				t.Errorf("%s %s: emulator role not %s: %v", f, w.Name, w.Role, w.Argv)
			}
		}
		if len(gpus) > s.GPUs.Budget {
			t.Errorf("%s: %d GPUs used, budget %d", f, len(gpus), s.GPUs.Budget)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                    "plain",
		"":                         "''",
		`{"a":1}`:                  `'{"a":1}'`,
		"it's":                     `'it'\''s'`,
		"CUDA_VISIBLE_DEVICES=0,1": "CUDA_VISIBLE_DEVICES=0,1",
		"a b":                      "'a b'",
		"$HOME":                    "'$HOME'",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestRenderEveryKnob renders a spec with every knob set for both engines
// and pins the exact argv: the two engines share the knob spelling, and a
// change to either path shows here.
func TestRenderEveryKnob(t *testing.T) {
	yes, no := true, false
	knobs := Knobs{
		MaxNumSeqs: 64, MaxNumBatchedTokens: 4096, GPUMemoryUtilization: 0.85, BlockSize: 32, MaxModelLen: 16384,
		EnforceEager: true, CUDAGraphMode: "NONE",
		SpeculativeNgram: &Ngram{NumSpeculativeTokens: 3, PromptLookupMax: 5, PromptLookupMin: 2},
	}
	for _, c := range []struct {
		spec   string
		prefix *bool
		extra  []string
		want   string
	}{
		{"testdata/specs/colocated-tp2.yaml", &yes, []string{"--seed", "7"},
			`vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --revision c03e6d358207e414f1eca0bb1891e29f1db0e242 ` +
				`--served-model-name Qwen/Qwen2.5-Coder-7B-Instruct --host 127.0.0.1 --port 8100 --tensor-parallel-size 2 ` +
				`--dtype bfloat16 --kv-cache-dtype auto --enable-prefix-caching --enable-prompt-tokens-details ` +
				`--max-num-seqs 64 --max-num-batched-tokens 4096 --gpu-memory-utilization 0.85 --block-size 32 --max-model-len 16384 ` +
				`--enforce-eager --compilation-config {"cudagraph_mode":"NONE"} ` +
				`--speculative-config {"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":5,"prompt_lookup_min":2} --seed 7`},
		{"testdata/specs/emulator-colocated-dp2.yaml", &no, nil,
			`hone sim serve --role colocated --host 127.0.0.1 --port 8100 --model Qwen/Qwen2.5-Coder-0.5B-Instruct ` +
				`--profile qwen2.5-coder-0.5b-h200 --time-scale 0.1 --no-enable-prefix-caching ` +
				`--enable-prompt-tokens-details --enable-per-request-metrics ` +
				`--max-num-seqs 64 --max-num-batched-tokens 4096 --gpu-memory-utilization 0.85 --block-size 32 --max-model-len 16384 ` +
				`--enforce-eager`},
	} {
		s, err := LoadSpec(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		s.Knobs = knobs
		s.Knobs.PrefixCaching = c.prefix
		s.Knobs.ExtraArgs = c.extra
		p, err := Render(s, RenderOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if got := strings.Join(p.Workers[0].Argv, " "); got != c.want {
			t.Errorf("%s argv\n got %s\nwant %s", c.spec, got, c.want)
		}
	}
}
