package replay

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// Shard makes a replay one of Count processes that together send one
// replay's schedule, for rates one client host cannot hold. Shards never
// talk to each other: they agree through their options alone (the same
// workload, levels, time scale, cache procedure, StartAt and LevelGap).
// Options.Cache must be CacheReset or CacheFreshPrefixes: what "" would
// find by probing, one shard cannot tell the others.
//
// Each shard sends the requests ShardOf assigns it, each at its global
// arrival time from the level's start instant, which is the same for every
// shard: level g (runs x levels, in order) starts at StartAt plus, for
// every earlier level, its schedule's span, LevelGap (model time) for its
// last requests to drain, and Setup (real time) for the next level's
// preparation. Shard 0 alone resets the prefix cache, sends the eight
// warm-ups and reads the engine's counters (the last at the level's drain
// deadline, once every shard's requests should have finished), so the
// engine sees the prewarm and the cold start a single process gives.
//
// A shard that is not ready when a level starts marks that level
// client_bound; one whose requests are still in flight at the level's drain
// deadline marks it incomplete: levels never silently shift. MergeShards
// combines the shards' records into the record one process would have
// written.
type Shard struct {
	Index, Count int
	// StartAt is the instant the first level starts. It is read on the
	// wall clock once, when the replay starts, and kept on the monotonic
	// clock from then on: shards agree as well as their hosts' wall clocks
	// do, and a clock step during the replay moves nothing.
	StartAt time.Time
	// LevelGap is the model time from a level's last scheduled arrival to
	// its drain deadline. 0: DefaultLevelGap.
	LevelGap time.Duration
	// Setup is the real time from a level's drain deadline to the next
	// level's start: shard 0's counter scrapes and cache reset, every
	// shard's prompts. 0: DefaultShardSetup.
	Setup time.Duration
}

// Defaults of Shard.
const (
	// DefaultLevelGap leaves a level's last requests a model minute to
	// finish: the seed workload's 128 output tokens take 6.4 s at a 50 ms TPOT, so
	// the rest absorbs the queue an overloaded level builds.
	DefaultLevelGap = time.Minute
	// DefaultShardSetup covers a reset, eight /tokenize calls and two
	// scrapes, which take milliseconds on a healthy engine.
	DefaultShardSetup = time.Second
)

// ShardAssignment states ShardOf for the record.
const ShardAssignment = "warm-ups (ids 0-7), every cache reset and every counter scrape on shard 0; measured request id i on shard i mod count; " +
	"every shard sends at the global schedule from the level's common start instant"

// ShardOf is the shard that sends request id of every level: shard 0 for
// the warm-ups, id mod count for measured requests. The client keeps no
// per-session state (every prompt is derived from the seed), so keeping a
// session on one client would buy nothing, while id mod count spreads
// consecutive arrivals evenly (each shard sends qps/count, evenly spaced)
// and allows as many shards as a level has measured requests.
func ShardOf(id, count int) int {
	if id < Sessions {
		return 0
	}
	return id % count
}

// validate rejects a shard configuration and fills its defaults.
func (s *Shard) validate(o *Options, now time.Time) error {
	measured := o.Workload.Requests - Sessions
	name := fmt.Sprintf("%d/%d", s.Index, s.Count)
	switch {
	case s.Count < 1 || s.Index < 0 || s.Index >= s.Count:
		return &ParamError{"shard", name, "INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/3"}
	case s.Count > measured:
		return &ParamError{"shard", name, fmt.Sprintf("at most %d shards: one measured request each", measured)}
	case s.StartAt.IsZero():
		return &ParamError{"start-at", `""`, "the instant every shard starts the first level (RFC 3339 or unix nanoseconds), the same for every shard"}
	case !s.StartAt.After(now):
		return &ParamError{"start-at", s.StartAt.UTC().Format(time.RFC3339Nano),
			fmt.Sprintf("an instant in the future (now %s): a shard started after it cannot keep the schedule", now.UTC().Format(time.RFC3339Nano))}
	case s.LevelGap < 0:
		return &ParamError{"level-gap", s.LevelGap, "a positive duration (model time), or 0 for the default"}
	case s.Setup < 0:
		return &ParamError{"shard setup", s.Setup, "a positive duration, or 0 for the default"}
	case o.Cache == "":
		return &ParamError{"cache", `""`, "reset_prefix_cache or fresh_prefixes: shards cannot agree on a procedure found by probing"}
	}
	if s.LevelGap == 0 {
		s.LevelGap = DefaultLevelGap
	}
	if s.Setup == 0 {
		s.Setup = DefaultShardSetup
	}
	s.StartAt = s.StartAt.Round(0) // the wall reading alone: the same instant in every shard
	return nil
}

// info is the record's shard field.
func (s Shard) info() *schema.ShardInfo {
	i := s.Index
	return &schema.ShardInfo{Index: &i, Count: s.Count, StartAtUnixNs: s.StartAt.UnixNano(), LevelGapMs: float64(s.LevelGap) / 1e6,
		SetupMs: float64(s.Setup) / 1e6, Assignment: ShardAssignment}
}

// nonce derives a value every shard derives alike from the start instant
// (a SplitMix64 step; never 0): the fresh-prefix nonce and the request id
// nonce, which a single process draws at random.
func (s Shard) nonce(k uint64) uint64 {
	z := uint64(s.StartAt.UnixNano()) + k*0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return max(z^z>>31, 1)
}

// shardPlan is a shard's schedule of levels: level g (run x levels + level)
// starts at starts[g] and must have drained by drains[g], on this
// process's monotonic clock.
type shardPlan struct {
	Shard
	starts, drains []time.Time
}

func newShardPlan(s Shard, o Options, span func(qps float64) time.Duration) *shardPlan {
	now := time.Now()
	t := now.Add(s.StartAt.Sub(now)) // wall instant, monotonic reading
	p := &shardPlan{Shard: s}
	gap := time.Duration(float64(s.LevelGap) * o.TimeScale)
	for range o.Runs {
		for _, q := range o.QPS {
			d := t.Add(span(q) + gap)
			p.starts, p.drains = append(p.starts, t), append(p.drains, d)
			t = d.Add(s.Setup)
		}
	}
	return p
}

// mine is the part of a level's schedule this shard sends, in id order.
func (p *shardPlan) mine(all []Request) []Request {
	var out []Request
	for _, q := range all {
		if ShardOf(q.ID, p.Count) == p.Index {
			out = append(out, q)
		}
	}
	return out
}

// settle summarizes and judges a shard's level on what the shard alone can
// tell, after marking it for a late start or a late drain. The shard's
// planned requests are its own; the window still runs from request 8's
// arrival. Shard 0's counters cover every shard's traffic: while there are
// other shards, the checks that weigh them against the level's requests
// (queries against prompt tokens, emulator lateness per measured request)
// wait for the merge, which has every request.
func (p *shardPlan) settle(lr *schema.LevelRecord, all, mine []Request, late, overrun time.Duration, o Options) {
	measured := 0
	for _, q := range mine {
		if q.ID >= Sessions {
			measured++
		}
	}
	summarizeOver(lr, Sessions, measured, all[Sessions].ArrivalMs, o.SLO, o.GPUs)
	if late > 0 {
		lr.Invalidate(schema.ReasonClientBound, "shard %d/%d was ready for this level %v after its start instant (its previous level drained, or its setup ended, too late): "+
			"its sends ran late; leave more time between levels (--level-gap) or start later (--start-at)", p.Index, p.Count, late.Round(time.Microsecond))
	}
	if overrun > 0 {
		lr.Invalidate(schema.ReasonIncomplete, "shard %d/%d still had requests in flight %v after the level's drain deadline (last arrival + --level-gap %v model time): "+
			"they ran into the counter scrape and the next level's cache reset; raise --level-gap", p.Index, p.Count, overrun.Round(time.Microsecond), p.LevelGap)
	}
	if p.Count == 1 {
		judgeLevel(lr, o.SLO, o.TimeScale)
		return
	}
	c := lr.Counters
	lr.Counters = schema.LevelCounters{}
	judgeLevel(lr, o.SLO, o.TimeScale)
	lr.Counters = c
}

// MergeError says why shard records cannot be merged: Field is the record
// field that differs ("shard" when a record is not a shard's).
type MergeError struct {
	Field  string
	Detail string
}

func (e *MergeError) Error() string {
	return "shards do not belong together: " + e.Field + ": " + e.Detail
}

// MergeShardFiles reads the records of a sharded replay (ReadRecord) and
// merges them (MergeShards); errors name the files.
func MergeShardFiles(paths ...string) (*schema.Record, error) {
	recs := make([]*schema.Record, len(paths))
	for i, p := range paths {
		r, err := ReadRecord(p)
		if err != nil {
			return nil, err
		}
		recs[i] = r
	}
	return mergeShards(recs, paths)
}

// MergeShards combines the records of every shard of one sharded replay
// into one record, identical in schema to a single process's: each level
// holds every shard's requests, in id order, and its summary and verdict
// are recomputed from them as a replay computes them. The engine's counters
// are shard 0's, the only shard that scrapes them (it brackets the warm-ups
// and reads the last at the drain deadline); a reason that invalidates a
// shard's level invalidates the merged level, its detail naming the shard.
//
// The records must belong together: every index of one shard count once,
// the same start instant, level gap, workload, levels, time scale,
// endpoint, model, SLO, cache procedure and prompts. Otherwise the error is
// a *MergeError naming the field.
func MergeShards(shards []*schema.Record) (*schema.Record, error) {
	names := make([]string, len(shards))
	for i := range names {
		names[i] = fmt.Sprintf("record %d", i+1)
	}
	return mergeShards(shards, names)
}

func mergeShards(recs []*schema.Record, names []string) (*schema.Record, error) {
	if len(recs) == 0 {
		return nil, &MergeError{"shard", "no records"}
	}
	for i, r := range recs {
		if r.Shard == nil || r.Shard.Index == nil {
			return nil, &MergeError{"shard", names[i] + " is not a shard's record (no shard.index: made without --shard, or already merged)"}
		}
	}
	count := recs[0].Shard.Count
	byIndex := make([]*schema.Record, count)
	byName := make([]string, count)
	for i, r := range recs {
		idx := *r.Shard.Index
		switch {
		case r.Shard.Count != count:
			return nil, &MergeError{"shard.count", fmt.Sprintf("%s has %d, %s has %d", names[0], count, names[i], r.Shard.Count)}
		case idx < 0 || idx >= count:
			return nil, &MergeError{"shard.index", fmt.Sprintf("%s is shard %d of %d", names[i], idx, count)}
		case byIndex[idx] != nil:
			return nil, &MergeError{"shard.index", fmt.Sprintf("shard %d twice: %s and %s", idx, byName[idx], names[i])}
		}
		byIndex[idx], byName[idx] = r, names[i]
	}
	var missing []string
	for i, r := range byIndex {
		if r == nil {
			missing = append(missing, fmt.Sprint(i))
		}
	}
	if len(missing) > 0 {
		return nil, &MergeError{"shard.count", fmt.Sprintf("%d shards, %d records: shard %s missing", count, len(recs), strings.Join(missing, ", "))}
	}
	if err := sameReplay(byIndex, byName); err != nil {
		return nil, err
	}
	return merge(byIndex, byName)
}

// sameReplay checks that every shard ran the same replay as shard 0.
func sameReplay(recs []*schema.Record, names []string) error {
	fields := []struct {
		name string
		of   func(*schema.Record) any
	}{
		{"shard.start_at_unix_ns", func(r *schema.Record) any { return r.Shard.StartAtUnixNs }},
		{"shard.level_gap_ms", func(r *schema.Record) any { return r.Shard.LevelGapMs }},
		{"shard.setup_ms", func(r *schema.Record) any { return r.Shard.SetupMs }},
		{"shard.assignment", func(r *schema.Record) any { return r.Shard.Assignment }},
		{"hone", func(r *schema.Record) any { return r.Hone }},
		{"kind", func(r *schema.Record) any { return r.Kind }},
		{"backend", func(r *schema.Record) any { return r.Backend }},
		{"engine.endpoint", func(r *schema.Record) any { return r.Engine.Endpoint }},
		{"model", func(r *schema.Record) any { return r.Model }},
		{"gpus", func(r *schema.Record) any { return r.GPUs }},
		{"config", func(r *schema.Record) any { return r.Config }},
		{"time_scale", func(r *schema.Record) any { return r.TimeScale }},
		{"request_timeout_ms", func(r *schema.Record) any { return r.RequestTimeoutMs }},
		{"slo", func(r *schema.Record) any { return r.SLO }},
		{"workload.seed", func(r *schema.Record) any { return r.Workload.Seed }},
		{"workload.requests", func(r *schema.Record) any { return r.Workload.Requests }},
		{"workload.input_tokens", func(r *schema.Record) any { return r.Workload.InputTokens }},
		{"workload.uncached_tokens", func(r *schema.Record) any { return r.Workload.UncachedTokens }},
		{"workload.output_tokens", func(r *schema.Record) any { return r.Workload.OutputTokens }},
		{"workload.length_ratio", func(r *schema.Record) any { return r.Workload.LengthRatio }},
		{"workload.qps", func(r *schema.Record) any { return r.Workload.QPS }},
		{"workload.runs", func(r *schema.Record) any { return r.Workload.Runs }},
		{"workload.generator", func(r *schema.Record) any { return r.Workload.Generator }},
		{"workload.sessions", func(r *schema.Record) any { return r.Workload.Sessions }},
		{"cache.procedure", func(r *schema.Record) any { return r.Cache.Procedure }},
		{"cache.nonce", func(r *schema.Record) any { return r.Cache.Nonce }},
		{"request_id_nonce", func(r *schema.Record) any { return r.RequestIDNonce }},
	}
	for _, f := range fields {
		want := f.of(recs[0])
		for i, r := range recs[1:] {
			if got := f.of(r); !reflect.DeepEqual(got, want) {
				return &MergeError{f.name, fmt.Sprintf("shard 0 (%s) has %s, shard %d (%s) has %s", names[0], short(want), i+1, names[i+1], short(got))}
			}
		}
	}
	for s, r := range recs {
		for ri, run := range r.Runs {
			if run.Run != ri || len(run.Levels) > len(r.Workload.QPS) {
				return &MergeError{"runs", fmt.Sprintf("shard %d (%s): run %d holds run %d with %d levels", s, names[s], ri, run.Run, len(run.Levels))}
			}
			for li, l := range run.Levels {
				field := fmt.Sprintf("runs[%d].levels[%d]", ri, li)
				if l.OfferedQPS != r.Workload.QPS[li] {
					return &MergeError{field + ".offered_qps", fmt.Sprintf("shard %d (%s) has %g, its workload.qps says %g", s, names[s], l.OfferedQPS, r.Workload.QPS[li])}
				}
				seen := map[int]bool{}
				for _, q := range l.Requests {
					if ShardOf(q.ID, len(recs)) != s || seen[q.ID] {
						return &MergeError{field + ".requests", fmt.Sprintf("shard %d (%s) holds request %d, which is shard %d's (or holds it twice)", s, names[s], q.ID, ShardOf(q.ID, len(recs)))}
					}
					seen[q.ID] = true
				}
				if s == 0 {
					continue
				}
				if ri < len(recs[0].Runs) && li < len(recs[0].Runs[ri].Levels) {
					l0 := recs[0].Runs[ri].Levels[li]
					if l.PromptsSHA256 != l0.PromptsSHA256 || l.PrefixSeed != l0.PrefixSeed {
						return &MergeError{field + ".prompts_sha256", fmt.Sprintf("shard 0 (%s) sent prompts %s (prefix seed %d), shard %d (%s) %s (prefix seed %d)",
							names[0], l0.PromptsSHA256, l0.PrefixSeed, s, names[s], l.PromptsSHA256, l.PrefixSeed)}
					}
				}
			}
		}
	}
	return nil
}

// short renders a field's value for an error, cut to a readable length.
func short(v any) string {
	s := fmt.Sprintf("%v", v)
	if sv, ok := v.(string); ok {
		s = fmt.Sprintf("%q", sv)
	}
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// merge builds the merged record from shards that belong together, in
// index order.
func merge(recs []*schema.Record, names []string) (*schema.Record, error) {
	r0 := recs[0]
	m := *r0
	m.Shard = &schema.ShardInfo{Count: r0.Shard.Count, StartAtUnixNs: r0.Shard.StartAtUnixNs, LevelGapMs: r0.Shard.LevelGapMs,
		SetupMs: r0.Shard.SetupMs, Assignment: r0.Shard.Assignment}
	m.Runs, m.Attribution = nil, nil
	m.Outcomes, m.Validation = map[string]int{}, schema.Validation{Reasons: map[string]int{}}
	m.Incomplete = false
	var errs []string
	zeroWhenAbsent := false
	for i, r := range recs {
		m.Shard.Merged = append(m.Shard.Merged, schema.ShardPart{Index: i, Clock: r.Clock, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
			Incomplete: r.Incomplete, Error: r.Error, Hardware: r.Hardware})
		if r.StartedAt.Before(m.StartedAt) {
			m.StartedAt = r.StartedAt
		}
		m.Incomplete = m.Incomplete || r.Incomplete
		if r.Error != "" {
			errs = append(errs, fmt.Sprintf("shard %d: %s", i, r.Error))
		}
		zeroWhenAbsent = zeroWhenAbsent || r.CachedTokensRule == CachedTokensZeroWhenAbsent
	}
	m.Error = strings.Join(errs, "; ")
	w := r0.Workload.Workload
	detailsSeen := false
	for run := range r0.Workload.Runs {
		rr := schema.RunRecord{Run: run}
		for li, qps := range r0.Workload.QPS {
			parts := make([]*schema.LevelRecord, len(recs))
			reached := false
			for s, r := range recs {
				if run < len(r.Runs) && li < len(r.Runs[run].Levels) {
					parts[s], reached = &r.Runs[run].Levels[li], true
				}
			}
			if !reached {
				break // no shard got this far: the replay stopped here
			}
			all, err := Generate(ParamsOf(w, qps))
			if err != nil {
				return nil, &MergeError{"workload", err.Error()}
			}
			lr := mergeLevel(parts, all, qps)
			fillCachedTokens(lr.Requests, false, &detailsSeen)
			summarizeLevel(&lr, all, m.SLO, m.GPUs)
			judgeLevel(&lr, m.SLO, m.TimeScale)
			rr.Levels = append(rr.Levels, lr)
		}
		if len(rr.Levels) == 0 {
			break
		}
		m.Runs = append(m.Runs, rr)
	}
	if zeroWhenAbsent || detailsSeen {
		m.CachedTokensRule = CachedTokensZeroWhenAbsent
	}
	finishRecord(&m)
	m.FinishedAt = r0.FinishedAt
	for _, r := range recs {
		if r.FinishedAt.After(m.FinishedAt) {
			m.FinishedAt = r.FinishedAt
		}
	}
	return &m, nil
}

// mergeLevel unions one level's shards (nil where a shard never reached
// it): requests in id order, shard 0's counters, and every shard's reasons
// (per code, the details of every shard that gave it). Summaries are left
// to summarize and judge.
func mergeLevel(parts []*schema.LevelRecord, all []Request, qps float64) schema.LevelRecord {
	lr := schema.LevelRecord{Level: slo.Level{OfferedQPS: qps}, Planned: len(all), Outcomes: map[string]int{}, Failures: map[string]int{},
		Complete: true, Requests: []schema.RequestRecord{}, Verdict: schema.Verdict{Valid: true}}
	first := true
	details := map[schema.Code][]string{}
	scales := map[schema.Code]float64{} // the largest of the parts' Scale estimates, 0 if one has none
	var codes []schema.Code
	for s, p := range parts {
		if p == nil {
			lr.Complete = false
			continue
		}
		if first {
			// Shard 0's where it got here: the level's instant is every
			// shard's; the counters are only shard 0's.
			lr.StartedAt, lr.PrefixSeed, lr.PromptsSHA256 = p.StartedAt, p.PrefixSeed, p.PromptsSHA256
			first = false
		}
		if s == 0 {
			lr.Counters, lr.WarmupOverlap = p.Counters, p.WarmupOverlap
		}
		lr.Sent += p.Sent
		lr.Complete = lr.Complete && p.Complete
		lr.Requests = append(lr.Requests, p.Requests...)
		for _, r := range p.Verdict.Reasons {
			if _, ok := details[r.Code]; !ok {
				codes = append(codes, r.Code)
			}
			details[r.Code] = append(details[r.Code], fmt.Sprintf("shard %d/%d: %s", s, len(parts), r.Detail))
			if k, ok := scales[r.Code]; ok {
				scales[r.Code] = schema.MergeScale(k, r.Scale)
			} else {
				scales[r.Code] = r.Scale
			}
		}
	}
	lr.Complete = lr.Complete && lr.Sent == len(all)
	slices.SortFunc(lr.Requests, func(a, b schema.RequestRecord) int { return a.ID - b.ID })
	for _, c := range codes {
		lr.Verdict.Reasons = append(lr.Verdict.Reasons, schema.Reason{Code: c, Detail: strings.Join(details[c], "; "), Scale: scales[c]})
		lr.Verdict.Valid = false
	}
	return lr
}
