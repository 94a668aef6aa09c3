package emulator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeProbe records the calls a live engine makes: "graph" (cuGraphLaunch),
// "launch" (cuLaunchKernel), "sync" (cuStreamSynchronize).
type fakeProbe struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeProbe) launch(graph bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if graph {
		f.calls = append(f.calls, "graph")
	} else {
		f.calls = append(f.calls, "launch")
	}
}

func (f *fakeProbe) sync() (int64, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "sync")
	return 0, 0
}

func (f *fakeProbe) snapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// launchesOf checks that calls alternate launch, sync, launch, sync... and
// returns the launches' kinds in order.
func launchesOf(t *testing.T, calls []string) []string {
	t.Helper()
	if len(calls)%2 != 0 {
		t.Fatalf("%d probe calls: not launch/sync pairs: %v", len(calls), calls)
	}
	var out []string
	for i := 0; i < len(calls); i += 2 {
		if calls[i] != "graph" && calls[i] != "launch" || calls[i+1] != "sync" {
			t.Fatalf("probe calls %d, %d are %q, %q: want a launch then a sync (all: %v)", i, i+1, calls[i], calls[i+1], calls)
		}
		out = append(out, calls[i])
	}
	return out
}

// stepLines returns the trace's step lines after checking they number the
// steps 1..n in order.
func stepLines(t *testing.T, trace *syncBuffer) []map[string]any {
	t.Helper()
	lines := trace.lines(t, "step")
	for i, l := range lines {
		if int(l["step"].(float64)) != i+1 {
			t.Fatalf("step line %d says step %v: want %d", i, l["step"], i+1)
		}
	}
	return lines
}

// stepPrefills says whether a step line's requests carry prefill tokens.
func stepPrefills(l map[string]any) bool {
	for _, r := range l["requests"].([]any) {
		m := r.(map[string]any)
		if m["prefill_tokens"].(float64) > 0 || !m["decode"].(bool) {
			return true
		}
	}
	return false
}

// TestCUDAProbeCallsPerStep: on the exercise profile (a batch of one)
// each request is one prefill step (cuLaunchKernel) and then max_tokens-1
// decode-only steps (cuGraphLaunch with CUDA graphs, cuLaunchKernel under
// --enforce-eager), each followed by one cuStreamSynchronize; the engine's
// step count and the trace's step lines agree with the calls exactly.
func TestCUDAProbeCallsPerStep(t *testing.T) {
	for _, eager := range []bool{false, true} {
		t.Run(fmt.Sprintf("eager=%v", eager), func(t *testing.T) {
			const n, k = 3, 5
			fp := &fakeProbe{}
			trace := newSyncBuffer()
			s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, Trace: trace, EnforceEager: eager, cudaProbe: fp})
			ctx := context.Background()
			for i := range n {
				r, _, err := complete(ctx, s.URL(), map[string]any{"prompt": suffix(100+i, 64), "max_tokens": k, "ignore_eos": true}, "")
				if err != nil {
					t.Fatal(err)
				}
				if r.Usage.CompletionTokens != k {
					t.Fatalf("request %d: %d tokens, want %d", i, r.Usage.CompletionTokens, k)
				}
			}
			launches := launchesOf(t, fp.snapshot())
			var want []string
			for range n {
				want = append(want, "launch")
				for range k - 1 {
					if eager {
						want = append(want, "launch")
					} else {
						want = append(want, "graph")
					}
				}
			}
			if !slices.Equal(launches, want) {
				t.Fatalf("launches %v, want %v", launches, want)
			}
			if got := s.eng.steps.Load(); got != int64(len(want)) {
				t.Errorf("engine ran %d steps, want %d", got, len(want))
			}
			lines := stepLines(t, trace)
			if len(lines) != len(want) {
				t.Fatalf("%d step lines, want %d", len(lines), len(want))
			}
			reqs := trace.lines(t, "request")
			if len(reqs) != n {
				t.Fatalf("%d request lines, want %d", len(reqs), n)
			}
			for i, l := range lines {
				rs := l["requests"].([]any)
				if len(rs) != 1 {
					t.Fatalf("step %d: %d requests, want 1 (a batch of one)", i+1, len(rs))
				}
				r := rs[0].(map[string]any)
				wantID := reqs[i/k]["request_id"]
				prefill := i%k == 0
				wantTokens := 0.0
				if prefill {
					wantTokens = 64
				}
				if r["request_id"] != wantID || r["decode"].(bool) == prefill || r["prefill_tokens"].(float64) != wantTokens {
					t.Errorf("step %d: request %v, want %v with prefill_tokens %v", i+1, r, wantID, wantTokens)
				}
				if l["call"] != want[i] || l["engine_id"] != s.EngineID() {
					t.Errorf("step %d: call %v engine %v, want %v %v", i+1, l["call"], l["engine_id"], want[i], s.EngineID())
				}
				if l["start_mono_ns"].(float64) > l["end_mono_ns"].(float64) {
					t.Errorf("step %d starts after it ends: %v", i+1, l)
				}
			}
		})
	}
}

// TestCUDAProbeBatchedSteps: with a real batch (requests of different
// lengths joining a long one's decodes, chunked prefill sharing steps with
// decodes) every step is one launch and one sync, the launch is
// cuGraphLaunch exactly when the step decodes only, and the step lines
// account for every request's prompt and output tokens.
func TestCUDAProbeBatchedSteps(t *testing.T) {
	fp := &fakeProbe{}
	trace := newSyncBuffer()
	s := startServer(t, Config{Profile: "qwen2.5-coder-0.5b-a10", TimeScale: 0.25, Trace: trace, MaxNumBatchedTokens: 96,
		cudaProbe: fp})
	ctx := context.Background()
	// The long request decodes for about a second of wall time (1000 steps
	// of about 4 model ms at 0.25): the others join its steps.
	const n = 5
	started := make(chan struct{})
	errs := make(chan error, n+1)
	go func() {
		_, err := sseData(ctx, s.URL(), map[string]any{"prompt": suffix(299, 50), "max_tokens": 1000, "ignore_eos": true,
			"stream": true}, func() { close(started) })
		errs <- err
	}()
	select {
	case <-started:
	case err := <-errs:
		t.Fatalf("long request: %v", err)
	}
	for i := range n {
		go func() {
			r, _, err := complete(ctx, s.URL(), map[string]any{"prompt": suffix(200+i, 40+30*i), "max_tokens": 4 + i,
				"ignore_eos": true}, "")
			if err == nil && r.Usage.CompletionTokens != 4+i {
				err = fmt.Errorf("request %d: %d tokens, want %d", i, r.Usage.CompletionTokens, 4+i)
			}
			errs <- err
		}()
	}
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	launches := launchesOf(t, fp.snapshot())
	lines := stepLines(t, trace)
	if got := s.eng.steps.Load(); got != int64(len(launches)) || len(lines) != len(launches) {
		t.Fatalf("engine steps %d, launches %d, step lines %d: want all equal", got, len(launches), len(lines))
	}
	prefill := map[string]float64{}
	decodes := map[string]int{}
	batched := false
	for i, l := range lines {
		want := "graph"
		if stepPrefills(l) {
			want = "launch"
		}
		if launches[i] != want || l["call"] != want {
			t.Errorf("step %d: launched %s, line says %v, want %s (requests %v)", i+1, launches[i], l["call"], want, l["requests"])
		}
		rs := l["requests"].([]any)
		batched = batched || len(rs) > 1
		for _, r := range rs {
			m := r.(map[string]any)
			id := m["request_id"].(string)
			prefill[id] += m["prefill_tokens"].(float64)
			if m["decode"].(bool) {
				decodes[id]++
			}
		}
	}
	if !batched {
		t.Error("no step held more than one request: the test needs a batch")
	}
	reqs := trace.lines(t, "request")
	if len(reqs) != n+1 {
		t.Fatalf("%d request lines, want %d", len(reqs), n+1)
	}
	for _, r := range reqs {
		id := r["request_id"].(string)
		wantPrefill := r["prompt_tokens"].(float64) - r["cached_tokens"].(float64)
		if prefill[id] != wantPrefill || decodes[id] != int(r["output_tokens"].(float64))-1 {
			t.Errorf("%s: step lines prefill %v tokens and decode %d, want %v and %v", id, prefill[id], decodes[id],
				wantPrefill, r["output_tokens"].(float64)-1)
		}
	}
}

// TestCUDAProbeOffWithoutLib: no CUDALib, no probe and no step lines.
func TestCUDAProbeOffWithoutLib(t *testing.T) {
	trace := newSyncBuffer()
	s := startServer(t, Config{Profile: "exercise", TimeScale: 0.01, Trace: trace})
	if s.eng.probe != nil {
		t.Fatal("engine has a probe without CUDALib")
	}
	if _, _, err := complete(context.Background(), s.URL(), map[string]any{"prompt": suffix(1, 16), "max_tokens": 3,
		"ignore_eos": true}, ""); err != nil {
		t.Fatal(err)
	}
	if l := trace.lines(t, "step"); len(l) != 0 {
		t.Fatalf("%d step lines without CUDALib", len(l))
	}
}

// TestCUDAProbeNotInVirtualTime: the virtual-time engine never calls the
// probe.
func TestCUDAProbeNotInVirtualTime(t *testing.T) {
	fp := &fakeProbe{}
	out, err := Simulate([]Config{{Profile: "exercise", CUDALib: "/nonexistent/libcuda.so.1", cudaProbe: fp}},
		[]VirtualRequest{{ID: "a", Prompt: suffix(1, 32), MaxTokens: 4, Decode: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Result.OutputTokens != 4 {
		t.Fatalf("virtual request: %d tokens, want 4", out[0].Result.OutputTokens)
	}
	if c := fp.snapshot(); len(c) != 0 {
		t.Fatalf("virtual time called the probe: %v", c)
	}
}

// TestCUDAProbeBadPath: a library that cannot be loaded fails Start with
// an error naming --cuda-lib (on every build).
func TestCUDAProbeBadPath(t *testing.T) {
	path := t.TempDir() + "/no-such-libcuda.so.1"
	s, err := Start(context.Background(), Config{Profile: "exercise", Port: 0, CUDALib: path})
	if err == nil {
		s.Close()
		t.Fatal("Start loaded a missing library")
	}
	if !strings.Contains(err.Error(), "--cuda-lib") || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q: want it to name --cuda-lib and %s", err, path)
	}
}
