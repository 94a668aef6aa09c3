package optimizer

import (
	"slices"
	"testing"

	"github.com/hone-llm/hone/replay"
)

// TestSummarizeGoodput: each run's goodput fraction at a level reaches
// the trial's level summary, run by run; a level where a run did not
// count it has none (the runs would no longer line up with RunValid).
func TestSummarizeGoodput(t *testing.T) {
	lvl := func(q, frac float64) replay.LevelRecord {
		l := replay.LevelRecord{Verdict: replay.Verdict{Valid: true}}
		l.OfferedQPS = q
		if frac >= 0 {
			l.Goodput = &replay.Goodput{Good: int(frac * 10), Measured: 10, Fraction: frac}
		}
		return l
	}
	rec := &replay.Record{Runs: []replay.RunRecord{
		{Run: 0, Levels: []replay.LevelRecord{lvl(4, 1), lvl(8, 0.9)}, Verdict: replay.Verdict{Valid: true}},
		{Run: 1, Levels: []replay.LevelRecord{lvl(4, 0.8), lvl(8, -1)}, Verdict: replay.Verdict{Valid: true}},
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
	for kind, want := range map[string]int{"": 32, replay.WorkloadTrace: 40} {
		l := replay.LevelRecord{Verdict: replay.Verdict{Valid: true}, Planned: 40, Sent: 40, Complete: true}
		l.OfferedQPS = 3
		rec := &replay.Record{Workload: replay.WorkloadRecord{Kind: kind},
			Runs: []replay.RunRecord{{Levels: []replay.LevelRecord{l}, Verdict: replay.Verdict{Valid: true}}}}
		var tr Trial
		summarizeRecord(&tr, rec)
		if len(tr.Levels) != 1 || tr.Levels[0].Measured != want {
			t.Errorf("workload kind %q: levels %+v, want %d measured", kind, tr.Levels, want)
		}
	}
}
