package engine

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// EnvServerDevMode is vLLM's development mode switch (vllm/envs.py): with
// it set to 1 the API server also serves POST /reset_prefix_cache, and
// with it /sleep, /wake_up, /collective_rpc and other admin routes, none
// of them authenticated (vllm_versions.go, FeatureServerDevMode).
const EnvServerDevMode = "VLLM_SERVER_DEV_MODE"

// vllmRequestKeys are the keys of vLLM's per-request metrics object
// (--enable-per-request-metrics; build_per_request_timing_metrics in
// vllm/entrypoints/generate/base/serving.py).
var vllmRequestKeys = []string{"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second"}

// vllmVersionRE is vLLM's GET /version answer: a bare PEP 440 release.
var vllmVersionRE = regexp.MustCompile(`^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.+-][0-9A-Za-z.+-]*)?$`)

// vllmProcesses matches vLLM's API server, EngineCore and worker processes
// by their command line (`vllm serve`, python -m vllm.entrypoints...,
// the VLLM::EngineCore process title, VllmWorker).
const vllmProcesses = `vllm serve|vllm\.entrypoints|VLLM::|EngineCore|VllmWorker`

var vllmProcessRE = regexp.MustCompile(vllmProcesses)

type vllm struct{}

func init() { Register(vllm{}) }

func (vllm) Name() string { return VLLM }

func (vllm) Facts() Facts {
	return Facts{
		Title: "vLLM", Binary: VLLM, LoadsWeights: true, ExtraArgs: true, Versioned: true, Versions: vllmVersions,
		// Weights load and CUDA graphs compile before /health answers.
		StartTimeout: 20 * time.Minute,
		Connectors:   []string{NixlConnector, P2pNcclConnector},
		Metrics: Metrics{
			Prefix: "vllm:",
			// Newest first: older releases named them gpu_..., the
			// oldest without the _total suffix.
			PrefixCache: []CounterPair{
				{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
				{"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"},
				{"vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_queries"},
			},
			RequestKeys: vllmRequestKeys,
		},
		Cache: Cache{ResetRoute: "POST /reset_prefix_cache", ResetEnv: EnvServerDevMode + "=1",
			ResetExposes: "admin routes (/reset_prefix_cache, /sleep, /collective_rpc, ...)"},
		HTTP: HTTP{RequestIDHeader: "X-Request-Id", ResponseHeads: []string{"Content-Type", "Cache-Control"}},
		// NIXL's side channel (5600 plus one per rank) and P2pNccl's default.
		KVPorts:        "5600-5663,14579-14580",
		ProcessPattern: vllmProcesses,
		KVCacheDTypes:  vllmVersions.KVCacheDTypes,
		// Set from the spec's fields (the spec's field names, for its
		// error message).
		ReservedEnv: map[string]string{
			"VLLM_NIXL_SIDE_CHANNEL_HOST":           "network.host",
			"VLLM_NIXL_SIDE_CHANNEL_PORT":           "kv_connector.side_channel_port",
			"VLLM_HOST_IP":                          "network.host (P2pNcclConnector)",
			"VLLM_DISABLE_REQUEST_ID_RANDOMIZATION": "kv_connector.name (P2pNcclConnector, by vLLM version)",
			EnvServerDevMode:                        "cold_start: reset_prefix_cache",
		},
	}
}

func (vllm) Recognise(version string) bool { return vllmVersionRE.MatchString(version) }

func (vllm) MatchProcess(_ string, cmdline []string) bool {
	return vllmProcessRE.MatchString(strings.Join(cmdline, " "))
}

// Render spells `vllm serve`.
func (vllm) Render(l Launch) (Command, error) {
	model := l.Model.ID
	if model == "" {
		model = l.Model.Path
	}
	argv := []string{l.Bin, "serve", model}
	if l.Model.Revision != "" {
		argv = append(argv, "--revision", l.Model.Revision)
	}
	argv = append(argv,
		"--served-model-name", l.Model.Served,
		"--host", l.Worker.Host,
		"--port", strconv.Itoa(l.Worker.Port),
		"--tensor-parallel-size", strconv.Itoa(len(l.Worker.GPUs)),
	)
	if d := l.DType; d != "" {
		argv = append(argv, "--dtype", d)
	}
	if d := l.KVCacheDType; d != "" {
		argv = append(argv, "--kv-cache-dtype", d)
	}
	argv = vllmKnobArgs(argv, l)
	env := []string{l.Worker.VisibleDevices()}
	if l.KV != nil {
		var kv map[string]any
		kv, env = vllmKVTransfer(l, env)
		argv = append(argv, "--kv-transfer-config", mustJSON(kv))
	}
	argv = append(argv, l.Knobs.ExtraArgs...)
	if l.ColdStartReset {
		// vLLM serves POST /reset_prefix_cache only in development
		// mode (FeatureServerDevMode); the worker binds network.host
		// (deploy refuses every interface), and on Kubernetes the pod
		// network.
		env = append(env, EnvServerDevMode+"=1")
	}
	return Command{Argv: argv, Env: env}, nil
}

// vllmKnobArgs spells spec.knobs for vLLM.
func vllmKnobArgs(argv []string, l Launch) []string {
	k := l.Knobs
	if k.PrefixCaching == nil || *k.PrefixCaching {
		argv = append(argv, "--enable-prefix-caching")
	} else {
		argv = append(argv, "--no-enable-prefix-caching")
	}
	argv = append(argv, "--enable-prompt-tokens-details")
	if l.Features.PerRequestMetrics {
		argv = append(argv, "--enable-per-request-metrics")
	}
	argv = SizeArgs(argv, k)
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
	return argv
}

// vllmKVTransfer is --kv-transfer-config and the environment the
// connector reads.
func vllmKVTransfer(l Launch, env []string) (map[string]any, []string) {
	w := l.Worker
	var kv map[string]any
	switch l.KV.Connector {
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
		extra := map[string]any{"proxy_ip": l.KV.ProxyHost, "proxy_port": strconv.Itoa(l.KV.DiscoveryPort), "http_port": strconv.Itoa(w.Port)}
		if w.Role == RoleDecode {
			role, buf = "kv_consumer", "8e9"
			extra["send_type"] = "PUT_ASYNC"
		}
		if l.KV.BufferSize != "" {
			buf = l.KV.BufferSize
		}
		host := P2PHost(w.Host)
		// kv_ip is kept for the record, but P2pNcclEngine ignores it
		// and binds get_ip(), i.e. VLLM_HOST_IP (see P2PHost).
		kv = map[string]any{"kv_connector": P2pNcclConnector, "kv_role": role, "kv_ip": host,
			"kv_port": strconv.Itoa(w.KVPorts[0]), "kv_buffer_size": buf, "kv_connector_extra_config": extra}
		env = append(env, "VLLM_HOST_IP="+host)
		if l.Features.StableRequestIDs {
			// Since 0.14 vLLM appends a random suffix to every request
			// id (input_processor.py InputProcessor.assign_request_id)
			// and P2pNcclConnector keys KV tensors by that id
			// (request_id + "#" + layer_name in save_kv_layer and
			// start_load_kv), so each side must keep the id it is sent.
			env = append(env, "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1")
		}
	}
	if l.KV.LoadFailurePolicy != "" {
		kv["kv_load_failure_policy"] = l.KV.LoadFailurePolicy
	}
	return kv, env
}
