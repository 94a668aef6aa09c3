package emulator

import (
	"fmt"
	"slices"
	"testing"
)

// TestSimulateClosedLoop: after two open-loop requests, 20 requests sent
// in a closed loop of 4 keep exactly 4 in flight from the loop's start
// until the last of them is sent, and each later request arrives at the
// instant an earlier one ended.
func TestSimulateClosedLoop(t *testing.T) {
	var reqs []VirtualRequest
	for i := range 22 {
		at := 0.0
		switch {
		case i < 2:
			at = float64(i) * 10
		case i >= 2:
			at = 1000
		}
		reqs = append(reqs, VirtualRequest{ID: fmt.Sprint(i), Prompt: suffix(i, 64+8*i), MaxTokens: 5 + i%7, ArrivalMs: at, Decode: -1})
	}
	out, err := SimulateLoad([]Config{{Profile: "exercise"}}, reqs, ClosedLoop{From: 2, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	var ends []float64
	for i, o := range out {
		if o.Result.OutputTokens != reqs[i].MaxTokens {
			t.Fatalf("request %d: %d tokens, want %d", i, o.Result.OutputTokens, reqs[i].MaxTokens)
		}
		if i < 6 && o.ArrivalMs != reqs[i].ArrivalMs {
			t.Errorf("request %d arrived at %v, want its own %v", i, o.ArrivalMs, reqs[i].ArrivalMs)
		}
		if i >= 2 {
			ends = append(ends, o.FinishMs)
		}
	}
	slices.Sort(ends)
	// Request 6+k arrives at the (k+1)-th end among the loop's requests.
	for k := 0; 6+k < len(out); k++ {
		if out[6+k].ArrivalMs != ends[k] {
			t.Errorf("request %d arrived at %v, want the loop's %d-th end %v", 6+k, out[6+k].ArrivalMs, k+1, ends[k])
		}
	}
	// In flight at every instant from 1000 ms to the last arrival: 4.
	last := out[len(out)-1].ArrivalMs
	for _, at := range append([]float64{1000}, ends...) {
		if at > last {
			break
		}
		n := 0
		for _, o := range out[2:] {
			if o.ArrivalMs <= at && o.FinishMs > at {
				n++
			}
		}
		if n != 4 {
			t.Errorf("at %v ms: %d in flight, want 4", at, n)
		}
	}
	if _, err := SimulateLoad([]Config{{Profile: "exercise"}}, reqs, ClosedLoop{From: 2}); err == nil {
		t.Error("a closed loop of concurrency 0 was run")
	}
}
