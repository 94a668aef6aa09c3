package replay

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// shardedRun runs every shard of a sharded replay as concurrent goroutines
// against url, all from the same start instant, and returns their records
// (schema-checked and read back) and the paths they were written to.
func shardedRun(t *testing.T, opts Options, sh Shard) ([]*schema.Record, []string) {
	t.Helper()
	recs := make([]*schema.Record, sh.Count)
	errs := make([]error, sh.Count)
	var wg sync.WaitGroup
	for i := range sh.Count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			s := sh
			s.Index = i
			o.Shard = &s
			recs[i], errs[i] = Run(context.Background(), o)
		}()
	}
	wg.Wait()
	dir := t.TempDir()
	paths := make([]string, sh.Count)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		paths[i] = filepath.Join(dir, "shard"+string(rune('0'+i))+".json.gz")
		if err := WriteRecord(paths[i], recs[i]); err != nil {
			t.Fatal(err)
		}
		recs[i] = roundTrip(t, recs[i])
	}
	return recs, paths
}

// The check of hone issue 18: the same replay sent by one process and by
// three shards (here goroutines, as separate processes would, sharing
// nothing but their options) gives the same request set and schedule, and
// sends within the dispatch tolerance; the engine sees one cold start and
// one set of warm-ups per level either way.
func TestShardedReplayEqualsSingle(t *testing.T) {
	const n, scale = 3, 0.01
	opts := func(url string) Options {
		o := testOptions(url)
		o.Cache = schema.CacheReset
		return o
	}
	one := newFakeVLLM(t)
	one.devMode, one.firstDelay = true, 20*time.Millisecond
	single, err := Run(context.Background(), opts(one.start().URL))
	if err != nil {
		t.Fatal(err)
	}
	single = roundTrip(t, single)

	f := newFakeVLLM(t)
	f.devMode, f.firstDelay = true, 20*time.Millisecond
	var mu sync.Mutex
	var scrapes []time.Time // when /metrics was read
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			mu.Lock()
			scrapes = append(scrapes, time.Now())
			mu.Unlock()
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	sh := Shard{Count: n, StartAt: time.Now().Add(1500 * time.Millisecond), LevelGap: 20 * time.Second, Setup: 200 * time.Millisecond}
	shards, paths := shardedRun(t, opts(srv.URL), sh)
	// Merge in any order: the shards sort themselves.
	merged, err := MergeShardFiles(paths[2], paths[0], paths[1])
	if err != nil {
		t.Fatal(err)
	}
	merged = roundTrip(t, merged)

	// The engine saw what a single process gives it: the probe and one
	// reset per level (shard 0's alone), and every request once.
	if f.resets != one.resets || f.resets != 1+2 || f.requests != one.requests || f.requests != 24 {
		t.Errorf("sharded: %d resets, %d requests; single: %d, %d; want 3 and 24", f.resets, f.requests, one.resets, one.requests)
	}
	for i, rec := range shards {
		if rec.Shard == nil || rec.Shard.Index == nil || *rec.Shard.Index != i || rec.Shard.Count != n || rec.Shard.StartAtUnixNs != sh.StartAt.UnixNano() {
			t.Fatalf("shard %d: shard field %+v", i, rec.Shard)
		}
		if rec.RequestIDNonce != shards[0].RequestIDNonce || rec.Cache.Procedure != schema.CacheReset {
			t.Errorf("shard %d: request id nonce %q (shard 0: %q), cache %q", i, rec.RequestIDNonce, shards[0].RequestIDNonce, rec.Cache.Procedure)
		}
		for _, l := range levels(rec) {
			for _, q := range l.Requests {
				if ShardOf(q.ID, n) != i {
					t.Errorf("shard %d sent request %d", i, q.ID)
				}
			}
			if want := map[int]int{0: 8 + 1, 1: 1, 2: 2}[i]; l.Sent != want || l.Planned != want {
				t.Errorf("shard %d, %g req/s: %d of %d sent, want %d", i, l.OfferedQPS, l.Sent, l.Planned, want)
			}
			if (l.Counters.Before != nil) != (i == 0) {
				t.Errorf("shard %d: counters %v: only shard 0 scrapes", i, l.Counters.Before)
			}
		}
	}

	if merged.Shard == nil || merged.Shard.Index != nil || merged.Shard.Count != n || len(merged.Shard.Merged) != n {
		t.Fatalf("merged shard field %+v", merged.Shard)
	}
	if !reflect.DeepEqual(merged.Outcomes, single.Outcomes) || merged.Validation.Valid != single.Validation.Valid ||
		merged.Incomplete || merged.Clock != shards[0].Clock || !validOrHostBound(merged.Verdict) {
		t.Errorf("merged outcomes %v, validation %+v, verdict %v; single %v, %+v", merged.Outcomes, merged.Validation, merged.Verdict,
			single.Outcomes, single.Validation)
	}
	tolMs := schema.ClientBoundSLOFraction * slo.Default.TTFTMillis // real ms: what a scale-1 run tolerates
	// Shard 0 alone reads the counters, three times a level (before, after
	// the warm-ups, after), the last not before the level's drain
	// deadline, when every shard's requests should have finished.
	if len(scrapes) != 2*3 {
		t.Fatalf("%d scrapes of /metrics, want 6: shard 0's alone", len(scrapes))
	}
	levelAt := sh.StartAt
	for li, a := range levels(single) {
		b := levels(merged)[li]
		if b.Planned != a.Planned || b.Sent != a.Sent || b.Measured != a.Measured || !b.Complete || b.PromptsSHA256 != a.PromptsSHA256 ||
			b.PrefixSeed != a.PrefixSeed || !reflect.DeepEqual(b.Outcomes, a.Outcomes) || len(b.Requests) != len(a.Requests) ||
			*b.HitRateCachedTokens != *a.HitRateCachedTokens || !validOrHostBound(b.Verdict) {
			t.Fatalf("%g req/s: merged %+v\nsingle %+v", a.OfferedQPS, b, a)
		}
		// Every shard started the level at the same planned instant.
		if b.StartedAt.UnixNs != levelAt.UnixNano() {
			t.Errorf("%g req/s started at %d, want %d", a.OfferedQPS, b.StartedAt.UnixNs, levelAt.UnixNano())
		}
		drain := levelAt.Add(time.Duration(float64((MeasureStartMillis+float64((12-1-Sessions)*1000)/a.OfferedQPS)*scale*1e6)) +
			time.Duration(float64(sh.LevelGap)*scale))
		// Less a millisecond: the wait is on the monotonic clock, this
		// comparison on the wall clock.
		if after := scrapes[3*li+2]; after.Before(drain.Add(-time.Millisecond)) {
			t.Errorf("%g req/s: counters read %v before the drain deadline", a.OfferedQPS, drain.Sub(after))
		}
		levelAt = drain.Add(sh.Setup)
		// The counters are shard 0's, read at the drain deadline: they
		// cover every shard's prompts, exactly.
		if c := levels(shards[0])[li].Counters; !reflect.DeepEqual(b.Counters, c) {
			t.Errorf("merged counters %v, shard 0's %v", b.Counters, c)
		}
		if dq := b.Counters.After["vllm:prefix_cache_queries_total"] - b.Counters.Before["vllm:prefix_cache_queries_total"]; dq != 12*256 {
			t.Errorf("%g req/s: queries grew by %g between shard 0's scrapes, want every shard's %d", a.OfferedQPS, dq, 12*256)
		}
		if !b.WarmupOverlap && (b.HitRateMetricsMeasure == nil || *b.HitRateMetricsMeasure != 240.0/256) {
			t.Errorf("measurement-phase hit rate %v, want 0.9375", b.HitRateMetricsMeasure)
		}
		for i, x := range a.Requests {
			y := b.Requests[i]
			if y.ID != x.ID || y.Session != x.Session || y.PromptSHA256 != x.PromptSHA256 || y.InputTokens != x.InputTokens ||
				y.OutputTokens != x.OutputTokens || y.OutputSHA256 != x.OutputSHA256 || y.Outcome != x.Outcome || y.Valid != x.Valid ||
				*y.CachedTokens != *x.CachedTokens || y.RequestID[strings.IndexByte(y.RequestID[5:], '-')+5:] != x.RequestID[strings.IndexByte(x.RequestID[5:], '-')+5:] {
				t.Fatalf("%g req/s, request %d: merged %+v\nsingle %+v", a.OfferedQPS, i, y, x)
			}
			// The schedule is the model's: exact. The sends are the
			// host's: bounded loosely, on one side.
			if y.ScheduledMs != x.ScheduledMs || y.Scheduled.UnixNs-b.StartedAt.UnixNs != int64(time.Duration(y.ScheduledMs*scale*1e6)) {
				t.Errorf("request %d scheduled at %g ms (%d ns after the level start), single %g ms", y.ID, y.ScheduledMs,
					y.Scheduled.UnixNs-b.StartedAt.UnixNs, x.ScheduledMs)
			}
			lagMs := float64(y.Sent.MonoNs-y.Scheduled.MonoNs) / 1e6
			if lagMs < 0 || lagMs > tolMs || math.Abs(y.SentMs-x.SentMs)*scale > tolMs {
				t.Errorf("request %d sent %g ms real after its schedule (%g model ms; single %g): want within %g ms",
					y.ID, lagMs, y.SentMs, x.SentMs, tolMs)
			}
		}
	}

	t.Run("refuses shards that do not belong together", func(t *testing.T) {
		read := func(i int) *schema.Record {
			r, err := ReadRecord(paths[i])
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		for _, tc := range []struct {
			field string
			recs  func() []*schema.Record
		}{
			{"shard", func() []*schema.Record { return []*schema.Record{single, read(1), read(2)} }},
			{"shard.index", func() []*schema.Record { return []*schema.Record{read(0), read(0), read(2)} }},
			{"shard.count", func() []*schema.Record { return []*schema.Record{read(0), read(1)} }},
			{"shard.start_at_unix_ns", func() []*schema.Record {
				r := read(2)
				r.Shard.StartAtUnixNs++
				return []*schema.Record{read(0), read(1), r}
			}},
			{"workload.seed", func() []*schema.Record { r := read(1); r.Workload.Seed++; return []*schema.Record{read(0), r, read(2)} }},
			{"workload.qps", func() []*schema.Record {
				r := read(1)
				r.Workload.QPS = []float64{10, 40}
				return []*schema.Record{read(0), r, read(2)}
			}},
			{"time_scale", func() []*schema.Record { r := read(2); r.TimeScale = 0.1; return []*schema.Record{read(0), read(1), r} }},
			{"engine.endpoint", func() []*schema.Record {
				r := read(1)
				r.Engine.Endpoint = "http://elsewhere:8000"
				return []*schema.Record{read(0), r, read(2)}
			}},
			{"model", func() []*schema.Record {
				r := read(1)
				r.Model.ID = "other"
				return []*schema.Record{read(0), r, read(2)}
			}},
			{"cache.procedure", func() []*schema.Record {
				r := read(1)
				r.Cache.Procedure = schema.CacheFreshPrefixes
				return []*schema.Record{read(0), r, read(2)}
			}},
			{"runs[0].levels[1].prompts_sha256", func() []*schema.Record {
				r := read(2)
				r.Runs[0].Levels[1].PromptsSHA256 = strings.Repeat("0", 64)
				return []*schema.Record{read(0), read(1), r}
			}},
			{"runs[0].levels[0].requests", func() []*schema.Record {
				r1, r2 := read(1), read(2)
				r2.Runs[0].Levels[0].Requests = append(r2.Runs[0].Levels[0].Requests, r1.Runs[0].Levels[0].Requests...)
				return []*schema.Record{read(0), r1, r2}
			}},
		} {
			_, err := MergeShards(tc.recs())
			var me *MergeError
			if !errors.As(err, &me) || me.Field != tc.field {
				t.Errorf("%s: err %v, want a MergeError naming %s", tc.field, err, tc.field)
			}
		}
		// Files are named: which shard disagrees is in the message.
		r := read(1)
		r.Workload.Seed++
		bad := filepath.Join(t.TempDir(), "odd.json")
		if err := WriteRecord(bad, r); err != nil {
			t.Fatal(err)
		}
		if _, err := MergeShardFiles(paths[0], bad, paths[2]); err == nil || !strings.Contains(err.Error(), "workload.seed") ||
			!strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), paths[0]) {
			t.Errorf("err %v, want workload.seed and both files named", err)
		}
	})

	t.Run("a reason of any shard invalidates the merged level", func(t *testing.T) {
		recs := []*schema.Record{shards[0], shards[1], shards[2]}
		r2 := *shards[2]
		r2.Runs = []schema.RunRecord{{Run: 0, Levels: slicesClone(shards[2].Runs[0].Levels)}}
		r2.Runs[0].Levels[1].Verdict = schema.Verdict{Valid: false, Reasons: []schema.Reason{{Code: schema.ReasonWarmStart, Detail: "planted"}}}
		recs[2] = &r2
		m, err := MergeShards(recs)
		if err != nil {
			t.Fatal(err)
		}
		l0, l1 := m.Runs[0].Levels[0], m.Runs[0].Levels[1]
		if l0.Verdict.Has(schema.ReasonWarmStart) || !l1.Verdict.Has(schema.ReasonWarmStart) || l1.Verdict.Valid || m.Verdict.Valid ||
			!strings.Contains(l1.Verdict.String(), "shard 2/3: planted") || m.Runs[0].Objective == l1.EffectiveQPS {
			t.Errorf("levels %v / %v, record %v, objective %g", l0.Verdict, l1.Verdict, m.Verdict, m.Runs[0].Objective)
		}
	})

	t.Run("a shard that stopped early leaves the merged level incomplete", func(t *testing.T) {
		r1 := *shards[1]
		r1.Runs = []schema.RunRecord{{Run: 0, Levels: slicesClone(shards[1].Runs[0].Levels[:1])}}
		r1.Incomplete, r1.Error = true, "interrupted during run 0: context canceled"
		m, err := MergeShards([]*schema.Record{shards[0], &r1, shards[2]})
		if err != nil {
			t.Fatal(err)
		}
		m = roundTrip(t, m)
		l1 := m.Runs[0].Levels[1]
		if !m.Incomplete || !strings.Contains(m.Error, "shard 1: interrupted") || l1.Complete || l1.Sent != 11 || l1.Planned != 12 ||
			!l1.Verdict.Has(schema.ReasonIncomplete) || !m.Verdict.Has(schema.ReasonIncomplete) {
			t.Errorf("record incomplete=%t error %q; level complete=%t sent %d/%d verdict %v", m.Incomplete, m.Error, l1.Complete, l1.Sent, l1.Planned, l1.Verdict)
		}
	})
}

func slicesClone(l []schema.LevelRecord) []schema.LevelRecord {
	return append([]schema.LevelRecord(nil), l...)
}

// A shard never shifts a level: one whose requests are still in flight at
// the level's drain deadline marks that level incomplete, and one ready
// after the next level's instant marks that level client_bound. Here a
// slow engine (160 ms real per request) against a 10 ms drain allowance.
func TestShardLateLevelsAreMarked(t *testing.T) {
	f := newFakeVLLM(t)
	f.devMode, f.tokenDelay = true, 20*time.Millisecond
	o := testOptions(f.start().URL)
	o.Cache = schema.CacheReset
	o.Shard = &Shard{Index: 0, Count: 1, StartAt: time.Now().Add(time.Second), LevelGap: time.Second, Setup: 10 * time.Millisecond}
	rec, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	l0, l1 := levels(rec)[0], levels(rec)[1]
	if !l0.Verdict.Has(schema.ReasonIncomplete) || !strings.Contains(l0.Verdict.String(), "shard 0/1 still had requests in flight") || !l0.Complete {
		t.Errorf("level 0: complete=%t %v; want every request answered, and incomplete for the late drain", l0.Complete, l0.Verdict)
	}
	if !l1.Verdict.Has(schema.ReasonClientBound) || !strings.Contains(l1.Verdict.String(), "shard 0/1 was ready for this level") {
		t.Errorf("level 1: %v; want client_bound for the late start", l1.Verdict)
	}
	// Sent late, never shifted: the level still starts at its instant.
	want := o.Shard.StartAt.Add(time.Duration((MeasureStartMillis+3*1000/10.0)*0.01*1e6) + 10*time.Millisecond + 10*time.Millisecond)
	if l1.StartedAt.UnixNs != want.UnixNano() || l1.DispatchLagMaxMs <= 0 {
		t.Errorf("level 1 started at %d, want %d; max dispatch lag %g", l1.StartedAt.UnixNs, want.UnixNano(), l1.DispatchLagMaxMs)
	}
}

// Fresh prefixes agree across shards without talking: the nonce comes
// from the start instant, and the merge checks every level's prompts.
func TestShardFreshPrefixes(t *testing.T) {
	f := newFakeVLLM(t)
	f.firstDelay = 20 * time.Millisecond
	o := oneLevel(testOptions(f.start().URL))
	o.Cache, o.PrefixNonce = schema.CacheFreshPrefixes, 0
	sh := Shard{Count: 2, StartAt: time.Now().Add(time.Second), LevelGap: 20 * time.Second, Setup: 100 * time.Millisecond}
	recs, _ := shardedRun(t, o, sh)
	if recs[0].Cache.Nonce == 0 || recs[0].Cache.Nonce != recs[1].Cache.Nonce || f.resets != 0 {
		t.Fatalf("nonces %d, %d; %d resets", recs[0].Cache.Nonce, recs[1].Cache.Nonce, f.resets)
	}
	m, err := MergeShards(recs)
	if err != nil {
		t.Fatal(err)
	}
	l := m.Runs[0].Levels[0]
	if l.Sent != 12 || *l.HitRateCachedTokens != 240.0/256 || l.WarmupHitRate == nil || *l.WarmupHitRate > 1.0/64 {
		t.Errorf("merged level: sent %d, hit rate %v, warm-up hit rate %v", l.Sent, *l.HitRateCachedTokens, l.WarmupHitRate)
	}
}

func TestShardOptions(t *testing.T) {
	soon := time.Now().Add(time.Hour)
	for field, sh := range map[string]Shard{
		"shard":       {Index: 3, Count: 3, StartAt: soon},
		"start-at":    {Index: 0, Count: 2, StartAt: time.Now().Add(-time.Second)},
		"level-gap":   {Index: 0, Count: 2, StartAt: soon, LevelGap: -time.Second},
		"shard setup": {Index: 0, Count: 2, StartAt: soon, Setup: -time.Second},
	} {
		o := testOptions("http://127.0.0.1:1")
		o.Cache = schema.CacheReset
		o.Shard = &sh
		rec, err := Run(context.Background(), o)
		var pe *ParamError
		if rec != nil || !errors.As(err, &pe) || pe.Field != field {
			t.Errorf("%s: err %v, want a ParamError for %q", field, err, field)
		}
	}
	for name, mod := range map[string]func(*Options){
		"cache":    func(o *Options) { o.Cache = "" },      // auto: shards could not agree
		"shard":    func(o *Options) { o.Shard.Count = 5 }, // 4 measured requests
		"start-at": func(o *Options) { o.Shard.StartAt = time.Time{} },
	} {
		o := testOptions("http://127.0.0.1:1")
		o.Cache = schema.CacheReset
		o.Shard = &Shard{Index: 0, Count: 2, StartAt: soon}
		mod(&o)
		_, err := Run(context.Background(), o)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Field != name {
			t.Errorf("%s: err %v, want a ParamError for %q", name, err, name)
		}
	}
	// ShardOf: warm-ups on shard 0, measured ids round-robin.
	for id, want := range map[int]int{0: 0, 7: 0, 8: 2, 9: 0, 10: 1, 11: 2} {
		if got := ShardOf(id, 3); got != want {
			t.Errorf("ShardOf(%d, 3) = %d, want %d", id, got, want)
		}
	}
}
