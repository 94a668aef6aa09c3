package calibrate

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// latency is a cost-profile-like model: fixed overhead, per-token and
// quadratic (attention) terms, with coefficients of very different sizes.
func latency(theta []float64, tokens float64) float64 {
	return theta[0] + theta[1]*tokens + theta[2]*tokens*tokens
}

func tokenGrid() []float64 {
	var x []float64
	for t := 16.0; t <= 8192; t *= 1.5 {
		x = append(x, t)
	}
	return x
}

func hasNote(f Fit, sub string) bool {
	for _, n := range f.Notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

func TestLinearExact(t *testing.T) {
	truth := []float64{1.5, 1e-4, 3e-9}
	x := tokenGrid()
	y := make([]float64, len(x))
	for i, xi := range x {
		y[i] = latency(truth, xi)
	}
	m := func(th []float64) ([]float64, error) {
		r := make([]float64, len(x))
		for i, xi := range x {
			r[i] = latency(th, xi) - y[i]
		}
		return r, nil
	}
	f, err := LeastSquares(m, []float64{3, 5e-5, 1e-8}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Converged {
		t.Errorf("not converged: %v", f.Notes)
	}
	for j, want := range truth {
		if rel := math.Abs(f.Theta[j]-want) / want; rel > 1e-9 {
			t.Errorf("theta[%d] = %.15g, want %g (relative error %.3g)", j, f.Theta[j], want, rel)
		}
		if !f.Identifiable[j] {
			t.Errorf("theta[%d] reported not identifiable", j)
		}
		if math.IsNaN(f.StdErr[j]) || f.RelStdErr[j] > 1e-6 {
			t.Errorf("theta[%d]: StdErr %g (relative %g), want ≈ 0 for noise-free data", j, f.StdErr[j], f.RelStdErr[j])
		}
	}
	if f.RSS > 1e-20 {
		t.Errorf("RSS = %g", f.RSS)
	}
	if len(f.Residuals) != len(x) || f.Evals == 0 || f.Iter == 0 {
		t.Errorf("bookkeeping: %d residuals, %d evals, %d iterations", len(f.Residuals), f.Evals, f.Iter)
	}
	t.Logf("iter=%d evals=%d notes=%q", f.Iter, f.Evals, f.Notes)
}

// decay builds an exponential-decay problem y = A·exp(−t/τ) + C with
// Gaussian noise of standard deviation sigma; residuals are weighted by it.
func decay(rng *rand.Rand, truth []float64, sigma float64) Model {
	var ts, y []float64
	for t := 0.0; t <= 10; t += 0.2 {
		ts = append(ts, t)
		y = append(y, truth[0]*math.Exp(-t/truth[1])+truth[2]+sigma*rng.NormFloat64())
	}
	return func(th []float64) ([]float64, error) {
		r := make([]float64, len(ts))
		for i, t := range ts {
			r[i] = (th[0]*math.Exp(-t/th[1]) + th[2] - y[i]) / sigma
		}
		return r, nil
	}
}

func TestExponentialNoisy(t *testing.T) {
	truth := []float64{5, 2, 0.5}
	m := decay(rand.New(rand.NewPCG(1, 2)), truth, 0.05)
	f, err := LeastSquares(m, []float64{3, 1, 1}, Options{Lower: []float64{0, 1e-3, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Converged {
		t.Errorf("not converged: %v", f.Notes)
	}
	for j, want := range truth {
		if !f.Identifiable[j] || !(f.StdErr[j] > 0) {
			t.Fatalf("theta[%d]: identifiable=%v StdErr=%g", j, f.Identifiable[j], f.StdErr[j])
		}
		if z := math.Abs(f.Theta[j]-want) / f.StdErr[j]; z > 3 {
			t.Errorf("theta[%d] = %g ± %g, true %g is %.1f SE away", j, f.Theta[j], f.StdErr[j], want, z)
		}
	}
	// Residuals are weighted by the true sigma, so s² should be near 1.
	if s2 := f.RSS / float64(len(f.Residuals)-3); s2 < 0.5 || s2 > 1.6 {
		t.Errorf("s² = %g, want ≈ 1", s2)
	}
	t.Logf("theta=%v stderr=%v iter=%d evals=%d", f.Theta, f.StdErr, f.Iter, f.Evals)
}

// The standard errors must be calibrated, not just large: over many noise
// draws about 95% of the ±1.96 SE intervals should cover the truth.
func TestExponentialCoverage(t *testing.T) {
	truth := []float64{5, 2, 0.5}
	const reps = 200
	covered := make([]int, 3)
	for k := range reps {
		m := decay(rand.New(rand.NewPCG(uint64(k), 7)), truth, 0.05)
		f, err := LeastSquares(m, []float64{3, 1, 1}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for j, want := range truth {
			if math.Abs(f.Theta[j]-want) <= 1.96*f.StdErr[j] {
				covered[j]++
			}
		}
	}
	for j, c := range covered {
		if frac := float64(c) / reps; frac < 0.88 || frac > 0.99 {
			t.Errorf("theta[%d]: 95%% intervals cover the truth in %.0f%% of %d fits", j, 100*frac, reps)
		}
	}
}

func TestZeroColumnNotIdentifiable(t *testing.T) {
	x := tokenGrid()
	m := func(th []float64) ([]float64, error) {
		r := make([]float64, len(x))
		for i, xi := range x {
			r[i] = th[0] + th[1]*xi - (2 + 1e-3*xi) // th[2] is ignored
		}
		return r, nil
	}
	theta0 := []float64{1, 1e-4, 7}
	f, err := LeastSquares(m, theta0, Options{Names: []string{"overhead", "per_token", "unused"}})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Converged {
		t.Errorf("not converged: %v", f.Notes)
	}
	if want := []bool{true, true, false}; !equalBools(f.Identifiable, want) {
		t.Errorf("Identifiable = %v, want %v", f.Identifiable, want)
	}
	if !math.IsNaN(f.StdErr[2]) || math.IsNaN(f.StdErr[0]) || math.IsNaN(f.StdErr[1]) {
		t.Errorf("StdErr = %v, want NaN only for the unused parameter", f.StdErr)
	}
	if f.Theta[2] != theta0[2] {
		t.Errorf("unused parameter moved from %g to %g", theta0[2], f.Theta[2])
	}
	if math.Abs(f.Theta[0]-2) > 1e-9 || math.Abs(f.Theta[1]-1e-3) > 1e-12 {
		t.Errorf("theta = %v, want [2 0.001 ·]", f.Theta)
	}
	if !hasNote(f, "unused does not affect the residuals") {
		t.Errorf("no note names the unused parameter: %q", f.Notes)
	}
}

func TestCollinearNotIdentifiable(t *testing.T) {
	x := tokenGrid()
	m := func(th []float64) ([]float64, error) {
		r := make([]float64, len(x))
		for i, xi := range x {
			r[i] = (th[0]+th[1])*xi + th[2] - (3e-3*xi + 1.5) // only th[0]+th[1] matters
		}
		return r, nil
	}
	f, err := LeastSquares(m, []float64{1e-3, 1e-3, 1}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, false, true}; !equalBools(f.Identifiable, want) {
		t.Errorf("Identifiable = %v, want %v (notes %q)", f.Identifiable, want, f.Notes)
	}
	if !math.IsNaN(f.StdErr[0]) || !math.IsNaN(f.StdErr[1]) || math.IsNaN(f.StdErr[2]) {
		t.Errorf("StdErr = %v", f.StdErr)
	}
	if sum := f.Theta[0] + f.Theta[1]; math.Abs(sum-3e-3) > 1e-12 || math.Abs(f.Theta[2]-1.5) > 1e-9 {
		t.Errorf("theta = %v: sum of the collinear pair %g, want 3e-3; intercept want 1.5", f.Theta, sum)
	}
	if !hasNote(f, "theta[0], theta[1] are (nearly) collinear") {
		t.Errorf("notes %q do not name the collinear pair", f.Notes)
	}
}

func TestAllZeroJacobian(t *testing.T) {
	m := func(th []float64) ([]float64, error) { return []float64{1, 2, 3}, nil }
	f, err := LeastSquares(m, []float64{1, 2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Converged || f.Identifiable[0] || f.Identifiable[1] || !hasNote(f, "Jacobian is zero") {
		t.Errorf("got converged=%v identifiable=%v notes=%q", f.Converged, f.Identifiable, f.Notes)
	}
}

func TestBounds(t *testing.T) {
	// Truth has a negative intercept and a slope above the upper bound.
	x := []float64{0, 1, 2, 3, 4, 5}
	var outside int
	lo, hi := []float64{0, 0.1}, []float64{10, 1.5}
	m := func(th []float64) ([]float64, error) {
		for j := range th {
			if th[j] < lo[j] || th[j] > hi[j] {
				outside++
			}
		}
		r := make([]float64, len(x))
		for i, xi := range x {
			r[i] = th[0] + th[1]*xi - (-1 + 2*xi)
		}
		return r, nil
	}
	// The start is outside the bounds too.
	f, err := LeastSquares(m, []float64{-3, 1}, Options{Lower: lo, Upper: hi})
	if err != nil {
		t.Fatal(err)
	}
	if outside > 0 {
		t.Errorf("model evaluated %d times outside the bounds", outside)
	}
	// With slope pinned at 1.5 the best intercept is mean(y − 1.5x) = 0.25.
	if f.Theta[1] != 1.5 || math.Abs(f.Theta[0]-0.25) > 1e-9 {
		t.Errorf("theta = %v, want [0.25 1.5]", f.Theta)
	}
	if !f.Converged {
		t.Errorf("not converged: %q", f.Notes)
	}
	if !hasNote(f, "moved into its bounds") || !hasNote(f, "at a bound") {
		t.Errorf("notes %q", f.Notes)
	}

	// Intercept pinned at its lower bound 0, slope free: slope = Σxy/Σx².
	hi = []float64{10, 10}
	f, err = LeastSquares(m, []float64{1, 1}, Options{Lower: lo, Upper: hi})
	if err != nil {
		t.Fatal(err)
	}
	sxy, sxx := 0.0, 0.0
	for _, xi := range x {
		sxy += xi * (-1 + 2*xi)
		sxx += xi * xi
	}
	if f.Theta[0] != 0 || math.Abs(f.Theta[1]-sxy/sxx) > 1e-9 {
		t.Errorf("theta = %v, want [0 %g]", f.Theta, sxy/sxx)
	}
	if outside > 0 {
		t.Errorf("model evaluated %d times outside the bounds", outside)
	}
}

func TestFixedByEqualBounds(t *testing.T) {
	x := tokenGrid()
	m := func(th []float64) ([]float64, error) {
		r := make([]float64, len(x))
		for i, xi := range x {
			r[i] = th[0] + th[1]*xi - (2 + 1e-3*xi)
		}
		return r, nil
	}
	f, err := LeastSquares(m, []float64{1, 1e-3}, Options{Lower: []float64{1, 0}, Upper: []float64{1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if f.Theta[0] != 1 || f.Identifiable[0] || !f.Identifiable[1] {
		t.Errorf("theta=%v identifiable=%v", f.Theta, f.Identifiable)
	}
}

// A piecewise-constant model: its output is rounded to a grid of 1e-3, as a
// discrete-event simulation's would be quantised.
func TestPiecewiseModel(t *testing.T) {
	truth := []float64{1.5, 1e-4, 3e-9}
	x := tokenGrid()
	y := make([]float64, len(x))
	for i, xi := range x {
		y[i] = latency(truth, xi)
	}
	m := func(th []float64) ([]float64, error) {
		r := make([]float64, len(x))
		for i, xi := range x {
			r[i] = math.Round(latency(th, xi)/1e-3)*1e-3 - y[i]
		}
		return r, nil
	}
	theta0 := []float64{3, 5e-5, 1e-8}
	f, err := LeastSquares(m, theta0, Options{RelStep: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Converged {
		t.Errorf("not converged: %q", f.Notes)
	}
	for j, want := range truth {
		if rel := math.Abs(f.Theta[j]-want) / want; rel > 0.01 {
			t.Errorf("theta[%d] = %g, want %g within 1%% (off by %.2g%%)", j, f.Theta[j], want, 100*rel)
		}
	}
	t.Logf("theta=%v iter=%d evals=%d notes=%q", f.Theta, f.Iter, f.Evals, f.Notes)

	// A tiny step sees no slope: reported, not a crash.
	f, err = LeastSquares(m, theta0, Options{RelStep: 1e-9})
	if err != nil {
		t.Fatal(err)
	}
	if f.Converged || !hasNote(f, "RelStep") {
		t.Errorf("tiny RelStep: converged=%v notes=%q", f.Converged, f.Notes)
	}
}

func TestNonFiniteTrialPointRejected(t *testing.T) {
	// r = a² − 9: from a = 0.5 the Gauss–Newton step lands at 9.25, where
	// the model is undefined.
	m := func(th []float64) ([]float64, error) {
		if th[0] > 6 {
			return []float64{math.NaN(), math.NaN()}, nil
		}
		v := th[0]*th[0] - 9
		return []float64{v, v}, nil
	}
	f, err := LeastSquares(m, []float64{0.5}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.Theta[0]-3) > 1e-9 || !f.Converged || !hasNote(f, "non-finite residual at a trial point") {
		t.Errorf("theta=%v converged=%v notes=%q", f.Theta, f.Converged, f.Notes)
	}
}

func TestMaxIter(t *testing.T) {
	m := decay(rand.New(rand.NewPCG(3, 4)), []float64{5, 2, 0.5}, 0.05)
	f, err := LeastSquares(m, []float64{1, 10, 3}, Options{MaxIter: 1})
	if err != nil {
		t.Fatal(err)
	}
	if f.Converged || f.Iter != 1 || !hasNote(f, "MaxIter=1") {
		t.Errorf("converged=%v iter=%d notes=%q", f.Converged, f.Iter, f.Notes)
	}
}

func TestErrors(t *testing.T) {
	lin := func(th []float64) ([]float64, error) { return []float64{th[0] - 1, th[0] - 2, th[0] - 3}, nil }
	boom := errors.New("simulator exploded")
	calls := 0
	cases := []struct {
		name  string
		m     Model
		theta []float64
		opt   Options
		want  string
	}{
		{"nil model", nil, []float64{1}, Options{}, "nil model"},
		{"no parameters", lin, nil, Options{}, "no parameters"},
		{"too few observations", lin, []float64{1, 2, 3, 4}, Options{}, "3 observations (residuals) for 4 parameters"},
		{"lower length", lin, []float64{1}, Options{Lower: []float64{0, 0}}, "2 lower bounds for 1 parameters"},
		{"upper length", lin, []float64{1}, Options{Upper: []float64{}}, "0 upper bounds for 1 parameters"},
		{"names length", lin, []float64{1}, Options{Names: []string{"a", "b"}}, "2 names"},
		{"crossed bounds", lin, []float64{1}, Options{Lower: []float64{2}, Upper: []float64{1}, Names: []string{"alpha"}}, "bounds of alpha are [2, 1]"},
		{"bad start", lin, []float64{math.NaN()}, Options{}, "starting value of theta[0] is NaN"},
		{"bad RelStep", lin, []float64{1}, Options{RelStep: 2}, "RelStep=2"},
		{"bad MaxIter", lin, []float64{1}, Options{MaxIter: -1}, "MaxIter=-1"},
		{"NaN at start", func(th []float64) ([]float64, error) {
			return []float64{0, math.NaN()}, nil
		}, []float64{1}, Options{}, "residual 1 is NaN at theta=[1]"},
		{"model error", func(th []float64) ([]float64, error) { return nil, boom }, []float64{1}, Options{}, "simulator exploded"},
		{"residual count changes", func(th []float64) ([]float64, error) {
			calls++
			if calls > 1 {
				return []float64{1, 2, 3}, nil
			}
			return []float64{1, 2}, nil
		}, []float64{1}, Options{}, "returned 3 residuals"},
		{"NaN in Jacobian", func(th []float64) ([]float64, error) {
			if th[0] > 1 {
				return []float64{math.Inf(1), 0}, nil
			}
			return []float64{th[0], th[0]}, nil
		}, []float64{1}, Options{}, "finite difference of theta[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LeastSquares(c.m, c.theta, c.opt)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if c.name == "model error" && !errors.Is(err, boom) {
				t.Errorf("error %v does not wrap the model's", err)
			}
		})
	}
}

func TestExactlyDetermined(t *testing.T) {
	m := func(th []float64) ([]float64, error) { return []float64{th[0] - 1, th[1] - 2}, nil }
	f, err := LeastSquares(m, []float64{3, 3}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.Theta[0]-1) > 1e-12 || math.Abs(f.Theta[1]-2) > 1e-12 {
		t.Errorf("theta = %v", f.Theta)
	}
	if !math.IsNaN(f.StdErr[0]) || !hasNote(f, "no degrees of freedom") {
		t.Errorf("StdErr = %v, notes %q", f.StdErr, f.Notes)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
