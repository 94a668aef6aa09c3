package deploy

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/internal/usage"
)

func TestDownCommand(t *testing.T) {
	if got := downCommand("emu", "/x", false); got != "hone deploy down emu" {
		t.Errorf("default state dir: %q", got)
	}
	if got := downCommand("emu", "/tmp/my state", true); got != "hone deploy down emu --state-dir '/tmp/my state'" {
		t.Errorf("--state-dir given: %q", got)
	}
}

// TestRenderCommandCLI: the script names the spec in the proxy's command;
// --daemonset without --target kubernetes and a missing spec are bad input.
func TestRenderCommandCLI(t *testing.T) {
	var out strings.Builder
	spec := "testdata/specs/colocated-tp2.yaml"
	if err := RenderCommand(context.Background(), RenderCmdOptions{Spec: spec, Format: "sh", VLLM: "vllm", Out: &out, Log: io.Discard}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "hone proxy --spec "+spec) {
		t.Errorf("script:\n%s", out.String())
	}
	for _, o := range []RenderCmdOptions{{Spec: spec, Daemonset: true}, {Spec: "/nonexistent.yaml"}} {
		o.Out, o.Log = io.Discard, io.Discard
		if err := RenderCommand(context.Background(), o); !errors.As(err, new(usage.Error)) {
			t.Errorf("%+v: %v, want a usage error", o, err)
		}
	}
}

// TestDownCommandNames: without an argument down stops the one deployment
// under the state directory, and refuses none or several.
func TestDownCommandNames(t *testing.T) {
	dir := t.TempDir()
	err := DownCommand(DownCmdOptions{StateDir: dir, Out: io.Discard})
	if !errors.As(err, new(usage.Error)) || !strings.Contains(err.Error(), "no deployment under "+dir) {
		t.Errorf("none: %v", err)
	}
	for _, n := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(StatePath(dir, n), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err = DownCommand(DownCmdOptions{StateDir: dir, Out: io.Discard})
	if !errors.As(err, new(usage.Error)) || !strings.Contains(err.Error(), "several deployments under "+dir+" (a, b): name one") {
		t.Errorf("several: %v", err)
	}
	if name, err := NameArg("testdata/specs/colocated-tp2.yaml"); err != nil || name != "coloc-tp2" {
		t.Errorf("NameArg of a spec: %q, %v", name, err)
	}
}
