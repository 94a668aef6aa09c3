package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hone-llm/hone/replay"

	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/schema"
)

// SchemaVersion is the version of the baseline file format. Version 3
// added the tail metrics' per-request values (Series.Samples); version 2
// files are read as they are, their tails compared per run (the check says
// so). Version 2 added each value's validity (Series.Invalid), the
// plausibility bounds and the cache procedure in the fingerprint; version 1
// files are read only for simulation_only baselines, which have neither
// invalid levels nor a cache procedure.
const SchemaVersion = 3

// Direction says which way a metric improves.
type Direction string

const (
	HigherIsBetter Direction = "higher"
	LowerIsBetter  Direction = "lower"
)

// Series is one metric of one scenario at one load level, across runs.
// OfferedQPS is 0 for scenario-wide metrics (objective, objective level).
type Series struct {
	Scenario   string    `json:"scenario"`
	OfferedQPS float64   `json:"offered_qps"`
	Metric     string    `json:"metric"`
	Direction  Direction `json:"direction"`
	Values     []float64 `json:"values"`
	// Invalid runs parallel to Values: why that run's value may not decide
	// anything ("code: detail" from the record's level verdict), "" for a
	// valid value. Omitted when every value is valid.
	Invalid []string `json:"invalid,omitempty"`
	// Samples runs parallel to Values for a tail metric (Metric.Percentile):
	// each run's per-request values at the level, sorted, in ms rounded to
	// 0.01 — what the gate pools across runs (see TailRule). An empty entry
	// is a run without per-request detail. Omitted for other metrics and
	// when no run has any.
	Samples [][]float64 `json:"samples,omitempty"`
	// Upper runs parallel to Values for CapacityMetric: each run's lowest
	// load measured to fail the SLO, 0 when none failed (the value is a
	// lower bound). Omitted for other metrics.
	Upper []float64 `json:"upper,omitempty"`
}

// checkUpper refuses failing loads the gate cannot pair with their
// capacities: on another metric, not one per value, or not above the
// value they bound.
func (s Series) checkUpper() error {
	switch {
	case s.Metric != CapacityMetric && s.Upper != nil:
		return fmt.Errorf("upper: only %s carries failing loads", CapacityMetric)
	case s.Metric == CapacityMetric && len(s.Upper) != len(s.Values):
		return fmt.Errorf("upper: %d entries for %d values (want each run's lowest failing load, 0 for none)", len(s.Upper), len(s.Values))
	}
	for i, u := range s.Upper {
		if err := checkPhysical(s.Metric, u, true); err != nil {
			return fmt.Errorf("upper[%d]: %w", i, err)
		}
		if u > 0 && u <= s.Values[i] {
			return fmt.Errorf("upper[%d]: %v is not above values[%d] %v: a failing load lies above the capacity it bounds", i, u, i, s.Values[i])
		}
	}
	return nil
}

// samplesAt is run i's per-request values, or nil.
func (s Series) samplesAt(i int) []float64 {
	if i < len(s.Samples) {
		return s.Samples[i]
	}
	return nil
}

// roundedSorted is v rounded to 0.01 (ms: far below any latency the gate
// can tell apart, and it keeps a baseline file small) and sorted, in a
// new slice.
func roundedSorted(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Round(x*100) / 100
	}
	sort.Float64s(out)
	return out
}

// checkSamples refuses per-request values the gate cannot pool: on a
// metric that is not a tail, not one entry per run, unsorted, or not a
// finite non-negative number.
func (s Series) checkSamples() error {
	if len(s.Samples) == 0 {
		return nil
	}
	if Metrics[s.Metric].Percentile == 0 {
		return fmt.Errorf("samples: %s is not a tail metric; only %s carry per-request values", s.Metric, strings.Join(tailMetrics(), " and "))
	}
	if len(s.Samples) != len(s.Values) {
		return fmt.Errorf("samples: %d entries for %d values (want one per value, or none)", len(s.Samples), len(s.Values))
	}
	for i, v := range s.Samples {
		for j, x := range v {
			if err := checkValue(x); err != nil || x < 0 {
				return fmt.Errorf("samples[%d][%d]: %v: want a latency >= 0 ms", i, j, x)
			}
			if j > 0 && x < v[j-1] {
				return fmt.Errorf("samples[%d][%d]: %v after %v: want each run's values sorted ascending", i, j, x, v[j-1])
			}
		}
	}
	return nil
}

// tailMetrics are the metrics that are percentiles of per-request values.
func tailMetrics() []string {
	var out []string
	for name, m := range Metrics {
		if m.Percentile > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// invalidAt is the reason value i is invalid, or "".
func (s Series) invalidAt(i int) string {
	if i < len(s.Invalid) {
		return s.Invalid[i]
	}
	return ""
}

// merge appends o's values (and their validity and samples) to s.
func (s *Series) merge(o Series) {
	if s.Invalid != nil || o.Invalid != nil {
		inv := make([]string, 0, len(s.Values)+len(o.Values))
		for i := range s.Values {
			inv = append(inv, s.invalidAt(i))
		}
		for i := range o.Values {
			inv = append(inv, o.invalidAt(i))
		}
		s.Invalid = inv
	}
	if s.Samples != nil || o.Samples != nil {
		smp := make([][]float64, 0, len(s.Values)+len(o.Values))
		for i := range s.Values {
			smp = append(smp, nonNil(s.samplesAt(i)))
		}
		for i := range o.Values {
			smp = append(smp, nonNil(o.samplesAt(i)))
		}
		s.Samples = smp
	}
	s.Values = append(s.Values, o.Values...)
	s.Upper = append(s.Upper, o.Upper...)
}

// nonNil is v, or an empty slice (written [] rather than null).
func nonNil(v []float64) []float64 {
	if v == nil {
		return []float64{}
	}
	return v
}

// keepLast keeps the newest n values.
func (s *Series) keepLast(n int) {
	if len(s.Values) <= n {
		return
	}
	cut := len(s.Values) - n
	s.Values = append([]float64(nil), s.Values[cut:]...)
	if s.Invalid != nil {
		s.Invalid = append([]string(nil), s.Invalid[cut:]...)
		if strings.Join(s.Invalid, "") == "" {
			s.Invalid = nil
		}
	}
	if s.Samples != nil {
		s.Samples = append([][]float64(nil), s.Samples[cut:]...)
	}
	if s.Upper != nil {
		s.Upper = append([]float64(nil), s.Upper[cut:]...)
	}
}

// valid returns the series restricted to its valid values (and their
// samples).
func (s Series) valid() Series {
	v := s
	v.Values, v.Invalid, v.Samples, v.Upper = nil, nil, nil, nil
	for i, x := range s.Values {
		if s.invalidAt(i) == "" {
			v.Values = append(v.Values, x)
			if s.Samples != nil {
				v.Samples = append(v.Samples, nonNil(s.samplesAt(i)))
			}
			if s.Upper != nil {
				v.Upper = append(v.Upper, s.Upper[i])
			}
		}
	}
	return v
}

// Key identifies a series within a baseline.
func (s Series) Key() string {
	return s.Scenario + "@" + strconv.FormatFloat(s.OfferedQPS, 'g', -1, 64) + "/" + s.Metric
}

// Fingerprint describes the environment a run was measured in. Keys are
// free-form; DefaultCompared lists those that must match for a comparison.
type Fingerprint map[string]string

// Baseline is a stored set of runs to compare candidates against.
type Baseline struct {
	SchemaVersion int         `json:"schema_version"`
	Name          string      `json:"name"`
	Created       time.Time   `json:"created"`
	Kind          string      `json:"kind"` // simulation_only | emulated | device | unverified
	Fingerprint   Fingerprint `json:"fingerprint"`
	Runs          int         `json:"runs"`
	// Bounds are what the baseline runs' figures can physically reach,
	// for the plausibility check.
	Bounds Bounds   `json:"bounds"`
	Series []Series `json:"series"`
}

// ReadBaseline reads and validates a baseline file. Every problem is an
// error that names the file and the field; nothing panics on bad input.
func ReadBaseline(path string) (*Baseline, error) {
	b, err := replay.ReadRecordFile(path) // bounded; plain or gzip-compressed
	if err != nil {
		return nil, fmt.Errorf("read baseline: %w", err)
	}
	bl, err := ParseBaseline(b)
	if err != nil {
		return nil, fmt.Errorf("baseline %s: %w", path, err)
	}
	return bl, nil
}

// ParseBaseline decodes and validates a baseline.
func ParseBaseline(b []byte) (*Baseline, error) {
	var bl Baseline
	if err := json.Unmarshal(b, &bl); err != nil {
		return nil, fmt.Errorf("not a valid baseline JSON document (truncated or corrupt?): %w", err)
	}
	switch {
	case bl.SchemaVersion == 1 && bl.Kind == string(schema.KindSimulationOnly):
		bl.SchemaVersion = SchemaVersion // nothing to add: the simulator has no invalid levels and no cache procedure
	case bl.SchemaVersion == 1:
		return nil, fmt.Errorf("schema_version 1: a %s baseline from before level verdicts and the cache procedure were recorded; "+
			"recreate it from schema-2 run records (hone gate baseline create RECORD... --out FILE)", bl.Kind)
	case bl.SchemaVersion == 2:
		// Read as it is: without samples its tails are compared per run
		// (the check says so), and a file it is written back to is a
		// version-3 one whose older runs have no samples.
		bl.SchemaVersion = SchemaVersion
	case bl.SchemaVersion != SchemaVersion:
		return nil, fmt.Errorf("schema_version %d: want 2 or %d", bl.SchemaVersion, SchemaVersion)
	}
	if bl.Kind == "" {
		return nil, errors.New("kind: missing (want simulation_only, emulated, device or unverified)")
	}
	if len(bl.Series) == 0 {
		return nil, errors.New("series: empty; a baseline needs at least one metric")
	}
	seen := map[string]bool{}
	for i, s := range bl.Series {
		where := fmt.Sprintf("series[%d] (%s)", i, s.Key())
		switch {
		case s.Scenario == "" || s.Metric == "":
			return nil, fmt.Errorf("%s: scenario and metric are required", where)
		case s.Direction != HigherIsBetter && s.Direction != LowerIsBetter:
			return nil, fmt.Errorf("%s: direction %q: want higher or lower", where, s.Direction)
		case len(s.Values) == 0:
			return nil, fmt.Errorf("%s: values: empty", where)
		case seen[s.Key()]:
			return nil, fmt.Errorf("%s: duplicate series", where)
		case len(s.Invalid) != 0 && len(s.Invalid) != len(s.Values):
			return nil, fmt.Errorf("%s: invalid: %d entries for %d values (want one per value, or none)", where, len(s.Invalid), len(s.Values))
		}
		for j, v := range s.Values {
			if err := checkPhysical(s.Metric, v, s.invalidAt(j) == ""); err != nil {
				return nil, fmt.Errorf("%s: values[%d]: %w", where, j, err)
			}
		}
		if err := s.checkSamples(); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if err := s.checkUpper(); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		seen[s.Key()] = true
	}
	return &bl, nil
}

// MaxMagnitude bounds every value the gate compares: no latency (ms), rate
// (req/s), cost (GPU-s) or count hone measures comes near it, and below it
// the statistics (means, squares, ratios) cannot overflow to Inf or NaN.
const MaxMagnitude = 1e15

// checkValue refuses a value the gate cannot compute with: not a number,
// infinite, or beyond MaxMagnitude.
func checkValue(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > MaxMagnitude {
		return fmt.Errorf("%v: want a finite number of magnitude at most %g", v, MaxMagnitude)
	}
	return nil
}

// checkPhysical refuses a value no measurement can produce: anything
// checkValue refuses, a negative latency, rate, cost or count, a cache hit
// rate outside [0, 1], and — at a valid level — a latency of 0 ms. A 0
// TPOT is what a record holds when no request produced two tokens: TPOT
// was not measured, and read as a number it would pass CI as the fastest
// deployment ever seen. valid is false for a value whose level the record
// itself calls invalid: such a value decides nothing, and a level whose
// every request failed has no latency to report.
func checkPhysical(metric string, v float64, valid bool) error {
	if err := checkValue(v); err != nil {
		return err
	}
	switch {
	case strings.HasSuffix(metric, "_ms") && v < 0:
		return fmt.Errorf("%v: a latency cannot be negative (want > 0 ms)", v)
	case strings.HasSuffix(metric, "_ms") && v == 0 && valid:
		why := "no latency is 0 ms"
		if strings.Contains(metric, "tpot") {
			why = "no request produced two tokens, so TPOT was not measured (a deployment that returns one token per request has no TPOT to gate)"
		}
		return fmt.Errorf("0 at a valid level: %s; want > 0 ms", why)
	case (metric == "cache_hit_rate" || metric == "goodput_fraction") && (v < 0 || v > 1):
		return fmt.Errorf("%v: want a fraction in [0, 1]", v)
	case v < 0:
		return fmt.Errorf("%v: a rate, cost or count cannot be negative", v)
	}
	return nil
}

// Write stores the baseline atomically: a temporary file in the same
// directory, fsynced, then renamed over path. Arrays of numbers are
// written on one line each (a run's samples are hundreds of values).
func (bl *Baseline) Write(path string) error {
	b, err := json.MarshalIndent(bl, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(compactNumberArrays(b), '\n'))
}

// numberArray is an indented JSON array of numbers. Its opening bracket is
// followed by a raw newline, which no JSON string holds, so it never
// matches inside a string.
var numberArray = regexp.MustCompile(`\[\n\s*(?:-?[0-9][0-9.eE+-]*,\n\s*)*-?[0-9][0-9.eE+-]*\n\s*\]`)

// compactNumberArrays puts each indented array of numbers on one line.
func compactNumberArrays(b []byte) []byte {
	return numberArray.ReplaceAllFunc(b, func(m []byte) []byte {
		return []byte("[" + strings.Join(strings.Fields(string(m[1:len(m)-1])), " ") + "]")
	})
}

// NewBaseline builds a baseline from runs that share one fingerprint.
func NewBaseline(name string, runs []Run, compared []string) (*Baseline, error) {
	if len(runs) == 0 {
		return nil, errors.New("no runs: a baseline needs at least one run record")
	}
	bl := &Baseline{SchemaVersion: SchemaVersion, Name: name, Created: time.Now().UTC(),
		Kind: runs[0].Kind, Fingerprint: runs[0].Fingerprint}
	if err := bl.add(runs, compared); err != nil {
		return nil, err
	}
	for _, s := range bl.Series {
		if (s.OfferedQPS > 0 || s.Metric == CapacityMetric) && len(s.valid().Values) > 0 {
			return bl, nil
		}
	}
	if bl.Series[0].Metric == CapacityMetric {
		return nil, errors.New("no capacity search finished in any run (see each result's outcome and last probe): a baseline needs at least one to compare against")
	}
	return nil, errors.New("no level is valid in any run (see each record's level verdicts): a baseline needs at least one valid level to compare against")
}

// Update appends runs to the baseline, keeping at most keep runs per
// series (the newest), and refuses runs from another environment.
func (bl *Baseline) Update(runs []Run, compared []string, keep int) error {
	if err := bl.add(runs, compared); err != nil {
		return err
	}
	if keep > 0 {
		for i := range bl.Series {
			bl.Series[i].keepLast(keep)
		}
		bl.Runs = min(bl.Runs, keep)
	}
	return nil
}

func (bl *Baseline) add(runs []Run, compared []string) error {
	idx := map[string]int{}
	for i, s := range bl.Series {
		idx[s.Key()] = i
	}
	for ri, r := range runs {
		if r.Kind != bl.Kind {
			return fmt.Errorf("run %d: kind %q, baseline kind %q: records of different kinds are never mixed", ri+1, r.Kind, bl.Kind)
		}
		if diff := DiffFingerprints(bl.Fingerprint, r.Fingerprint, withProcedure(compared)); len(diff) > 0 {
			return fmt.Errorf("run %d was measured in another environment: %v", ri+1, diff)
		}
		if err := r.check(); err != nil {
			return fmt.Errorf("run %d: %w", ri+1, err)
		}
		for _, s := range r.Series() {
			if i, ok := idx[s.Key()]; ok {
				bl.Series[i].merge(s)
				continue
			}
			idx[s.Key()] = len(bl.Series)
			bl.Series = append(bl.Series, s)
		}
		if bl.Runs == 0 {
			bl.Bounds = r.Bounds
		} else {
			bl.Bounds = bl.Bounds.merge(r.Bounds)
		}
		bl.Runs++
	}
	sort.SliceStable(bl.Series, func(i, j int) bool { return seriesLess(bl.Series[i], bl.Series[j]) })
	return nil
}

func seriesLess(a, b Series) bool {
	if a.Scenario != b.Scenario {
		return a.Scenario < b.Scenario
	}
	if a.OfferedQPS != b.OfferedQPS {
		return a.OfferedQPS < b.OfferedQPS
	}
	return a.Metric < b.Metric
}

// DefaultCompared are the fingerprint fields that must match. hone's own
// version and the engine version are recorded but not compared: changing
// them is what a gate is for.
var DefaultCompared = []string{"kind", "engine", "model", "revision", "precision", "gpu_model", "gpu_count", "workload", "slo", "time_scale", "cache"}

// ProcedureCompared are compared whatever a config's compare_fingerprint
// says: a record made with another cold-start procedure (the record's
// cache.procedure) or time scale measured something else, and comparing
// it would report the procedure's effect as the deployment's.
var ProcedureCompared = []string{"cache", "time_scale", "load"}

// DiffFingerprints lists the compared fields whose values differ, as
// "field: baseline → candidate".
func DiffFingerprints(base, cand Fingerprint, compared []string) []string {
	var out []string
	for _, k := range compared {
		if fingerprintValue(base, k) != fingerprintValue(cand, k) {
			out = append(out, fmt.Sprintf("%s: %q → %q", k, base[k], cand[k]))
		}
	}
	return out
}

// fingerprintValue is fp's value of field k; a record from before load
// modes were recorded was sent open-loop, and its baseline says nothing.
func fingerprintValue(fp Fingerprint, k string) string {
	if v := fp[k]; v != "" || k != "load" {
		return v
	}
	return schema.LoadOpen
}
