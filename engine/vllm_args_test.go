package engine_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
)

func TestCheckVLLMServeArgs(t *testing.T) {
	for _, c := range []struct {
		version string
		args    string
		want    string // "" accepted, else a part of the error
	}{
		{"0.26.0", "Qwen/Q --port 8100 --enable-per-request-metrics --kv-cache-dtype float16", ""},
		{"0.25.1", "Qwen/Q --port 8100 --enable-per-request-metrics", "unrecognized arguments: --enable-per-request-metrics (first in 0.26.0"},
		{"0.17.0", "Qwen/Q --kv-cache-dtype float16", `argument --kv-cache-dtype: invalid choice: "float16"`},
		{"0.11.0", "Qwen/Q --kv-cache-dtype bfloat16", ""},
		{"0.11.0", `Qwen/Q --kv-transfer-config {"kv_connector":"NixlConnector","kv_load_failure_policy":"fail"}`, `no field "kv_load_failure_policy" (first in 0.11.1`},
		{"0.11.1", `Qwen/Q --kv-transfer-config={"kv_connector":"NixlConnector","kv_load_failure_policy":"fail"}`, ""},
		{"0.26.0", `Qwen/Q --kv-transfer-config {"kv_connector":"NixlConnector","kv_rank":0}`, `no field "kv_rank"`},
		{"0.26.0", "Qwen/Q --kv-transfer-config not-json", "not a JSON object"},
		{"0.26.0", "Qwen/Q --trust-remote-code", "unrecognized arguments: --trust-remote-code (not a flag hone's version table knows)"},
		{"0.26.0", "Qwen/Q --port eighty", `invalid int value: "eighty"`},
		{"0.26.0", "Qwen/Q --gpu-memory-utilization x", "invalid float value"},
		{"0.26.0", "Qwen/Q --dtype fp4", `invalid choice: "fp4"`},
		{"0.26.0", "Qwen/Q --port", "expected one argument"},
		{"0.26.0", "Qwen/Q --enforce-eager=1", "ignored explicit argument"},
		{"0.26.0", "Qwen/Q Other/M", "unrecognized arguments: Other/M"},
		{"0.26.0", "--port 8100", "required: model_tag"},
		{"0.26.0", "Qwen/Q --port 1 --port 2", "given twice"},
	} {
		sa, err := engine.CheckVLLMServeArgs(engine.MustVersion(c.version), strings.Fields(c.args))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %q: %v", c.version, c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %q: got %v, want an error with %q", c.version, c.args, err, c.want)
		case c.want == "" && sa.Model != "Qwen/Q":
			t.Errorf("%s %q: model %q", c.version, c.args, sa.Model)
		}
	}
}

// TestRenderedFlagsAreKnown renders every spec hone ships for every vLLM
// the table distinguishes and checks the command with CheckVLLMServeArgs:
// Render spells only flags of VLLMServeFlags and the table's, and only
// what that version accepts (what it cannot run it refuses, naming the
// field).
func TestRenderedFlagsAreKnown(t *testing.T) {
	specs, _ := filepath.Glob("../deploy/testdata/specs/*.yaml")
	examples, _ := filepath.Glob("../examples/vllm-*.yaml")
	versions := []string{vllmTable.Floor}
	for _, f := range vllmTable.Features {
		versions = append(versions, f.Since)
		if f.Removed != "" {
			versions = append(versions, f.Removed)
		}
	}
	rendered := 0
	for _, file := range append(specs, examples...) {
		s, err := deploy.LoadSpec(file)
		if err != nil {
			t.Fatal(err)
		}
		if s.Engine != engine.VLLM {
			continue
		}
		for _, ver := range versions {
			p, err := deploy.Render(s, deploy.RenderOptions{VLLMVersion: ver})
			if err != nil {
				if !strings.HasPrefix(err.Error(), "spec.") {
					t.Errorf("%s on %s: refused without naming a field: %v", file, ver, err)
				}
				continue
			}
			for _, w := range p.Workers {
				if w.Argv[1] != "serve" {
					t.Fatalf("%s: argv %q", file, w.Argv)
				}
				if _, err := engine.CheckVLLMServeArgs(engine.MustVersion(ver), w.Argv[2:]); err != nil {
					t.Errorf("%s rendered for %s, worker %s: %v", file, ver, w.Name, err)
				}
				rendered++
			}
		}
	}
	if rendered < 10 {
		t.Errorf("only %d workers rendered and checked", rendered)
	}
}
