package diagnose

import (
	"math"
	"strings"
	"testing"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// boundRecord has one run with levels at 4 and 8 req/s, both valid.
func boundRecord() *schema.Record {
	lvl := func(q float64) schema.LevelRecord {
		return schema.LevelRecord{Level: slo.Level{OfferedQPS: q, Passed: true, EffectiveQPS: q}, Verdict: validVerdict(), Complete: true}
	}
	rec := &schema.Record{Kind: "emulated", TimeScale: 1, SLO: slo.Default,
		Runs: []schema.RunRecord{{Levels: []schema.LevelRecord{lvl(4), lvl(8)}}}}
	replay.Judge(rec)
	return rec
}

// clientAtts: 40 requests at q with TTFT 50 ms and the client part
// client(i) (the rest prefill).
func clientAtts(q float64, client func(i int) float64) []Attribution {
	return levelAtts(q, 40, func(i int) map[string]float64 {
		c := client(i)
		return map[string]float64{Client: c, Prefill: 50 - c}
	})
}

func TestMarkClientBound(t *testing.T) {
	sloLim := schema.ClientBoundSLOFraction * slo.Default.TTFTMillis // on the p99
	medLim := schema.ClientBoundTTFTFraction * 50                    // on the median (TTFT 50 ms)
	past := func(x float64) float64 { return math.Nextafter(x, math.Inf(1)) }
	one := func(v float64) func(int) float64 { // one request (the p99 rank of 40) at v, the rest 1 ms
		return func(i int) float64 {
			if i == 13 {
				return v
			}
			return 1
		}
	}
	all := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	for _, tc := range []struct {
		name   string
		client func(int) float64
		marked string // the bound named, "" for none
	}{
		{"p99 at the bound", one(sloLim), ""},
		{"p99 just past the bound", one(past(sloLim)), "p99 client/proxy residual"},
		{"median at the bound", all(medLim), ""},
		{"median just past the bound", all(past(medLim)), "median client/proxy residual"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := boundRecord()
			atts := append(clientAtts(4, all(1)), clientAtts(8, tc.client)...)
			if c := tc.client(13); c > 50 { // keep TTFT = parts: the p99 request is slow
				atts[40+13].Parts[Prefill], atts[40+13].TTFTMs = 0, c
			}
			lines := MarkClientBound(rec, atts)
			l4, l8 := rec.Runs[0].Levels[0], rec.Runs[0].Levels[1]
			if !l4.Verdict.Valid || len(atts[0].Invalid) != 0 {
				t.Errorf("4 req/s marked: %v %v", l4.Verdict, atts[0].Invalid)
			}
			if tc.marked == "" {
				if len(lines) != 0 || !l8.Verdict.Valid || !rec.Runs[0].Verdict.Valid || rec.Runs[0].Objective != 8 || len(atts[40].Invalid) != 0 {
					t.Errorf("marked at the bound: %v, level %v", lines, l8.Verdict)
				}
				return
			}
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "run 1, 8 req/s: client_bound: "+tc.marked) {
				t.Errorf("lines %q", lines)
			}
			if l8.Verdict.Valid || !l8.Verdict.Has(schema.ReasonClientBound) {
				t.Errorf("8 req/s verdict %v", l8.Verdict)
			}
			// Just past a bound, a time scale just above this one clears
			// it (the residual is host time; the rest of TTFT stays).
			if k := l8.Verdict.Reasons[0].Scale; !(k > 1) || k > 1+1e-9 {
				t.Errorf("scale %.12g, want just above 1", k)
			}
			// Judge ran: the run and the record follow, and the objective
			// rests on the valid level only.
			if rec.Runs[0].Verdict.Valid || rec.Verdict.Valid || rec.Runs[0].Objective != 4 {
				t.Errorf("run %v objective %v, record %v", rec.Runs[0].Verdict, rec.Runs[0].Objective, rec.Verdict)
			}
			if strings.Join(atts[40].Invalid, ",") != string(schema.ReasonClientBound) {
				t.Errorf("attributions at 8 req/s not marked: %v", atts[40].Invalid)
			}
		})
	}
}

// In a disaggregated deployment, a request without its proxy timeline
// has the prefill leg in its residual: it is not judged.
func TestMarkClientBoundNeedsTimelinesWhenDisaggregated(t *testing.T) {
	rec := boundRecord()
	rec.Config = map[string]any{"topology": map[string]any{"kind": "disaggregated"}}
	atts := clientAtts(4, func(int) float64 { return 40 })
	lines := MarkClientBound(rec, atts)
	if !rec.Runs[0].Levels[0].Verdict.Valid || len(lines) != 1 || !strings.Contains(lines[0], "40 requests without a proxy timeline") {
		t.Errorf("lines %q verdict %v", lines, rec.Runs[0].Levels[0].Verdict)
	}
	for i := range atts {
		atts[i].Timeline = true
	}
	if lines := MarkClientBound(rec, atts); len(lines) != 1 || rec.Runs[0].Levels[0].Verdict.Valid {
		t.Errorf("with timelines: lines %q verdict %v", lines, rec.Runs[0].Levels[0].Verdict)
	}
}
