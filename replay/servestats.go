package replay

import (
	"math"
	"slices"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// Dist summarizes one latency metric over a level's requests the way
// `vllm bench serve` prints it: mean, median, p90 and p99, and the
// population standard deviation (numpy's np.std) it saves, in model
// milliseconds. Percentiles (the median too) are nearest rank, as in every
// hone record (vllm bench serve interpolates; with hundreds of requests the
// two differ by less than one request's spacing).
type Dist struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean_ms"`
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Std    float64 `json:"std_ms"`
}

// dist sorts v (a trace's ITLs are tens of millions: one sort, in place,
// where slo.NearestRank would copy and sort for each percentile).
func dist(v []float64) Dist {
	d := Dist{N: len(v)}
	if d.N == 0 {
		return d
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	d.Mean = sum / float64(d.N)
	ss := 0.0
	for _, x := range v {
		ss += (x - d.Mean) * (x - d.Mean)
	}
	d.Std = math.Sqrt(ss / float64(d.N))
	slices.Sort(v)
	rank := func(p float64) float64 { return v[slo.NearestRankIndex(d.N, p)-1] }
	d.Median, d.P90, d.P99 = rank(50), rank(90), rank(99)
	return d
}

// ServeStats is one load level in `vllm bench serve`'s terms, pooled over
// the runs given: the measured requests (ids >= 8) that completed. TTFT and
// E2E latency run from the scheduled send (the open loop's latency, as the
// record's percentiles do); TPOT is per request, (last - first
// chunk)/(output tokens - 1); ITL pools the gaps between successive output
// chunks. Throughputs divide by the levels' measurement windows (model
// seconds: request 8's scheduled arrival to the last completion).
type ServeStats struct {
	OfferedQPS            float64 `json:"offered_qps"`
	Concurrency           int     `json:"concurrency,omitempty"` // a closed loop's clients (OfferedQPS is then 0)
	Runs                  int     `json:"runs"`
	Valid                 bool    `json:"valid"` // every run pooled is valid at this level
	Completed             int     `json:"completed"`
	Failed                int     `json:"failed"`
	DurationS             float64 `json:"duration_s"`
	RequestThroughput     float64 `json:"request_throughput"`     // req/s
	OutputTokenThroughput float64 `json:"output_throughput"`      // output tok/s
	TotalTokenThroughput  float64 `json:"total_token_throughput"` // (prompt + output) tok/s
	TTFT                  Dist    `json:"ttft"`
	TPOT                  Dist    `json:"tpot"`
	ITL                   Dist    `json:"itl"`
	E2E                   Dist    `json:"e2el"`
}

// LevelServeStats pools level i of every run in rec: of the runs where that
// level is valid when there are any (Valid true), else of all of them.
func LevelServeStats(rec *schema.Record, i int) ServeStats {
	levels := pooledLevels(rec, i)
	scale := rec.TimeScale
	if !(scale > 0) {
		scale = 1
	}
	s := ServeStats{Runs: len(levels), Valid: len(levels) > 0}
	for _, l := range levels {
		s.Valid = s.Valid && l.Verdict.Valid
	}
	var ttft, tpot, e2e []float64
	var outTok, inTok int
	warmups := rec.Warmups()
	for _, l := range levels {
		s.OfferedQPS, s.Concurrency = l.OfferedQPS, l.Concurrency
		s.DurationS += l.WindowSeconds
		for _, q := range l.Requests {
			if q.ID < warmups {
				continue
			}
			if !completed(&q) {
				s.Failed++
				continue
			}
			s.Completed++
			ttft = append(ttft, *q.TTFTMs)
			e2e = append(e2e, *q.FinishMs-q.ScheduledMs)
			if q.TPOTMs != nil && q.OutputTokens > 1 {
				tpot = append(tpot, *q.TPOTMs)
			}
			outTok += q.OutputTokens
			if q.PromptTokens != nil {
				inTok += *q.PromptTokens
			} else {
				inTok += q.InputTokens
			}
		}
	}
	if s.DurationS > 0 {
		s.RequestThroughput = float64(s.Completed) / s.DurationS
		s.OutputTokenThroughput = float64(outTok) / s.DurationS
		s.TotalTokenThroughput = float64(inTok+outTok) / s.DurationS
	}
	s.TTFT, s.TPOT, s.E2E = dist(ttft), dist(tpot), dist(e2e)
	s.ITL = intervalDist(func(f func(int64)) {
		for _, l := range levels {
			for qi := range l.Requests {
				if q := &l.Requests[qi]; q.ID >= warmups && completed(q) {
					q.Chunks.EachInterval(f)
				}
			}
		}
	}, func(ns int64) float64 { return float64(ns) / 1e6 / scale })
	return s
}

// intervalDist is dist over the values ms(g) of the intervals g that
// each gives, without holding them: a trace's ITLs are tens of millions
// (8 bytes each as a list). It reads them six times: the count and mean,
// the deviations, and four passes that select the nearest-rank
// percentiles 16 bits at a time (ms is non-decreasing, so the k-th
// smallest ms(g) is ms of the k-th smallest g). The figures are dist's
// over the same values in the same order, bit for bit.
func intervalDist(each func(func(int64)), ms func(int64) float64) Dist {
	var d Dist
	sum := 0.0
	each(func(g int64) { d.N++; sum += ms(g) })
	if d.N == 0 {
		return d
	}
	d.Mean = sum / float64(d.N)
	ss := 0.0
	each(func(g int64) { x := ms(g) - d.Mean; ss += x * x })
	d.Std = math.Sqrt(ss / float64(d.N))
	ranks := [3]int{slo.NearestRankIndex(d.N, 50), slo.NearestRankIndex(d.N, 90), slo.NearestRankIndex(d.N, 99)}
	var prefix [3]uint64 // the selected values' top bits so far, as keys
	hist := make([][1 << 16]int, 3)
	for shift := 48; shift >= 0; shift -= 16 {
		for i := range hist {
			hist[i] = [1 << 16]int{}
		}
		each(func(g int64) {
			u := uint64(g) ^ 1<<63 // order-preserving key
			for i := range hist {
				if u>>(shift+16) == prefix[i] { // all match at shift 48: u>>64 is 0
					hist[i][u>>shift&0xffff]++
				}
			}
		})
		for i := range hist {
			for digit, n := range hist[i] {
				if ranks[i] <= n {
					prefix[i] = prefix[i]<<16 | uint64(digit)
					break
				}
				ranks[i] -= n
			}
		}
	}
	d.Median, d.P90, d.P99 = ms(int64(prefix[0]^1<<63)), ms(int64(prefix[1]^1<<63)), ms(int64(prefix[2]^1<<63))
	return d
}

// pooledLevels is level i of every run in rec that has one: the runs where
// it is valid when there are any, else all of them.
func pooledLevels(rec *schema.Record, i int) []*schema.LevelRecord {
	var valid, all []*schema.LevelRecord
	for r := range rec.Runs {
		if i < len(rec.Runs[r].Levels) {
			l := &rec.Runs[r].Levels[i]
			all = append(all, l)
			if l.Verdict.Valid {
				valid = append(valid, l)
			}
		}
	}
	if len(valid) > 0 {
		return valid
	}
	return all
}

// completed: the request ended in [DONE] with output, the requests
// ServeStats measures.
func completed(q *schema.RequestRecord) bool {
	return q.Outcome == schema.OutcomeOK && q.FirstMs != nil && q.FinishMs != nil && q.TTFTMs != nil
}

// ServeStatsByLevel is LevelServeStats for every level of the record's
// first run, in order.
func ServeStatsByLevel(rec *schema.Record) []ServeStats {
	if len(rec.Runs) == 0 {
		return nil
	}
	out := make([]ServeStats, len(rec.Runs[0].Levels))
	for i := range out {
		out[i] = LevelServeStats(rec, i)
	}
	return out
}
