package exercise

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/slo"
)

// LevelView is what the policy reads of one load level of a result: the
// exercise's level figures, and whether both p99s were there.
type LevelView struct {
	slo.Level
	HasLatency bool // both p99 figures were present
}

// ResultView is what the policy reads of an evaluation result, whatever
// shape the driver gave it: the objective when the result carries one, else
// computed from per-level figures (largest effective QPS among passing
// levels, 0 if none).
type ResultView struct {
	Objective         float64
	ObjectiveReported bool // the result carried "objective" itself
	Levels            []LevelView
	SLO               slo.SLO
}

// Passing reports whether at least one load level met its SLOs.
func (r ResultView) Passing() bool { return r.Objective > 0 }

// PassSet lists the offered rates whose levels passed, for comparing runs.
func (r ResultView) PassSet() string {
	var s []string
	for _, l := range r.Levels {
		if l.Passed {
			s = append(s, strconv.FormatFloat(l.OfferedQPS, 'g', -1, 64))
		}
	}
	return strings.Join(s, ",")
}

// ReadResult interprets an evaluation result. It understands the exercise's
// shape ({"objective", "levels":[{"offered_qps","p99_ttft_ms","p99_tpot_ms",
// "effective_qps","passed"}]}) and close variants (keys matched by the words
// they contain), and fails when it finds neither an objective nor levels.
func ReadResult(res map[string]any) (ResultView, error) {
	v := ResultView{SLO: slo.Default}
	if cfg, ok := res["config"].(map[string]any); ok {
		if x, ok := num(findKey(cfg, "ttft", "slo")); ok {
			v.SLO.TTFTMillis = x
		}
		if x, ok := num(findKey(cfg, "tpot", "slo")); ok {
			v.SLO.TPOTMillis = x
		}
	}
	for _, item := range levelsOf(res) {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		var l LevelView
		l.OfferedQPS, _ = num(findKey(m, "offered"))
		if x, ok := num(findKey(m, "effective")); ok {
			l.EffectiveQPS = x
		}
		ttft, okT := num(findKey(m, "ttft"))
		tpot, okP := num(findKey(m, "tpot"))
		l.P99TTFTMs, l.P99TPOTMs, l.HasLatency = ttft, tpot, okT && okP
		if p, ok := findKey(m, "pass").(bool); ok {
			l.Passed = p
		} else if l.HasLatency {
			l.Passed = v.SLO.Met(ttft, tpot)
		}
		v.Levels = append(v.Levels, l)
	}
	sort.SliceStable(v.Levels, func(i, j int) bool { return v.Levels[i].OfferedQPS < v.Levels[j].OfferedQPS })
	if x, ok := num(res["objective"]); ok {
		v.Objective, v.ObjectiveReported = x, true
		return v, nil
	}
	if len(v.Levels) == 0 {
		return v, fmt.Errorf("result has neither an objective nor per-level figures (keys: %s)", keyList(res))
	}
	levels := make([]slo.Level, len(v.Levels))
	for i, l := range v.Levels {
		levels[i] = l.Level
	}
	v.Objective = slo.Objective(levels)
	return v, nil
}

// levelsOf finds the list of per-level objects: "levels", or the first list
// of objects under a key that mentions "level".
func levelsOf(res map[string]any) []any {
	if l, ok := res["levels"].([]any); ok {
		return l
	}
	keys := make([]string, 0, len(res))
	for k := range res {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if l, ok := res[k].([]any); ok && strings.Contains(strings.ToLower(k), "level") {
			return l
		}
	}
	return nil
}

// findKey returns the value of the first key (in sorted order) whose
// lower-cased name contains every word.
func findKey(m map[string]any, words ...string) any {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
next:
	for _, k := range keys {
		lk := strings.ToLower(k)
		for _, w := range words {
			if !strings.Contains(lk, w) {
				continue next
			}
		}
		return m[k]
	}
	return nil
}

// num reads a JSON number (float64 or json.Number) as a finite float64.
func num(v any) (float64, bool) {
	var x float64
	switch n := v.(type) {
	case float64:
		x = n
	case json.Number:
		f, err := n.Float64()
		if err != nil {
			return 0, false
		}
		x = f
	case int:
		x = float64(n)
	default:
		return 0, false
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, false
	}
	return x, true
}
