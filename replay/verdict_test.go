package replay

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// levels returns every level of a record in run, rate order.
func levels(rec *schema.Record) []*schema.LevelRecord {
	var out []*schema.LevelRecord
	for i := range rec.Runs {
		for j := range rec.Runs[i].Levels {
			out = append(out, &rec.Runs[i].Levels[j])
		}
	}
	return out
}

// A second replay against the same long-running engine used to start warm
// (same seed, same prompts: hit rate 96.9% → 99.6%, objective 3.16 →
// 14.95 req/s). Now every level starts cold: reset where the engine offers
// it, so both replays measure the same thing, exactly.
func TestSecondReplayStartsColdAfterReset(t *testing.T) {
	f := newFakeVLLM(t)
	f.devMode, f.firstDelay = true, 20*time.Millisecond
	srv := f.start()
	var recs [2]*schema.Record
	for i := range recs {
		rec, err := Run(context.Background(), testOptions(srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = roundTrip(t, rec)
		if rec.Cache.Procedure != schema.CacheReset {
			t.Fatalf("replay %d: cache procedure %q, want %q", i, rec.Cache.Procedure, schema.CacheReset)
		}
	}
	// One probe per replay plus one reset before each of its 2 levels.
	if f.resets != 2*(1+2) {
		t.Errorf("%d resets, want 6", f.resets)
	}
	for i, rec := range recs {
		if !validOrHostBound(rec.Verdict) {
			t.Errorf("replay %d: %v", i, rec.Verdict)
		}
		for _, l := range levels(rec) {
			if l.WarmupHitRate == nil || *l.WarmupHitRate != 0 {
				t.Errorf("replay %d, %g req/s: warm-up hit rate %v, want 0 (cold)", i, l.OfferedQPS, l.WarmupHitRate)
			}
			if l.PrefixSeed != smallWorkload().Seed {
				t.Errorf("prefix seed %d, want the workload's %d after a reset", l.PrefixSeed, smallWorkload().Seed)
			}
		}
	}
	a, b := levels(recs[0]), levels(recs[1])
	for i := range a {
		if a[i].PromptsSHA256 != b[i].PromptsSHA256 || *a[i].HitRateCachedTokens != *b[i].HitRateCachedTokens {
			t.Errorf("level %d: prompts or hit rate differ between the replays: %v vs %v", i, *a[i].HitRateCachedTokens, *b[i].HitRateCachedTokens)
		}
	}
}

// Without a reset route (vLLM outside dev mode), every level gets fresh
// prefixes of the same lengths: a second replay against the same engine
// finds nothing of the first in the cache.
func TestSecondReplayWithoutResetUsesFreshPrefixes(t *testing.T) {
	f := newFakeVLLM(t)
	f.firstDelay = 20 * time.Millisecond
	srv := f.start()
	var recs [2]*schema.Record
	for i := range recs {
		opts := testOptions(srv.URL)
		opts.PrefixNonce = 0 // a random nonce per replay, as on the command line
		rec, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = rec
		if rec.Cache.Procedure != schema.CacheFreshPrefixes || !validOrHostBound(rec.Verdict) {
			t.Fatalf("replay %d: cache %+v, verdict %v", i, rec.Cache, rec.Verdict)
		}
	}
	a, b := levels(recs[0]), levels(recs[1])
	seeds := map[uint64]bool{}
	for i := range a {
		if a[i].PromptsSHA256 == b[i].PromptsSHA256 || a[i].PrefixSeed == b[i].PrefixSeed {
			t.Errorf("level %d: the two replays sent the same prompts", i)
		}
		seeds[a[i].PrefixSeed], seeds[b[i].PrefixSeed] = true, true
		for _, l := range []*schema.LevelRecord{a[i], b[i]} {
			// Cold: at most a block the generated code's first lines share.
			if *l.WarmupHitRate > 1.0/64 || *l.HitRateCachedTokens != 240.0/256 {
				t.Errorf("level %d: warm-up hit rate %v, measured %v; want ~0 and 0.9375", i, *l.WarmupHitRate, *l.HitRateCachedTokens)
			}
		}
	}
	if len(seeds) != 2*len(a) {
		t.Errorf("%d distinct prefix seeds over %d levels", len(seeds), 2*len(a))
	}
	// The same nonce gives the same prompts: the procedure is reproducible.
	opts := testOptions(srv.URL)
	opts.PrefixNonce = recs[0].Cache.Nonce
	again, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if levels(again)[1].PromptsSHA256 != a[1].PromptsSHA256 {
		t.Error("the same nonce gave other prompts")
	}
}

// An engine that answers the reset without clearing its cache is caught by
// the warm-ups' hit rate: the second level starts warm and does not count.
func TestWarmStartIsInvalid(t *testing.T) {
	f := newFakeVLLM(t)
	f.devMode, f.brokenReset, f.firstDelay = true, true, 20*time.Millisecond
	rec, err := Run(context.Background(), testOptions(f.start().URL))
	if err != nil {
		t.Fatal(err)
	}
	ls := levels(rec)
	if !validOrHostBound(ls[0].Verdict) {
		t.Errorf("first level (a fresh engine) %v, want valid", ls[0].Verdict)
	}
	if ls[1].Verdict.Valid || !ls[1].Verdict.Has(schema.ReasonWarmStart) || *ls[1].WarmupHitRate != 240.0/256 {
		t.Errorf("second level: %v, warm-up hit rate %v; want warm_start at 0.9375", ls[1].Verdict, *ls[1].WarmupHitRate)
	}
	if rec.Verdict.Valid || rec.Runs[0].Verdict.Valid {
		t.Errorf("record %v, run %v: want invalid", rec.Verdict, rec.Runs[0].Verdict)
	}
	// The objective reads valid levels only: the first level's.
	if rec.Runs[0].Objective != ls[0].EffectiveQPS {
		t.Errorf("objective %g, want the valid level's %g", rec.Runs[0].Objective, ls[0].EffectiveQPS)
	}
}

// An engine at time scale 0.1 replayed at the default scale gave numbers
// 10× too small with exit 0. The emulator states its scale; replay adopts
// it, and a stated scale it contradicts is refused.
func TestTimeScaleDiscovered(t *testing.T) {
	f := newFakeVLLM(t)
	f.version = `{"version":"hone-emulator/test","time_scale":0.01}`
	srv := f.start()
	opts := oneLevel(testOptions(srv.URL))
	opts.TimeScale = 0
	rec, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if rec.TimeScale != 0.01 || rec.Kind != schema.KindEmulated || rec.Engine.TimeScale != 0.01 {
		t.Errorf("time scale %g kind %q engine %+v; want 0.01 and emulated, adopted", rec.TimeScale, rec.Kind, rec.Engine)
	}
	opts.TimeScale = 1
	rec, err = Run(context.Background(), opts)
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Field != "time-scale" || rec != nil || !strings.Contains(pe.Error(), "0.01") {
		t.Errorf("stated 1 against the engine's 0.01: err %v, record %v; want a ParamError on time-scale naming 0.01", err, rec != nil)
	}
}

// An engine whose per-request metrics state another time scale than the
// record's (a worker started with another --time-scale behind a proxy)
// makes the level invalid.
func TestTimeScaleMismatchInMetrics(t *testing.T) {
	f := newFakeVLLM(t)
	f.metricsTimeScale = 0.1
	rec, err := Run(context.Background(), oneLevel(testOptions(f.start().URL))) // stated 0.01
	if err != nil {
		t.Fatal(err)
	}
	if l := levels(rec)[0]; !l.Verdict.Has(schema.ReasonTimeScaleMismatch) || rec.Runs[0].Objective != 0 {
		t.Errorf("level %v, objective %g; want time_scale_mismatch and no objective", l.Verdict, rec.Runs[0].Objective)
	}
}

// The kind is discovered, and a stated kind the endpoint cannot back is
// refused: a simulator without vLLM's /version is never "device".
func TestKindDiscovered(t *testing.T) {
	for _, tc := range []struct {
		version      string
		stated, want schema.Kind
		refused      string
	}{
		{version: "", want: schema.KindDevice},
		{version: "-", want: schema.KindUnverified},
		{version: `{"version":"llm-d-inference-sim"}`, want: schema.KindUnverified},
		{version: `{"version":"hone-emulator/x"}`, want: schema.KindEmulated},
		{version: "-", stated: schema.KindDevice, refused: "kind"},
		{version: `{"version":"hone-emulator/x"}`, stated: schema.KindDevice, refused: "kind"},
		{version: "", stated: schema.KindEmulated, refused: "kind"},
		{version: "", stated: schema.KindUnverified, want: schema.KindUnverified},
	} {
		f := newFakeVLLM(t)
		f.version = tc.version
		opts := oneLevel(testOptions(f.start().URL))
		opts.Kind = tc.stated
		rec, err := Run(context.Background(), opts)
		var pe *ParamError
		switch {
		case tc.refused != "" && (!errors.As(err, &pe) || pe.Field != tc.refused || rec != nil):
			t.Errorf("version %s, stated %q: err %v; want a ParamError on %s", tc.version, tc.stated, err, tc.refused)
		case tc.refused == "" && (err != nil || rec.Kind != tc.want):
			t.Errorf("version %s, stated %q: err %v kind %v; want %s", tc.version, tc.stated, err, rec, tc.want)
		}
	}
}

// A starved load generator (here: one that loses 3 ms real before each
// measured send of the second level, at time scale 0.01: 300 model-ms and
// growing) is flagged, and its level does not count.
func TestStarvedClientIsClientBound(t *testing.T) {
	f := newFakeVLLM(t)
	opts := testOptions(f.start().URL)
	opts.SLO = slo.SLO{TTFTMillis: 2000, TPOTMillis: 1e9}
	opts.beforeSend = func(_ int, qps float64, id int) {
		if qps == 20 && id >= Sessions {
			time.Sleep(3 * time.Millisecond)
		}
	}
	rec, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	l := levels(rec)[1]
	if !l.Verdict.Has(schema.ReasonClientBound) || l.DispatchLagP99Ms <= 100 {
		t.Errorf("starved level: %v, p99 dispatch lag %g model ms; want client_bound", l.Verdict, l.DispatchLagP99Ms)
	}
	if rec.Runs[0].Objective == l.EffectiveQPS && l.EffectiveQPS > levels(rec)[0].EffectiveQPS {
		t.Errorf("the objective %g comes from the client-bound level", rec.Runs[0].Objective)
	}
	// One TTFT everywhere: from the scheduled send, the lateness included;
	// the other one is kept, and they differ by the dispatch lag exactly.
	for _, q := range l.Requests {
		if *q.TTFTMs != *q.FirstMs-q.ScheduledMs || *q.TTFTFromSentMs != *q.FirstMs-q.SentMs ||
			math.Abs(*q.TTFTMs-*q.TTFTFromSentMs-q.DispatchLagMs) > 1e-9*math.Max(1, *q.TTFTMs) {
			t.Fatalf("request %d: ttft %g, from sent %g, lag %g", q.ID, *q.TTFTMs, *q.TTFTFromSentMs, q.DispatchLagMs)
		}
	}
}

// Traffic that is not the replay's moves the engine's counters; the level
// says so instead of reporting someone else's hit rate.
func TestForeignTrafficIsCounterContamination(t *testing.T) {
	f := newFakeVLLM(t)
	f.foreignQueries = 1 << 20
	rec, err := Run(context.Background(), oneLevel(testOptions(f.start().URL)))
	if err != nil {
		t.Fatal(err)
	}
	if l := levels(rec)[0]; !l.Verdict.Has(schema.ReasonCounterContamination) {
		t.Errorf("level %v; want counter_contamination", l.Verdict)
	}
}

// judge's thresholds, exactly: the 1.13 hit rate seen after a stalled
// decode worker, a queries counter that went backwards, and dispatch lag on
// both sides of 5% of the TTFT SLO.
func TestJudgeThresholds(t *testing.T) {
	target := slo.SLO{TTFTMillis: 2000, TPOTMillis: 50}
	base := func() schema.LevelRecord {
		return schema.LevelRecord{Complete: true, Measured: 4, Sent: 12, Planned: 12, Level: slo.Level{OfferedQPS: 1}, P50TTFTMs: 40}
	}
	h := 1.13
	for name, tc := range map[string]struct {
		edit func(*schema.LevelRecord)
		want schema.Code
	}{
		"clean":              {func(*schema.LevelRecord) {}, ""},
		"lag at the bound":   {func(l *schema.LevelRecord) { l.DispatchLagP99Ms = 100 }, ""},
		"lag past the bound": {func(l *schema.LevelRecord) { l.DispatchLagP99Ms = 100.001 }, schema.ReasonClientBound},
		"median lag vs ttft": {func(l *schema.LevelRecord) { l.DispatchLagP50Ms = 20.001 }, schema.ReasonClientBound},
		"median lag at half": {func(l *schema.LevelRecord) { l.DispatchLagP50Ms = 20 }, ""},
		"hit rate 1.13":      {func(l *schema.LevelRecord) { l.HitRateMetricsMeasure = &h }, schema.ReasonCounterContamination},
		"warm start":         {func(l *schema.LevelRecord) { w := 0.51; l.WarmupHitRate = &w }, schema.ReasonWarmStart},
		"not warm":           {func(l *schema.LevelRecord) { w := 0.5; l.WarmupHitRate = &w }, ""},
		"incomplete":         {func(l *schema.LevelRecord) { l.Complete = false }, schema.ReasonIncomplete},
		// 4 measured requests, median TTFT 40 ms: 2 ms of host time per
		// request is the bound, 8 ms in all.
		"pulls late below the bound": {func(l *schema.LevelRecord) {
			l.Counters.Before = schema.Counters{schema.EmulatorKVPullsLate: 3, schema.EmulatorKVPullLateSeconds: 0.001}
			l.Counters.After = schema.Counters{schema.EmulatorKVPullsLate: 7, schema.EmulatorKVPullLateSeconds: 0.0089}
		}, ""},
		"pulls late past the bound": {func(l *schema.LevelRecord) {
			l.Counters.Before = schema.Counters{schema.EmulatorKVPullsLate: 3, schema.EmulatorKVPullLateSeconds: 0.001}
			l.Counters.After = schema.Counters{schema.EmulatorKVPullsLate: 7, schema.EmulatorKVPullLateSeconds: 0.0091}
		}, schema.ReasonEmulatorBound},
		"warm-ups' pulls late, measured ones not": {func(l *schema.LevelRecord) {
			l.Counters.Before = schema.Counters{schema.EmulatorKVPullsLate: 0, schema.EmulatorKVPullLateSeconds: 0}
			l.Counters.Warmup = schema.Counters{schema.EmulatorKVPullsLate: 8, schema.EmulatorKVPullLateSeconds: 0.5}
			l.Counters.After = schema.Counters{schema.EmulatorKVPullsLate: 9, schema.EmulatorKVPullLateSeconds: 0.5079}
		}, ""},
		"warm-ups overlapped the measurement": {func(l *schema.LevelRecord) {
			l.WarmupOverlap = true
			l.Counters.Before = schema.Counters{schema.EmulatorKVPullsLate: 0, schema.EmulatorKVPullLateSeconds: 0}
			l.Counters.Warmup = schema.Counters{schema.EmulatorKVPullsLate: 8, schema.EmulatorKVPullLateSeconds: 0.5}
			l.Counters.After = schema.Counters{schema.EmulatorKVPullsLate: 9, schema.EmulatorKVPullLateSeconds: 0.5079}
		}, schema.ReasonEmulatorBound},
		"pulls late, one scrape lacks them": {func(l *schema.LevelRecord) {
			l.Counters.After = schema.Counters{schema.EmulatorKVPullsLate: 7, schema.EmulatorKVPullLateSeconds: 1}
		}, ""},
		// 100 measured requests of 11 tokens; the engine's decode time 100
		// model ms (TPOT 10): 5% over it (10.5 ms) is the bound, at the
		// median or p99 (the 99th of 100 requests).
		"delivery on time":      {func(l *schema.LevelRecord) { l.Requests = delivered(100, 10.5, 10.5) }, ""},
		"median delivered late": {func(l *schema.LevelRecord) { l.Requests = delivered(100, 10.51, 10.51) }, schema.ReasonEmulatorBound},
		"p99 delivered late":    {func(l *schema.LevelRecord) { l.Requests = delivered(98, 10, 10.6) }, schema.ReasonEmulatorBound},
		"only the max late":     {func(l *schema.LevelRecord) { l.Requests = delivered(99, 10, 30) }, ""},
		"late, a real engine (no time_scale key)": {func(l *schema.LevelRecord) {
			l.Requests = delivered(100, 20, 20)
			for i := range l.Requests {
				l.Requests[i].EngineMetrics = json.RawMessage(`{"decode_time_ms": 100}`)
			}
		}, ""},
		"queries went back": {func(l *schema.LevelRecord) {
			l.Counters.Before = schema.Counters{"vllm:prefix_cache_hits_total": 10, "vllm:prefix_cache_queries_total": 1000}
			l.Counters.After = schema.Counters{"vllm:prefix_cache_hits_total": 0, "vllm:prefix_cache_queries_total": 100}
		}, schema.ReasonCounterContamination},
	} {
		l := base()
		tc.edit(&l)
		judgeLevel(&l, target, 1)
		if tc.want == "" && !l.Verdict.Valid || tc.want != "" && !l.Verdict.Has(tc.want) || len(l.Verdict.Reasons) > 1 {
			t.Errorf("%s: %v, want %q", name, l.Verdict, tc.want)
		}
	}
}

// validOrHostBound: valid, or invalid only because a busy test host made
// the load generator late (client_bound) or an emulated engine's KV pulls
// late (emulator_bound), which these tests at time scale 0.01 (1 ms late =
// 100 model ms) cannot rule out; any other reason fails.
func validOrHostBound(v schema.Verdict) bool {
	if v.Valid {
		return true
	}
	for _, r := range v.Reasons {
		if !schema.HostReason(r.Code) {
			return false
		}
	}
	return len(v.Reasons) > 0
}

// A host reason's Scale is the factor that clears it: the level judged
// again with its host time shrunk by that factor (host time is wall time,
// so model time sees 1/scale of it) is at the bound, valid just above the
// factor and invalid just below. This holds where the host time the level
// can see (dispatch lag, late pulls) is all there is; the rest of a TTFT
// (the model's, and the proxy's hops, which no figure separates) is taken
// to stay, which makes the estimate low by the hops' share: the optimizer
// adds a margin.
func TestHostReasonScale(t *testing.T) {
	target := slo.SLO{TTFTMillis: 2000, TPOTMillis: 50}
	// c: model time in the median TTFT; h: host time at the measured
	// scale. at(k) is the level measured at k times the scale.
	const c = 40.0
	for name, tc := range map[string]struct {
		at   func(k float64) schema.LevelRecord
		code schema.Code
		want float64
	}{
		"p99 lag": {func(k float64) schema.LevelRecord {
			return schema.LevelRecord{Complete: true, Measured: 4, P50TTFTMs: c + 1/k, DispatchLagP50Ms: 1 / k, DispatchLagP99Ms: 300 / k}
		}, schema.ReasonClientBound, 3},
		"median lag": {func(k float64) schema.LevelRecord {
			return schema.LevelRecord{Complete: true, Measured: 4, P50TTFTMs: c + 60/k, DispatchLagP50Ms: 60 / k, DispatchLagP99Ms: 60 / k}
		}, schema.ReasonClientBound, 1.5},
		"late pulls": {func(k float64) schema.LevelRecord {
			// 4 measured requests, 8.4 model ms late each at k = 1.
			return schema.LevelRecord{Complete: true, Measured: 4, P50TTFTMs: c + 8.4/k, Counters: schema.LevelCounters{
				Before: schema.Counters{schema.EmulatorKVPullsLate: 0, schema.EmulatorKVPullLateSeconds: 0},
				After:  schema.Counters{schema.EmulatorKVPullsLate: 4, schema.EmulatorKVPullLateSeconds: 4 * 0.0084 / k}}}
		}, schema.ReasonEmulatorBound, 8.4 * 0.95 / (0.05 * c)},
		// The p99 bound fires and needs 1.5; at 1.5 the median bound
		// would still fail (26.7 > 23.3 ms), so the estimate is the
		// median's: (40 - 0.5·40) / (0.5·20) = 2.
		"p99 lag, the median binds": {func(k float64) schema.LevelRecord {
			return schema.LevelRecord{Complete: true, Measured: 4, P50TTFTMs: 20 + 40/k, DispatchLagP50Ms: 40 / k, DispatchLagP99Ms: 150 / k}
		}, schema.ReasonClientBound, 2},
		// Late pulls beside dispatch lag: both are host time inside the
		// TTFT, so the model's share is 40 ms, not 50:
		// (6 - 0.05·16) / (0.05·40) = 2.6.
		// With the late pulls' modelled time (b = 1.16 ms per request):
		// a pull took the host 0.0066 s of wall time at k = 1, so at k it
		// is late by 6.66/k - 1.16 ms; the model's own time (40 ms)
		// includes the 1.16. Smallest k with that at 5% of the TTFT:
		// (6.66·0.95 - 0.05·1) / (0.05·40 + 1.16·0.95).
		"late pulls with their modelled time": {func(k float64) schema.LevelRecord {
			late := max(6.66/k-1.16, 0)
			return schema.LevelRecord{Complete: true, Measured: 4, P50TTFTMs: c + 1/k + late, DispatchLagP50Ms: 1 / k, DispatchLagP99Ms: 1 / k,
				Counters: schema.LevelCounters{Before: schema.Counters{schema.EmulatorKVPullsLate: 0, schema.EmulatorKVPullLateSeconds: 0, schema.EmulatorKVPullLateModelSeconds: 0},
					After: schema.Counters{schema.EmulatorKVPullsLate: 4, schema.EmulatorKVPullLateSeconds: 4 * late / 1000, schema.EmulatorKVPullLateModelSeconds: 4 * 1.16 / 1000}}}
		}, schema.ReasonEmulatorBound, (6.66*0.95 - 0.05*1) / (0.05*c + 1.16*0.95)},
		"late pulls and lag": {func(k float64) schema.LevelRecord {
			return schema.LevelRecord{Complete: true, Measured: 4, P50TTFTMs: c + 16/k, DispatchLagP50Ms: 10 / k, DispatchLagP99Ms: 10 / k,
				Counters: schema.LevelCounters{Before: schema.Counters{schema.EmulatorKVPullsLate: 0, schema.EmulatorKVPullLateSeconds: 0},
					After: schema.Counters{schema.EmulatorKVPullsLate: 4, schema.EmulatorKVPullLateSeconds: 4 * 0.006 / k}}}
		}, schema.ReasonEmulatorBound, 2.6},
	} {
		l := tc.at(1)
		judgeLevel(&l, target, 1)
		if len(l.Verdict.Reasons) != 1 || l.Verdict.Reasons[0].Code != tc.code {
			t.Fatalf("%s: %v, want %s alone", name, l.Verdict, tc.code)
		}
		k := l.Verdict.Reasons[0].Scale
		if math.Abs(k-tc.want) > 1e-9*tc.want {
			t.Errorf("%s: scale %.12g, want %.12g", name, k, tc.want)
		}
		above, below := tc.at(k*(1+1e-6)), tc.at(k*(1-1e-6))
		judgeLevel(&above, target, 1)
		judgeLevel(&below, target, 1)
		if !above.Verdict.Valid || below.Verdict.Valid {
			t.Errorf("%s: at %.6g× the scale %v, just below %v; want valid above, invalid below", name, k, above.Verdict, below.Verdict)
		}
	}
	// A reason with no host time to scale carries no estimate, nor does
	// a median bound with no model time left to judge by; a second
	// finding of the same code keeps the larger estimate, or none.
	l := schema.LevelRecord{Complete: false, Measured: 4, P50TTFTMs: c}
	judgeLevel(&l, target, 1)
	if r := l.Verdict.Reasons; len(r) != 1 || r[0].Scale != 0 {
		t.Errorf("incomplete: %+v, want no scale", r)
	}
	l = schema.LevelRecord{Complete: true, Measured: 4, P50TTFTMs: 30, DispatchLagP50Ms: 31, DispatchLagP99Ms: 31}
	judgeLevel(&l, target, 1)
	if r := l.Verdict.Reasons; len(r) != 1 || r[0].Code != schema.ReasonClientBound || r[0].Scale != 0 {
		t.Errorf("lag above the median TTFT: %+v, want client_bound with no scale", r)
	}
	var v schema.Verdict
	v.AddScaled(schema.ReasonClientBound, 2, "a")
	v.AddScaled(schema.ReasonClientBound, 3, "b")
	if v.Reasons[0].Scale != 3 || v.Reasons[0].Detail != "a" {
		t.Errorf("merged %+v, want the first detail and scale 3", v.Reasons)
	}
	v.AddScaled(schema.ReasonClientBound, 0, "c")
	if v.Reasons[0].Scale != 0 {
		t.Errorf("merged with an unknown: %+v, want no scale", v.Reasons)
	}
}

// delivered is 100 measured requests (after the warm-ups) of 11 output
// tokens each, whose emulated engine took 100 model ms from first to last
// token (TPOT 10 ms): the first n measured by the client at TPOT on, the
// rest at late.
func delivered(n int, on, late float64) []schema.RequestRecord {
	var out []schema.RequestRecord
	for i := range 100 {
		tpot := late
		if i < n {
			tpot = on
		}
		out = append(out, schema.RequestRecord{ID: Sessions + i, Outcome: schema.OutcomeOK, OutputTokens: 11, TPOTMs: &tpot,
			EngineMetrics: json.RawMessage(`{"decode_time_ms": 100, "time_scale": 1}`)})
	}
	return out
}
