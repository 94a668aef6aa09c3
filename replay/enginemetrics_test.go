package replay

import (
	"context"
	"encoding/json"
	"maps"
	"testing"

	"github.com/hone-llm/hone/schema"
)

func TestEngineMetricsKeys(t *testing.T) {
	m := func(s string) json.RawMessage { return json.RawMessage(s) }
	reqs := []schema.RequestRecord{
		{ID: 0, Outcome: schema.OutcomeOK, EngineMetrics: m(`{"queue_time_ms":1}`)}, // a warm-up: not measured
		{ID: 8, Outcome: schema.OutcomeOK, EngineMetrics: m(`{"queue_time_ms":1,"time_to_first_token_ms":2,"mean_itl_ms":null}`)},
		{ID: 9, Outcome: schema.OutcomeOK, EngineMetrics: m(`{"queue_time_ms":1,"time_to_first_token_ms":2,"mean_itl_ms":0.5}`)},
		{ID: 10, Outcome: schema.OutcomeOK},
		{ID: 11, Outcome: schema.OutcomeStreamCut, EngineMetrics: m(`{"queue_time_ms":1}`)},
	}
	got := engineMetricsKeys(reqs, Sessions)
	if want := map[string]int{"queue_time_ms": 2, "time_to_first_token_ms": 2, "mean_itl_ms": 1}; !maps.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	if got := engineMetricsKeys(reqs[3:4], Sessions); got != nil {
		t.Errorf("no metrics: %v, want nil", got)
	}
}

// vLLM needs no opt-in field for its per-request metrics, only the usage
// chunk they ride on in a stream; each level records which keys came back.
func TestRunRecordsEngineMetricsKeys(t *testing.T) {
	f := newFakeVLLM(t)
	rec, err := Run(context.Background(), oneLevel(testOptions(f.start().URL)))
	if err != nil {
		t.Fatal(err)
	}
	rec = roundTrip(t, rec)
	b := f.bodies[0]
	if so, _ := b["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options %v: vLLM sends the metrics on the usage chunk only", b["stream_options"])
	}
	for _, k := range []string{"include_metrics", "n"} {
		if _, ok := b[k]; ok {
			t.Errorf("body has %q: vLLM has no per-request metrics opt-in, and drops metrics for n > 1", k)
		}
	}
	l := rec.Runs[0].Levels[0]
	if want := map[string]int{"queue_time_ms": l.Measured, "time_to_first_token_ms": l.Measured}; l.Measured == 0 || !maps.Equal(l.EngineMetricsKeys, want) {
		t.Errorf("engine_metrics_keys %v, want %v", l.EngineMetricsKeys, want)
	}
}
