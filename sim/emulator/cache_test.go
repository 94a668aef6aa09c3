package emulator

import (
	"context"
	"fmt"
	"testing"
)

// cacheRun sends, one at a time, a cold round and then rounds more, each
// round repeat consecutive requests per session, each the session's prefix plus its own suffix,
// and returns the cached_tokens of each measured (non-cold) request.
func cacheRun(t *testing.T, s *Server, sessions, prefix, suffixLen, rounds, repeat int) []int {
	t.Helper()
	ctx := context.Background()
	var cached []int
	id := 0
	for round := 0; round <= rounds; round++ {
		for k := 0; k < sessions*repeat; k++ {
			sess := k / repeat
			id++
			prompt := append(sessionPrefix(sess, prefix), suffix(id, suffixLen)...)
			r := streamCompletion(ctx, s.URL(), map[string]any{"prompt": prompt, "max_tokens": 8, "ignore_eos": true}, fmt.Sprint(id))
			if r.err != nil {
				t.Fatal(r.err)
			}
			if round > 0 {
				cached = append(cached, r.usage.Cached())
			}
		}
	}
	return cached
}

func TestPrefixCacheHitRate(t *testing.T) {
	const sessions, prefix, suffixLen, rounds = 8, 1000, 72, 3
	// 1000 prefix tokens fill 62 blocks of 16 (992 tokens); block 63 mixes
	// prefix and suffix, so it never matches.
	const wantCached = 992
	cases := []struct {
		name   string
		repeat int
		cfg    Config
		want   func(cached []int, hits, queries float64) error
	}{
		{"prefix caching on", 1, Config{}, func(cached []int, hits, queries float64) error {
			for i, c := range cached {
				if c != wantCached {
					return fmt.Errorf("request %d: cached_tokens %d, want %d", i, c, wantCached)
				}
			}
			// /metrics counts the cold round too: queries are every prompt token.
			n := float64(sessions * (rounds + 1))
			if queries != n*(prefix+suffixLen) || hits != float64(sessions*rounds*wantCached) {
				return fmt.Errorf("metrics hits %v queries %v, want %v and %v", hits, queries, sessions*rounds*wantCached, n*(prefix+suffixLen))
			}
			return nil
		}},
		{"prefix caching off", 1, Config{DisablePrefixCaching: true}, func(cached []int, hits, queries float64) error {
			for i, c := range cached {
				if c != 0 {
					return fmt.Errorf("request %d: cached_tokens %d with caching off", i, c)
				}
			}
			if hits != 0 || queries == 0 {
				return fmt.Errorf("metrics hits %v queries %v, want 0 hits", hits, queries)
			}
			return nil
		}},
		// 200 blocks hold about two and a half sessions (68 blocks per
		// request), so while the other seven sessions pass, LRU evicts a
		// session's prefix: the first of each pair of requests misses and
		// the second, right behind it, hits.
		{"small capacity", 2, Config{NumGPUBlocksOverride: 200, MaxModelLen: 2048}, func(cached []int, hits, queries float64) error {
			total := 0
			for i, c := range cached {
				total += c
				if want := wantCached * (i % 2); c != want {
					return fmt.Errorf("request %d: cached_tokens %d, want %d (all: %v)", i, c, want, cached)
				}
			}
			// /metrics also saw the cold round, whose second requests hit too.
			if want := total + sessions*wantCached; hits != float64(want) {
				return fmt.Errorf("metrics hits %v, want %d", hits, want)
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Profile, c.cfg.TimeScale = "qwen2.5-coder-0.5b-a10", 0.01
			s := startServer(t, c.cfg)
			cached := cacheRun(t, s, sessions, prefix, suffixLen, rounds, c.repeat)
			hits := metricValue(t, s.URL(), "vllm:prefix_cache_hits_total")
			queries := metricValue(t, s.URL(), "vllm:prefix_cache_queries_total")
			evictions := metricValue(t, s.URL(), "hone_emulator_kv_evictions_total")
			t.Logf("hit rate %.4f (%v/%v), evictions %v", hits/queries, hits, queries, evictions)
			if err := c.want(cached, hits, queries); err != nil {
				t.Error(err)
			}
			if (c.name == "small capacity") != (evictions > 0) {
				t.Errorf("evictions %v", evictions)
			}
			if u := metricValue(t, s.URL(), "vllm:kv_cache_usage_perc"); u != 0 {
				t.Errorf("kv_cache_usage_perc %v after all requests finished, want 0", u)
			}
		})
	}
}

func TestKVCacheLRU(t *testing.T) {
	c := newKVCache(4, 2, true)
	a := c.allocate(2)
	c.commit(a[0], 10)
	c.commit(a[1], 11)
	c.free(a) // tail (11) queued before head (10)
	if got := c.match([]uint64{10, 11}, 2); len(got) != 2 {
		t.Fatalf("match after free: %v", got)
	}
	b := c.allocate(3) // two never-used blocks, then the LRU cached one: 11
	if len(b) != 3 || c.evictions.Load() != 1 {
		t.Fatalf("allocated %v evictions %d", b, c.evictions.Load())
	}
	if got := c.match([]uint64{10, 11}, 2); len(got) != 1 {
		t.Fatalf("want only block 10 cached, matched %v", got)
	}
	if c.canAllocate(nil, 2) || !c.canAllocate(nil, 1) {
		t.Fatal("capacity accounting")
	}
	hit := c.match([]uint64{10}, 1)
	if c.canAllocate(hit, 1) {
		t.Fatal("touching a free cached block must count against free blocks")
	}
	c.touch(hit)
	if c.numFree != 0 || c.usage() != 1 {
		t.Fatalf("free %d usage %v", c.numFree, c.usage())
	}
	// The match memo never outlives what it remembers: after a reset
	// (and after the eviction above) only what is cached matches.
	c.free(hit)
	c.reset()
	if got := c.match([]uint64{10, 11}, 2); len(got) != 0 {
		t.Fatalf("matched %v after reset_prefix_cache", got)
	}
}
