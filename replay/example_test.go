package replay

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

var update = flag.Bool("update", false, "rewrite testdata/record.example.v3.json from a live run against the test server")

// TestExampleRecord keeps testdata/record.example.v3.json, a small real
// record (one run, one level of 12 requests of 4 tokens) that shows
// readers of records (gate, diagnose, optimizer) the layout, valid under
// the schema. testdata/record.example.json is the same record as schema
// version 2 wrote it, kept to show that version still reads
// (TestRecordVersions); -update leaves it alone.
func TestExampleRecord(t *testing.T) {
	path := filepath.Join("testdata", "record.example.v3.json")
	if *update {
		f := newFakeVLLM(t)
		opts := oneLevel(testOptions(f.start().URL))
		opts.Workload.OutputTokens = 4
		opts.SLO = slo.Default
		opts.TimeScale = 0.1
		opts.RequestTimeout = time.Minute
		opts.Config = map[string]any{"engine": "vllm", "mode": "colocated", "tp": 1, "prefix_caching": true}
		opts.Hardware = map[string]any{"gpus": []string{"NVIDIA H200"}, "client_cpu": "example"}
		opts.ModelInfo = schema.Model{Revision: "main", Precision: "bf16"}
		rec, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteRecord(path, rec); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := ReadRecord(path)
	if err != nil {
		t.Fatalf("%v (go test ./replay -run ExampleRecord -update rewrites it)", err)
	}
	if len(rec.Runs) != 1 || len(rec.Runs[0].Levels) != 1 || len(rec.Runs[0].Levels[0].Requests) != 12 {
		t.Errorf("example has %d runs", len(rec.Runs))
	}
}
