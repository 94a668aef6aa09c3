package exercise

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/hone-llm/hone/sim"
)

// A full exchange over the protocol, with a Go peer standing in for
// submission.py; the second call raises.
func TestServeBridgeExchange(t *testing.T) {
	toHone, fromPeer := io.Pipe()
	fromHone, toPeer := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeBridge(context.Background(), toHone, toPeer, io.Discard)
		toPeer.Close()
	}()
	enc := json.NewEncoder(fromPeer)
	if err := enc.Encode(map[string]any{"type": "start", "budget": 4,
		"baseline": map[string]any{"mode": "colocated", "prefix_cache": true, "note": "kept"}}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(fromHone)
	sc.Buffer(nil, 1<<20)
	var calls int
	var decision map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] == "decision" {
			decision = m
			break
		}
		if m["type"] != "evaluate" {
			t.Fatalf("unexpected message %v", m)
		}
		calls++
		cfg := m["config"].(map[string]any)
		if cfg["note"] != "kept" {
			t.Errorf("call %d dropped an unknown key: %v", calls, cfg)
		}
		if calls == 2 {
			enc.Encode(map[string]any{"type": "error", "call": m["call"], "error": "RuntimeError: boom"})
			continue
		}
		res, _ := sim.Scan(sim.DefaultScan(sim.Config{Mode: sim.Mode(cfg["mode"].(string)), PrefixCache: cfg["prefix_cache"].(bool)}))
		enc.Encode(map[string]any{"type": "result", "call": m["call"], "result": res})
	}
	fromPeer.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls != 4 {
		t.Errorf("%d calls, want 4", calls)
	}
	// Disaggregated raised, so the baseline (colocated) is the best that passed
	// and is verified by the last call.
	if decision["call"] != 1.0 || decision["verified"] != true {
		t.Errorf("decision %v", decision)
	}
}
