package calibrate

import (
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// A trace record has no warm-ups (replay.Record.Warmups): its requests
// 0-7 are measured requests like the rest. Without engine metrics a
// measured request's TTFT goes to its level's mean only, a warm-up's is
// fitted alone: the trace has exactly Sessions fewer observations per
// level. And the late warm-up pulls an emulator's counters report leave
// nothing out of a trace.
func TestCalibrateTraceHasNoWarmups(t *testing.T) {
	h := hidden(t)
	start, _ := emulator.LookupProfile("qwen2.5-coder-0.5b-l4")
	observations := func(in Input, trace bool) int {
		t.Helper()
		if trace {
			in.Record.Workload.Kind = schema.WorkloadTrace
		} else {
			in.Record.Workload.Kind = ""
		}
		res, err := Calibrate([]Input{in}, Config{Start: start, MaxIter: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Observations
	}

	co := Input{Spec: testSpec(t, deploy.Colocated, false), Path: "colocated"}
	co.Record = measure(t, co.Spec, h)
	for _, r := range co.Record.Runs {
		for _, l := range r.Levels {
			for k := range l.Requests {
				l.Requests[k].EngineMetrics = nil // the client's figures
			}
		}
	}
	if brief, trace := observations(co, false), observations(co, true); brief-trace != len(testQPS)*replay.Sessions {
		t.Errorf("client figures: %d observations as the brief's workload, %d as a trace; want %d fewer (requests 0-7 in the TTFT mean)",
			brief, trace, len(testQPS)*replay.Sessions)
	}

	dis := Input{Spec: testSpec(t, deploy.Disaggregated, false), Path: "1p1d"}
	dis.Record = measure(t, dis.Spec, h)
	onTime := observations(dis, true)
	for li := range dis.Record.Runs[0].Levels {
		l := &dis.Record.Runs[0].Levels[li]
		l.Counters.Before = schema.Counters{schema.EmulatorKVPullsLate: 0, schema.EmulatorKVPullLateSeconds: 0}
		l.Counters.Warmup = schema.Counters{schema.EmulatorKVPullsLate: 3, schema.EmulatorKVPullLateSeconds: 0.01}
	}
	if late := observations(dis, true); late != onTime {
		t.Errorf("a trace with late pulls before its warm-up scrape: %d observations, want all %d (requests 0-7 are measured)", late, onTime)
	}
}
