package calibrate

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestClusterRobustStdErr: residuals correlated within clusters (a shared
// offset per cluster, as requests of one level share its queue) make the
// independent-residual formula state errors several times too small. Over
// repeated synthetic data sets the cluster-robust standard error matches
// the estimates' actual spread; the classical one does not.
func TestClusterRobustStdErr(t *testing.T) {
	const (
		groups, per, reps = 24, 25, 200
	)
	rng := rand.New(rand.NewPCG(3, 5))
	var slopes, seRobust, seNaive []float64
	for rep := 0; rep < reps; rep++ {
		xs := make([]float64, groups*per)
		ys := make([]float64, groups*per)
		clusters := make([]int, groups*per)
		for g := 0; g < groups; g++ {
			xg := rng.NormFloat64()
			ug := rng.NormFloat64()
			for i := 0; i < per; i++ {
				k := g*per + i
				xs[k] = xg + 0.2*rng.NormFloat64()
				ys[k] = 1 + 2*xs[k] + ug*(1+xg*xg)/2 + 0.3*rng.NormFloat64()
				clusters[k] = g
			}
		}
		model := func(th []float64) ([]float64, error) {
			r := make([]float64, len(xs))
			for i := range xs {
				r[i] = th[0] + th[1]*xs[i] - ys[i]
			}
			return r, nil
		}
		naive, err := LeastSquares(model, []float64{0.5, 1}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		robust, err := LeastSquares(model, []float64{0.5, 1}, Options{Clusters: clusters})
		if err != nil {
			t.Fatal(err)
		}
		slopes = append(slopes, robust.Theta[1])
		seRobust = append(seRobust, robust.StdErr[1])
		seNaive = append(seNaive, naive.StdErr[1])
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	m := mean(slopes)
	ss := 0.0
	for _, x := range slopes {
		ss += (x - m) * (x - m)
	}
	sd := math.Sqrt(ss / float64(len(slopes)-1))
	r, n := mean(seRobust)/sd, mean(seNaive)/sd
	t.Logf("slope spread %.4f; mean stated error: cluster-robust %.4f (%.2f×), independent %.4f (%.2f×)", sd, mean(seRobust), r, mean(seNaive), n)
	if r < 0.7 || r > 1.3 {
		t.Errorf("cluster-robust standard error is %.2f× the estimates' spread, want 0.7–1.3×", r)
	}
	if n > 0.5 {
		t.Errorf("independent-residual error is %.2f× the spread: the data set does not show the understatement it is meant to", n)
	}
}

func TestResultWorse(t *testing.T) {
	nan := math.NaN()
	lvl := func(bt, bp, at, ap float64) LevelError {
		return LevelError{Before: LevelPrediction{TTFTRelErr: bt, TPOTRelErr: bp}, After: LevelPrediction{TTFTRelErr: at, TPOTRelErr: ap}}
	}
	for name, c := range map[string]struct {
		r    Result
		want string
	}{
		"better": {Result{Objective: []ObjectiveError{{BeforeRelErr: 0.20, AfterRelErr: -0.05}},
			PredictionError: []LevelError{lvl(0.3, -0.2, 0.05, 0.01)}}, ""},
		// The demo's case: a perfect start, a fit 22.7% off.
		"objective worse": {Result{Objective: []ObjectiveError{{BeforeRelErr: 0.0, AfterRelErr: 0.227}},
			PredictionError: []LevelError{lvl(0.1, 0.1, 0.1, 0.1)}}, "objective error 22.7% after, 0.0% before"},
		"levels worse":       {Result{PredictionError: []LevelError{lvl(0.02, 0.01, 0.10, nan)}}, "p50 TTFT/TPOT error 10.0% after, 1.5% before"},
		"within tolerance":   {Result{Objective: []ObjectiveError{{BeforeRelErr: 0.050, AfterRelErr: 0.055}}}, ""},
		"nothing to compare": {Result{Objective: []ObjectiveError{{BeforeRelErr: nan, AfterRelErr: 0.5}}}, ""},
	} {
		if got := c.r.Worse(); got != c.want {
			t.Errorf("%s: Worse() = %q, want %q", name, got, c.want)
		}
	}
}
