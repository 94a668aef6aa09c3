package deploy

import (
	"encoding/json"
	"flag"
	"fmt"
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
			if s.Topology.Kind == Disaggregated && len(w.KVPorts) != len(w.GPUs) {
				t.Errorf("%s %s: %d KV ports for TP %d", f, w.Name, len(w.KVPorts), len(w.GPUs))
			}
			for _, kp := range w.KVPorts {
				if ports[kp] || kp == s.Network.ProxyPort {
					t.Errorf("%s %s: KV port %d used twice", f, w.Name, kp)
				}
				ports[kp] = true
			}
			if w.KVAddr != "" && (s.Engine != EngineVLLM || w.KVAddr != hostPort(envOf(w, "VLLM_HOST_IP"), w.KVPorts[0])) {
				t.Errorf("%s %s: KVAddr %s is not where the engine binds (VLLM_HOST_IP %q, ports %v)", f, w.Name, w.KVAddr, envOf(w, "VLLM_HOST_IP"), w.KVPorts)
			}
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

// p2pSpec is a vLLM P2pNcclConnector spec; tp is each pool's TP.
func p2pSpec(t *testing.T, host string, tp int, extra string) *Spec {
	t.Helper()
	s, err := ParseSpec([]byte(fmt.Sprintf(`
name: p2p
engine: vllm
model: {id: org/m, revision: 0123456789abcdef0123456789abcdef01234567}
gpus: {budget: %d}
topology:
  kind: disaggregated
  prefill: {replicas: 1, tp: %d}
  decode: {replicas: 1, tp: %d}
kv_connector: {name: P2pNcclConnector, kv_port: 21001%s}
network: {host: %q}
`, 2*tp, tp, tp, extra, host)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func kvConfig(t *testing.T, w Worker) map[string]any {
	t.Helper()
	i := slices.Index(w.Argv, "--kv-transfer-config")
	if i < 0 {
		t.Fatalf("%s: no --kv-transfer-config in %v", w.Name, w.Argv)
	}
	var kv map[string]any
	if err := json.Unmarshal([]byte(w.Argv[i+1]), &kv); err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestRenderP2PBindsWhereTheProxyPoints: P2pNcclEngine binds
// get_ip():kv_port+rank and ignores kv_ip (p2p_nccl_engine.py
// P2pNcclEngine.__init__, hostname "" from p2p_nccl_connector.py); get_ip()
// is VLLM_HOST_IP when set, else the default-route address. So every P2P
// worker must get VLLM_HOST_IP = the host the proxy writes into request
// ids (KVAddr), or the prefill worker connects where nothing listens.
func TestRenderP2PBindsWhereTheProxyPoints(t *testing.T) {
	for _, c := range []struct{ host, want string }{
		{"127.0.0.1", "127.0.0.1"}, {"localhost", "127.0.0.1"}, {"10.1.2.3", "10.1.2.3"},
	} {
		p, err := Render(p2pSpec(t, c.host, 1, ""), RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range p.Workers {
			kvHost, kvPort, _ := strings.Cut(w.KVAddr, ":")
			if got := envOf(w, "VLLM_HOST_IP"); got != c.want || kvHost != c.want {
				t.Errorf("host %s, %s: VLLM_HOST_IP=%q, KVAddr %q; want both on %s", c.host, w.Name, got, w.KVAddr, c.want)
			}
			if kv := kvConfig(t, w); kv["kv_port"] != kvPort {
				t.Errorf("%s: kv_port %v but KVAddr %s", w.Name, kv["kv_port"], w.KVAddr)
			}
		}
	}
	// NIXL workers place their side channel with VLLM_NIXL_SIDE_CHANNEL_HOST
	// and get no VLLM_HOST_IP.
	s, _ := LoadSpec("testdata/specs/disagg-nixl-2p2d.yaml")
	p, _ := Render(s, RenderOptions{})
	if envOf(p.Workers[0], "VLLM_HOST_IP") != "" {
		t.Errorf("NIXL worker got VLLM_HOST_IP: %v", p.Workers[0].Env)
	}
}

// TestRenderRequestIDRandomization: vLLM >= 0.14 appends a random suffix
// to every request id (input_processor.py assign_request_id), and
// P2pNcclConnector keys KV tensors by request_id + "#" + layer, so prefill
// and decode never meet unless VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1
// (vllm/envs.py). NIXL matches by the remote_request_id the prefill
// returns and needs nothing.
func TestRenderRequestIDRandomization(t *testing.T) {
	nixl, _ := LoadSpec("testdata/specs/disagg-nixl-2p2d.yaml")
	nixl.KV.LoadFailurePolicy = ""
	for _, c := range []struct {
		version, env, err string
	}{
		{"", "1", ""},      // unknown: render the switch (ignored where unread)
		{"0.13.0", "", ""}, // ids kept as sent: nothing to switch off
		{"0.15.1", "", "spec.kv_connector.name: P2pNcclConnector cannot run on vLLM 0.15.1"},
		{"0.16.1.dev4+gabc", "", "spec.kv_connector.name"},
		{"0.17.0", "1", ""},
		{"0.27.1", "1", ""},
	} {
		p, err := Render(p2pSpec(t, "127.0.0.1", 1, ""), RenderOptions{VLLMVersion: c.version})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.version, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.version, err)
		}
		for _, w := range p.Workers {
			if got := envOf(w, "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION"); got != c.env {
				t.Errorf("%q %s: VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=%q, want %q", c.version, w.Name, got, c.env)
			}
		}
		pn, err := Render(nixl, RenderOptions{VLLMVersion: c.version})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range pn.Workers {
			if envOf(w, "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION") != "" {
				t.Errorf("%q NIXL %s got the switch", c.version, w.Name)
			}
		}
	}
}

// TestRenderKVPortsPerRank: a worker of TP n binds n KV ports (P2P binds
// kv_port + rank; NIXL before its scheduler-side listener bound
// side_channel_port + tp_rank), so worker i starts at base + the TP of the
// workers before it.
func TestRenderKVPortsPerRank(t *testing.T) {
	s, err := ParseSpec([]byte(`
name: nixl-tp
engine: vllm
model: {id: org/m, revision: 0123456789abcdef0123456789abcdef01234567}
gpus: {budget: 7}
topology:
  kind: disaggregated
  prefill: {replicas: 1, tp: 1}
  decode: {replicas: 3, tp: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Render(s, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{5600}, {5601, 5602}, {5603, 5604}, {5605, 5606}}
	for i, w := range p.Workers {
		if !slices.Equal(w.KVPorts, want[i]) || envOf(w, "VLLM_NIXL_SIDE_CHANNEL_PORT") != fmt.Sprint(want[i][0]) {
			t.Errorf("%s: KVPorts %v, env %s; want %v", w.Name, w.KVPorts, envOf(w, "VLLM_NIXL_SIDE_CHANNEL_PORT"), want[i])
		}
	}
	p2, err := Render(p2pSpec(t, "127.0.0.1", 2, ""), RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := p2.Workers[0], p2.Workers[1]; a.KVAddr != "127.0.0.1:21001" || b.KVAddr != "127.0.0.1:21003" ||
		kvConfig(t, b)["kv_port"] != "21003" || !slices.Equal(b.KVPorts, []int{21003, 21004}) {
		t.Errorf("P2P TP 2: prefill %s %v, decode %s %v", a.KVAddr, a.KVPorts, b.KVAddr, b.KVPorts)
	}
}

// TestRenderEmulatorTP: an emulated worker spanning several GPUs models
// them (--tensor-parallel-size); one of a single GPU keeps the default.
func TestRenderEmulatorTP(t *testing.T) {
	s, err := ParseSpec([]byte(`
name: emu-tp
engine: emulator
model: {id: Qwen/Qwen2.5-Coder-0.5B-Instruct}
gpus: {budget: 3}
topology:
  kind: disaggregated
  prefill: {replicas: 1, tp: 1}
  decode: {replicas: 1, tp: 2}
emulator: {profile: qwen2.5-coder-0.5b-h200}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Render(s, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", "2"} {
		w := p.Workers[i]
		got := ""
		if j := slices.Index(w.Argv, "--tensor-parallel-size"); j >= 0 {
			got = w.Argv[j+1]
		}
		if got != want || envOf(w, "CUDA_VISIBLE_DEVICES") != joinInts(w.GPUs) {
			t.Errorf("%s on GPUs %v: --tensor-parallel-size %q, want %q: %v", w.Name, w.GPUs, got, want, w.Argv)
		}
	}
}

// TestRenderVLLMVersionAdapts: with the installed version known, Render
// omits what it lacks and refuses, naming the spec field, what the spec
// needs and it cannot do; unknown renders as before and says so.
func TestRenderVLLMVersionAdapts(t *testing.T) {
	load := func() *Spec {
		s, err := LoadSpec("testdata/specs/disagg-nixl-2p2d.yaml") // sets load_failure_policy
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	metrics := func(p *Plan) bool { return slices.Contains(p.Workers[0].Argv, "--enable-per-request-metrics") }
	p, err := Render(load(), RenderOptions{})
	if err != nil || metrics(p) || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "vLLM version unknown") || p.VLLMVersion != "" {
		t.Fatalf("unknown version: err %v, warnings %q", err, p.Warnings)
	}
	if b, _ := json.Marshal(p); !strings.Contains(string(b), `"warnings":["vLLM version unknown`) {
		t.Errorf("plan JSON lacks the warning: %s", b)
	}
	if kv := kvConfig(t, p.Workers[0]); kv["kv_load_failure_policy"] != "recompute" {
		t.Errorf("unknown version dropped kv_load_failure_policy: %v", kv)
	}
	p, err = Render(load(), RenderOptions{VLLMVersion: "0.26.0"})
	if err != nil || !metrics(p) || len(p.Warnings) != 0 || p.VLLMVersion != "0.26.0" {
		t.Errorf("0.26.0: err %v, metrics %v, warnings %q", err, p != nil && metrics(p), p.Warnings)
	}
	if p, err = Render(load(), RenderOptions{VLLMVersion: "0.25.0"}); err != nil || metrics(p) {
		t.Errorf("0.25.0 has no --enable-per-request-metrics: err %v", err)
	}
	if _, err = Render(load(), RenderOptions{VLLMVersion: "0.11.0"}); err == nil ||
		!strings.Contains(err.Error(), "spec.kv_connector.load_failure_policy: vLLM 0.11.0 has no kv_load_failure_policy") {
		t.Errorf("0.11.0 with load_failure_policy: %v", err)
	}
	if _, err = Render(load(), RenderOptions{VLLMVersion: "0.11.1"}); err != nil {
		t.Errorf("0.11.1: %v", err)
	}
	dtype := func(d, v string) error {
		s := load()
		s.KV.LoadFailurePolicy = ""
		s.Precision.KVCacheDType = d
		_, err := Render(s, RenderOptions{VLLMVersion: v})
		return err
	}
	if err := dtype("bfloat16", "0.10.2"); err == nil || !strings.Contains(err.Error(),
		"spec.precision.kv_cache_dtype: vLLM 0.10.2 does not accept --kv-cache-dtype bfloat16") ||
		!strings.Contains(err.Error(), "want one of auto, fp8, fp8_e4m3, fp8_e5m2") {
		t.Errorf("bfloat16 on 0.10.2: %v", err)
	}
	if err := dtype("float16", "0.17.0"); err == nil || !strings.Contains(err.Error(), "want one of auto, bfloat16, fp8") {
		t.Errorf("float16 on 0.17.0: %v", err)
	}
	for _, ok := range [][2]string{{"bfloat16", "0.11.0"}, {"float16", "0.18.0"}, {"fp8", "0.10.2"}} {
		if err := dtype(ok[0], ok[1]); err != nil {
			t.Errorf("%s on %s: %v", ok[0], ok[1], err)
		}
	}
	if p, err := Render(load(), RenderOptions{VLLMVersion: "0.10.2.dev1"}); err == nil {
		t.Errorf("0.10.2.dev1 rendered load_failure_policy: %v", p.Workers[0].Argv)
	}
	s := load()
	s.KV.LoadFailurePolicy = ""
	if p, err := Render(s, RenderOptions{VLLMVersion: "0.10.2"}); err != nil || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "older than 0.11.0") {
		t.Errorf("below the table's floor: err %v, warnings %q", err, p.Warnings)
	}
	if p, err := Render(load(), RenderOptions{VLLMVersion: "nightly"}); err != nil || len(p.Warnings) != 2 {
		t.Errorf("unparsable version: err %v, warnings %q", err, p.Warnings)
	}
	emu, _ := LoadSpec("testdata/specs/emulator-disagg-1p2d.yaml")
	if p, err := Render(emu, RenderOptions{}); err != nil || len(p.Warnings) != 0 {
		t.Errorf("the emulator needs no vLLM version: %v %q", err, p.Warnings)
	}
}

// TestRenderEngineEnv: spec.engine_env reaches every engine process of
// either engine, and cold_start: reset_prefix_cache adds vLLM's
// development mode (VLLM_SERVER_DEV_MODE=1) to vLLM workers only — the
// emulator always serves POST /reset_prefix_cache — bound to network.host.
func TestRenderEngineEnv(t *testing.T) {
	const extra = "engine_env: {VLLM_LOGGING_LEVEL: DEBUG, HF_HUB_OFFLINE: \"1\"}\ncold_start: reset_prefix_cache\ngpus:"
	for _, c := range []struct {
		name, spec string
		devMode    bool
	}{
		{"vllm", strings.Replace(validColocated, "gpus:", extra, 1), true},
		{"emulator", strings.Replace(validDisagg, "gpus:", extra, 1), false},
	} {
		s, err := ParseSpec([]byte(c.spec))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p, err := Render(s, RenderOptions{VLLMVersion: "0.26.0"})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, w := range p.Workers {
			if envOf(w, "VLLM_LOGGING_LEVEL") != "DEBUG" || envOf(w, "HF_HUB_OFFLINE") != "1" {
				t.Errorf("%s %s: engine_env missing from %q", c.name, w.Name, w.Env)
			}
			if got := envOf(w, EnvServerDevMode) == "1"; got != c.devMode {
				t.Errorf("%s %s: dev mode %v, want %v: %q", c.name, w.Name, got, c.devMode, w.Env)
			}
			if !slices.IsSorted(w.Env) {
				t.Errorf("%s %s: env not sorted: %q", c.name, w.Name, w.Env)
			}
			if i := slices.Index(w.Argv, "--host"); i < 0 || w.Argv[i+1] != "127.0.0.1" {
				t.Errorf("%s %s: not bound to network.host: %q", c.name, w.Name, w.Argv)
			}
		}
		script := p.Script(nil)
		if c.devMode && !strings.Contains(script, "env CUDA_VISIBLE_DEVICES=0 HF_HUB_OFFLINE=1 VLLM_LOGGING_LEVEL=DEBUG VLLM_SERVER_DEV_MODE=1 vllm serve org/m") {
			t.Errorf("render output lacks the engine environment:\n%s", script)
		}
	}
	// Without cold_start, or with fresh prefixes, no development mode.
	for _, cs := range []string{"", "cold_start: fresh_prefixes\n"} {
		s, err := ParseSpec([]byte(strings.Replace(validColocated, "gpus:", cs+"gpus:", 1)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Render(s, RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v := envOf(p.Workers[0], EnvServerDevMode); v != "" {
			t.Errorf("%q: %s=%s rendered", cs, EnvServerDevMode, v)
		}
	}
}
