package calibrate

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hone-llm/hone/sim/emulator"
)

// plantedSteps are the step shapes of the golden runs' TP 1 and TP 2 (the
// probe's every step and every third step of the real workload) with
// latencies from truth, relative noise of sd noise, and misbooked pairs
// per directory booked as async scheduling books them: nearly all of the
// pair's time on its first step.
func plantedSteps(t *testing.T, truth *emulator.StepCosts, hidden int, noise float64, misbooked int) []*StepData {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	var out []*StepData
	for _, tp := range []string{"tp1", "tp2"} {
		d, err := ReadStepDir(goldenDir + tp)
		if err != nil {
			t.Fatal(err)
		}
		var keep []MeasuredStep
		for i, s := range d.Steps {
			if s.Segment == "real" && i%3 != 0 {
				continue
			}
			s.Counter = int64(len(keep))
			s.Ms = truth.SummaryMs(s.Summary, d.TP, hidden, false) * (1 + noise*rng.NormFloat64())
			keep = append(keep, s)
		}
		// Mis-book pairs of consecutive steps of one phase, spread over the run.
		done := 0
		for i := 10; i+1 < len(keep) && done < misbooked; i += len(keep) / (misbooked + 1) {
			for ; i+1 < len(keep) && keep[i].Phase != keep[i+1].Phase; i++ {
			}
			if i+1 >= len(keep) {
				break
			}
			total := keep[i].Ms + keep[i+1].Ms
			keep[i+1].Ms = 0.03 * keep[i+1].Ms
			keep[i].Ms = total - keep[i+1].Ms
			done++
		}
		if done != misbooked {
			t.Fatalf("%s: planted %d mis-booked pairs, want %d", tp, done, misbooked)
		}
		d.Steps = keep
		out = append(out, d)
	}
	return out
}

func plantedTruth(t *testing.T) (*emulator.StepCosts, emulator.Model) {
	t.Helper()
	m, err := emulator.ModelFromHFConfig(aicModels+"Qwen--Qwen3-32B_config.json", "Qwen/Qwen3-32B")
	if err != nil {
		t.Fatal(err)
	}
	ar, err := ReadAllReduceTable(aicSystems+"data/b300_sxm/comm/vllm/0.19.0/custom_allreduce_perf.parquet", "table")
	if err != nil {
		t.Fatal(err)
	}
	truth := &emulator.StepCosts{FixedMs: 1.2, PrefillStepMs: 2.0, DecodeSeqMs: 0.04, WeightsMs: 12, TokenMs: 0.045,
		GEMMOffsetMs: -3, PrefillAttnMsPerM: 1.7, DecodeKVMsPerK: 0.05, AllReduces: 2 * m.Layers, AllReduce: ar}
	return truth, m
}

// TestFitStepsRecoversPlanted: steps made from a known cost with 3% noise
// and three mis-booked pairs per run give back every coefficient within
// two of its stated standard errors, and the pairs are found.
func TestFitStepsRecoversPlanted(t *testing.T) {
	truth, m := plantedTruth(t)
	data := plantedSteps(t, truth, m.Hidden, 0.03, 3)
	fit, err := FitSteps(data, StepFitConfig{Model: m, AllReduces: truth.AllReduces, AllReduce: truth.AllReduce, Bootstrap: 60, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if fit.MergedPairs != 6 {
		t.Errorf("merged %d mis-booked pairs, planted 6", fit.MergedPairs)
	}
	want := truth.Coefficients()
	for i, term := range fit.Terms {
		if !term.Fitted {
			t.Errorf("%s not fitted: %s", term.Name, term.Why)
			continue
		}
		if !(term.StdErr > 0) {
			t.Errorf("%s: standard error %v, want > 0", term.Name, term.StdErr)
			continue
		}
		z := (term.Value - want[i]) / term.StdErr
		t.Logf("%-26s planted %9.5g fitted %9.5g ± %8.3g (z %+.2f)", term.Name, want[i], term.Value, term.StdErr, z)
		if math.Abs(z) > 2 {
			t.Errorf("%s: fitted %.5g ± %.3g, planted %.5g: %.1f standard errors away", term.Name, term.Value, term.StdErr, want[i], math.Abs(z))
		}
	}
}

// TestFitStepsOneTP: one TP size cannot tell the host part from the GPU
// part; the fit says so and books it all as GPU, and still fits its own
// steps.
func TestFitStepsOneTP(t *testing.T) {
	truth, m := plantedTruth(t)
	data := plantedSteps(t, truth, m.Hidden, 0, 0)[:1]
	fit, err := FitSteps(data, StepFitConfig{Model: m, AllReduces: truth.AllReduces, AllReduce: truth.AllReduce, Bootstrap: 4})
	if err != nil {
		t.Fatal(err)
	}
	if fit.Terms[0].Fitted || fit.Terms[0].Value != 0 {
		t.Errorf("fixed_ms with one TP: %+v, want held at 0", fit.Terms[0])
	}
	if got, want := fit.Costs.WeightsMs, truth.WeightsMs+truth.FixedMs; math.Abs(got-want) > 1e-6*want {
		t.Errorf("weights_ms %v, want the host part booked with it: %v", got, want)
	}
}

// TestFitStepsHoldsWhatStepsCannotSeparate: steps of too few shapes (every
// prompt chunk 2,048 tokens, cold) determine only combinations of some
// terms; those are held at 0, said so, and the fit still reproduces its
// own steps.
func TestFitStepsHoldsWhatStepsCannotSeparate(t *testing.T) {
	truth, m := plantedTruth(t)
	data := plantedSteps(t, truth, m.Hidden, 0, 0)
	for _, d := range data {
		var keep []MeasuredStep
		for _, s := range d.Steps {
			if s.Phase == "decode" {
				keep = append(keep, s)
			}
		}
		for i := 0; i < 20; i++ {
			s := emulator.StepSummary{PrefillTokens: 2048, PrefillRequests: 1}
			keep = append(keep, MeasuredStep{Counter: int64(1e6 + 2*i), Phase: "context", Summary: s, Ms: truth.SummaryMs(s, d.TP, m.Hidden, false)})
		}
		d.Steps = keep
	}
	fit, err := FitSteps(data, StepFitConfig{Model: m, AllReduces: truth.AllReduces, AllReduce: truth.AllReduce, Bootstrap: 4})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, term := range fit.Terms {
		if !term.Fitted && strings.Contains(term.Why, "do not separate") {
			held++
		}
	}
	if held == 0 {
		t.Errorf("no term held as inseparable: %+v", fit.Terms)
	}
	for _, e := range fit.Residuals {
		if e.Steps > 0 && e.MedianAPE > 0.5 {
			t.Errorf("%s TP %d: median APE %.2f%% on its own noiseless steps", e.Phase, e.TP, e.MedianAPE)
		}
	}
}
