package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/engine"
)

const validColocated = `
name: t
engine: vllm
model: {id: org/m, revision: 0123456789abcdef0123456789abcdef01234567}
gpus: {budget: 2}
topology: {kind: colocated, replicas: 2, tp: 1}
`

const validDisagg = `
name: t
engine: emulator
model: {id: org/m}
gpus: {budget: 2}
topology:
  kind: disaggregated
  prefill: {replicas: 1, tp: 1}
  decode: {replicas: 1, tp: 1}
emulator: {profile: exercise}
`

func TestParseSpecDefaults(t *testing.T) {
	s, err := ParseSpec([]byte(validDisagg))
	if err != nil {
		t.Fatal(err)
	}
	if s.KV.Name != NixlConnector || s.KV.SideChannelPort != DefaultSideChannelPort {
		t.Errorf("kv defaults = %+v", s.KV)
	}
	if s.Routing.Policy != SessionAffinity || s.Network.Host != "127.0.0.1" || s.Network.ProxyPort != 8000 {
		t.Errorf("defaults: routing %+v network %+v", s.Routing, s.Network)
	}
	if got := s.GPUs.IDs; len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Errorf("gpus.ids default = %v", got)
	}
	if s.Emulator.TimeScale != 1 {
		t.Errorf("time_scale default = %v", s.Emulator.TimeScale)
	}
}

// TestSpecErrors checks that each mistake is refused with the field named.
func TestSpecErrors(t *testing.T) {
	cases := []struct {
		name, base, old, new, want string
	}{
		{"unknown field", validColocated, "gpus:", "gpu_count: 3\ngpus:", `unknown field "gpu_count" in the spec's top level`},
		{"engine", validColocated, "engine: vllm", "engine: sglang", "spec.engine: want vllm or emulator"},
		{"unpinned hub model", validColocated, "revision: 0123456789abcdef0123456789abcdef01234567", "revision: main", "spec.model.revision: a hub model must be pinned"},
		{"no model", validColocated, "model: {id: org/m, revision: 0123456789abcdef0123456789abcdef01234567}", "", "spec.model: want id"},
		{"missing dir", validColocated, "model: {id: org/m, revision: 0123456789abcdef0123456789abcdef01234567}", "model: {path: /nonexistent/dir}", "spec.model.path: want an existing directory"},
		{"over budget", validColocated, "replicas: 2, tp: 1", "replicas: 2, tp: 2", "spec.topology: workers need 4 GPUs, over the budget of 2"},
		{"zero replicas", validColocated, "replicas: 2", "replicas: 0", "spec.topology.replicas: want >= 1"},
		{"prefill replicas", validDisagg, "prefill: {replicas: 1", "prefill: {replicas: 0", "spec.topology.prefill.replicas: want >= 1"},
		{"decode tp", validDisagg, "decode: {replicas: 1, tp: 1}", "decode: {replicas: 1, tp: 0}", "spec.topology.decode.tp: want >= 1"},
		{"missing decode", validDisagg, "  decode: {replicas: 1, tp: 1}\n", "", "spec.topology.decode: missing"},
		{"disagg over budget", validDisagg, "budget: 2", "budget: 1", "spec.topology: workers need 2 GPUs, over the budget of 1"},
		{"connector", validDisagg, "emulator:", "kv_connector: {name: LMCache}\nemulator:", "spec.kv_connector.name: want NixlConnector or P2pNcclConnector"},
		{"colocated connector", validColocated, "gpus:", "kv_connector: {name: NixlConnector}\ngpus:", "spec.kv_connector: only a disaggregated"},
		{"kind", validColocated, "kind: colocated", "kind: pd", "spec.topology.kind: want colocated or disaggregated"},
		{"ids count", validColocated, "{budget: 2}", "{budget: 2, ids: [0]}", "spec.gpus.ids: want 2 ids"},
		{"dup ids", validColocated, "{budget: 2}", "{budget: 2, ids: [1, 1]}", "spec.gpus.ids[1]: GPU 1 listed twice"},
		{"mem util", validColocated, "gpus:", "knobs: {gpu_memory_utilization: 1.5}\ngpus:", "spec.knobs.gpu_memory_utilization: want a fraction"},
		{"cudagraph", validColocated, "gpus:", "knobs: {cudagraph_mode: MOST}\ngpus:", "spec.knobs.cudagraph_mode: want FULL_AND_PIECEWISE"},
		{"eager+graphs", validColocated, "gpus:", "knobs: {enforce_eager: true, cudagraph_mode: FULL}\ngpus:", "spec.knobs.cudagraph_mode: enforce_eager disables"},
		{"ngram", validColocated, "gpus:", "knobs: {speculative_ngram: {num_speculative_tokens: 0, prompt_lookup_max: 4}}\ngpus:", "spec.knobs.speculative_ngram.num_speculative_tokens: want >= 1"},
		{"routing", validColocated, "gpus:", "routing: {policy: random}\ngpus:", "spec.routing.policy: want session_affinity or round_robin"},
		{"timeout", validColocated, "gpus:", "routing: {prefill_timeout: soon}\ngpus:", "want a duration like 30s"},
		{"port clash", validColocated, "gpus:", "network: {proxy_port: 8101}\ngpus:", "spec.network.proxy_port: port 8101 collides"},
		{"side channel clash", validDisagg, "emulator:", "kv_connector: {side_channel_port: 8100}\nemulator:", "spec.kv_connector.side_channel_port: ports 8100..8101 collide"},
		{"nixl kv_port", validDisagg, "emulator:", "kv_connector: {name: NixlConnector, kv_port: 9}\nemulator:", "spec.kv_connector: buffer_size, kv_port and discovery_port are P2pNcclConnector's"},
		{"emulator profile", validDisagg, "emulator: {profile: exercise}", "", "spec.emulator.profile: unknown profile"},
		{"emulator on vllm", validColocated, "gpus:", "emulator: {profile: x}\ngpus:", "spec.emulator: only for engine: emulator"},
		{"unknown profile", validDisagg, "{profile: exercise}", "{profile: b200}", `spec.emulator.profile: unknown profile "b200": want one of`},
		{"emulator p2p", validDisagg, "emulator:", "kv_connector: {name: P2pNcclConnector}\nemulator:", "spec.kv_connector.name: the emulator speaks NixlConnector"},
		{"time scale", validDisagg, "{profile: exercise}", "{profile: exercise, time_scale: -1}", "spec.emulator.time_scale: want a positive factor"},
		{"name", validColocated, "name: t", "name: Bad Name", "spec.name: want lowercase"},
		{"host", validColocated, "gpus:", "network: {host: example.com}\ngpus:", "spec.network.host: want an IP address"},
		{"kv cache dtype", validColocated, "gpus:", "precision: {kv_cache_dtype: bf16}\ngpus:",
			`spec.precision.kv_cache_dtype: want one of auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2 (the --kv-cache-dtype values hone renders for vLLM), got "bf16"`},
		// A TP-2 worker binds two side-channel ports: three ranks from 8098
		// reach the first worker's 8100.
		{"side channel per rank", strings.Replace(validDisagg, "budget: 2", "budget: 3", 1), "decode: {replicas: 1, tp: 1}\nemulator:",
			"decode: {replicas: 1, tp: 2}\nkv_connector: {side_channel_port: 8098}\nemulator:", "spec.kv_connector.side_channel_port: ports 8098..8100 collide"},
		{"p2p tp mismatch", strings.Replace(validDisagg, "budget: 2", "budget: 3", 1), "decode: {replicas: 1, tp: 1}\nemulator:",
			"decode: {replicas: 1, tp: 2}\nkv_connector: {name: P2pNcclConnector}\nemulator:", "spec.topology.decode.tp: P2pNcclConnector pairs prefill and decode ranks one to one: want the prefill pool's tp 1, got 2"},
		{"p2p ipv6", validDisagg, "emulator:", "kv_connector: {name: P2pNcclConnector}\nnetwork: {host: \"::1\"}\nemulator:", "spec.network.host: P2pNcclConnector needs an IPv4 address"},
		{"engine_env name", validColocated, "gpus:", "engine_env: {\"1X\": a}\ngpus:", `spec.engine_env: "1X" is not an environment variable name`},
		{"engine_env name with =", validColocated, "gpus:", "engine_env: {\"A=B\": a}\ngpus:", `spec.engine_env: "A=B" is not an environment variable name`},
		{"engine_env hone's", validColocated, "gpus:", "engine_env: {CUDA_VISIBLE_DEVICES: \"0\"}\ngpus:", "spec.engine_env.CUDA_VISIBLE_DEVICES: hone sets it from spec.gpus.ids"},
		{"engine_env dev mode", validColocated, "gpus:", "engine_env: {VLLM_SERVER_DEV_MODE: \"1\"}\ngpus:", "spec.engine_env.VLLM_SERVER_DEV_MODE: hone sets it from spec.cold_start: reset_prefix_cache"},
		{"engine_env not a map", validColocated, "gpus:", "engine_env: [A]\ngpus:", "want a mapping, got a list"},
		{"cold_start", validColocated, "gpus:", "cold_start: flush\ngpus:", `spec.cold_start: want reset_prefix_cache or fresh_prefixes, got "flush"`},
		{"dev mode on every interface", validColocated, "gpus:", "cold_start: reset_prefix_cache\nnetwork: {host: 0.0.0.0}\ngpus:", "spec.cold_start: reset_prefix_cache renders VLLM_SERVER_DEV_MODE=1"},
		{"kv port range", validDisagg, "emulator:", "kv_connector: {name: P2pNcclConnector, kv_port: 65535}\nemulator:", "spec.kv_connector.kv_port: want 1..65534 (2 ports, one per tensor-parallel rank), got 65535"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(c.base, c.old) {
				t.Fatalf("test bug: %q not in base", c.old)
			}
			_, err := ParseSpec([]byte(strings.Replace(c.base, c.old, c.new, 1)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestKVCacheDTypes: vLLM's CacheDType literal (vllm/config/cache.py) has
// bfloat16 (0.11.0 on) and float16 (0.18.0 on); the spec takes both and
// Render checks them against the installed version.
func TestKVCacheDTypes(t *testing.T) {
	for _, d := range engine.FactsOf(engine.VLLM).KVCacheDTypes {
		if _, err := ParseSpec([]byte(strings.Replace(validColocated, "gpus:", "precision: {kv_cache_dtype: "+d+"}\ngpus:", 1))); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
}

func TestExampleSpecsValid(t *testing.T) {
	files, _ := filepath.Glob("testdata/specs/*.yaml")
	if len(files) < 6 {
		t.Fatalf("want the example specs, found %v", files)
	}
	for _, f := range files {
		if _, err := LoadSpec(f); err != nil {
			t.Errorf("%v", err)
		}
	}
	if _, err := LoadSpec("testdata/specs/nonexistent.yaml"); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing file: err = %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
