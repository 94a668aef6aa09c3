package kubernetes

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hone-llm/hone/internal/usage"
)

// TestRenderCommandCLI: a spec renders as YAML that decodes; nothing to
// render, or a replay Job without a spec, is bad input.
func TestRenderCommandCLI(t *testing.T) {
	var out strings.Builder
	err := RenderCommand(RenderCmdOptions{Args: []string{"../testdata/specs/colocated-tp2.yaml"}, Options: Options{Namespace: "llm"}, Out: &out, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if objs, err := Decode([]byte(out.String())); err != nil || len(objs) == 0 {
		t.Fatalf("%d objects, %v:\n%s", len(objs), err, out.String())
	}
	for want, o := range map[string]RenderCmdOptions{
		"give a SPEC, --daemonset, or both": {},
		"--replay-shards needs a SPEC":      {Replay: ReplayJob{Shards: 2}},
		"--node-kernel: only with":          {Args: []string{"../testdata/specs/colocated-tp2.yaml"}, NodeKernel: "6.8"},
	} {
		o.Out, o.Log = io.Discard, io.Discard
		if err := RenderCommand(o); !errors.As(err, new(usage.Error)) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want a usage error %q", o, err, want)
		}
	}
}

// TestDownCommandNeedsName: down --target kubernetes names the deployment.
func TestDownCommandNeedsName(t *testing.T) {
	err := DownCommand(context.Background(), DownCmdOptions{Out: io.Discard, Log: io.Discard})
	if !errors.As(err, new(usage.Error)) || !strings.Contains(err.Error(), "name the deployment") {
		t.Errorf("%v", err)
	}
}
