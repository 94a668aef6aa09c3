package calibrate

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// Step-data directories (hone calibrate --steps, hone profile check) hold
// one engine's measured forward passes in the layout of vLLM's
// forward-pass metrics as the public golden runs publish them:
//
//	fpm_metrics_detail.csv  one row per forward pass (StepColumns)
//	vllm_metadata.json      the effective engine config: TP, version, model
const (
	StepsFile    = "fpm_metrics_detail.csv"
	MetadataFile = "vllm_metadata.json"
)

// StepColumns are the columns a step file must have; others are ignored.
var StepColumns = []string{"phase", "counter_id", "sum_prefill_tokens", "num_prefill_requests",
	"sum_prefill_kv_tokens", "var_prefill_length", "num_decode_requests", "sum_decode_kv_tokens", "latency_ms"}

// MeasuredStep is one measured forward pass.
type MeasuredStep struct {
	Line    int    // in the step file, 1-based, the header being line 1
	Counter int64  // the engine's step counter: consecutive steps differ by 1
	Phase   string // context, decode or mixed, from what the step held
	Segment string // workload_segment, where given (sweep, real)
	Summary emulator.StepSummary
	Ms      float64
}

// StepData is one step-data directory.
type StepData struct {
	Dir          string
	TP           int
	Model        string // the served model, from the metadata
	EngineVer    string // vllm_version
	BatchedLimit int    // the largest tokens one step held (prefill + decode): the budget the engine applied, as the data shows it
	// RecordKind is the kind of the replay record the steps were joined
	// with (hone profile steps: emulated, device, ...); "" for others.
	RecordKind schema.Kind
	Steps      []MeasuredStep
	// Source is the data's provenance, from source.yaml beside the step
	// file when there is one.
	Source *emulator.DataRef
}

// SourceFile, beside a step file, names where the steps come from (an
// emulator.DataRef: repository, commit, path, license, what).
const SourceFile = "source.yaml"

// ReadStepDir reads a step-data directory. Errors name the file, and the
// line and column of a bad value; a step with a negative, NaN or infinite
// latency or count is an error, not skipped.
func ReadStepDir(dir string) (*StepData, error) {
	d := &StepData{Dir: dir}
	mpath := filepath.Join(dir, MetadataFile)
	mb, err := os.ReadFile(mpath)
	if err != nil {
		return nil, fmt.Errorf("step data %s: %w (want %s and %s)", dir, err, StepsFile, MetadataFile)
	}
	var meta struct {
		RecordKind schema.Kind    `json:"record_kind"`
		Effective  map[string]any `json:"effective_config"`
		Requested  struct {
			Deployment struct {
				Model string `json:"model"`
			} `json:"deployment_config"`
		} `json:"requested"`
	}
	if err := json.Unmarshal(mb, &meta); err != nil {
		return nil, fmt.Errorf("%s: %w", mpath, err)
	}
	tp, ok := meta.Effective["parallel_config.tensor_parallel_size"].(float64)
	if !ok || tp < 1 || tp != math.Trunc(tp) {
		return nil, fmt.Errorf("%s: effective_config.parallel_config.tensor_parallel_size: want an integer >= 1, got %v", mpath, meta.Effective["parallel_config.tensor_parallel_size"])
	}
	d.TP = int(tp)
	d.Model = meta.Requested.Deployment.Model
	d.RecordKind = meta.RecordKind
	if v, ok := meta.Effective["vllm_version"].(string); ok {
		d.EngineVer = v
	}
	if b, err := os.ReadFile(filepath.Join(dir, SourceFile)); err == nil {
		var ref emulator.DataRef
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&ref); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, SourceFile), err)
		}
		d.Source = &ref
	}

	if err := d.readSteps(filepath.Join(dir, StepsFile)); err != nil {
		return nil, err
	}
	return d, nil
}

// readSteps reads the step file at spath into d.Steps and d.BatchedLimit.
func (d *StepData) readSteps(spath string) error {
	f, err := os.Open(spath)
	if err != nil {
		return fmt.Errorf("step data %s: %w", d.Dir, err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.ReuseRecord = true
	col, err := stepHeader(r, spath)
	if err != nil {
		return err
	}
	seg, hasSeg := col["workload_segment"]
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", spath, err)
		}
		st, err := parseStep(rec, col, spath, line)
		if err != nil {
			return err
		}
		if hasSeg {
			st.Segment = rec[seg]
		}
		d.BatchedLimit = max(d.BatchedLimit, st.Summary.PrefillTokens+st.Summary.DecodeRequests)
		d.Steps = append(d.Steps, st)
	}
	if len(d.Steps) == 0 {
		return fmt.Errorf("%s: no steps", spath)
	}
	return nil
}

// stepHeader reads the step file's header and returns each column's index;
// every one of StepColumns must be there.
func stepHeader(r *csv.Reader, spath string) (map[string]int, error) {
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", spath, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, c := range StepColumns {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("%s: line 1: missing column %q (want %v)", spath, c, StepColumns)
		}
	}
	return col, nil
}

// parseStep parses one row of the step file (line, 1-based): every count
// and the latency finite and >= 0, the latency > 0, the step not empty.
func parseStep(rec []string, col map[string]int, spath string, line int) (MeasuredStep, error) {
	num := func(name string) (float64, error) {
		s := rec[col[name]]
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, fmt.Errorf("%s: line %d: %s: want a finite number >= 0, got %q", spath, line, name, s)
		}
		return v, nil
	}
	var vals [8]float64
	for i, name := range StepColumns[1:] {
		var err error
		if vals[i], err = num(name); err != nil {
			return MeasuredStep{}, err
		}
	}
	st := MeasuredStep{Line: line, Counter: int64(vals[0]), Ms: vals[7], Summary: emulator.StepSummary{
		PrefillTokens: int(vals[1]), PrefillRequests: int(vals[2]), PrefillKV: int(vals[3]), PrefillLenVar: vals[4],
		DecodeRequests: int(vals[5]), DecodeKV: int(vals[6]),
	}}
	if st.Ms <= 0 {
		return MeasuredStep{}, fmt.Errorf("%s: line %d: latency_ms: want > 0, got %v", spath, line, st.Ms)
	}
	st.Phase = st.Summary.Phase()
	if st.Phase == "" {
		return MeasuredStep{}, fmt.Errorf("%s: line %d: an empty step (no prefill and no decode requests)", spath, line)
	}
	return st, nil
}
