package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/hone-llm/hone/internal/atomicfile"
)

// SchemaVersion is the version of the baseline file format.
const SchemaVersion = 1

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
	Kind          string      `json:"kind"` // simulation_only | emulated | device
	Fingerprint   Fingerprint `json:"fingerprint"`
	Runs          int         `json:"runs"`
	Series        []Series    `json:"series"`
}

// ReadBaseline reads and validates a baseline file. Every problem is an
// error that names the file and the field; nothing panics on bad input.
func ReadBaseline(path string) (*Baseline, error) {
	b, err := os.ReadFile(path)
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
	if bl.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("schema_version %d: want %d", bl.SchemaVersion, SchemaVersion)
	}
	if bl.Kind == "" {
		return nil, errors.New("kind: missing (want simulation_only, emulated or device)")
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
		}
		for j, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%s: values[%d] is %v: want a finite number", where, j, v)
			}
		}
		seen[s.Key()] = true
	}
	return &bl, nil
}

// Write stores the baseline atomically: a temporary file in the same
// directory, fsynced, then renamed over path.
func (bl *Baseline) Write(path string) error {
	b, err := json.MarshalIndent(bl, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'))
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
	return bl, nil
}

// Update appends runs to the baseline, keeping at most keep runs per
// series (the newest), and refuses runs from another environment.
func (bl *Baseline) Update(runs []Run, compared []string, keep int) error {
	if err := bl.add(runs, compared); err != nil {
		return err
	}
	if keep > 0 {
		for i := range bl.Series {
			if v := bl.Series[i].Values; len(v) > keep {
				bl.Series[i].Values = append([]float64(nil), v[len(v)-keep:]...)
			}
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
		if diff := DiffFingerprints(bl.Fingerprint, r.Fingerprint, compared); len(diff) > 0 {
			return fmt.Errorf("run %d was measured in another environment: %v", ri+1, diff)
		}
		for _, s := range r.Series() {
			if i, ok := idx[s.Key()]; ok {
				bl.Series[i].Values = append(bl.Series[i].Values, s.Values...)
				continue
			}
			idx[s.Key()] = len(bl.Series)
			bl.Series = append(bl.Series, s)
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
var DefaultCompared = []string{"kind", "engine", "model", "revision", "precision", "gpu_model", "gpu_count", "workload", "slo", "time_scale"}

// DiffFingerprints lists the compared fields whose values differ, as
// "field: baseline → candidate".
func DiffFingerprints(base, cand Fingerprint, compared []string) []string {
	var out []string
	for _, k := range compared {
		if base[k] != cand[k] {
			out = append(out, fmt.Sprintf("%s: %q → %q", k, base[k], cand[k]))
		}
	}
	return out
}
