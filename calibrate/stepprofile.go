package calibrate

import (
	"fmt"
	"strings"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// StepProfileConfig is what a fitted step profile needs beyond the steps.
type StepProfileConfig struct {
	Name  string
	Model emulator.Model
	GPU   emulator.GPU
	Fit   StepFitConfig
	// Data are the provenance of the all-reduce table and model config,
	// added to the step directories' own.
	Data []emulator.DataRef
}

// Figures of a fitted profile that the steps do not measure: kept from the
// hand-made profiles and said so in the profile's note.
const (
	fittedReserveBytes    = 4 << 30
	fittedTransferFixedMs = 0.5
	fittedFrontendMs      = 2.0
)

// StepProfile fits a profile to step data (FitSteps) and makes it a
// complete profile: the model, the GPU's memory for the KV cache, the
// serving limits the data shows, and its source: the data's provenance,
// the method, each coefficient's standard error and the residuals.
func StepProfile(data []*StepData, cfg StepProfileConfig) (*emulator.Profile, *StepFit, error) {
	cfg.Fit.Model = cfg.Model
	if cfg.Fit.AllReduces == 0 {
		cfg.Fit.AllReduces = 2 * cfg.Model.Layers
	}
	fit, err := FitSteps(data, cfg.Fit)
	if err != nil {
		return nil, nil, err
	}
	p := &emulator.Profile{
		Name: cfg.Name, Model: cfg.Model, GPU: cfg.GPU,
		ActivationReserveBytes: fittedReserveBytes, TransferFixedMs: fittedTransferFixedMs, FrontendMs: fittedFrontendMs,
	}
	costs := fit.Costs
	if !fit.Terms[0].Fitted && len(data) > 0 && sameTP(data) {
		costs.TPs = []int{data[0].TP}
	}
	p.Steps = &costs
	var tps []string
	src := &emulator.ProfileSource{Kind: emulator.SourceFittedSteps, StdErr: map[string]float64{}}
	// Serving limits: vLLM's defaults for the GPU, the token budget as the
	// steps show it (the golden runs' metadata states SchedulerConfig's
	// class defaults, 2048 tokens and 128 sequences, while their steps
	// hold 8,192 tokens: what EngineArgs gives a >= 70 GiB GPU).
	p.MaxNumSeqs, _ = emulator.ServingDefaults(cfg.GPU)
	for _, d := range data {
		p.MaxNumBatchedTokens = max(p.MaxNumBatchedTokens, d.BatchedLimit)
		tps = append(tps, fmt.Sprint(d.TP))
		ref := emulator.DataRef{Path: d.Dir, What: fmt.Sprintf("%d measured forward passes, vLLM %s, TP %d", len(d.Steps), d.EngineVer, d.TP)}
		if d.Source != nil {
			ref = *d.Source
			ref.What = strings.TrimSpace(ref.What + fmt.Sprintf(" (%d forward passes, vLLM %s, TP %d)", len(d.Steps), d.EngineVer, d.TP))
		}
		src.Data = append(src.Data, ref)
	}
	src.Data = append(src.Data, cfg.Data...)
	src.Method = fmt.Sprintf("hone calibrate --steps: weighted least squares on relative errors, each phase of each directory weighing the same; "+
		"%d mis-booked step pairs (async scheduling) fitted as one; Huber weights (k=1.345) on outliers (%d of %d observations below 1/2); "+
		"negative costs held at 0; standard errors from a moving-block bootstrap (%d replicates, blocks of %d consecutive steps, the GEMM knee held)",
		fit.MergedPairs, fit.Downweighted, fit.Observations, orDefault(cfg.Fit.Bootstrap, DefaultBootstrap), orDefault(cfg.Fit.BlockLen, DefaultBlockLen))
	for _, t := range fit.Terms {
		if t.Fitted {
			src.StdErr[t.Name] = t.StdErr
		}
	}
	src.Residuals = fit.Residuals
	src.Note = fmt.Sprintf("fitted on TP %s; all-reduces from %s; activation_reserve_bytes, transfer_fixed_ms, frontend_ms and the KV link are not measured by steps (hand-made values)",
		strings.Join(tps, ", "), allReduceSource(cfg.Fit.AllReduce))
	for _, d := range data {
		if d.RecordKind != "" && d.RecordKind != schema.KindDevice {
			w := fmt.Sprintf("%s: steps of a run of kind %s, not of vLLM on a GPU: this profile reproduces that engine's cost model, it measures no GPU", d.Dir, d.RecordKind)
			src.Note += "; " + w
			fit.Notes = append(fit.Notes, w)
		}
	}
	p.Source = src
	if err := p.Validate(); err != nil {
		return nil, nil, fmt.Errorf("fitted profile: %w", err)
	}
	return p, fit, nil
}

// sameTP says whether every directory has one TP size.
func sameTP(data []*StepData) bool {
	for _, d := range data {
		if d.TP != data[0].TP {
			return false
		}
	}
	return true
}

func allReduceSource(a emulator.AllReduceModel) string {
	if a.Source != "" {
		return a.Source
	}
	return "the GPU's spec"
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// PhaseStats is one phase's errors in hone profile check's JSON.
type PhaseStats struct {
	Steps     int     `json:"steps"`
	MedianAPE float64 `json:"median_ape"`
	P90APE    float64 `json:"p90_ape"`
}

// CheckResult is hone profile check's output: predicted against measured
// step latencies of one directory, APE in percent. Its JSON is stable:
// tools outside hone read it.
type CheckResult struct {
	TP     int                   `json:"tp"`
	Phases map[string]PhaseStats `json:"phases"`
	All    PhaseStats            `json:"all"`
	// MisbookedPairs were scored as one step (ScoreSteps).
	MisbookedPairs int    `json:"misbooked_pairs"`
	Profile        string `json:"profile"`
	ProfileSource  string `json:"profile_source"`
	Data           string `json:"data"`
	// Warnings say what makes the comparison doubtful (a profile of
	// another model than the steps').
	Warnings []string `json:"warnings,omitempty"`
}

// CheckSteps predicts every step of d with p at d's TP.
func CheckSteps(p *emulator.Profile, d *StepData) (*CheckResult, error) {
	q := *p
	q.TP = d.TP
	if q.Steps != nil {
		if err := q.Steps.HoldsFor(d.TP); err != nil {
			return nil, fmt.Errorf("profile %s: %w", p.Name, err)
		}
	}
	predict := func(s emulator.StepSummary) float64 {
		if q.Steps != nil {
			return q.Steps.SummaryMs(s, d.TP, q.Model.Hidden, false)
		}
		return q.StepMs(SummaryEntries(s), false)
	}
	sc := ScoreSteps(d, predict)
	res := &CheckResult{TP: d.TP, Phases: map[string]PhaseStats{}, MisbookedPairs: sc.Pairs,
		Profile: p.Name, ProfileSource: p.SourceKind(), Data: d.Dir}
	if d.Model != "" && p.Model.Name != d.Model {
		res.Warnings = append(res.Warnings, fmt.Sprintf("the profile models %s, the steps are of %s", p.Model.Name, d.Model))
	}
	for _, e := range sc.PhaseErrors(d.Dir) {
		st := PhaseStats{Steps: e.Steps, MedianAPE: e.MedianAPE, P90APE: e.P90APE}
		if e.Phase == "all" {
			res.All = st
		} else {
			res.Phases[e.Phase] = st
		}
	}
	return res, nil
}

// SummaryEntries is a list of step entries with the summary's totals, for
// profiles that cost entries: the prompt chunks share the new tokens
// evenly and the cached tokens sit on the first chunk (as
// StepSummary.AttentionPairs assumes); the decodes share the KV evenly.
func SummaryEntries(s emulator.StepSummary) []emulator.StepEntry {
	var out []emulator.StepEntry
	for i := 0; i < s.PrefillRequests; i++ {
		n := s.PrefillTokens / s.PrefillRequests
		if i < s.PrefillTokens%s.PrefillRequests {
			n++
		}
		e := emulator.StepEntry{Tokens: n, Samples: true}
		if i == 0 {
			e.Context = s.PrefillKV
		}
		out = append(out, e)
	}
	for i := 0; i < s.DecodeRequests; i++ {
		kv := s.DecodeKV / s.DecodeRequests
		out = append(out, emulator.StepEntry{Tokens: 1, Context: max(kv-1, 0), Decode: true, Samples: true})
	}
	return out
}
