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

// This file checks a spec against vLLM's release table, which the engine
// owns (engine/vllm_versions.go, Facts.Versions): every flag, environment
// variable, --kv-transfer-config field and --kv-cache-dtype value hone
// renders whose presence changed across vLLM releases. Render (render.go)
// and hone preflight (preflight/serving.go) read it; nothing else should
// compare vLLM versions.

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

// vLLM's release table is the engine's (engine/vllm_versions.go,
// Facts.Versions); the names below are deploy's for it.

// FeatureKind says how a feature appears in a rendered command.
type FeatureKind = engine.FeatureKind

const (
	KindFlag         = engine.KindFlag
	KindEnv          = engine.KindEnv
	KindKVConfig     = engine.KindKVConfig
	KindKVCacheDType = engine.KindKVCacheDType
	KindBehavior     = engine.KindBehavior
)

// VLLMFeature is one row of the table.
type VLLMFeature = engine.Feature

// Feature IDs.
const (
	FeaturePerRequestMetrics        = engine.FeaturePerRequestMetrics
	FeatureKVLoadFailurePolicy      = engine.FeatureKVLoadFailurePolicy
	FeatureRequestIDRandomization   = engine.FeatureRequestIDRandomization
	FeatureDisableRequestIDRandom   = engine.FeatureDisableRequestIDRandom
	FeatureKVCacheDTypeBFloat16     = engine.FeatureKVCacheDTypeBFloat16
	FeatureKVCacheDTypeFloat16      = engine.FeatureKVCacheDTypeFloat16
	FeatureServerDevMode            = engine.FeatureServerDevMode
	featureKVCacheDTypePrefix       = engine.FeatureKVCacheDTypePrefix
	vllmFileKVTransfer              = engine.VLLMSourceKVTransfer
	vllmFileCache                   = engine.VLLMSourceCache
	vllmFileInputProcessorAssignRID = engine.VLLMSourceAssignRequestID
)

// vllmTable is the vLLM engine's release table.
var vllmTable = engine.FactsOf(engine.VLLM).Versions

// VLLMTableFloor is the oldest vLLM the table was checked against; an
// older vLLM renders with a warning, unadapted.
var VLLMTableFloor = vllmTable.Floor

// VLLMFeatures is the table's rows.
var VLLMFeatures = vllmTable.Features

// KVCacheDTypes are the --kv-cache-dtype values a spec may name; bfloat16
// and float16 are version-gated through VLLMFeatures.
var KVCacheDTypes = vllmTable.KVCacheDTypes

func lookupFeature(id string) (VLLMFeature, bool) { return vllmTable.Feature(id) }

// Has reports whether vLLM v has the table's feature id: it is Since or
// later, and older than Removed when that is set.
func (v Version) Has(id string) bool {
	f, ok := lookupFeature(id)
	if !ok {
		panic("deploy: no vLLM feature " + id)
	}
	return featureIn(f, v)
}

func featureIn(f VLLMFeature, v Version) bool {
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
