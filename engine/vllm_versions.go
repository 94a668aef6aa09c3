package engine

// This file is vLLM's release table (Facts.Versions): every flag,
// environment variable, --kv-transfer-config field and --kv-cache-dtype
// value hone renders whose presence changed across vLLM releases, with the
// first release that has it and where that was checked. vLLM's Adapter
// (vllm_adapt.go) checks a spec against it and adapts the command;
// nothing else should compare vLLM versions.

// Feature IDs.
const (
	FeaturePerRequestMetrics      = "per-request-metrics"
	FeatureKVLoadFailurePolicy    = "kv-load-failure-policy"
	FeatureRequestIDRandomization = "request-id-randomization"
	FeatureDisableRequestIDRandom = "disable-request-id-randomization"
	FeatureKVCacheDTypeBFloat16   = "kv-cache-dtype-bfloat16"
	FeatureKVCacheDTypeFloat16    = "kv-cache-dtype-float16"
	FeatureServerDevMode          = "server-dev-mode"
	FeatureKVCacheDTypePrefix     = "kv-cache-dtype-"
	VLLMSourceKVTransfer          = "vllm/config/kv_transfer.py KVTransferConfig"
	VLLMSourceCache               = "vllm/config/cache.py CacheDType"
	VLLMSourceAssignRequestID     = "vllm/v1/engine/input_processor.py InputProcessor.assign_request_id"
)

// vllmTableFloor is the oldest vLLM the table was checked against. What
// hone renders unconditionally (--enable-prompt-tokens-details,
// --no-enable-prefix-caching, --compilation-config cudagraph_mode,
// --speculative-config, both connectors under the V1 engine) is taken to
// exist from here on; an older vLLM renders with a warning, unadapted.
const vllmTableFloor = "0.11.0"

// vllmFeatures is the table. Since is the first release known to have the
// feature; where the release could not be pinned exactly it is the first
// one that certainly has it, so hone errs toward omitting or refusing,
// never toward rendering what a version lacks.
var vllmFeatures = []Feature{
	{
		ID: FeaturePerRequestMetrics, Kind: KindFlag, Name: "--enable-per-request-metrics", Since: "0.26.0",
		Source: "vllm/entrypoints/launchers/cli_args.py BaseFrontendArgs.enable_per_request_metrics (read at " +
			"003befe5; the frontend's arguments moved there from vllm/entrypoints/openai/cli_args.py, where " +
			"#46768 added it; a frontend flag, not in vllm/engine/arg_utils.py), gating the `metrics` object in " +
			"chat_completion/serving.py; added by vllm-project/vllm#46768 (merged after 2026-06-25); 0.26.0 is " +
			"the first release seen with it",
	},
	{
		ID: FeatureKVLoadFailurePolicy, Kind: KindKVConfig, Name: "kv_load_failure_policy", Since: "0.11.1",
		Source: VLLMSourceKVTransfer + `.kv_load_failure_policy: Literal["recompute", "fail"] (absent from the ` +
			"0.10-era KVTransferConfig, read at 007c643b); added by vllm-project/vllm#26813, merged after " +
			"2025-10-20, i.e. after 0.11.0; default changed to \"fail\" by #34896 (2026-02)",
	},
	{
		ID: FeatureRequestIDRandomization, Kind: KindBehavior, Name: "random suffix on every request id", Since: "0.14.0",
		Source: VLLMSourceAssignRequestID + ` (request_id = f"{external_req_id}-{random_uuid():.8}", ` +
			"read at 009daaee); vllm-project/vllm#27987, first in 0.14.0 per #34415",
	},
	{
		ID: FeatureDisableRequestIDRandom, Kind: KindEnv, Name: "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION", Since: "0.17.0",
		Removal: "planned, no release named: " + VLLMSourceAssignRequestID + " logs that it \"is set and will " +
			"be removed in a future release\" (read at 009daaee); when a release drops it, P2pNcclConnector specs " +
			"are refused there (set Removed)",
		Source: "vllm/envs.py VLLM_DISABLE_REQUEST_ID_RANDOMIZATION (bool(int(...)), default \"0\"), read by " +
			VLLMSourceAssignRequestID + "; added by vllm-project/vllm#34415 (opened 2026-02-12, after " +
			"0.15.x); the 0.16.0 tag was not checked, so the table says 0.17.0",
	},
	{
		ID: FeatureServerDevMode, Kind: KindEnv, Name: "VLLM_SERVER_DEV_MODE", Since: vllmTableFloor,
		Source: "vllm/envs.py VLLM_SERVER_DEV_MODE (bool(int(...)), default \"0\"), which attaches the development " +
			"routers: POST /reset_prefix_cache (vllm/entrypoints/serve/dev/cache/api_router.py, now a shim for " +
			"vllm/frontend/entrypoints/serve/dev/cache/api_router.py, read at 055e47c2), /sleep, /wake_up, " +
			"/is_sleeping, /reconfigure (serve/dev/api_router.py attach_router, read at 1b1a3461), /collective_rpc, " +
			"/server_info; present long before the table's floor",
	},
	{
		ID: FeatureKVCacheDTypeBFloat16, Kind: KindKVCacheDType, Name: "bfloat16", Since: "0.11.0",
		Source: VLLMSourceCache + ` (absent from the older Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]; ` +
			"present by vllm-project/vllm#25988, 2025-09-30, the DeepSeek-V3.2 release)",
	},
	{
		ID: FeatureKVCacheDTypeFloat16, Kind: KindKVCacheDType, Name: "float16", Since: "0.18.0",
		Source: VLLMSourceCache + " (read at 002f10e0); added by vllm-project/vllm#37199 (2026-03-16); 0.17.0 rejects " +
			"it (its list, quoted in vllm-project/vllm-ascend#7685, has no float16)",
	},
}

// vllmKVCacheDTypes are the --kv-cache-dtype values a spec may name: the
// general-purpose CUDA ones of vLLM's CacheDType literal (vllm/config/cache.py,
// read at 002f10e0). The platform- or model-specific ones (fp8_inc for
// Gaudi, fp8_ds_mla and nvfp4_ds_mla for DeepSeek MLA, the per-token-head
// and TurboQuant/NVFP4 formats) are left out. bfloat16 and float16 are
// version-gated through vllmFeatures.
var vllmKVCacheDTypes = []string{"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"}

// vllmVersions is vLLM's release table.
var vllmVersions = &VersionTable{Floor: vllmTableFloor, Features: vllmFeatures, KVCacheDTypes: vllmKVCacheDTypes}
