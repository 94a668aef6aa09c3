package gate

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// capRecord is a capacity result as hone replay --capacity writes it, with
// a minimal header.
func capRecord(kind schema.Kind, value, upper float64, outcome string) capacity.Record {
	w := replay.DefaultWorkload()
	h := &schema.Record{Kind: kind, Backend: "emulator", Model: schema.Model{ID: "m"}, GPUs: 1, TimeScale: 0.25,
		SLO: slo.SLO{TTFTMillis: 2000, TPOTMillis: 12}, Workload: schema.WorkloadRecord{Workload: w, Load: schema.LoadOpen},
		Cache: schema.CacheState{Procedure: schema.CacheReset}, Config: map[string]any{"scenario": "emu"}}
	return capacity.Record{Kind: kind, Source: "endpoint x", Header: capacity.HeaderOf(h), Capacity: &capacity.Result{
		Mode: capacity.Open, Unit: capacity.UnitRate, Value: value, Upper: upper, Precision: 0.1, Bounded: outcome == capacity.OutcomeBounded,
		Outcome: outcome, SLO: h.SLO, Rule: capacity.Rule}}
}

func capRuns(t *testing.T, recs ...capacity.Record) []Run {
	t.Helper()
	var out []Run
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := ParseRuns(b)
		if err != nil {
			t.Fatalf("ParseRuns: %v", err)
		}
		out = append(out, runs...)
	}
	return out
}

func bounded(v, u float64) capacity.Record {
	return capRecord(schema.KindEmulated, v, u, capacity.OutcomeBounded)
}

// TestCapacityBrackets checks CapacityRule on hand-made results: what
// decides is whether the brackets are apart, then how far the medians
// moved.
func TestCapacityBrackets(t *testing.T) {
	base := []capacity.Record{bounded(14.67, 15.51), bounded(14.67, 16.07), bounded(14.2, 15.51)}
	cases := []struct {
		name   string
		cand   []capacity.Record
		want   Verdict
		change float64 // candidate median / baseline median − 1
		reason string
	}{
		{"same brackets", []capacity.Record{bounded(14.67, 15.51), bounded(14.2, 15.51), bounded(14.67, 16.07)}, Pass, 0, "overlap"},
		// Every candidate run failed at or below 14.2, which every
		// baseline run met: apart, and 12.9% lower.
		{"lower and apart", []capacity.Record{bounded(12.78, 13.9), bounded(12.78, 14.2), bounded(13.1, 14.0)}, Fail, 12.78/14.67 - 1, "every candidate run failed"},
		// Apart but only 3.4% lower: beyond the 3% warn, within the 5% fail.
		{"lower within fail", []capacity.Record{bounded(14.17, 14.2), bounded(14.17, 14.2), bounded(14.17, 14.19)}, Warn, 14.17/14.67 - 1, "warn threshold"},
		// One candidate run far lower, the others overlapping: the runs
		// cannot tell the deployments apart.
		{"one low run", []capacity.Record{bounded(10, 11), bounded(14.67, 15.51), bounded(14.67, 15.51)}, Pass, 0, "overlap"},
		{"higher and apart", []capacity.Record{bounded(17, 18.5), bounded(17.5, 19), bounded(16.1, 17)}, Improved, 17.0/14.67 - 1, "every candidate run met"},
		// A lower bound at the largest load searched failed nothing.
		{"candidate lower bound", []capacity.Record{capRecord(schema.KindEmulated, 32, 0, capacity.OutcomeAtMax), bounded(17, 18), bounded(17, 18)}, Improved, 17.0/14.67 - 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bl, err := NewBaseline("cap", capRuns(t, base...), nil)
			if err != nil {
				t.Fatal(err)
			}
			rep := Check(bl, capRuns(t, tc.cand...), Config{})
			if len(rep.Results) != 1 {
				t.Fatalf("%d results, want the one capacity: %+v", len(rep.Results), rep)
			}
			r := rep.Results[0]
			if r.Verdict != tc.want || rep.Verdict != tc.want || r.Series.Metric != CapacityMetric {
				t.Fatalf("verdict %s (check %s), want %s: %s", r.Verdict, rep.Verdict, tc.want, r.Reason)
			}
			if d := r.Change - tc.change; d > 1e-9 || d < -1e-9 {
				t.Errorf("change %v, want %v", r.Change, tc.change)
			}
			if !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("reason %q, want it to say %q", r.Reason, tc.reason)
			}
			if r.Bracket == nil || r.Bracket.BaseMet != 14.2 || r.Bracket.BaseFailed != 16.07 {
				t.Errorf("bracket %+v, want baseline met 14.2, failed 16.07", r.Bracket)
			}
			found := false
			for _, n := range rep.Notes {
				found = found || strings.HasPrefix(n, "capacity: ")
			}
			if !found {
				t.Errorf("notes %q lack the capacity rule", rep.Notes)
			}
		})
	}
}

// TestCapacityUnfinished: a search the host cut short decides nothing; a
// candidate with no finished search is unusable (exit 2).
func TestCapacityUnfinished(t *testing.T) {
	bl, err := NewBaseline("cap", capRuns(t, bounded(14.67, 15.51), bounded(14.67, 15.51)), nil)
	if err != nil {
		t.Fatal(err)
	}
	cut := capRecord(schema.KindEmulated, 8, 16, capacity.OutcomeUnfinished)
	cut.Capacity.Probes = []capacity.Probe{{Load: 11.3, Note: "invalid: client_bound: ..."}}
	rep := Check(bl, capRuns(t, cut, cut), Config{})
	if rep.Verdict != Unusable || rep.ExitCode() != 2 {
		t.Fatalf("verdict %s exit %d, want unusable, 2: %+v", rep.Verdict, rep.ExitCode(), rep.Results)
	}
	if !strings.Contains(rep.Results[0].Reason, "the search did not finish: invalid: client_bound") {
		t.Errorf("reason %q does not say why", rep.Results[0].Reason)
	}
	// One of three unfinished: compared on the two that finished.
	rep = Check(bl, capRuns(t, cut, bounded(12, 13), bounded(12, 13)), Config{})
	if rep.Verdict != Fail || !strings.Contains(rep.Results[0].Excluded, "1 of 3 runs invalid") {
		t.Fatalf("verdict %s, excluded %q: want fail on the finished runs", rep.Verdict, rep.Results[0].Excluded)
	}
}

// TestCapacityIncomparable: a capacity result is never compared with a
// level scan, nor with one of another workload or SLO.
func TestCapacityIncomparable(t *testing.T) {
	bl, err := NewBaseline("cap", capRuns(t, bounded(14.67, 15.51), bounded(14.67, 15.51)), nil)
	if err != nil {
		t.Fatal(err)
	}
	other := bounded(14.67, 15.51)
	other.Header.Workload.OutputTokens = 64
	other.Header.SLO.TPOTMillis = 20
	rep := Check(bl, capRuns(t, other), Config{})
	if rep.Verdict != Incomparable || rep.ExitCode() != 2 {
		t.Fatalf("verdict %s, want incomparable", rep.Verdict)
	}
	got := strings.Join(rep.Incomparable, "\n")
	for _, want := range []string{"workload", "output=64", "slo"} {
		if !strings.Contains(got, want) {
			t.Errorf("incomparable %q does not name %q", got, want)
		}
	}
	// A level scan against the capacity baseline: another load mode.
	lv := Run{Kind: string(schema.KindEmulated), Scenario: "emu", Fingerprint: bl.Fingerprint.clone(), Objective: 10,
		Levels: []LevelRun{{OfferedQPS: 4, Passed: true, Metrics: map[string]float64{"p50_ttft_ms": 30}}}}
	lv.Fingerprint["load"] = schema.LoadOpen
	rep = Check(bl, []Run{lv}, Config{})
	if rep.Verdict != Incomparable || !strings.Contains(strings.Join(rep.Incomparable, "\n"), "load") {
		t.Fatalf("a level scan against a capacity baseline: %s %q", rep.Verdict, rep.Incomparable)
	}
}

func (fp Fingerprint) clone() Fingerprint {
	out := Fingerprint{}
	for k, v := range fp {
		out[k] = v
	}
	return out
}

// TestCapacityBadInput: what a capacity result cannot be is refused,
// naming the field.
func TestCapacityBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(r *capacity.Record)
		want string
	}{
		{"upper below value", func(r *capacity.Record) { r.Capacity.Upper = 14 }, "capacity.upper: 14 is not above capacity.value"},
		{"negative", func(r *capacity.Record) { r.Capacity.Value = -1 }, "capacity.value"},
		{"no header", func(r *capacity.Record) { r.Header = nil }, "record: missing"},
		{"mode", func(r *capacity.Record) { r.Capacity.Mode = "burst" }, "capacity.mode"},
		{"precision", func(r *capacity.Record) { r.Capacity.Precision = 0 }, "capacity.precision"},
		{"kind", func(r *capacity.Record) { r.Kind = "" }, "kind: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bounded(14.67, 15.51)
			tc.edit(&r)
			b, _ := json.Marshal(r)
			if _, err := ParseRuns(b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	bl := &Baseline{SchemaVersion: SchemaVersion, Kind: "emulated", Series: []Series{{Scenario: "s", Metric: CapacityMetric, Direction: HigherIsBetter,
		Values: []float64{10, 11}, Upper: []float64{12}}}}
	b, _ := json.Marshal(bl)
	if _, err := ParseBaseline(b); err == nil || !strings.Contains(err.Error(), "upper: 1 entries for 2 values") {
		t.Fatalf("a baseline with an upper per value missing: %v", err)
	}
}

// TestCapacityBaselineRoundTrip: the failing loads survive a baseline's
// file, update and trimming to the newest runs.
func TestCapacityBaselineRoundTrip(t *testing.T) {
	bl, err := NewBaseline("cap", capRuns(t, bounded(14.67, 15.51), bounded(14.2, 16.07)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bl.Update(capRuns(t, bounded(13.9, 14.67)), nil, 2); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "b.json")
	if err := bl.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadBaseline(path)
	if err != nil {
		t.Fatal(err)
	}
	s := back.Series[0]
	if len(back.Series) != 1 || s.Metric != CapacityMetric || len(s.Values) != 2 || s.Values[0] != 14.2 || s.Values[1] != 13.9 ||
		len(s.Upper) != 2 || s.Upper[0] != 16.07 || s.Upper[1] != 14.67 {
		t.Fatalf("series after update and trim: %+v", back.Series)
	}
}

// TestCapacityGatePredicted gates predicted capacities end to end, as
// `hone predict --capacity --out` writes them: the same deployment passes
// against itself, and one whose every step costs 25% more fails. The
// predicted figures are the emulator's model in virtual time
// (deterministic); what this checks is the reading and the rule, not a
// GPU.
func TestCapacityGatePredicted(t *testing.T) {
	spec, err := deploy.LoadSpec("../examples/emulator-l4-colocated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	target := slo.SLO{TTFTMillis: 2000, TPOTMillis: 12}
	w := replay.DefaultWorkload()
	w.Requests = 48
	prof, err := emulator.LookupProfile("qwen2.5-coder-0.5b-l4")
	if err != nil {
		t.Fatal(err)
	}
	slow := *prof
	slow.MFU, slow.MBU = slow.MFU/1.25, slow.MBU/1.25
	slow.StepOverheadMs, slow.LaunchUs, slow.GraphLaunchMs = slow.StepOverheadMs*1.25, slow.LaunchUs*1.25, slow.GraphLaunchMs*1.25
	measure := func(p *emulator.Profile, start float64) capacity.Record {
		rec, err := predict.CapacityRecord(context.Background(), spec, predict.Options{Profile: p, Workload: w, SLO: target},
			capacity.Options{SLO: target, Precision: 0.05, Start: start})
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Capacity.Bounded || rec.Header == nil || rec.Header.Workload.Requests != 0 || len(rec.Header.Workload.QPS) != 0 {
			t.Fatalf("capacity record: %+v, header %+v", rec.Capacity, rec.Header)
		}
		return *rec
	}
	base := measure(prof, 8)
	// Searches started elsewhere bracket the same capacity on other grids.
	bl, err := NewBaseline("pred", capRuns(t, base, measure(prof, 20)), nil)
	if err != nil {
		t.Fatal(err)
	}
	same := Check(bl, capRuns(t, measure(prof, 11), measure(prof, 5)), Config{})
	slower := Check(bl, capRuns(t, measure(&slow, 8), measure(&slow, 20)), Config{})
	t.Logf("baseline %.4g–%.4g req/s; same: %s (%s); 25%% slower steps: %s (%s)", bl.Series[0].Values[0], bl.Series[0].Upper[0],
		same.Verdict, same.Results[0].Reason, slower.Verdict, slower.Results[0].Reason)
	if same.Verdict != Pass || same.ExitCode() != 0 {
		t.Errorf("the same deployment: %s, want pass", same.Verdict)
	}
	if slower.Verdict != Fail || slower.ExitCode() != 1 || !(slower.Results[0].Change < -0.05) {
		t.Errorf("25%% slower steps: %s, change %+.3f, want fail beyond −5%%", slower.Verdict, slower.Results[0].Change)
	}
}
