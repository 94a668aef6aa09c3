package proxy

import (
	"sync"
	"sync/atomic"
	"testing"
)

func (f *fakeEngine) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// TestSetWorkersUnderLoad: while clients send requests, a worker is added
// and one removed; every request succeeds, nothing sent after the removal
// reaches the removed worker, and the added one gets requests.
func TestSetWorkersUnderLoad(t *testing.T) {
	a, b, c := newFakeEngine(t, "a"), newFakeEngine(t, "b"), newFakeEngine(t, "c")
	px := startProxy(t, colocated(a, b))
	wa, wb, wc := px.Workers()[0], px.Workers()[1], Worker{Name: "c", Role: RoleColocated, URL: c.srv.URL}

	var stop atomic.Bool
	var sent, bad atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				code, _, _ := post(t, px.URL, completion(sessionPrompt(g*1000+i, 0), 4), nil)
				sent.Add(1)
				if code != 200 {
					bad.Add(1)
				}
			}
		}()
	}
	waitFor(t, "requests before the change", func() bool { return sent.Load() >= 40 })
	if err := px.SetWorkers([]Worker{wa, wb, wc}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "requests on the added worker", func() bool { return c.count() >= 10 })
	if err := px.SetWorkers([]Worker{wb, wc}); err != nil {
		t.Fatal(err)
	}
	// Requests picked before the swap may still be on their way to a.
	waitFor(t, "requests after the removal", func() bool { return sent.Load() >= 200 })
	stop.Store(true)
	wg.Wait()
	atRemoval := a.count()
	for i := range 40 {
		if code, _, body := post(t, px.URL, completion(sessionPrompt(i, 1), 4), nil); code != 200 {
			t.Fatalf("after the change: %d %s", code, body)
		}
	}
	if n := a.count(); n != atRemoval {
		t.Errorf("the removed worker got %d requests after its removal", n-atRemoval)
	}
	if bad.Load() != 0 {
		t.Errorf("%d of %d requests failed across the worker changes", bad.Load(), sent.Load())
	}
	if got := px.Workers(); len(got) != 2 || got[0].Name != "b" || got[1].Name != "c" {
		t.Errorf("workers = %+v, want b, c", got)
	}
}

// TestSetWorkersKeepsSessions: rendezvous hashing moves only the sessions
// of the worker that left, and a kept worker keeps its backend (health).
func TestSetWorkersKeepsSessions(t *testing.T) {
	es := []*fakeEngine{newFakeEngine(t, "a"), newFakeEngine(t, "b"), newFakeEngine(t, "c")}
	px := startProxy(t, colocated(es...))
	before := map[uint64]string{}
	for k := range uint64(256) {
		before[k] = px.set().pools[RoleColocated].pick(mix64(k+1), true, nil).Name
	}
	kept := px.set().all[0]
	if err := px.SetWorkers(px.Workers()[:2]); err != nil {
		t.Fatal(err)
	}
	if px.set().all[0] != kept {
		t.Error("a kept worker got a new backend (its health state lost)")
	}
	moved := 0
	for k, was := range before {
		now := px.set().pools[RoleColocated].pick(mix64(k+1), true, nil).Name
		if was != "c" && now != was {
			moved++
		}
		if now == "c" {
			t.Fatalf("key %d still goes to the removed worker", k)
		}
	}
	if moved != 0 {
		t.Errorf("%d sessions moved between workers that stayed", moved)
	}
}

// TestSetWorkersRoundRobinContinues: the round-robin position survives a
// change of the set.
func TestSetWorkersRoundRobinContinues(t *testing.T) {
	es := []*fakeEngine{newFakeEngine(t, "a"), newFakeEngine(t, "b")}
	cfg := colocated(es...)
	cfg.Routing = RoundRobin
	px := startProxy(t, cfg)
	px.set().pools[RoleColocated].pick(0, false, nil)
	if err := px.SetWorkers(px.Workers()); err != nil {
		t.Fatal(err)
	}
	if got := px.set().pools[RoleColocated].pick(0, false, nil).Name; got != "b" {
		t.Errorf("after the change round robin picked %s, want b (it continues)", got)
	}
}

// TestSetWorkersEmptyAndInvalid: an empty pool answers 503 (not a panic);
// bad workers are refused, naming the field.
func TestSetWorkersEmptyAndInvalid(t *testing.T) {
	px := startProxy(t, colocated(newFakeEngine(t, "a")))
	if err := px.SetWorkers(nil); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := post(t, px.URL, completion([]int{1, 2, 3}, 2), nil); code != 503 {
		t.Errorf("no workers: status %d, want 503", code)
	}
	for _, tc := range []struct {
		w    []Worker
		want string
	}{
		{[]Worker{{Name: "x", Role: RolePrefill, URL: "http://h:1"}}, "workers[0]: role: want one of [colocated] in a colocated deployment, got \"prefill\""},
		{[]Worker{{Name: "x", Role: RoleColocated, URL: "h:1"}}, "workers[0]: url: want http://host:port, got \"h:1\""},
		{[]Worker{{Name: "x", Role: RoleColocated, URL: "http://h:1"}, {Name: "x", Role: RoleColocated, URL: "http://h:2"}}, "workers[1].name: \"x\" twice"},
	} {
		if err := px.SetWorkers(tc.w); err == nil || err.Error() != tc.want {
			t.Errorf("SetWorkers(%v) = %v, want %s", tc.w, err, tc.want)
		}
	}
}

// TestSetWorkersDisaggregated: an added prefill worker takes prefill legs.
func TestSetWorkersDisaggregated(t *testing.T) {
	p0, p1, d0 := newFakeEngine(t, "p0"), newFakeEngine(t, "p1"), newFakeEngine(t, "d0")
	px := startProxy(t, disagg([]*fakeEngine{p0}, []*fakeEngine{d0}))
	ws := append(px.Workers(), Worker{Name: "p1", Role: RolePrefill, URL: p1.srv.URL})
	if err := px.SetWorkers(ws[1:]); err != nil { // d0, p1: p0 out, p1 in
		t.Fatal(err)
	}
	for i := range 8 {
		if code, _, body := post(t, px.URL, completion(sessionPrompt(i, 0), 4), nil); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	if p0.count() != 0 || p1.count() != 8 {
		t.Errorf("prefill legs: p0 %d, p1 %d; want 0, 8", p0.count(), p1.count())
	}
}
