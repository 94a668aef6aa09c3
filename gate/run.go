package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// Run is one run of one scenario: what the gate reads of a run record.
type Run struct {
	Kind        string
	Scenario    string
	Fingerprint Fingerprint
	// Objective is the record's, computed from valid levels only.
	Objective float64
	Levels    []LevelRun
	// Bounds are what the run's figures can physically reach.
	Bounds Bounds
	// Capacity is set for a capacity result (no levels): its one series
	// is CapacityMetric.
	Capacity *CapacityRun
}

// LevelRun is one load level of one run.
type LevelRun struct {
	OfferedQPS float64
	Passed     bool
	Failed     int                // failed + timed-out requests
	Metrics    map[string]float64 // by metric name; see Metrics
	// Invalid holds the record's reasons ("code: detail") why the level's
	// figures may not decide anything; empty when the level is valid. The
	// zero value is valid because simulation records have no invalid
	// levels.
	Invalid []string
	// Samples holds, per tail metric (Metric.Percentile > 0), the
	// per-request values that metric is a percentile of: every measured
	// request's TTFT, TPOT of those of two or more tokens, in ms. nil
	// when the record has no per-request detail (a simulation record);
	// the gate then compares that tail per run.
	Samples map[string][]float64
}

// Valid reports whether the level's figures may be compared.
func (l LevelRun) Valid() bool { return len(l.Invalid) == 0 }

// Metric describes a gated metric: its direction and default thresholds as
// relative changes (0.05 = 5%). Warn 0 means no warn band.
type Metric struct {
	Direction Direction
	Fail      float64
	Warn      float64
	Hard      bool // judged by a hard rule, not statistics
	// Percentile, when set, makes the metric a tail: that percentile of a
	// level's per-request values, compared on the values pooled over the
	// runs valid at the level when both sides carry them (see TailRule).
	Percentile float64
}

// Metrics are the metrics the gate knows, with the defaults: throughput −5%
// fails and −3% warns, p99 latency +10% fails, cost +5% fails.
var Metrics = map[string]Metric{
	"objective":               {Direction: HigherIsBetter, Fail: 0.05, Warn: 0.03},
	"effective_qps":           {Direction: HigherIsBetter, Fail: 0.05, Warn: 0.03},
	"p50_ttft_ms":             {Direction: LowerIsBetter, Fail: 0.10, Warn: 0.05},
	"p99_ttft_ms":             {Direction: LowerIsBetter, Fail: 0.10, Warn: 0.05, Percentile: 99},
	"p50_tpot_ms":             {Direction: LowerIsBetter, Fail: 0.10, Warn: 0.05},
	"p99_tpot_ms":             {Direction: LowerIsBetter, Fail: 0.10, Warn: 0.05, Percentile: 99},
	"gpu_seconds_per_request": {Direction: LowerIsBetter, Fail: 0.05, Warn: 0.03},
	"cache_hit_rate":          {Direction: HigherIsBetter, Fail: 0.05, Warn: 0.02},
	"failed_requests":         {Direction: LowerIsBetter, Hard: true},
	"passed":                  {Direction: HigherIsBetter, Hard: true},
	"objective_level_qps":     {Direction: HigherIsBetter, Hard: true},
	CapacityMetric:            {Direction: HigherIsBetter, Fail: 0.05, Warn: 0.03},
	"goodput_fraction":        {Direction: HigherIsBetter, Fail: 0.05, Warn: 0.03},
	"goodput_qps":             {Direction: HigherIsBetter, Fail: 0.05, Warn: 0.03},
}

// Series flattens a run into one-value series: scenario-wide metrics at
// offered QPS 0, then each level's metrics, pass flag and failure count.
// A level's series carry its invalid reasons; the scenario-wide series are
// invalid when any level is, since the objective then stands on part of
// the scan only.
func (r Run) Series() []Series {
	if r.Capacity != nil {
		return r.capacitySeries()
	}
	one := func(q float64, m string, v float64, invalid string) Series {
		s := Series{Scenario: r.Scenario, OfferedQPS: q, Metric: m, Direction: direction(m), Values: []float64{v}}
		if invalid != "" {
			s.Invalid = []string{invalid}
		}
		return s
	}
	top := 0.0
	var whole []string
	for _, l := range r.Levels {
		if l.Passed {
			top = max(top, l.OfferedQPS)
		}
		if !l.Valid() {
			whole = append(whole, fmtQPS(l.OfferedQPS)+" req/s invalid ("+strings.Join(l.Invalid, "; ")+")")
		}
	}
	wholeInvalid := strings.Join(whole, "; ")
	out := []Series{one(0, "objective", r.Objective, wholeInvalid), one(0, "objective_level_qps", top, wholeInvalid)}
	for _, l := range r.Levels {
		inv := strings.Join(l.Invalid, "; ")
		names := make([]string, 0, len(l.Metrics))
		for m := range l.Metrics {
			names = append(names, m)
		}
		sort.Strings(names)
		for _, m := range names {
			s := one(l.OfferedQPS, m, l.Metrics[m], inv)
			if v, ok := l.Samples[m]; ok && Metrics[m].Percentile > 0 {
				s.Samples = [][]float64{roundedSorted(v)}
			}
			out = append(out, s)
		}
		out = append(out, one(l.OfferedQPS, "passed", b2f(l.Passed), inv), one(l.OfferedQPS, "failed_requests", float64(l.Failed), inv))
	}
	return out
}

// check refuses a run holding a value no measurement can produce (see
// checkPhysical), naming the series.
func (r Run) check() error {
	for _, s := range r.Series() {
		for j, v := range s.Values {
			if err := checkPhysical(s.Metric, v, s.invalidAt(j) == ""); err != nil {
				return fmt.Errorf("%s: %w", s.Key(), err)
			}
		}
		if err := s.checkSamples(); err != nil {
			return fmt.Errorf("%s: %w", s.Key(), err)
		}
		if err := s.checkUpper(); err != nil {
			return fmt.Errorf("%s: %w", s.Key(), err)
		}
	}
	return nil
}

func direction(metric string) Direction {
	if m, ok := Metrics[metric]; ok {
		return m.Direction
	}
	if strings.Contains(metric, "qps") || strings.Contains(metric, "hit") {
		return HigherIsBetter
	}
	return LowerIsBetter
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ReadRuns reads the runs in a record file. A replay run record is read
// streaming (replay.ReadRecord: a 100,000-request trace's record reads in
// bounded memory); any other document whole, by ParseRuns: hone's
// simulation records (`hone sim --output json`, kind simulation_only) and
// the formats registered with RegisterReader (capacity results).
func ReadRuns(path string) ([]Run, error) {
	rec, err := replay.ReadRecordSummary(path) // plain or gzip-compressed; the gate reads no chunks
	if err == nil {
		runs, err := runsOfRecord(rec)
		if err == nil {
			err = checkRuns(runs)
		}
		if err != nil {
			return nil, fmt.Errorf("record %s: %w", path, err)
		}
		return runs, nil
	}
	if !errors.Is(err, replay.ErrNotRecord) {
		return nil, err
	}
	b, err := replay.ReadRecordFile(path)
	if err != nil {
		return nil, fmt.Errorf("read record: %w", err)
	}
	runs, err := ParseRuns(b)
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", path, err)
	}
	return runs, nil
}

// A RecordReader turns one record format into runs; ok is false when the
// document is not of its format.
type RecordReader func(doc []byte) (runs []Run, ok bool, err error)

var readers = []RecordReader{readSimRecord}

// RegisterReader adds a record format. Packages that own a record format
// (replay) register theirs, so gate does not import them.
func RegisterReader(r RecordReader) { readers = append(readers, r) }

// ParseRuns decodes a record document with the first reader that knows it.
func ParseRuns(b []byte) ([]Run, error) {
	if !json.Valid(bytes.TrimSpace(b)) {
		return nil, fmt.Errorf("not a valid JSON document (truncated or corrupt?)")
	}
	for _, r := range readers {
		runs, ok, err := r(b)
		if !ok {
			continue
		}
		if err != nil {
			return nil, err
		}
		return runs, checkRuns(runs)
	}
	return nil, fmt.Errorf("not a record hone knows: want `hone sim --output json` or `hone replay` output")
}

// checkRuns refuses a record without runs, or with a value no
// measurement can produce.
func checkRuns(runs []Run) error {
	if len(runs) == 0 {
		return fmt.Errorf("no runs in the record")
	}
	for i, run := range runs {
		if err := run.check(); err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
	}
	return nil
}

// simRecord is `hone sim --output json`.
type simRecord struct {
	Kind   string         `json:"kind"`
	Config map[string]any `json:"config"`
	Levels []struct {
		OfferedQPS   *float64 `json:"offered_qps"`
		P99TTFTMs    *float64 `json:"p99_ttft_ms"`
		P99TPOTMs    *float64 `json:"p99_tpot_ms"`
		EffectiveQPS *float64 `json:"effective_qps"`
		Passed       *bool    `json:"passed"`
	} `json:"levels"`
	Objective *float64 `json:"objective"`
}

func readSimRecord(b []byte) ([]Run, bool, error) {
	var r simRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Kind != string(schema.KindSimulationOnly) {
		return nil, false, nil
	}
	if r.Objective == nil {
		return nil, true, fmt.Errorf("objective: missing")
	}
	cfg := r.Config
	scenario := fmt.Sprintf("%v/prefix-cache=%v", cfg["mode"], cfg["prefix_cache"])
	fp := Fingerprint{"kind": r.Kind, "engine": "sim",
		"workload": fmt.Sprintf("requests=%v input=%v output=%v qps=%v", cfg["requests"], cfg["input_tokens"], cfg["output_tokens"], cfg["qps"]),
		"slo":      fmt.Sprintf("ttft<=%vms tpot<=%vms", cfg["ttft_slo_ms"], cfg["tpot_slo_ms"])}
	run := Run{Kind: r.Kind, Scenario: scenario, Fingerprint: fp, Objective: *r.Objective}
	for i, l := range r.Levels {
		if l.OfferedQPS == nil || l.P99TTFTMs == nil || l.P99TPOTMs == nil || l.EffectiveQPS == nil || l.Passed == nil {
			return nil, true, fmt.Errorf("levels[%d]: want offered_qps, p99_ttft_ms, p99_tpot_ms, effective_qps and passed", i)
		}
		run.Levels = append(run.Levels, LevelRun{OfferedQPS: *l.OfferedQPS, Passed: *l.Passed, Metrics: map[string]float64{
			"p99_ttft_ms": *l.P99TTFTMs, "p99_tpot_ms": *l.P99TPOTMs, "effective_qps": *l.EffectiveQPS}})
	}
	return []Run{run}, true, nil
}

func fmtQPS(q float64) string { return strconv.FormatFloat(q, 'g', -1, 64) }
