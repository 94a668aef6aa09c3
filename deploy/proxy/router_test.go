package proxy

import (
	"encoding/json"
	"testing"
)

// TestPromptKeyIsTheProxysKey: the key predict routes by is the one the
// proxy computes from the whole request body, for prompts longer and
// shorter than the affinity window.
func TestPromptKeyIsTheProxysKey(t *testing.T) {
	for _, n := range []int{1, 4, 256} {
		for _, length := range []int{1, 3, 4, 5, 300, 4096} {
			ids := make([]int, length)
			for i := range ids {
				ids[i] = (i*7919 + 13) % 151936
			}
			body, _ := json.Marshal(map[string]any{"model": "m", "prompt": ids, "max_tokens": 8})
			fields, err := splitObject(body)
			if err != nil {
				t.Fatal(err)
			}
			want, wok := affinityKey("", fields, n)
			got, gok := PromptKey(ids, n)
			if got != want || gok != wok {
				t.Errorf("n %d, %d ids: PromptKey = %x,%v, the proxy's key = %x,%v", n, length, got, gok, want, wok)
			}
		}
	}
}

// TestRouterPicksAsThePoolDoes: a Router and a proxy pool of the same
// names make the same choices, by key and in round-robin order.
func TestRouterPicksAsThePoolDoes(t *testing.T) {
	names := []string{"replica-0", "replica-1", "replica-2"}
	r := NewRouter(names)
	var p pool
	for _, n := range names {
		b := &backend{Worker: Worker{Name: n}, seed: mix64(hashString("w:" + n))}
		b.up.Store(true)
		p.backends = append(p.backends, b)
	}
	seen := map[int]bool{}
	for k := range uint64(64) {
		key := mix64(k + 1)
		got := r.Pick(key, true)
		if want := p.pick(key, true, nil).Name; names[got] != want {
			t.Fatalf("key %x: router picked %s, the pool %s", key, names[got], want)
		}
		seen[got] = true
	}
	if len(seen) != len(names) {
		t.Errorf("64 keys reached only %d of %d workers", len(seen), len(names))
	}
	for i := range 7 {
		if got, want := r.Pick(0, false), i%len(names); got != want {
			t.Errorf("round robin call %d picked %d, want %d", i, got, want)
		}
	}
	if NewRouter(nil).Pick(1, true) != -1 {
		t.Error("an empty router picked a worker")
	}
}
