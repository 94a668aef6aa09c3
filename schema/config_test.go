package schema_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// A record's config reads through its typed views whether it came from a
// file (JSON values) or was built in memory (Go values); a section of the
// wrong shape is an error naming config.<field>.
func TestConfigViews(t *testing.T) {
	var read schema.Config
	if err := json.Unmarshal([]byte(`{"name":"n","scenario":"s","tpot_floor_ms":2.5,"topology":{"kind":"colocated","replicas":2,"tp":4},"knobs":{"max_num_seqs":64},"other":[1]}`), &read); err != nil {
		t.Fatal(err)
	}
	built := schema.Config{"name": "n", "scenario": "s", "tpot_floor_ms": 2.5, "topology": map[string]any{"kind": "colocated", "replicas": 2, "tp": 4}, "knobs": map[string]any{"max_num_seqs": 64}, "other": []int{1}}
	for name, c := range map[string]schema.Config{"read": read, "built": built} {
		topo, ok, err := c.Topology()
		if err != nil || !ok || topo.Kind != "colocated" || topo.Replicas != 2 || topo.TP != 4 {
			t.Errorf("%s: topology %+v, %v, %v", name, topo, ok, err)
		}
		k, err := c.Knobs()
		if err != nil || k.MaxNumSeqs != 64 {
			t.Errorf("%s: knobs %+v, %v", name, k, err)
		}
		ms, ok, err := c.TPOTFloorMs()
		if err != nil || !ok || ms != 2.5 || c.Scenario() != "s" {
			t.Errorf("%s: tpot_floor_ms %v, %v, %v; scenario %q", name, ms, ok, err, c.Scenario())
		}
	}
	if _, ok, err := (schema.Config{}).Topology(); ok || err != nil {
		t.Errorf("no topology: %v, %v", ok, err)
	}
	if s := (schema.Config{"name": "n"}).Scenario(); s != "n" {
		t.Errorf("scenario of a config without one: %q, want its name", s)
	}
	bad := schema.Config{"topology": "colocated", "knobs": map[string]any{"max_num_seqs": "many"}, "tpot_floor_ms": -1}
	if _, _, err := bad.Topology(); err == nil || !strings.HasPrefix(err.Error(), "config.topology: got a JSON string") {
		t.Errorf("topology as a string: %v", err)
	}
	if _, err := bad.Knobs(); err == nil || !strings.HasPrefix(err.Error(), "config.knobs.max_num_seqs: got a JSON string") {
		t.Errorf("max_num_seqs as a string: %v", err)
	}
	if _, ok, err := bad.TPOTFloorMs(); !ok || err == nil || !strings.HasPrefix(err.Error(), "config.tpot_floor_ms: -1: want a positive number") {
		t.Errorf("tpot_floor_ms -1: %v, %v", ok, err)
	}
}
