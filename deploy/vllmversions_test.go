package deploy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseVersion(t *testing.T) {
	for _, c := range []struct {
		in                  string
		maj, min, pat, micr int
		pre                 bool
	}{
		{"0.11.1", 0, 11, 1, 0, false},
		{"0.10.1.1", 0, 10, 1, 1, false},
		{"0.8.5.post1", 0, 8, 5, 0, false},
		{"0.17.0rc1", 0, 17, 0, 0, true},
		{"0.16.1.dev42+g1a2b3c4", 0, 16, 1, 0, true},
		{"0.11.0+cu128", 0, 11, 0, 0, false},
		{"v0.26.0", 0, 26, 0, 0, false},
		{"vllm 0.12.0", 0, 12, 0, 0, false},
		{" 1.0 ", 1, 0, 0, 0, false},
	} {
		v, err := ParseVersion(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if v.Major != c.maj || v.Minor != c.min || v.Patch != c.pat || v.Micro != c.micr || v.Pre != c.pre {
			t.Errorf("%q = %+v", c.in, v)
		}
	}
	for _, bad := range []string{"", "vllm", "0", "0.11.x", "INFO 08-09 starting", "0.11.0garbage"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestVersionOrder(t *testing.T) {
	order := []string{"0.9.2", "0.10.1", "0.10.1.1", "0.11.0rc1", "0.11.0", "0.11.0.post1", "0.11.1.dev3", "0.11.1", "0.16.1.dev9+gabc", "0.17.0", "1.0.0"}
	for i := range order {
		for j := range order {
			a, b := MustVersion(order[i]), MustVersion(order[j])
			if got := a.AtLeast(b); got != (i >= j) {
				t.Errorf("%s.AtLeast(%s) = %v", a, b, got)
			}
		}
	}
}

// TestVLLMFeatureTable keeps the table well formed: every row parses, is
// cited, and is not older than the floor.
func TestVLLMFeatureTable(t *testing.T) {
	seen := map[string]bool{}
	floor := MustVersion(VLLMTableFloor)
	for _, f := range VLLMFeatures {
		if seen[f.ID] {
			t.Errorf("%s listed twice", f.ID)
		}
		seen[f.ID] = true
		v, err := ParseVersion(f.Since)
		if err != nil || !v.AtLeast(floor) || f.Name == "" || !strings.Contains(f.Source, "vllm") {
			t.Errorf("bad row %+v (%v)", f, err)
		}
		if f.Removed != "" {
			if r, err := ParseVersion(f.Removed); err != nil || r.cmp(v) <= 0 || f.Removal == "" {
				t.Errorf("%s: removed in %q, since %s, removal note %q: want a release after Since, said where", f.ID, f.Removed, f.Since, f.Removal)
			}
		}
	}
	// What vLLM has announced, as read in its source (see the rows).
	if f, _ := lookupFeature(FeatureDisableRequestIDRandom); f.Removed != "" || !strings.HasPrefix(f.Removal, "planned, no release named") {
		t.Errorf("%s: removed %q, removal %q", f.ID, f.Removed, f.Removal)
	}
	if f, _ := lookupFeature(FeaturePerRequestMetrics); !strings.HasPrefix(f.Source, "vllm/entrypoints/launchers/cli_args.py") {
		t.Errorf("%s: source %q: the frontend's arguments live in vllm/entrypoints/launchers/cli_args.py", f.ID, f.Source)
	}
	for _, d := range KVCacheDTypes {
		MustVersion("0.1.0").acceptsKVCacheDType(d) // panics on a gated value with no row
	}
}

func TestParseVLLMVersionOutput(t *testing.T) {
	out := "INFO 08-09 21:13:56 [__init__.py:216] Automatically detected platform cuda.\n0.11.1\n"
	if v, err := ParseVLLMVersionOutput(out); err != nil || v.Raw != "0.11.1" {
		t.Errorf("got %v, %v", v, err)
	}
	if _, err := ParseVLLMVersionOutput("usage: vllm [-h]\n"); err == nil {
		t.Error("usage text parsed as a version")
	}
}

// fakeVLLM writes an executable script named vllm into a temp dir.
func fakeVLLM(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vllm")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVLLMVersionRunsTheExecutable(t *testing.T) {
	ctx := context.Background()
	ok := fakeVLLM(t, `[ "$1" = --version ] || exit 3
echo "INFO 01-01 00:00:00 [__init__.py:216] Automatically detected platform cuda." >&2
echo "WARNING a plugin printed this" 
echo 0.17.0`)
	if v, err := VLLMVersion(ctx, ok); err != nil || v != "0.17.0" {
		t.Errorf("VLLMVersion = %q, %v", v, err)
	}
	if v, err := VLLMVersion(ctx, fakeVLLM(t, `echo "ModuleNotFoundError: No module named 'vllm'" >&2; exit 1`)); err == nil || v != "" || !strings.Contains(err.Error(), "No module named") {
		t.Errorf("failing vllm: %q, %v", v, err)
	}
	if v, err := VLLMVersion(ctx, fakeVLLM(t, `echo hello`)); err == nil || v != "" {
		t.Errorf("no version printed: %q, %v", v, err)
	}
	if v, err := VLLMVersion(ctx, filepath.Join(t.TempDir(), "missing")); err == nil || v != "" {
		t.Errorf("missing vllm: %q, %v", v, err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if v, err := VLLMVersion(short, fakeVLLM(t, `exec sleep 30`)); err == nil || v != "" || !strings.Contains(err.Error(), "time limit") {
		t.Errorf("hanging vllm: %q, %v", v, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("hanging vllm held VLLMVersion for %s", d)
	}
}

func TestVLLMCapabilities(t *testing.T) {
	status := func(v string) map[string]bool {
		m := map[string]bool{}
		for _, c := range VLLMCapabilities(MustVersion(v)) {
			m[c.ID] = c.OK
		}
		return m
	}
	old := status("0.10.2")
	if old["table"] || old[FeaturePerRequestMetrics] || old[FeatureKVLoadFailurePolicy] || !old["p2p-request-ids"] || old[FeatureKVCacheDTypeBFloat16] {
		t.Errorf("0.10.2: %v", old)
	}
	mid := status("0.15.1")
	if !mid["table"] || mid["p2p-request-ids"] || !mid[FeatureKVLoadFailurePolicy] || !mid[FeatureKVCacheDTypeBFloat16] || mid[FeatureKVCacheDTypeFloat16] {
		t.Errorf("0.15.1: %v", mid)
	}
	for id, ok := range status("0.27.1") {
		if !ok {
			t.Errorf("0.27.1 lacks %s", id)
		}
	}
}

// TestVLLMFeatureRemoved: a release at or after a row's Removed lacks the
// feature, and what hone needed it for is refused there, naming the field
// and the release that removed it.
func TestVLLMFeatureRemoved(t *testing.T) {
	i := slices.IndexFunc(VLLMFeatures, func(f VLLMFeature) bool { return f.ID == FeatureDisableRequestIDRandom })
	saved := VLLMFeatures[i]
	t.Cleanup(func() { VLLMFeatures[i] = saved })
	VLLMFeatures[i].Removed = "0.40.0"
	if !MustVersion("0.39.9").Has(FeatureDisableRequestIDRandom) || MustVersion("0.40.0").Has(FeatureDisableRequestIDRandom) ||
		!MustVersion("0.40.0rc1").Has(FeatureDisableRequestIDRandom) {
		t.Error("Has ignores Removed")
	}
	s, err := LoadSpec("testdata/specs/disagg-p2pnccl-1p1d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(s, RenderOptions{VLLMVersion: "0.39.0"}); err != nil {
		t.Errorf("0.39.0: %v", err)
	}
	_, err = Render(s, RenderOptions{VLLMVersion: "0.40.0"})
	if err == nil || !strings.Contains(err.Error(), "spec.kv_connector.name: P2pNcclConnector cannot run on vLLM 0.40.0") ||
		!strings.Contains(err.Error(), "first in 0.17.0, removed in 0.40.0") {
		t.Errorf("0.40.0: %v", err)
	}
	for _, c := range VLLMCapabilities(MustVersion("0.40.0")) {
		if c.ID == "p2p-request-ids" && (c.OK || !strings.Contains(c.Detail, "removed in 0.40.0")) {
			t.Errorf("capability: %+v", c)
		}
	}
}
