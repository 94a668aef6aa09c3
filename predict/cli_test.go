package predict

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// commandOptions predicts baseSpec at 1 and 4 req/s with 24 requests.
func commandOptions(t *testing.T, format string) (CommandOptions, *strings.Builder) {
	t.Helper()
	prof, err := emulator.ResolveProfile("", "qwen2.5-coder-0.5b-l4")
	if err != nil {
		t.Fatal(err)
	}
	w := replay.DefaultWorkload()
	w.Requests = 24
	var out strings.Builder
	return CommandOptions{SpecArg: "spec.yaml", Spec: baseSpec(t, 2, "[0, 1]"), Format: format, Top: 3, Out: &out, Log: &strings.Builder{},
		Options: Options{Profile: prof, Workload: w, QPS: []float64{1, 4}, SLO: slo.Default}}, &out
}

// The table ends in the note on what a predicted figure is; -o json is
// the record without its requests.
func TestCommandTableAndJSON(t *testing.T) {
	o, out := commandOptions(t, "table")
	if err := Command(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "kind: predicted  profile: qwen2.5-coder-0.5b-l4 (hand-made)  spec: base  gpus: 1") ||
		!strings.HasSuffix(out.String(), "\n"+Note+"\n") {
		t.Errorf("table:\n%s", out)
	}
	// A profile loaded from a file is labelled by how it was made too,
	// and an fp8 KV cache says what its decode read rests on.
	o, out = commandOptions(t, "table")
	fromFile := *o.Options.Profile
	fromFile.Name = "mine"
	fromFile.Source = &emulator.ProfileSource{Kind: emulator.SourceDerivedRoof}
	o.Options.Profile = &fromFile
	o.Spec.Precision.KVCacheDType = "fp8"
	if err := Command(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "kind: predicted  profile: mine (derived from roofline)") ||
		!strings.Contains(out.String(), "\nKV cache fp8: 1-byte elements, so the cache holds more tokens and the roofline reads fewer KV bytes\n") {
		t.Errorf("table with a file profile and an fp8 KV cache:\n%s", out)
	}
	o, out = commandOptions(t, "json")
	if err := Command(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	var rec schema.Record
	if err := json.Unmarshal([]byte(out.String()), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Kind != Kind || len(rec.Runs) != 1 || len(rec.Runs[0].Levels) != 2 || rec.Runs[0].Levels[0].Requests != nil {
		t.Errorf("-o json: kind %q, runs %+v", rec.Kind, rec.Runs)
	}
}

// A workload parameter the prediction refuses names its flag; any other
// failure names the spec; both are bad input.
func TestCommandErrors(t *testing.T) {
	o, _ := commandOptions(t, "table")
	o.Options.Workload.Requests = 8
	err := Command(context.Background(), o)
	var ue usage.Error
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "--requests: 8 is invalid: want ") {
		t.Errorf("8 requests: %v", err)
	}
	o, _ = commandOptions(t, "table")
	o.Options.Workload.InputTokens = 100000
	err = Command(context.Background(), o)
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "spec.yaml: cannot predict: ") {
		t.Errorf("100000 input tokens: %v", err)
	}
}

// A grid none of whose specs can be predicted still prints its table,
// and fails.
func TestCommandGridAllFailed(t *testing.T) {
	o, out := commandOptions(t, "table")
	o.Grid, o.Axes = true, Axes{TP: []int{1}, MaxNumSeqs: []int{256}, MaxNumBatchedTokens: []int{2048}, PrefixCaching: []bool{true},
		Routing: []string{deploy.SessionAffinity}, EnforceEager: []bool{false}, GPUMemoryUtilization: []float64{0.9}}
	o.Options.Workload.InputTokens = 100000
	err := Command(context.Background(), o)
	var f usage.Failed
	if !errors.As(err, &f) || !strings.HasPrefix(f.Msg, "no spec of the grid could be predicted: ") {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(out.String(), "specs could not be predicted:") || !strings.HasSuffix(out.String(), Note+"\n") {
		t.Errorf("table:\n%s", out)
	}
	if log := o.Log.(*strings.Builder).String(); !strings.Contains(log, "predict: 3 specs in ") {
		t.Errorf("log %q", log)
	}
}
