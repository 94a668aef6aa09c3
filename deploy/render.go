package deploy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Roles of a worker.
const (
	RoleColocated = "colocated"
	RolePrefill   = "prefill"
	RoleDecode    = "decode"
)

// Worker is one engine process: the exact argv and the environment it adds
// to the inherited one.
type Worker struct {
	Name string   `json:"name"` // replica-0, prefill-0, decode-1
	Role string   `json:"role"`
	Host string   `json:"host"`
	Port int      `json:"port"`
	GPUs []int    `json:"gpus"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"` // KEY=VALUE, sorted
	// KVAddr is the worker's KV-transfer address (P2pNcclConnector's
	// VLLM_HOST_IP:kv_port, its rank-0 port); the proxy encodes it in
	// request ids.
	KVAddr string `json:"kv_addr,omitempty"`
	// KVPorts are the ports on Host the worker's KV transfer may bind, one
	// per tensor-parallel rank: the NIXL side channel's
	// (VLLM_NIXL_SIDE_CHANNEL_PORT onward) or P2pNcclConnector's (kv_port
	// onward). No two workers share one.
	KVPorts []int `json:"kv_ports,omitempty"`
}

// URL is the worker's HTTP base URL.
func (w Worker) URL() string { return "http://" + hostPort(w.Host, w.Port) }

// Plan is a rendered spec: the workers to start, in order, and the proxy's
// listen address.
type Plan struct {
	Spec      *Spec    `json:"spec"`
	Workers   []Worker `json:"workers"`
	ProxyAddr string   `json:"proxy_addr"`
	// VLLMVersion is the vLLM version the commands were adapted to; empty
	// when unknown (or the engine is the emulator).
	VLLMVersion string `json:"vllm_version,omitempty"`
	// Warnings say what the render could not check or adapt, e.g. that
	// the vLLM version was unknown.
	Warnings []string `json:"warnings,omitempty"`
}

// RenderOptions says how to spell the commands.
type RenderOptions struct {
	// VLLM is argv[0] for vLLM workers; "vllm" when empty.
	VLLM string
	// Hone is argv[0] for emulator workers (the running hone binary).
	Hone string
	// VLLMVersion is the installed vLLM's version as `vllm --version`
	// prints it (see VLLMVersion); empty when unknown. Render omits what
	// that version lacks and refuses what the spec needs but it cannot do
	// (vllmversions.go); unknown renders for the newest vLLM and says so
	// in Plan.Warnings.
	VLLMVersion string
}

// Render turns a valid spec into workers. GPUs are handed out in spec order:
// prefill workers first, then decode workers; each takes TP consecutive ids.
func Render(s *Spec, o RenderOptions) (*Plan, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if o.VLLM == "" {
		o.VLLM = "vllm"
	}
	if o.Hone == "" {
		o.Hone = "hone"
	}
	type slot struct {
		name, role string
		tp         int
	}
	var slots []slot
	t := s.Topology
	if t.Kind == Colocated {
		for i := range t.Replicas {
			slots = append(slots, slot{fmt.Sprintf("replica-%d", i), RoleColocated, t.TP})
		}
	} else {
		for i := range t.Prefill.Replicas {
			slots = append(slots, slot{fmt.Sprintf("prefill-%d", i), RolePrefill, t.Prefill.TP})
		}
		for i := range t.Decode.Replicas {
			slots = append(slots, slot{fmt.Sprintf("decode-%d", i), RoleDecode, t.Decode.TP})
		}
	}
	p := &Plan{Spec: s, ProxyAddr: hostPort(s.Network.Host, s.Network.ProxyPort)}
	var adapt vllmAdapt
	if s.Engine == EngineVLLM {
		var err error
		adapt, p.Warnings, err = s.adaptToVLLM(o.VLLMVersion)
		if err != nil {
			return nil, err
		}
		if adapt.known {
			p.VLLMVersion = adapt.version.Raw
		}
	}
	// next is both the first GPU and the first KV port offset of the next
	// worker: a worker of TP n binds n KV ports, one per rank, because
	// P2pNcclConnector binds kv_port + rank (p2p_nccl_connector.py
	// P2pNcclConnector.__init__: port_offset=get_world_group().rank;
	// p2p_nccl_engine.py P2pNcclEngine.__init__: port = kv_port +
	// port_offset) and NIXL before the scheduler-side handshake listener
	// bound VLLM_NIXL_SIDE_CHANNEL_PORT + dp_rank*tp + tp_rank (today's
	// nixl/base_scheduler.py binds one port, + data_parallel_index: the
	// reserved range covers both).
	next := 0
	for i, sl := range slots {
		w := Worker{
			Name: sl.name, Role: sl.role, Host: s.Network.Host, Port: s.Network.WorkerPort + i,
			GPUs: slices.Clone(s.GPUs.IDs[next : next+sl.tp]),
		}
		if base := s.kvPortBase(); base > 0 {
			for r := range sl.tp {
				w.KVPorts = append(w.KVPorts, base+next+r)
			}
		}
		next += sl.tp
		if s.Topology.Kind == Disaggregated && s.KV.Name == P2pNcclConnector {
			w.KVAddr = hostPort(p2pHost(s.Network.Host), w.KVPorts[0])
		}
		var err error
		if s.Engine == EngineVLLM {
			w.Argv, w.Env, err = renderVLLM(s, o.VLLM, w, sl.tp, adapt)
		} else {
			w.Argv, w.Env, err = renderEmulator(s, o.Hone, w)
		}
		if err != nil {
			return nil, err
		}
		if s.Engine == EngineVLLM && s.ColdStart == ColdStartReset {
			// vLLM serves POST /reset_prefix_cache only in development
			// mode (FeatureServerDevMode); the worker binds network.host
			// (validateColdStart refuses every interface), and on
			// Kubernetes the pod network.
			w.Env = append(w.Env, EnvServerDevMode+"=1")
		}
		for k, v := range s.EngineEnv { // no clash: validateEngineEnv
			w.Env = append(w.Env, k+"="+v)
		}
		slices.Sort(w.Env)
		p.Workers = append(p.Workers, w)
	}
	names := map[string]bool{}
	for _, w := range p.Workers {
		names[w.Name] = true
	}
	for i, f := range s.Emulator.Faults {
		name, _, _ := strings.Cut(f, "=")
		if !names[name] {
			return nil, fmt.Errorf("spec.emulator.faults[%d]: no worker named %q", i, name)
		}
	}
	return p, nil
}

// kvPortBase is the first KV port of a disaggregated topology (NIXL's
// side channel or P2pNcclConnector's kv_port), 0 when there is none.
func (s *Spec) kvPortBase() int {
	if s.Topology.Kind != Disaggregated {
		return 0
	}
	if s.KV.Name == P2pNcclConnector {
		return s.KV.KVPort
	}
	return s.KV.SideChannelPort
}

// p2pHost is the address a P2pNcclConnector worker binds its KV socket
// on and the proxy writes into request ids. The engine binds
// f"{get_ip()}:{kv_port + rank}" (p2p_nccl_engine.py P2pNcclEngine.__init__,
// hostname "" from p2p_nccl_connector.py) and get_ip() returns VLLM_HOST_IP
// when set (vllm/utils/network_utils.py get_ip), else the default-route
// address; kv_ip is not read. ZMQ binds an IP, so localhost becomes
// 127.0.0.1.
func p2pHost(h string) string {
	if h == "localhost" {
		return "127.0.0.1"
	}
	return h
}

// ServedName is the model name clients send and workers answer to.
func (s *Spec) ServedName() string {
	switch {
	case s.Model.ServedName != "":
		return s.Model.ServedName
	case s.Model.ID != "":
		return s.Model.ID
	default:
		return filepath.Base(filepath.Clean(s.Model.Path))
	}
}

func renderVLLM(s *Spec, bin string, w Worker, tp int, adapt vllmAdapt) (argv, env []string, err error) {
	model := s.Model.ID
	if model == "" {
		model = s.Model.Path
	}
	argv = []string{bin, "serve", model}
	if s.Model.Revision != "" {
		argv = append(argv, "--revision", s.Model.Revision)
	}
	argv = append(argv,
		"--served-model-name", s.ServedName(),
		"--host", w.Host,
		"--port", strconv.Itoa(w.Port),
		"--tensor-parallel-size", strconv.Itoa(tp),
	)
	if d := s.Precision.DType; d != "" {
		argv = append(argv, "--dtype", d)
	}
	if d := s.Precision.KVCacheDType; d != "" {
		argv = append(argv, "--kv-cache-dtype", d)
	}
	k := s.Knobs
	if k.PrefixCaching == nil || *k.PrefixCaching {
		argv = append(argv, "--enable-prefix-caching")
	} else {
		argv = append(argv, "--no-enable-prefix-caching")
	}
	argv = append(argv, "--enable-prompt-tokens-details")
	if adapt.perRequestMetrics {
		argv = append(argv, "--enable-per-request-metrics")
	}
	argv = appendSizeKnobs(argv, k)
	if k.EnforceEager {
		argv = append(argv, "--enforce-eager")
	}
	if k.CUDAGraphMode != "" {
		argv = append(argv, "--compilation-config", mustJSON(map[string]any{"cudagraph_mode": k.CUDAGraphMode}))
	}
	if n := k.SpeculativeNgram; n != nil {
		cfg := map[string]any{"method": "ngram", "num_speculative_tokens": n.NumSpeculativeTokens, "prompt_lookup_max": n.PromptLookupMax}
		if n.PromptLookupMin > 0 {
			cfg["prompt_lookup_min"] = n.PromptLookupMin
		}
		argv = append(argv, "--speculative-config", mustJSON(cfg))
	}
	env = []string{"CUDA_VISIBLE_DEVICES=" + joinInts(w.GPUs)}
	if s.Topology.Kind == Disaggregated {
		var kv map[string]any
		switch s.KV.Name {
		case NixlConnector:
			// The proxy, not kv_role, decides who prefills (vllm.md).
			kv = map[string]any{"kv_connector": NixlConnector, "kv_role": "kv_both"}
			env = append(env,
				"VLLM_NIXL_SIDE_CHANNEL_HOST="+w.Host,
				"VLLM_NIXL_SIDE_CHANNEL_PORT="+strconv.Itoa(w.KVPorts[0]))
			// No VLLM_DISABLE_REQUEST_ID_RANDOMIZATION: the decode side
			// finds the prefill's blocks by the remote_request_id the
			// prefill returns in kv_transfer_params (nixl/base_scheduler.py
			// request_finished, on_new_request), which the proxy passes on
			// verbatim, not by the id it sent.
		case P2pNcclConnector:
			role, buf := "kv_producer", "1e9"
			extra := map[string]any{"proxy_ip": s.Network.Host, "proxy_port": strconv.Itoa(s.KV.DiscoveryPort), "http_port": strconv.Itoa(w.Port)}
			if w.Role == RoleDecode {
				role, buf = "kv_consumer", "8e9"
				extra["send_type"] = "PUT_ASYNC"
			}
			if s.KV.BufferSize != "" {
				buf = s.KV.BufferSize
			}
			host := p2pHost(w.Host)
			// kv_ip is kept for the record, but P2pNcclEngine ignores it
			// and binds get_ip(), i.e. VLLM_HOST_IP (see p2pHost).
			kv = map[string]any{"kv_connector": P2pNcclConnector, "kv_role": role, "kv_ip": host,
				"kv_port": strconv.Itoa(w.KVPorts[0]), "kv_buffer_size": buf, "kv_connector_extra_config": extra}
			env = append(env, "VLLM_HOST_IP="+host)
			if adapt.disableRandomIDs {
				// Since 0.14 vLLM appends a random suffix to every request
				// id (input_processor.py InputProcessor.assign_request_id)
				// and P2pNcclConnector keys KV tensors by that id
				// (request_id + "#" + layer_name in save_kv_layer and
				// start_load_kv), so each side must keep the id it is sent.
				env = append(env, "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1")
			}
		}
		if s.KV.LoadFailurePolicy != "" {
			kv["kv_load_failure_policy"] = s.KV.LoadFailurePolicy
		}
		argv = append(argv, "--kv-transfer-config", mustJSON(kv))
	}
	argv = append(argv, k.ExtraArgs...)
	return argv, env, nil
}

// renderEmulator spells `hone sim serve` (cmd/hone/simserve.go) with the
// same role and knobs. The emulator reads VLLM_NIXL_SIDE_CHANNEL_HOST/PORT
// like vLLM does, so its KV side channel is placed the same way.
func renderEmulator(s *Spec, bin string, w Worker) (argv, env []string, err error) {
	model := s.Model.ID
	if model == "" {
		model = s.ServedName()
	}
	argv = []string{bin, "sim", "serve",
		"--role", w.Role,
		"--host", w.Host,
		"--port", strconv.Itoa(w.Port),
		"--model", model,
	}
	if s.Model.ServedName != "" {
		argv = append(argv, "--served-model-name", s.Model.ServedName)
	}
	argv = append(argv,
		"--profile", s.Emulator.Profile,
		"--time-scale", strconv.FormatFloat(s.Emulator.TimeScale, 'f', -1, 64),
	)
	if tp := len(w.GPUs); tp > 1 {
		argv = append(argv, "--tensor-parallel-size", strconv.Itoa(tp))
	}
	if d := s.Precision.KVCacheDType; d != "" {
		argv = append(argv, "--kv-cache-dtype", d)
	}
	k := s.Knobs
	if k.PrefixCaching != nil && !*k.PrefixCaching {
		argv = append(argv, "--no-enable-prefix-caching")
	}
	argv = append(argv, "--enable-prompt-tokens-details", "--enable-per-request-metrics")
	argv = appendSizeKnobs(argv, k)
	if k.EnforceEager || k.CUDAGraphMode == "NONE" {
		argv = append(argv, "--enforce-eager")
	}
	if w.Role == RoleDecode && s.KV.LoadFailurePolicy != "" {
		argv = append(argv, "--kv-load-failure-policy", s.KV.LoadFailurePolicy)
	}
	if d := s.Emulator.TraceDir; d != "" {
		argv = append(argv, "--trace-file", filepath.Join(d, w.Name+".jsonl"))
	}
	for _, f := range s.Emulator.Faults {
		if name, fault, _ := strings.Cut(f, "="); name == w.Name {
			argv = append(argv, "--fault", fault)
		}
	}
	env = []string{"CUDA_VISIBLE_DEVICES=" + joinInts(w.GPUs)}
	if s.Topology.Kind == Disaggregated && s.KV.Name == NixlConnector {
		env = append(env,
			"VLLM_NIXL_SIDE_CHANNEL_HOST="+w.Host,
			"VLLM_NIXL_SIDE_CHANNEL_PORT="+strconv.Itoa(w.KVPorts[0]))
	}
	return argv, env, nil
}

// appendSizeKnobs spells the knobs vLLM and the emulator take under the
// same flags (batch, memory and length limits); zero leaves the engine's
// default.
func appendSizeKnobs(argv []string, k Knobs) []string {
	if k.MaxNumSeqs > 0 {
		argv = append(argv, "--max-num-seqs", strconv.Itoa(k.MaxNumSeqs))
	}
	if k.MaxNumBatchedTokens > 0 {
		argv = append(argv, "--max-num-batched-tokens", strconv.Itoa(k.MaxNumBatchedTokens))
	}
	if k.GPUMemoryUtilization > 0 {
		argv = append(argv, "--gpu-memory-utilization", strconv.FormatFloat(k.GPUMemoryUtilization, 'f', -1, 64))
	}
	if k.BlockSize > 0 {
		argv = append(argv, "--block-size", strconv.Itoa(k.BlockSize))
	}
	if k.MaxModelLen > 0 {
		argv = append(argv, "--max-model-len", strconv.Itoa(k.MaxModelLen))
	}
	return argv
}

func mustJSON(v any) string {
	b, err := json.Marshal(v) // maps marshal with sorted keys: stable output
	if err != nil {
		panic(err)
	}
	return string(b)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func hostPort(h string, p int) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]:" + strconv.Itoa(p)
	}
	return h + ":" + strconv.Itoa(p)
}

// ShellQuote quotes one word for a POSIX shell, for people to copy; hone
// itself never runs a shell string.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=,@%+", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Script renders the plan as shell lines a person can run by hand: one
// `env K=V ... argv` line per worker, then the proxy.
func (p *Plan) Script(proxyArgv []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# hone deploy render: %s (%s, %s)\n", p.Spec.Name, p.Spec.Engine, p.Spec.Topology.Kind)
	if p.VLLMVersion != "" {
		fmt.Fprintf(&b, "# for vLLM %s\n", p.VLLMVersion)
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "# warning: %s\n", w)
	}
	for _, w := range p.Workers {
		fmt.Fprintf(&b, "# %s: role %s, GPUs %s, http://%s\n", w.Name, w.Role, joinInts(w.GPUs), hostPort(w.Host, w.Port))
		words := []string{"env"}
		for _, e := range w.Env {
			words = append(words, ShellQuote(e))
		}
		for _, a := range w.Argv {
			words = append(words, ShellQuote(a))
		}
		b.WriteString(strings.Join(words, " "))
		b.WriteString(" &\n")
	}
	if len(proxyArgv) > 0 {
		fmt.Fprintf(&b, "# proxy: http://%s\n", p.ProxyAddr)
		words := make([]string, len(proxyArgv))
		for i, a := range proxyArgv {
			words[i] = ShellQuote(a)
		}
		b.WriteString(strings.Join(words, " "))
		b.WriteString("\n")
	}
	return b.String()
}
