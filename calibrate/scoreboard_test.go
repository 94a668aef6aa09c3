package calibrate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/hone-llm/hone/sim/emulator"
)

// Scoreboard is every tracked accuracy figure of hone's predictions
// against measured data (make validate writes it to
// sim/emulator/profiles/validation-scoreboard.json; CI compares against the committed one).
type Scoreboard struct {
	// Steps: per profile, its errors on measured steps (fit residuals and
	// held-out checks), as the profile states them.
	Steps map[string][]ScoreboardPhase `json:"steps"`
	// Silicon: request-level errors on a silicon file, per model group,
	// once per way of drawing the requests' lengths.
	Silicon []SiliconBoard `json:"silicon"`
}

// ScoreboardPhase is one phase's step errors.
type ScoreboardPhase struct {
	Set       string  `json:"set"` // fit or check
	Data      string  `json:"data"`
	TP        int     `json:"tp"`
	Phase     string  `json:"phase"`
	Steps     int     `json:"steps"`
	MedianAPE float64 `json:"median_ape"`
	P90APE    float64 `json:"p90_ape"`
}

// SiliconBoard is a silicon file's errors by group (model, precision, GPU)
// and the rows predicted.
type SiliconBoard struct {
	File         string                    `json:"file"`
	LengthRatio  float64                   `json:"length_ratio"`
	KVCacheDType string                    `json:"kv_cache_dtype,omitempty"`
	Groups       map[string]SiliconSummary `json:"groups"`
	// Profiles are the same errors by the profile that predicted the rows
	// (what hone predict and the report show beside a profile's figures).
	Profiles  map[string]SiliconSummary `json:"profiles"`
	All       SiliconSummary            `json:"all"`
	Predicted []string                  `json:"predicted_ids"`
}

// StepBoard is a profile's errors on measured steps as the scoreboard
// tracks them: a fitted profile's residuals, and any profile's checks. A
// derived profile's residuals are the form's fit to its own derivation,
// not to anything measured: they are not tracked.
func StepBoard(p *emulator.Profile) []ScoreboardPhase {
	var out []ScoreboardPhase
	if p.Source == nil {
		return out
	}
	var fit []emulator.PhaseError
	if p.SourceKind() == emulator.SourceFittedSteps {
		fit = p.Source.Residuals
	}
	for _, s := range []struct {
		set  string
		errs []emulator.PhaseError
	}{{"fit", fit}, {"check", p.Source.Checks}} {
		for _, e := range s.errs {
			out = append(out, ScoreboardPhase{Set: s.set, Data: e.Data, TP: e.TP, Phase: e.Phase, Steps: e.Steps, MedianAPE: e.MedianAPE, P90APE: e.P90APE})
		}
	}
	return out
}

// NewSiliconBoard summarises a silicon result by group.
func NewSiliconBoard(file string, res *SiliconResult) SiliconBoard {
	b := SiliconBoard{File: file, LengthRatio: res.LengthRatio, KVCacheDType: res.KVCacheDType, All: res.Summary, Predicted: []string{}}
	for _, r := range res.Rows {
		b.Predicted = append(b.Predicted, r.ID)
	}
	slices.Sort(b.Predicted)
	b.Groups = summariseBy(res.Rows, func(r SiliconPrediction) string { return siliconGroup(r.Model, r.Precision, r.System, r.Mode) })
	b.Profiles = summariseBy(res.Rows, func(r SiliconPrediction) string { return r.Profile })
	return b
}

// summariseBy summarises rows' errors by key.
func summariseBy(rows []SiliconPrediction, key func(SiliconPrediction) string) map[string]SiliconSummary {
	ttft, tpot := map[string][]float64{}, map[string][]float64{}
	for _, r := range rows {
		k := key(r)
		ttft[k] = append(ttft[k], r.TTFT.APE)
		tpot[k] = append(tpot[k], r.TPOT.APE)
	}
	out := map[string]SiliconSummary{}
	for k := range ttft {
		out[k] = SiliconSummary{Rows: len(ttft[k]), Predicted: len(ttft[k]), TTFT: apeSummary(ttft[k]), TPOT: apeSummary(tpot[k])}
	}
	return out
}

func siliconGroup(model, precision, system, mode string) string {
	if precision == "" {
		precision = "native"
	}
	g := model + " " + precision + " " + system
	if mode == "disagg" {
		g += " disagg"
	}
	return g
}

// ScoreboardTolerance is how much worse (relatively) a tracked median may
// get before the accuracy gate fails.
const ScoreboardTolerance = 0.05

// CompareScoreboards lists what got worse from committed to current: a
// tracked median error worse by more than ScoreboardTolerance relative
// (and 0.01 points absolute, below which rounding decides), a figure that
// is no longer computed, or a row that was predicted and no longer is.
// Improvements are not listed: updating the committed scoreboard is a
// deliberate change.
func CompareScoreboards(committed, current Scoreboard) []string {
	var out []string
	worse := func(name string, was, now float64) {
		if now > was*(1+ScoreboardTolerance) && now-was > 0.01 {
			out = append(out, fmt.Sprintf("%s: median APE %.2f%% → %.2f%% (worse by more than %.0f%% relative)", name, was, now, 100*ScoreboardTolerance))
		}
	}
	for prof, phases := range committed.Steps {
		now := map[string]ScoreboardPhase{}
		for _, p := range current.Steps[prof] {
			now[p.Set+" "+p.Data+" "+p.Phase] = p
		}
		for _, p := range phases {
			k := p.Set + " " + p.Data + " " + p.Phase
			n, ok := now[k]
			if !ok {
				out = append(out, fmt.Sprintf("steps %s %s: no longer computed", prof, k))
				continue
			}
			worse(fmt.Sprintf("steps %s %s", prof, k), p.MedianAPE, n.MedianAPE)
		}
	}
	for _, was := range committed.Silicon {
		name := fmt.Sprintf("silicon %s (length ratio %g, kv cache %s)", was.File, was.LengthRatio, cmp.Or(was.KVCacheDType, "auto"))
		i := slices.IndexFunc(current.Silicon, func(b SiliconBoard) bool {
			return b.File == was.File && b.LengthRatio == was.LengthRatio && b.KVCacheDType == was.KVCacheDType
		})
		if i < 0 {
			out = append(out, name+": no longer computed")
			continue
		}
		now := current.Silicon[i]
		for g, s := range was.Groups {
			n, ok := now.Groups[g]
			if !ok {
				out = append(out, fmt.Sprintf("%s %s: no longer predicted", name, g))
				continue
			}
			worse(name+" "+g+" TTFT", s.TTFT.MedianAPE, n.TTFT.MedianAPE)
			worse(name+" "+g+" TPOT", s.TPOT.MedianAPE, n.TPOT.MedianAPE)
		}
		var lost []string
		for _, id := range was.Predicted {
			if !slices.Contains(now.Predicted, id) {
				lost = append(lost, id)
			}
		}
		if len(lost) > 0 {
			out = append(out, fmt.Sprintf("%s: %d rows predicted before are not now: %s", name, len(lost), strings.Join(lost, ", ")))
		}
	}
	slices.Sort(out)
	return out
}
