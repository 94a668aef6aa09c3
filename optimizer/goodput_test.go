package optimizer

import (
	"slices"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// TestSummarizeGoodput: each run's goodput fraction at a level reaches
// the trial's level summary, run by run; a level where a run did not
// count it has none (the runs would no longer line up with RunValid).
func TestSummarizeGoodput(t *testing.T) {
	lvl := func(q, frac float64) schema.LevelRecord {
		l := schema.LevelRecord{Verdict: schema.Verdict{Valid: true}}
		l.OfferedQPS = q
		if frac >= 0 {
			l.Goodput = &schema.Goodput{Good: int(frac * 10), Measured: 10, Fraction: frac}
		}
		return l
	}
	rec := &schema.Record{Runs: []schema.RunRecord{
		{Run: 0, Levels: []schema.LevelRecord{lvl(4, 1), lvl(8, 0.9)}, Verdict: schema.Verdict{Valid: true}},
		{Run: 1, Levels: []schema.LevelRecord{lvl(4, 0.8), lvl(8, -1)}, Verdict: schema.Verdict{Valid: true}},
	}}
	var tr Trial
	summarizeRecord(&tr, rec)
	if len(tr.Levels) != 2 || !slices.Equal(tr.Levels[0].RunGoodput, []float64{1, 0.8}) || tr.Levels[1].RunGoodput != nil {
		t.Fatalf("levels %+v", tr.Levels)
	}
}

// A level's measured requests are its planned ones less the warm-ups the
// record's workload has (replay.Record.Warmups): the brief's 8, a
// trace's none.
func TestSummarizeMeasuredTrace(t *testing.T) {
	for kind, want := range map[string]int{"": 32, schema.WorkloadTrace: 40} {
		l := schema.LevelRecord{Verdict: schema.Verdict{Valid: true}, Planned: 40, Sent: 40, Complete: true}
		l.OfferedQPS = 3
		rec := &schema.Record{Workload: schema.WorkloadRecord{Kind: kind},
			Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{l}, Verdict: schema.Verdict{Valid: true}}}}
		var tr Trial
		summarizeRecord(&tr, rec)
		if len(tr.Levels) != 1 || tr.Levels[0].Measured != want {
			t.Errorf("workload kind %q: levels %+v, want %d measured", kind, tr.Levels, want)
		}
	}
}
