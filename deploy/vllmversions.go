package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hone-llm/hone/engine"
)

// This file is the one place that knows which vLLM version has what: every
// flag, environment variable, --kv-transfer-config field and
// --kv-cache-dtype value hone renders whose presence changed across vLLM
// releases, with the first release that has it and where that was checked.
// Render (render.go) and hone preflight (preflight/serving.go) read it;
// nothing else should compare vLLM versions.

// Version is a vLLM release as `vllm --version` prints it: 0.11.1,
// 0.10.1.1, 0.8.5.post1, 0.17.0rc1, 0.16.1.dev42+g1a2b3c4 or 0.11.0+cu128.
type Version struct {
	Major, Minor, Patch, Micro int
	// Pre marks a pre-release or development build (rc, a, b, dev). It
	// sorts below the release of the same number, as in PEP 440, so a
	// development build of the next release is never assumed to have that
	// release's features.
	Pre bool
	// Post marks a post-release (.post1): above the release it follows.
	Post bool
	Raw  string
}

var versionRE = regexp.MustCompile(`^(?:vllm\s+|v)?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?([0-9A-Za-z.\-_]*)(\+[0-9A-Za-z.\-_]*)?$`)

// suffixRE reads what follows the release numbers (the local +... part
// aside) as PEP 440 segments: a pre-release, a post-release, a dev build.
var suffixRE = regexp.MustCompile(`^(?i)([.\-_]?(?:a|alpha|b|beta|c|rc|pre|preview)\d*)?([.\-_]?post\d*)?([.\-_]?dev\d*)?$`)

// ParseVersion reads one version string.
func ParseVersion(s string) (Version, error) {
	s = strings.TrimSpace(s)
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("%q is not a vLLM version", s)
	}
	n := func(x string) int {
		v, _ := strconv.Atoi(x)
		return v
	}
	v := Version{Major: n(m[1]), Minor: n(m[2]), Patch: n(m[3]), Micro: n(m[4]), Raw: strings.TrimPrefix(strings.TrimPrefix(s, "vllm "), "v")}
	seg := suffixRE.FindStringSubmatch(m[5])
	if seg == nil {
		return Version{}, fmt.Errorf("%q: unknown version suffix %q", s, m[5])
	}
	v.Pre = seg[1] != "" || seg[3] != ""
	v.Post = !v.Pre && seg[2] != ""
	return v, nil
}

// MustVersion parses a version the table itself spells; it panics on a typo.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

func (v Version) String() string { return v.Raw }

func (v Version) cmp(w Version) int {
	for _, d := range [][2]int{{v.Major, w.Major}, {v.Minor, w.Minor}, {v.Patch, w.Patch}, {v.Micro, w.Micro}} {
		if d[0] != d[1] {
			if d[0] < d[1] {
				return -1
			}
			return 1
		}
	}
	rank := func(x Version) int {
		switch {
		case x.Pre:
			return -1
		case x.Post:
			return 1
		}
		return 0
	}
	return rank(v) - rank(w)
}

// AtLeast reports whether v is release w or later.
func (v Version) AtLeast(w Version) bool { return v.cmp(w) >= 0 }

// ParseVLLMVersionOutput finds the version in `vllm --version` output: the
// last line that is a version (importing vLLM may log lines before it).
func ParseVLLMVersionOutput(out string) (Version, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if v, err := ParseVersion(lines[i]); err == nil {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("no version in `vllm --version` output %q", clip(out, 200))
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// VLLMVersionTimeout bounds `vllm --version` (it imports vLLM and torch,
// several seconds on a cold cache) when the context has no earlier deadline.
const VLLMVersionTimeout = 90 * time.Second

// VLLMVersion runs `vllmPath --version` ("vllm" on PATH when empty) and
// returns the installed version's string, e.g. "0.11.1", for
// RenderOptions.VLLMVersion. On any failure it returns "" and the reason;
// Render treats "" as unknown (and says so in the plan's warnings).
func VLLMVersion(ctx context.Context, vllmPath string) (string, error) {
	if vllmPath == "" {
		vllmPath = engine.FactsOf(engine.VLLM).Binary
	}
	ctx, cancel := context.WithTimeout(ctx, VLLMVersionTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, vllmPath, "--version")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A killed vllm can leave a child holding the pipes; do not wait on it.
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s --version: no answer within the time limit: %w", vllmPath, ctx.Err())
	}
	if err != nil {
		msg := clip(stderr.String(), 300)
		if msg == "" {
			return "", fmt.Errorf("%s --version: %w", vllmPath, err)
		}
		return "", fmt.Errorf("%s --version: %w: %s", vllmPath, err, msg)
	}
	v, err := ParseVLLMVersionOutput(stdout.String())
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", vllmPath, err)
	}
	return v.Raw, nil
}

// FeatureKind says how a feature appears in a rendered command.
type FeatureKind string

const (
	KindFlag         FeatureKind = "flag"
	KindEnv          FeatureKind = "env"
	KindKVConfig     FeatureKind = "kv-transfer-config field"
	KindKVCacheDType FeatureKind = "kv-cache-dtype value"
	KindBehavior     FeatureKind = "behavior"
)

// VLLMFeature is one row of the table.
type VLLMFeature struct {
	ID    string      // stable key; preflight names its check vllm-<ID>
	Kind  FeatureKind //
	Name  string      // as hone renders it
	Since string      // first vLLM release that has it
	// Removed is the first vLLM release without it; "" while the newest
	// release checked still has it, announced removal or not.
	Removed string
	// Removal is what vLLM has said about removing it, when it has (a
	// deprecation warning, a planned release), and where that was read;
	// "" when nothing is announced.
	Removal string
	// Source is where the fact was checked: the vLLM file and function
	// (read at the commit given), and the pull request that added it.
	Source string
}

// Feature IDs.
const (
	FeaturePerRequestMetrics        = "per-request-metrics"
	FeatureKVLoadFailurePolicy      = "kv-load-failure-policy"
	FeatureRequestIDRandomization   = "request-id-randomization"
	FeatureDisableRequestIDRandom   = "disable-request-id-randomization"
	FeatureKVCacheDTypeBFloat16     = "kv-cache-dtype-bfloat16"
	FeatureKVCacheDTypeFloat16      = "kv-cache-dtype-float16"
	FeatureServerDevMode            = "server-dev-mode"
	featureKVCacheDTypePrefix       = "kv-cache-dtype-"
	vllmFileKVTransfer              = "vllm/config/kv_transfer.py KVTransferConfig"
	vllmFileCache                   = "vllm/config/cache.py CacheDType"
	vllmFileInputProcessorAssignRID = "vllm/v1/engine/input_processor.py InputProcessor.assign_request_id"
)

// VLLMTableFloor is the oldest vLLM the table was checked against. What
// hone renders unconditionally (--enable-prompt-tokens-details,
// --no-enable-prefix-caching, --compilation-config cudagraph_mode,
// --speculative-config, both connectors under the V1 engine) is taken to
// exist from here on; an older vLLM renders with a warning, unadapted.
const VLLMTableFloor = "0.11.0"

// VLLMFeatures is the table. Since is the first release known to have the
// feature; where the release could not be pinned exactly it is the first
// one that certainly has it, so hone errs toward omitting or refusing,
// never toward rendering what a version lacks.
var VLLMFeatures = []VLLMFeature{
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
		Source: vllmFileKVTransfer + `.kv_load_failure_policy: Literal["recompute", "fail"] (absent from the ` +
			"0.10-era KVTransferConfig, read at 007c643b); added by vllm-project/vllm#26813, merged after " +
			"2025-10-20, i.e. after 0.11.0; default changed to \"fail\" by #34896 (2026-02)",
	},
	{
		ID: FeatureRequestIDRandomization, Kind: KindBehavior, Name: "random suffix on every request id", Since: "0.14.0",
		Source: vllmFileInputProcessorAssignRID + ` (request_id = f"{external_req_id}-{random_uuid():.8}", ` +
			"read at 009daaee); vllm-project/vllm#27987, first in 0.14.0 per #34415",
	},
	{
		ID: FeatureDisableRequestIDRandom, Kind: KindEnv, Name: "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION", Since: "0.17.0",
		Removal: "planned, no release named: " + vllmFileInputProcessorAssignRID + " logs that it \"is set and will " +
			"be removed in a future release\" (read at 009daaee); when a release drops it, P2pNcclConnector specs " +
			"are refused there (set Removed)",
		Source: "vllm/envs.py VLLM_DISABLE_REQUEST_ID_RANDOMIZATION (bool(int(...)), default \"0\"), read by " +
			vllmFileInputProcessorAssignRID + "; added by vllm-project/vllm#34415 (opened 2026-02-12, after " +
			"0.15.x); the 0.16.0 tag was not checked, so the table says 0.17.0",
	},
	{
		ID: FeatureServerDevMode, Kind: KindEnv, Name: "VLLM_SERVER_DEV_MODE", Since: VLLMTableFloor,
		Source: "vllm/envs.py VLLM_SERVER_DEV_MODE (bool(int(...)), default \"0\"), which attaches the development " +
			"routers: POST /reset_prefix_cache (vllm/entrypoints/serve/dev/cache/api_router.py, now a shim for " +
			"vllm/frontend/entrypoints/serve/dev/cache/api_router.py, read at 055e47c2), /sleep, /wake_up, " +
			"/is_sleeping, /reconfigure (serve/dev/api_router.py attach_router, read at 1b1a3461), /collective_rpc, " +
			"/server_info; present long before the table's floor",
	},
	{
		ID: FeatureKVCacheDTypeBFloat16, Kind: KindKVCacheDType, Name: "bfloat16", Since: "0.11.0",
		Source: vllmFileCache + ` (absent from the older Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]; ` +
			"present by vllm-project/vllm#25988, 2025-09-30, the DeepSeek-V3.2 release)",
	},
	{
		ID: FeatureKVCacheDTypeFloat16, Kind: KindKVCacheDType, Name: "float16", Since: "0.18.0",
		Source: vllmFileCache + " (read at 002f10e0); added by vllm-project/vllm#37199 (2026-03-16); 0.17.0 rejects " +
			"it (its list, quoted in vllm-project/vllm-ascend#7685, has no float16)",
	},
}

// KVCacheDTypes are the --kv-cache-dtype values a spec may name: the
// general-purpose CUDA ones of vLLM's CacheDType literal (vllm/config/cache.py,
// read at 002f10e0). The platform- or model-specific ones (fp8_inc for
// Gaudi, fp8_ds_mla and nvfp4_ds_mla for DeepSeek MLA, the per-token-head
// and TurboQuant/NVFP4 formats) are left out. bfloat16 and float16 are
// version-gated through VLLMFeatures.
var KVCacheDTypes = []string{"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"}

func lookupFeature(id string) (VLLMFeature, bool) {
	for _, f := range VLLMFeatures {
		if f.ID == id {
			return f, true
		}
	}
	return VLLMFeature{}, false
}

// Has reports whether vLLM v has the table's feature id: it is Since or
// later, and older than Removed when that is set.
func (v Version) Has(id string) bool {
	f, ok := lookupFeature(id)
	if !ok {
		panic("deploy: no vLLM feature " + id)
	}
	return f.in(v)
}

func (f VLLMFeature) in(v Version) bool {
	return v.AtLeast(MustVersion(f.Since)) && (f.Removed == "" || !v.AtLeast(MustVersion(f.Removed)))
}

// removedIn is the release that removed feature id, "" when none has.
func removedIn(id string) string {
	f, _ := lookupFeature(id)
	return f.Removed
}

func since(id string) string {
	f, _ := lookupFeature(id)
	return f.Since
}

// spanOf says which releases have feature id: "first in 0.17.0", or
// "first in 0.17.0, removed in 0.30.0".
func spanOf(id string) string {
	s := "first in " + since(id)
	if r := removedIn(id); r != "" {
		s += ", removed in " + r
	}
	return s
}

// acceptsKVCacheDType reports whether vLLM v takes --kv-cache-dtype d.
func (v Version) acceptsKVCacheDType(d string) bool {
	if _, gated := lookupFeature(featureKVCacheDTypePrefix + d); gated {
		return v.Has(featureKVCacheDTypePrefix + d)
	}
	return true
}

// VLLMCapability is where one hone capability stands on an installed vLLM.
type VLLMCapability struct {
	ID     string
	OK     bool
	Detail string
}

// VLLMCapabilities lists, for vLLM v, each hone capability the table
// decides, with what Render does about it. hone preflight prints these.
func VLLMCapabilities(v Version) []VLLMCapability {
	var out []VLLMCapability
	add := func(id string, ok bool, format string, args ...any) {
		out = append(out, VLLMCapability{ID: id, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	if floor := MustVersion(VLLMTableFloor); !v.AtLeast(floor) {
		add("table", false, "vLLM %s is older than %s, the oldest vLLM hone's version table covers: commands render unadapted and may use flags it lacks", v, VLLMTableFloor)
	} else {
		add("table", true, "vLLM %s is covered by hone's version table (from %s)", v, VLLMTableFloor)
	}
	if v.Has(FeaturePerRequestMetrics) {
		add(FeaturePerRequestMetrics, true, "--enable-per-request-metrics rendered: responses carry per-request timings")
	} else {
		add(FeaturePerRequestMetrics, false, "no --enable-per-request-metrics before %s: left out; no per-request timings in responses", since(FeaturePerRequestMetrics))
	}
	if v.Has(FeatureKVLoadFailurePolicy) {
		add(FeatureKVLoadFailurePolicy, true, "kv_connector.load_failure_policy honoured (kv_load_failure_policy)")
	} else {
		add(FeatureKVLoadFailurePolicy, false, "no kv_load_failure_policy before %s: a spec that sets kv_connector.load_failure_policy is refused", since(FeatureKVLoadFailurePolicy))
	}
	switch {
	case !v.Has(FeatureRequestIDRandomization):
		add("p2p-request-ids", true, "request ids kept as sent (no randomization before %s): P2pNcclConnector works", since(FeatureRequestIDRandomization))
	case v.Has(FeatureDisableRequestIDRandom):
		add("p2p-request-ids", true, "request ids randomized; VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1 is rendered for P2pNcclConnector workers")
	default:
		add("p2p-request-ids", false, "request ids randomized (since %s) with no switch to turn it off (%s): P2pNcclConnector specs are refused; use NixlConnector",
			since(FeatureRequestIDRandomization), spanOf(FeatureDisableRequestIDRandom))
	}
	for _, d := range []string{"bfloat16", "float16"} {
		id := featureKVCacheDTypePrefix + d
		if v.Has(id) {
			add(id, true, "--kv-cache-dtype %s accepted", d)
		} else {
			add(id, false, "--kv-cache-dtype %s not accepted before %s: a spec that names it is refused", d, since(id))
		}
	}
	return out
}

// vllmAdapt is what Render changes for the installed vLLM.
type vllmAdapt struct {
	known             bool
	version           Version
	perRequestMetrics bool // render --enable-per-request-metrics
	disableRandomIDs  bool // P2P workers get VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1
}

// adaptToVLLM decides, for a valid vllm-engine spec and the version string
// of RenderOptions, what to render, what to warn about, and what to refuse
// (an error naming the spec field).
func (s *Spec) adaptToVLLM(raw string) (vllmAdapt, []string, error) {
	p2p := s.Topology.Kind == Disaggregated && s.KV.Name == P2pNcclConnector
	var warnings []string
	a := vllmAdapt{}
	if raw != "" {
		v, err := ParseVersion(raw)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("vLLM version %q not understood (%v): treated as unknown", raw, err))
		} else {
			a.known, a.version = true, v
		}
	}
	if !a.known {
		// Render as before, plus the fixes harmless on every version: an
		// environment variable an old vLLM does not read is ignored.
		a.disableRandomIDs = p2p
		return a, append(warnings, "vLLM version unknown: rendered for the newest vLLM, unchecked, without "+
			"--enable-per-request-metrics; give the installed version (hone deploy render --vllm-version auto) "+
			"to adapt"), nil
	}
	v := a.version
	if !v.AtLeast(MustVersion(VLLMTableFloor)) {
		warnings = append(warnings, fmt.Sprintf("vLLM %s is older than %s, the oldest vLLM hone's version table covers: rendered unadapted", v, VLLMTableFloor))
	}
	if d := s.Precision.KVCacheDType; d != "" && !v.acceptsKVCacheDType(d) {
		var ok []string
		for _, x := range KVCacheDTypes {
			if v.acceptsKVCacheDType(x) {
				ok = append(ok, x)
			}
		}
		return a, nil, badField("precision.kv_cache_dtype",
			"vLLM %s does not accept --kv-cache-dtype %s (first in %s, %s); want one of %s",
			v, d, since(featureKVCacheDTypePrefix+d), vllmFileCache, strings.Join(ok, ", "))
	}
	if s.Topology.Kind == Disaggregated && s.KV.LoadFailurePolicy != "" && !v.Has(FeatureKVLoadFailurePolicy) {
		return a, nil, badField("kv_connector.load_failure_policy",
			"vLLM %s has no kv_load_failure_policy (first in %s, %s); remove the field or upgrade vLLM",
			v, since(FeatureKVLoadFailurePolicy), vllmFileKVTransfer)
	}
	if p2p && v.Has(FeatureRequestIDRandomization) && !v.Has(FeatureDisableRequestIDRandom) {
		return a, nil, badField("kv_connector.name",
			"P2pNcclConnector cannot run on vLLM %s: it appends a random suffix to every request id (since %s, %s), "+
				"so prefill and decode key the KV tensors differently and decode waits forever, and it has no "+
				"VLLM_DISABLE_REQUEST_ID_RANDOMIZATION to turn that off (%s); use NixlConnector or a vLLM that has it",
			v, since(FeatureRequestIDRandomization), vllmFileInputProcessorAssignRID, spanOf(FeatureDisableRequestIDRandom))
	}
	a.perRequestMetrics = v.Has(FeaturePerRequestMetrics)
	a.disableRandomIDs = p2p && v.Has(FeatureRequestIDRandomization)
	return a, warnings, nil
}
