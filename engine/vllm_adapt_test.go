package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
)

var vllmTable = engine.FactsOf(engine.VLLM).Versions

func vllmAdapter(t *testing.T) engine.Adapter {
	t.Helper()
	e, _ := engine.Lookup(engine.VLLM)
	a, ok := e.(engine.Adapter)
	if !ok {
		t.Fatal("vllm is not an engine.Adapter")
	}
	return a
}

// Facts.Versioned engines, and only they, adapt to the installed release.
func TestVersionedEnginesAdapt(t *testing.T) {
	for _, n := range engine.Names() {
		e, _ := engine.Lookup(n)
		_, ok := e.(engine.Adapter)
		if f := e.Facts(); ok != f.Versioned || ok != (f.Versions != nil) {
			t.Errorf("%s: Adapter %v, Versioned %v, Versions %v", n, ok, f.Versioned, f.Versions != nil)
		}
	}
}

// TestVLLMFeatureTable keeps the table well formed: every row parses, is
// cited, and is not older than the floor.
func TestVLLMFeatureTable(t *testing.T) {
	seen := map[string]bool{}
	floor := engine.MustVersion(vllmTable.Floor)
	for _, f := range vllmTable.Features {
		if seen[f.ID] {
			t.Errorf("%s listed twice", f.ID)
		}
		seen[f.ID] = true
		v, err := engine.ParseVersion(f.Since)
		if err != nil || !v.AtLeast(floor) || f.Name == "" || !strings.Contains(f.Source, "vllm") {
			t.Errorf("bad row %+v (%v)", f, err)
		}
		if f.Removed != "" {
			if r, err := engine.ParseVersion(f.Removed); err != nil || r.Compare(v) <= 0 || f.Removal == "" {
				t.Errorf("%s: removed in %q, since %s, removal note %q: want a release after Since, said where", f.ID, f.Removed, f.Since, f.Removal)
			}
		}
	}
	// What vLLM has announced, as read in its source (see the rows).
	if f, _ := vllmTable.Feature(engine.FeatureDisableRequestIDRandom); f.Removed != "" || !strings.HasPrefix(f.Removal, "planned, no release named") {
		t.Errorf("%s: removed %q, removal %q", f.ID, f.Removed, f.Removal)
	}
	if f, _ := vllmTable.Feature(engine.FeaturePerRequestMetrics); !strings.HasPrefix(f.Source, "vllm/entrypoints/launchers/cli_args.py") {
		t.Errorf("%s: source %q: the frontend's arguments live in vllm/entrypoints/launchers/cli_args.py", f.ID, f.Source)
	}
	for _, d := range vllmTable.KVCacheDTypes {
		vllmTable.AcceptsKVCacheDType(engine.MustVersion("0.1.0"), d) // panics on a gated value with no row
	}
}

func TestParseVLLMVersionOutput(t *testing.T) {
	out := "INFO 08-09 21:13:56 [__init__.py:216] Automatically detected platform cuda.\n0.11.1\n"
	if v, err := engine.ParseVLLMVersionOutput(out); err != nil || v.Raw != "0.11.1" {
		t.Errorf("got %v, %v", v, err)
	}
	if _, err := engine.ParseVLLMVersionOutput("usage: vllm [-h]\n"); err == nil {
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

func TestVLLMInstalledVersionRunsTheExecutable(t *testing.T) {
	ctx := context.Background()
	VLLMVersion := vllmAdapter(t).InstalledVersion
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
		for _, c := range vllmAdapter(t).Capabilities(engine.MustVersion(v)) {
			m[c.ID] = c.OK
		}
		return m
	}
	old := status("0.10.2")
	if old["table"] || old[engine.FeaturePerRequestMetrics] || old[engine.FeatureKVLoadFailurePolicy] || !old["p2p-request-ids"] || old[engine.FeatureKVCacheDTypeBFloat16] {
		t.Errorf("0.10.2: %v", old)
	}
	mid := status("0.15.1")
	if !mid["table"] || mid["p2p-request-ids"] || !mid[engine.FeatureKVLoadFailurePolicy] || !mid[engine.FeatureKVCacheDTypeBFloat16] || mid[engine.FeatureKVCacheDTypeFloat16] {
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
	i := slices.IndexFunc(vllmTable.Features, func(f engine.Feature) bool { return f.ID == engine.FeatureDisableRequestIDRandom })
	saved := vllmTable.Features[i]
	t.Cleanup(func() { vllmTable.Features[i] = saved })
	vllmTable.Features[i].Removed = "0.40.0"
	has := func(v string) bool { return vllmTable.Has(engine.MustVersion(v), engine.FeatureDisableRequestIDRandom) }
	if !has("0.39.9") || has("0.40.0") || !has("0.40.0rc1") {
		t.Error("Has ignores Removed")
	}
	s, err := deploy.LoadSpec("../deploy/testdata/specs/disagg-p2pnccl-1p1d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deploy.Render(s, deploy.RenderOptions{VLLMVersion: "0.39.0"}); err != nil {
		t.Errorf("0.39.0: %v", err)
	}
	_, err = deploy.Render(s, deploy.RenderOptions{VLLMVersion: "0.40.0"})
	if err == nil || !strings.Contains(err.Error(), "spec.kv_connector.name: P2pNcclConnector cannot run on vLLM 0.40.0") ||
		!strings.Contains(err.Error(), "first in 0.17.0, removed in 0.40.0") {
		t.Errorf("0.40.0: %v", err)
	}
	for _, c := range vllmAdapter(t).Capabilities(engine.MustVersion("0.40.0")) {
		if c.ID == "p2p-request-ids" && (c.OK || !strings.Contains(c.Detail, "removed in 0.40.0")) {
			t.Errorf("capability: %+v", c)
		}
	}
}
