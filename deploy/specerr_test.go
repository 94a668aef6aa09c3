package deploy

import (
	"strings"
	"testing"
)

// The decoder's type errors name Go types (deploy.Spec, deploy.Model); a
// spec's author gets the field's place in the spec and what it takes.
func TestSpecYAMLErrorsNameTheSpecsFields(t *testing.T) {
	cases := []struct{ spec, want string }{
		{"name: x\nengine: vllm\nnosuch: 1\n",
			`line 3: unknown field "nosuch" in the spec's top level, which takes cold_start, emulator, engine, engine_env, gpus, knobs, kv_connector, model, name, network, objective, precision, routing, topology`},
		{"name: x\nmodel: m\n",
			`line 2: model: want a mapping (fields id, path, revision, served_name), got the string "m"`},
		{"name: x\ntopology:\n  kind: disaggregated\n  decode: {tp: 1, bogus: 2}\n",
			`line 4: unknown field "bogus" in topology.prefill or topology.decode, which takes`},
		{"name: x\ngpus: {budget: many}\n",
			`line 2: want an integer, got the string "many"`},
	}
	for _, c := range cases {
		_, err := ParseSpec([]byte(c.spec))
		if err == nil {
			t.Fatalf("%q: parsed", c.spec)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant it to contain %s", c.spec, err, c.want)
		}
		if strings.Contains(err.Error(), "deploy.") || strings.Contains(err.Error(), "schema.") {
			t.Errorf("%q: the error names a Go type: %v", c.spec, err)
		}
	}
}
