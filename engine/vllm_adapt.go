package engine

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// This file is vLLM's Adapter: it reads the installed vLLM's version and
// checks a deployment against vLLM's release table (vllm_versions.go),
// deciding what Render omits for that release and what it refuses. Render
// (deploy), hone preflight and the fake vllm (scripts/fake-vllm) ask it;
// nothing else should compare vLLM versions.

var _ Adapter = vllm{}

// ParseVLLMVersion reads a vLLM version as `vllm --version` prints it:
// 0.11.1, v0.26.0 or "vllm 0.12.0".
func ParseVLLMVersion(s string) (Version, error) { return parseVersion(s, VLLM, "vLLM") }

func (vllm) ParseVersion(s string) (Version, error) { return ParseVLLMVersion(s) }

// parseVLLMVersionOutput finds the version in `vllm --version` output: the
// last line that is a version (importing vLLM may log lines before it).
func parseVLLMVersionOutput(out string) (Version, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if v, err := ParseVLLMVersion(lines[i]); err == nil {
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

// InstalledVersion runs `binary --version` ("vllm" on PATH when empty)
// and returns the installed version's string, e.g. "0.11.1". On any
// failure it returns "" and the reason; Adapt treats "" as unknown.
func (vllm) InstalledVersion(ctx context.Context, binary string) (string, error) {
	if binary == "" {
		binary = vllm{}.Facts().Binary
	}
	ctx, cancel := context.WithTimeout(ctx, VLLMVersionTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, "--version")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A killed vllm can leave a child holding the pipes; do not wait on it.
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s --version: no answer within the time limit: %w", binary, ctx.Err())
	}
	if err != nil {
		msg := clip(stderr.String(), 300)
		if msg == "" {
			return "", fmt.Errorf("%s --version: %w", binary, err)
		}
		return "", fmt.Errorf("%s --version: %w: %s", binary, err, msg)
	}
	v, err := parseVLLMVersionOutput(stdout.String())
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", binary, err)
	}
	return v.Raw, nil
}

// Capabilities lists, for vLLM v, each hone capability the table decides,
// with what Render does about it.
func (vllm) Capabilities(v Version) []Capability {
	t := vllmVersions
	var out []Capability
	add := func(id string, ok bool, format string, args ...any) {
		out = append(out, Capability{ID: id, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	if floor := MustVersion(t.Floor); !v.AtLeast(floor) {
		add("table", false, "vLLM %s is older than %s, the oldest vLLM hone's version table covers: commands render unadapted and may use flags it lacks", v, t.Floor)
	} else {
		add("table", true, "vLLM %s is covered by hone's version table (from %s)", v, t.Floor)
	}
	if t.Has(v, FeaturePerRequestMetrics) {
		add(FeaturePerRequestMetrics, true, "--enable-per-request-metrics rendered: responses carry per-request timings")
	} else {
		add(FeaturePerRequestMetrics, false, "no --enable-per-request-metrics before %s: left out; no per-request timings in responses", t.Since(FeaturePerRequestMetrics))
	}
	if t.Has(v, FeatureKVLoadFailurePolicy) {
		add(FeatureKVLoadFailurePolicy, true, "kv_connector.load_failure_policy honoured (kv_load_failure_policy)")
	} else {
		add(FeatureKVLoadFailurePolicy, false, "no kv_load_failure_policy before %s: a spec that sets kv_connector.load_failure_policy is refused", t.Since(FeatureKVLoadFailurePolicy))
	}
	switch {
	case !t.Has(v, FeatureRequestIDRandomization):
		add("p2p-request-ids", true, "request ids kept as sent (no randomization before %s): P2pNcclConnector works", t.Since(FeatureRequestIDRandomization))
	case t.Has(v, FeatureDisableRequestIDRandom):
		add("p2p-request-ids", true, "request ids randomized; VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1 is rendered for P2pNcclConnector workers")
	default:
		add("p2p-request-ids", false, "request ids randomized (since %s) with no switch to turn it off (%s): P2pNcclConnector specs are refused; use NixlConnector",
			t.Since(FeatureRequestIDRandomization), t.Span(FeatureDisableRequestIDRandom))
	}
	for _, d := range []string{"bfloat16", "float16"} {
		id := FeatureKVCacheDTypePrefix + d
		if t.Has(v, id) {
			add(id, true, "--kv-cache-dtype %s accepted", d)
		} else {
			add(id, false, "--kv-cache-dtype %s not accepted before %s: a spec that names it is refused", d, t.Since(id))
		}
	}
	return out
}

// Adapt decides, for a valid vLLM deployment and the installed version
// string, what to render, what to warn about, and what to refuse.
func (vllm) Adapt(raw string, l Launch) (Adaptation, []string, error) {
	t := vllmVersions
	p2p := l.KV != nil && l.KV.Connector == P2pNcclConnector
	var warnings []string
	var v Version
	known := false
	if raw != "" {
		var err error
		if v, err = ParseVLLMVersion(raw); err != nil {
			warnings = append(warnings, fmt.Sprintf("vLLM version %q not understood (%v): treated as unknown", raw, err))
		} else {
			known = true
		}
	}
	if !known {
		// Render as before, plus the fixes harmless on every version: an
		// environment variable an old vLLM does not read is ignored.
		return Adaptation{Features: Features{StableRequestIDs: p2p}}, append(warnings, "vLLM version unknown: rendered for the newest vLLM, unchecked, without "+
			"--enable-per-request-metrics; give the installed version (hone deploy render --vllm-version auto) "+
			"to adapt"), nil
	}
	a := Adaptation{Version: v.Raw}
	if !v.AtLeast(MustVersion(t.Floor)) {
		warnings = append(warnings, fmt.Sprintf("vLLM %s is older than %s, the oldest vLLM hone's version table covers: rendered unadapted", v, t.Floor))
	}
	if err := vllmRefusal(v, l, p2p); err != nil {
		return a, nil, err
	}
	a.Features = Features{PerRequestMetrics: t.Has(v, FeaturePerRequestMetrics), StableRequestIDs: p2p && t.Has(v, FeatureRequestIDRandomization)}
	return a, warnings, nil
}

// vllmRefusal is the spec field vLLM v cannot run, if any.
func vllmRefusal(v Version, l Launch, p2p bool) error {
	t := vllmVersions
	if d := l.KVCacheDType; d != "" && !t.AcceptsKVCacheDType(v, d) {
		var ok []string
		for _, x := range t.KVCacheDTypes {
			if t.AcceptsKVCacheDType(v, x) {
				ok = append(ok, x)
			}
		}
		return fieldErr("precision.kv_cache_dtype",
			"vLLM %s does not accept --kv-cache-dtype %s (first in %s, %s); want one of %s",
			v, d, t.Since(FeatureKVCacheDTypePrefix+d), VLLMSourceCache, strings.Join(ok, ", "))
	}
	if l.KV != nil && l.KV.LoadFailurePolicy != "" && !t.Has(v, FeatureKVLoadFailurePolicy) {
		return fieldErr("kv_connector.load_failure_policy",
			"vLLM %s has no kv_load_failure_policy (first in %s, %s); remove the field or upgrade vLLM",
			v, t.Since(FeatureKVLoadFailurePolicy), VLLMSourceKVTransfer)
	}
	if p2p && t.Has(v, FeatureRequestIDRandomization) && !t.Has(v, FeatureDisableRequestIDRandom) {
		return fieldErr("kv_connector.name",
			"P2pNcclConnector cannot run on vLLM %s: it appends a random suffix to every request id (since %s, %s), "+
				"so prefill and decode key the KV tensors differently and decode waits forever, and it has no "+
				"VLLM_DISABLE_REQUEST_ID_RANDOMIZATION to turn that off (%s); use NixlConnector or a vLLM that has it",
			v, t.Since(FeatureRequestIDRandomization), VLLMSourceAssignRequestID, t.Span(FeatureDisableRequestIDRandom))
	}
	return nil
}

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
