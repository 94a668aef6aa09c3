package diagnose

import (
	"sort"

	"github.com/hone-llm/hone/schema"
)

// Knobs are the engine settings a diagnosis's proposals follow.
type Knobs struct {
	// MaxNumSeqs is vLLM's --max-num-seqs (0: unknown).
	MaxNumSeqs int
}

// RecordKnobs reads the knobs a record's config states (a deploy spec's
// knobs, as the optimizer records it); zero where it states none.
func RecordKnobs(rec *schema.Record) Knobs {
	if k, err := rec.Config.Knobs(); err == nil && k.MaxNumSeqs >= 1 {
		return Knobs{MaxNumSeqs: k.MaxNumSeqs}
	}
	return Knobs{}
}

// peakInFlight is the most requests of one run that streamed at once
// (first → last token) at a valid level: each held a seat then.
func peakInFlight(lv []*level) int {
	peak := 0
	for _, l := range lv {
		type edge struct {
			at    float64
			delta int
		}
		byRun := map[int][]edge{}
		for _, a := range l.valid {
			if a.seat[1] > a.seat[0] {
				byRun[a.Run] = append(byRun[a.Run], edge{a.seat[0], 1}, edge{a.seat[1], -1})
			}
		}
		for _, es := range byRun {
			// Ends before starts at one instant: a seat freed is taken.
			sort.Slice(es, func(i, j int) bool { return es[i].at < es[j].at || es[i].at == es[j].at && es[i].delta < es[j].delta })
			n := 0
			for _, e := range es {
				n += e.delta
				peak = max(peak, n)
			}
		}
	}
	return peak
}

// confidenceBasis says what a verdict's confidence counts.
func confidenceBasis(b string) string {
	switch b {
	case Stall:
		return "the share of the level's requests the freeze reached"
	case Decode:
		return "bootstrap resamples of the level's requests whose p99 TPOT misses the SLO"
	case "none":
		return "bootstrap resamples in which no part clears the bar"
	}
	return "bootstrap resamples of requests that name the same part"
}

// unsplitKVWaits counts the valid levels' disaggregated requests whose
// decode-worker wait was not split at the KV pull's end (splitKVWait),
// of all their disaggregated requests.
func unsplitKVWaits(lv []*level) (n, of int) {
	for _, l := range lv {
		for _, a := range l.valid {
			if _, disagg := a.Parts[Transfer]; !disagg || a.Fallback {
				continue
			}
			of++
			if a.kvSplit == "" {
				n++
			}
		}
	}
	return n, of
}
