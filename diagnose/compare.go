package diagnose

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// Truth is the emulator's ground truth for one request, mapped onto the
// attribution's parts (model ms).
type Truth map[string]float64

// ReadTrace reads emulator --trace-file lines (any number of files
// concatenated) and returns the ground truth by request id (the
// X-Request-Id, without the engine's "cmpl-" prefix).
func ReadTrace(r io.Reader) (map[string]Truth, error) {
	type pair struct{ prefill, main *emulator.TraceRecord }
	by := map[string]*pair{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		var tr emulator.TraceRecord
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if tr.Event != "request" || tr.Error != "" {
			continue
		}
		id := strings.TrimPrefix(tr.RequestID, "cmpl-")
		p := by[id]
		if p == nil {
			p = &pair{}
			by[id] = p
		}
		t := tr
		if tr.Role == emulator.RolePrefill {
			p.prefill = &t
		} else {
			p.main = &t
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := map[string]Truth{}
	for id, p := range by {
		if p.main == nil {
			continue
		}
		// Queueing runs from the engine's receipt (its API server's front
		// end inside, as attribution counts it: vLLM's queue_time_ms plus
		// the front end where the engine reports it, the kernel's receipt
		// on the API socket) to the first scheduling.
		t := Truth{Decode: p.main.DecodeMs}
		if p.prefill != nil {
			t[Queueing] = p.prefill.TTFTMs - p.prefill.PrefillMs
			t[Prefill] = p.prefill.PrefillMs
			// Waiting for KV is arrival at the decode worker → KV ready:
			// the pull itself (transfer_ms) and any wait before it. The
			// decode worker's queue and its first step (its prefill_ms:
			// scheduled → first token) are decode_queue.
			t[Transfer] = p.main.TTFTMs - p.main.QueueMs - p.main.PrefillMs
			t[DecodeQ] = p.main.QueueMs + p.main.PrefillMs
		} else {
			t[Queueing] = p.main.TTFTMs - p.main.PrefillMs - p.main.TransferMs
			t[Prefill] = p.main.PrefillMs
		}
		out[id] = t
	}
	return out, nil
}

// PartError is how far attribution is from the truth for one part.
type PartError struct {
	Part       string  `json:"part"`
	Requests   int     `json:"requests"`
	MeanTruth  float64 `json:"mean_truth_ms"`
	MeanAttrib float64 `json:"mean_attributed_ms"`
	MAE        float64 `json:"mean_abs_error_ms"`
	MedianErr  float64 `json:"median_abs_error_ms"`
	P90AbsErr  float64 `json:"p90_abs_error_ms"`
}

// Compare measures attribution against ground truth, per part.
func Compare(atts []Attribution, truth map[string]Truth) ([]PartError, error) {
	errs := map[string][]float64{}
	sumT, sumA := map[string]float64{}, map[string]float64{}
	matched := 0
	for _, a := range atts {
		t, ok := truth[a.RequestID]
		if !ok {
			continue
		}
		matched++
		parts := []string{Queueing, Prefill, Decode}
		if _, disagg := t[Transfer]; disagg {
			parts = append(parts, Transfer, DecodeQ)
		}
		for _, k := range parts {
			errs[k] = append(errs[k], math.Abs(a.Parts[k]-t[k]))
			sumA[k] += a.Parts[k]
			sumT[k] += t[k]
		}
	}
	if matched == 0 {
		return nil, fmt.Errorf("no attributed request has a ground-truth trace line (request ids differ?)")
	}
	var out []PartError
	for k, e := range errs {
		sort.Float64s(e)
		mae := 0.0
		for _, x := range e {
			mae += x / float64(len(e))
		}
		n := float64(len(e))
		out = append(out, PartError{Part: k, Requests: len(e), MeanTruth: sumT[k] / n, MeanAttrib: sumA[k] / n,
			MAE: mae, MedianErr: e[slo.NearestRankIndex(len(e), 50)-1], P90AbsErr: e[slo.NearestRankIndex(len(e), 90)-1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Part < out[j].Part })
	return out, nil
}
