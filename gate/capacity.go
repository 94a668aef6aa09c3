package gate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

func init() { RegisterReader(readCapacityRecord) }

// CapacityMetric is the metric of a capacity result (hone replay
// --capacity, hone predict --capacity): the largest load that met the SLO
// at steady state, with the load above it that failed (Series.Upper).
const CapacityMetric = "capacity"

// CapacityRule states how capacities are compared, for the check's notes
// and help.
var CapacityRule = "a capacity is a bracket: each run met the SLO at its capacity and failed it at the next load it measured. " +
	"The candidate is worse only when every candidate run failed at a load that every baseline run met " +
	"(the highest candidate failing load <= the lowest baseline capacity); it then fails when its median capacity is lower by more than " +
	"the fail threshold and warns beyond the warn threshold. It improves when every candidate run met a load that every baseline run failed. " +
	"Overlapping brackets pass: the runs cannot tell the capacities apart at the search's precision, however far the medians moved. " +
	"A search that did not finish (interrupted, or ended by a probe the host distorted) is invalid and decides nothing"

// CapacityRun is a run's capacity result.
type CapacityRun struct {
	Mode  string // capacity.Open or capacity.Closed
	Unit  string
	Value float64
	// Upper is the lowest load measured to fail; 0 when none failed
	// (Value is a lower bound at the largest load searched).
	Upper     float64
	Precision float64
	// Invalid says why the result decides nothing, or "".
	Invalid string
}

// readCapacityRecord reads a capacity result (capacity.Record): one Run.
// Its fingerprint is the first probe's record's, with the load mode
// "capacity/MODE" and a workload without the probes' rates and request
// counts (the search chose those).
func readCapacityRecord(b []byte) ([]Run, bool, error) {
	var probe struct {
		Capacity json.RawMessage `json:"capacity"`
	}
	if err := json.Unmarshal(b, &probe); err != nil || len(probe.Capacity) == 0 || bytes.Equal(bytes.TrimSpace(probe.Capacity), []byte("null")) {
		return nil, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var rec capacity.Record
	if err := dec.Decode(&rec); err != nil {
		return nil, true, fmt.Errorf("not a valid capacity result: %w", err)
	}
	res := rec.Capacity
	switch {
	case rec.Kind == "":
		return nil, true, fmt.Errorf("kind: missing (want emulated, device, predicted or unverified)")
	case rec.Header == nil:
		return nil, true, fmt.Errorf("record: missing: this capacity result does not say what was measured (deployment, workload, SLO, procedure); " +
			"it was written by an older hone: measure it again to gate it")
	case res.Mode != capacity.Open && res.Mode != capacity.Closed:
		return nil, true, fmt.Errorf("capacity.mode: %q: want %s or %s", res.Mode, capacity.Open, capacity.Closed)
	case !(res.Precision > 0 && res.Precision < 1):
		return nil, true, fmt.Errorf("capacity.precision: %v: want a fraction in (0, 1)", res.Precision)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"capacity.value", res.Value}, {"capacity.upper", res.Upper}} {
		if err := checkPhysical(CapacityMetric, f.v, true); err != nil {
			return nil, true, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if res.Upper > 0 && res.Upper <= res.Value {
		return nil, true, fmt.Errorf("capacity.upper: %v is not above capacity.value %v: the failing load must lie above the passing one", res.Upper, res.Value)
	}
	h := rec.Header
	scenario := scenarioOf(h.Config)
	fp := recordFingerprint(h)
	fp["load"] = "capacity/" + res.Mode
	fp["workload"] = capacityWorkloadFingerprint(h.Workload)
	run := Run{Kind: string(rec.Kind), Scenario: scenario, Fingerprint: fp,
		Capacity: &CapacityRun{Mode: res.Mode, Unit: res.Unit, Value: res.Value, Upper: res.Upper, Precision: res.Precision}}
	if !res.Finished() {
		why := "the search did not finish"
		if n := len(res.Probes); n > 0 && res.Probes[n-1].Note != "" {
			why += ": " + res.Probes[n-1].Note
		}
		run.Capacity.Invalid = "unfinished: " + why
	}
	return []Run{run}, true, nil
}

// capacityWorkloadFingerprint is the workload as the gate compares
// capacities: workloadFingerprint without the request count and rates,
// which the search chose per probe.
func capacityWorkloadFingerprint(w schema.WorkloadRecord) string {
	return fmt.Sprintf("seed=%d input=%d uncached=%d output=%d", w.Seed, w.InputTokens, w.UncachedTokens, w.OutputTokens) + lengthRatio(w)
}

// capacitySeries is a capacity run's one series.
func (r Run) capacitySeries() []Series {
	c := r.Capacity
	s := Series{Scenario: r.Scenario, Metric: CapacityMetric, Direction: HigherIsBetter, Values: []float64{c.Value}, Upper: []float64{c.Upper}}
	if c.Invalid != "" {
		s.Invalid = []string{c.Invalid}
	}
	return []Series{s}
}

// Bracket is the evidence a capacity comparison decides on.
type Bracket struct {
	// BaseMet is the lowest baseline capacity: every baseline run met the
	// SLO at or above it. BaseFailed is the highest load a baseline run
	// failed at (0: some run failed nothing, its capacity a lower bound).
	BaseMet    float64 `json:"baseline_met"`
	BaseFailed float64 `json:"baseline_failed"`
	CandMet    float64 `json:"candidate_met"`
	CandFailed float64 `json:"candidate_failed"`
}

// compareCapacity compares two capacity series (valid runs only).
func compareCapacity(base, cand Series, cfg Config) Result {
	r := Result{Series: base, Candidate: cand.Values}
	r.BaseCenter, r.CandCenter = slo.Median(base.Values), slo.Median(cand.Values)
	r.Change = relChange(r.BaseCenter, r.CandCenter)
	r.Worse = r.CandCenter < r.BaseCenter
	r.Threshold, _ = cfg.thresholds(CapacityMetric)
	r.Bracket = &Bracket{BaseMet: minOf(base.Values), BaseFailed: highestFailing(base.Upper), CandMet: minOf(cand.Values), CandFailed: highestFailing(cand.Upper)}
	r.Test = fmt.Sprintf("brackets (%d vs %d runs)", len(base.Values), len(cand.Values))
	return r
}

// highestFailing is the highest failing load of runs' upper bounds, or 0
// when a run failed nothing (its bracket reaches infinity).
func highestFailing(upper []float64) float64 {
	hi := 0.0
	for _, u := range upper {
		if u == 0 {
			return 0
		}
		hi = math.Max(hi, u)
	}
	return hi
}

// decideCapacity applies CapacityRule.
func decideCapacity(r *Result, cfg Config) {
	fail, warn := cfg.thresholds(CapacityMetric)
	b := r.Bracket
	size := math.Abs(r.Change)
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
	below := b.CandFailed > 0 && b.CandFailed <= b.BaseMet // every candidate run failed where every baseline run met the SLO
	above := b.BaseFailed > 0 && b.CandMet >= b.BaseFailed
	switch {
	case below && size > fail:
		r.Verdict, r.Reason = Fail, fmt.Sprintf("lower by %s > %s threshold: every candidate run failed the SLO at or below %.4g, a load every baseline run met",
			pct(size), pct(fail), b.CandFailed)
	case below && warn > 0 && size > warn:
		r.Verdict, r.Reason = Warn, fmt.Sprintf("lower by %s > %s warn threshold: every candidate run failed the SLO at or below %.4g, a load every baseline run met",
			pct(size), pct(warn), b.CandFailed)
	case below:
		r.Verdict, r.Reason = Pass, fmt.Sprintf("lower by %s, measured apart (every candidate run failed at or below %.4g) but within the %s threshold",
			pct(size), b.CandFailed, pct(fail))
	case above && size > fail:
		r.Verdict, r.Reason = Improved, fmt.Sprintf("higher by %s: every candidate run met the SLO at or above %.4g, a load every baseline run failed", pct(size), b.CandMet)
	case above:
		r.Verdict, r.Reason = Pass, fmt.Sprintf("higher by %s, measured apart but within the %s threshold", pct(size), pct(fail))
	default:
		r.Verdict, r.Reason = Pass, fmt.Sprintf("change %s: the brackets overlap (baseline met %s, candidate met %s), so the runs cannot tell the capacities apart at the search's precision",
			pct(r.Change), bracketText(b.BaseMet, b.BaseFailed), bracketText(b.CandMet, b.CandFailed))
	}
}

func bracketText(met, failed float64) string {
	if failed == 0 {
		return fmt.Sprintf(">= %.4g, nothing failed", met)
	}
	return fmt.Sprintf("%.4g, failed %.4g", met, failed)
}
