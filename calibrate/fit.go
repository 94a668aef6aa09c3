// Package calibrate fits model parameters to measurements by nonlinear least
// squares.
//
// It also carries out the commands that fit or judge a cost profile (the
// cli*.go and derivecli.go files): hone calibrate (Run), hone profile derive
// (DeriveProfile), check (ProfileCheck) and steps (ProfileSteps), and hone
// validate silicon (ValidateSilicon).
//
// It is meant for calibrating a cost profile's coefficients against measured
// latency records, where the "model" is a simulator run: every evaluation is
// comparatively expensive, the model may be piecewise (a discrete-event
// simulation moves in steps, not smoothly), and the coefficients span several
// orders of magnitude (1e-4 ms/token next to 1.5 ms of fixed overhead).
// LeastSquares therefore uses Levenberg–Marquardt with
//
//   - a central-difference Jacobian whose step is relative to each parameter
//     and deliberately not tiny (Options.RelStep), so that a piecewise model
//     still shows a slope;
//   - parameters scaled by their starting values and Marquardt's column
//     scaling, so that the fit does not care about units;
//   - bounds enforced by projection, with parameters held at a bound left
//     out of the step while the gradient pushes them outward;
//   - an identifiability check on the final Jacobian: a parameter that does
//     not move the residuals, or only moves them together with others, is
//     reported (Fit.Identifiable, Fit.Notes) rather than given a meaningless
//     standard error.
package calibrate

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/mat"
)

// Model returns the residuals for parameters theta: model − measured, one per
// observation, each already divided by its scale or uncertainty if the caller
// wants weighting. The number of residuals must not depend on theta. The
// model receives a copy of theta and may keep or modify it.
type Model func(theta []float64) ([]float64, error)

// Options tunes LeastSquares. The zero value is usable.
type Options struct {
	// Lower and Upper bound each parameter (nil means unbounded; ±Inf entries
	// leave one side open). Coefficients are typically positive, so a small
	// positive Lower is common. A starting value outside the bounds is moved
	// onto them, with a note.
	Lower, Upper []float64

	// RelStep is the finite-difference step relative to each parameter's
	// magnitude (default 1e-3): h = RelStep·max(|θ|, |θ0|/100), with |θ0|
	// taken as 1 where θ0 is 0. Differences are central, one-sided next to
	// a bound. The model may be piecewise, e.g. a
	// discrete-event simulation, so steps must not be tiny: a step that does
	// not cross a "stair" of the model yields a zero derivative.
	RelStep float64

	// MaxIter bounds the number of Levenberg–Marquardt iterations, i.e.
	// Jacobian evaluations (default 50).
	MaxIter int

	// Tol stops the fit when an accepted step lowers the cost (RSS) by less
	// than Tol relative, or moves the scaled parameters by less than Tol
	// relative (default 1e-8).
	Tol float64

	// Names optionally names the parameters in notes and errors; default
	// "theta[i]".
	Names []string

	// Clusters, when set, gives each residual's cluster: residuals of one
	// cluster may be correlated (requests of one level of one run share its
	// queue), residuals of different clusters are taken as independent.
	// StdErr is then cluster-robust (the sandwich (JᵀJ)⁻¹ Σ_g J_gᵀ r_g r_gᵀ J_g
	// (JᵀJ)⁻¹ with the CR1 small-sample factor), never below the classical
	// one. Its length must be the number of residuals.
	Clusters []int
}

// Fit is the result of LeastSquares.
type Fit struct {
	// Theta holds the fitted parameters.
	Theta []float64
	// StdErr is sqrt(diag(s²·(JᵀJ)⁻¹)) with s² = RSS/(n−q), q the number of
	// identifiable parameters, J the Jacobian at Theta, or with
	// Options.Clusters the larger of that and the cluster-robust error. It
	// is NaN for a parameter that is not identifiable (the others are then
	// conditional on it staying where it is) and for all when n ≤ q.
	StdErr []float64
	// RelStdErr is StdErr/|Theta| (+Inf where Theta is 0).
	RelStdErr []float64
	// Residuals at Theta.
	Residuals []float64
	// RSS is the residual sum of squares at Theta.
	RSS float64
	// Iter counts Levenberg–Marquardt iterations (Jacobian evaluations,
	// not counting the final one used for the standard errors).
	Iter int
	// Converged reports whether a stopping criterion other than MaxIter was
	// met; Notes says which.
	Converged bool
	// Evals counts calls of the model.
	Evals int
	// Identifiable is false for a parameter whose column of the Jacobian is
	// (numerically) zero, or (nearly) collinear with other columns; Notes
	// names them.
	Identifiable []bool
	// Notes explains the stop and anything the caller should know: starting
	// values moved into bounds, parameters at a bound, parameters not
	// identifiable or poorly determined.
	Notes []string
}

// Defaults for Options' zero fields.
const (
	DefaultRelStep = 1e-3
	DefaultMaxIter = 50
	DefaultTol     = 1e-8
)

const (
	// zeroColTol: a Jacobian column (in units of relative parameter change)
	// this much smaller than the largest counts as zero.
	zeroColTol = 1e-10
	// collinearTol: with unit-norm columns, a singular value this much below
	// the largest marks a (near-)collinear group of parameters.
	collinearTol = 1e-7
	// collinearMember: a parameter belongs to a collinear group when its
	// weight in the corresponding right singular vector is at least this.
	collinearMember = 0.1
	lambda0         = 1e-3
	lambdaMin       = 1e-12
	lambdaMax       = 1e16
)

// problem carries the model and the bookkeeping shared by the steps.
type problem struct {
	m      Model
	names  []string
	lo, hi []float64
	scale  []float64 // |theta0|, or 1 where theta0 is 0
	rel    float64
	n      int // number of residuals, -1 until known
	evals  int
	// clusters is Options.Clusters.
	clusters []int
}

// errNonFinite marks a model that returned NaN or ±Inf.
var errNonFinite = errors.New("non-finite residual")

// LeastSquares minimises the sum of squared residuals of m over theta,
// starting at theta0, by Levenberg–Marquardt with a finite-difference
// Jacobian. It returns an error for malformed input (no parameters, fewer
// residuals than parameters, bounds of the wrong length or crossed, a
// non-finite start), when the model fails, when the number of residuals
// changes, and when a residual is NaN or ±Inf at the starting point or
// during a Jacobian evaluation. A non-finite residual at a trial point
// merely rejects that step (and is noted). A parameter that does not affect
// the residuals is not an error: it stays put and is reported as not
// identifiable.
func LeastSquares(m Model, theta0 []float64, opt Options) (Fit, error) {
	pr, theta, notes, err := setup(m, theta0, opt)
	if err != nil {
		return Fit{}, err
	}
	maxIter := opt.MaxIter
	if maxIter == 0 {
		maxIter = DefaultMaxIter
	}
	tol := opt.Tol
	if tol == 0 {
		tol = DefaultTol
	}
	s, err := newLM(pr, theta, notes, tol)
	if err != nil {
		return Fit{}, err
	}
	J, iter, err := s.run(maxIter)
	if err != nil {
		return Fit{}, err
	}
	s.noteStop(maxIter)
	ident, se, more := pr.uncertainty(J, s.theta, s.r, s.cost)
	s.notes = append(s.notes, more...)
	return s.fit(iter, ident, se), nil
}

// lm is the state of one Levenberg–Marquardt fit: the current point, its
// residuals and cost, the damping, and why the fit stopped.
type lm struct {
	pr    *problem
	tol   float64
	theta []float64
	r     []float64 // residuals at theta
	cost  float64   // sumSq(r)

	lambda      float64
	diag        []float64 // Marquardt scaling, running max of scaled column norms
	nanNoted    bool
	lastRelDrop float64
	notes       []string

	converged, stopped bool
	reason             string
}

// newLM evaluates the model at the starting point and checks that there
// are at least as many residuals as parameters.
func newLM(pr *problem, theta []float64, notes []string, tol float64) (*lm, error) {
	p := len(theta)
	r, err := pr.eval(theta)
	if err != nil {
		return nil, fmt.Errorf("calibrate: at the starting point: %w", err)
	}
	n := len(r)
	if n < p {
		return nil, fmt.Errorf("calibrate: %d observations (residuals) for %d parameters: need at least as many observations as parameters", n, p)
	}
	pr.n = n
	return &lm{
		pr: pr, tol: tol, theta: theta, r: r, cost: sumSq(r),
		lambda: lambda0, diag: make([]float64, p), lastRelDrop: math.NaN(), notes: notes,
	}, nil
}

// run iterates until a stopping criterion or maxIter, and returns the
// Jacobian at the final point and the iterations made.
func (s *lm) run(maxIter int) (J *mat.Dense, iter int, err error) {
	var jAt []float64 // theta at which J was evaluated
	for iter < maxIter {
		iter++
		J, err = s.pr.jacobian(s.theta, s.r)
		if err != nil {
			return nil, iter, err
		}
		jAt = clone(s.theta)
		done, err := s.iterate(J)
		if err != nil {
			return nil, iter, err
		}
		if done {
			break
		}
	}
	if jAt == nil || !equal(jAt, s.theta) {
		if J, err = s.pr.jacobian(s.theta, s.r); err != nil {
			return nil, iter, err
		}
	}
	return J, iter, nil
}

// converge stops the fit as converged, for reason.
func (s *lm) converge(reason string) (done bool) {
	s.converged, s.reason = true, reason
	return true
}

// iterate makes one iteration with the Jacobian J at the current point: it
// tests for convergence, then damps the step until one lowers the cost. It
// reports whether the fit is done.
func (s *lm) iterate(J *mat.Dense) (done bool, err error) {
	if s.cost == 0 {
		return s.converge("residuals are exactly zero"), nil
	}
	js, g, cn, anyNonZero := s.scaled(J)
	if !anyNonZero {
		s.reason = fmt.Sprintf("the Jacobian is zero at the current point: no parameter changes the residuals within RelStep=%g (a piecewise model needs a step large enough to cross its steps)", s.pr.rel)
		s.stopped = true
		return true, nil
	}
	// Gradient test: every column (nearly) orthogonal to the residuals.
	if gmax := maxCosine(g, cn, math.Sqrt(s.cost)); gmax <= s.tol {
		return s.converge(fmt.Sprintf("the residuals are orthogonal to the Jacobian (max cosine %.3g)", gmax)), nil
	}
	free := s.free(g, cn)
	if len(free) == 0 {
		return s.converge("every parameter is held at a bound by the gradient"), nil
	}
	st, err := s.dampedStep(js, free)
	if err != nil {
		return true, err
	}
	return s.search(st)
}

// scaled works in scaled coordinates x = theta/scale: it returns
// Js = J·diag(scale), the gradient of cost/2 in x (Jsᵀr), the column norms
// of Js, and whether any column is non-zero.
func (s *lm) scaled(J *mat.Dense) (js *mat.Dense, g, cn []float64, anyNonZero bool) {
	n, p := len(s.r), len(s.theta)
	js = mat.NewDense(n, p, nil)
	js.Apply(func(i, j int, v float64) float64 { return v * s.pr.scale[j] }, J)
	g = make([]float64, p)
	cn = make([]float64, p)
	for j := 0; j < p; j++ {
		col := mat.Col(nil, j, js)
		cn[j] = math.Sqrt(sumSq(col))
		g[j] = dot(col, s.r)
		if cn[j] > 0 {
			anyNonZero = true
		}
	}
	return js, g, cn, anyNonZero
}

// maxCosine is the largest cosine between a non-zero column (norm cn, dot
// product with the residuals g) and the residuals (norm rn).
func maxCosine(g, cn []float64, rn float64) float64 {
	gmax := 0.0
	for j := range g {
		if cn[j] > 0 {
			gmax = math.Max(gmax, math.Abs(g[j])/(cn[j]*rn))
		}
	}
	return gmax
}

// free lists the free parameters: not pinned at a bound the gradient pushes
// against. It updates their Marquardt scaling.
func (s *lm) free(g, cn []float64) []int {
	pr := s.pr
	var free []int
	for j := range s.theta {
		if pr.lo[j] == pr.hi[j] ||
			(s.theta[j] <= pr.lo[j] && g[j] > 0) ||
			(s.theta[j] >= pr.hi[j] && g[j] < 0) {
			continue
		}
		free = append(free, j)
		s.diag[j] = math.Max(s.diag[j], cn[j])
		if s.diag[j] == 0 {
			s.diag[j] = 1
		}
	}
	return free
}

// lmStep is the SVD from which the damped step is taken for any λ.
type lmStep struct {
	free []int
	diag []float64
	sv   []float64
	v    mat.Dense
	utr  mat.VecDense
}

// dampedStep factors Jd = Js[:, free]·diag(1/D); with y = D·x the damped
// step is y = −V·diag(σ/(σ²+λ))·Uᵀr.
func (s *lm) dampedStep(js *mat.Dense, free []int) (*lmStep, error) {
	n, q := len(s.r), len(free)
	jd := mat.NewDense(n, q, nil)
	for k, j := range free {
		for i := 0; i < n; i++ {
			jd.Set(i, k, js.At(i, j)/s.diag[j])
		}
	}
	var svd mat.SVD
	if !svd.Factorize(jd, mat.SVDThin) {
		return nil, fmt.Errorf("calibrate: SVD of the Jacobian failed at theta=%v", s.theta)
	}
	st := &lmStep{free: free, diag: s.diag, sv: svd.Values(nil)}
	var u mat.Dense
	svd.UTo(&u)
	svd.VTo(&st.v)
	st.utr.MulVec(u.T(), mat.NewVecDense(n, s.r))
	return st, nil
}

// x is the damped step for λ, in x, over all p parameters.
func (st *lmStep) x(lambda float64, p int) []float64 {
	step := make([]float64, p)
	for k, j := range st.free {
		s := 0.0
		for i, sig := range st.sv {
			if sig > 0 {
				s += st.v.At(k, i) * sig / (sig*sig + lambda) * st.utr.AtVec(i)
			}
		}
		step[j] = -s / st.diag[j]
	}
	return step
}

// search raises the damping until a step lowers the cost, and takes it. It
// reports whether the fit is done.
func (s *lm) search(st *lmStep) (done bool, err error) {
	pr := s.pr
	for {
		step := st.x(s.lambda, len(s.theta))
		trial := clone(s.theta)
		for j := range trial {
			trial[j] = clamp(s.theta[j]+step[j]*pr.scale[j], pr.lo[j], pr.hi[j])
		}
		if equal(trial, s.theta) {
			return s.converge("no step lowers the cost any more (the damped step fell below floating-point resolution)"), nil
		}
		rt, err := pr.eval(trial)
		switch {
		case errors.Is(err, errNonFinite):
			if !s.nanNoted {
				s.nanNoted = true
				s.notes = append(s.notes, fmt.Sprintf("the model gave a non-finite residual at a trial point (%v); such steps were rejected", err))
			}
		case err != nil:
			return true, err
		default:
			if ct := sumSq(rt); ct < s.cost {
				return s.accept(trial, rt, ct), nil
			}
		}
		s.lambda *= 10
		if s.lambda > lambdaMax {
			return s.converge("no step lowers the cost any more (local minimum at the resolution of the model and of the finite differences)"), nil
		}
	}
}

// accept moves to trial (residuals rt, cost ct), relaxes the damping, and
// reports whether the fit has converged.
func (s *lm) accept(trial, rt []float64, ct float64) (done bool) {
	drop := (s.cost - ct) / s.cost
	s.lastRelDrop = drop
	dx, xn := 0.0, 0.0
	for j := range trial {
		d := (trial[j] - s.theta[j]) / s.pr.scale[j]
		dx += d * d
		xn += (s.theta[j] / s.pr.scale[j]) * (s.theta[j] / s.pr.scale[j])
	}
	s.theta, s.r, s.cost = trial, rt, ct
	s.lambda = math.Max(s.lambda/10, lambdaMin)
	switch {
	case s.cost == 0:
		return s.converge("residuals are exactly zero")
	case drop <= s.tol:
		return s.converge(fmt.Sprintf("relative change in cost %.3g ≤ Tol", drop))
	case math.Sqrt(dx) <= s.tol*(math.Sqrt(xn)+s.tol):
		return s.converge("relative step ≤ Tol")
	}
	return false
}

// noteStop puts why the fit stopped first in the notes.
func (s *lm) noteStop(maxIter int) {
	switch {
	case s.converged:
		s.notes = append([]string{"converged: " + s.reason}, s.notes...)
	case s.stopped:
		s.notes = append([]string{"not converged: " + s.reason}, s.notes...)
	default:
		s.notes = append([]string{fmt.Sprintf("not converged: MaxIter=%d reached (last relative change in cost %.3g)", maxIter, s.lastRelDrop)}, s.notes...)
	}
}

// fit is the result, with notes on parameters at a bound and poorly
// determined ones.
func (s *lm) fit(iter int, ident []bool, se []float64) Fit {
	pr, theta := s.pr, s.theta
	fit := Fit{
		Theta:        theta,
		StdErr:       se,
		RelStdErr:    make([]float64, len(theta)),
		Residuals:    s.r,
		RSS:          s.cost,
		Iter:         iter,
		Converged:    s.converged,
		Evals:        pr.evals,
		Identifiable: ident,
	}
	notes := s.notes
	var atBound, poor []string
	for j := range theta {
		fit.RelStdErr[j] = math.Abs(se[j] / theta[j])
		if pr.lo[j] < pr.hi[j] && (theta[j] == pr.lo[j] || theta[j] == pr.hi[j]) {
			atBound = append(atBound, fmt.Sprintf("%s=%g", pr.names[j], theta[j]))
		}
		if fit.RelStdErr[j] > 1 {
			poor = append(poor, fmt.Sprintf("%s (relative standard error %.3g)", pr.names[j], fit.RelStdErr[j]))
		}
	}
	if len(atBound) > 0 {
		notes = append(notes, "at a bound (its standard error ignores the bound): "+strings.Join(atBound, ", "))
	}
	if len(poor) > 0 {
		notes = append(notes, "poorly determined: "+strings.Join(poor, ", "))
	}
	fit.Notes = notes
	return fit
}

// setup validates the inputs and fills in defaults.
func setup(m Model, theta0 []float64, opt Options) (*problem, []float64, []string, error) {
	p := len(theta0)
	switch {
	case m == nil:
		return nil, nil, nil, errors.New("calibrate: nil model")
	case p == 0:
		return nil, nil, nil, errors.New("calibrate: no parameters (theta0 is empty)")
	case opt.Lower != nil && len(opt.Lower) != p:
		return nil, nil, nil, fmt.Errorf("calibrate: %d lower bounds for %d parameters", len(opt.Lower), p)
	case opt.Upper != nil && len(opt.Upper) != p:
		return nil, nil, nil, fmt.Errorf("calibrate: %d upper bounds for %d parameters", len(opt.Upper), p)
	case opt.Names != nil && len(opt.Names) != p:
		return nil, nil, nil, fmt.Errorf("calibrate: %d names for %d parameters", len(opt.Names), p)
	case opt.RelStep < 0 || opt.RelStep >= 1 || math.IsNaN(opt.RelStep):
		return nil, nil, nil, fmt.Errorf("calibrate: RelStep=%g, want 0 < RelStep < 1 (0 for the default %g)", opt.RelStep, DefaultRelStep)
	case opt.MaxIter < 0:
		return nil, nil, nil, fmt.Errorf("calibrate: MaxIter=%d is negative", opt.MaxIter)
	case opt.Tol < 0 || math.IsNaN(opt.Tol):
		return nil, nil, nil, fmt.Errorf("calibrate: Tol=%g is negative", opt.Tol)
	}
	pr := &problem{
		m:        m,
		names:    make([]string, p),
		lo:       make([]float64, p),
		hi:       make([]float64, p),
		scale:    make([]float64, p),
		rel:      opt.RelStep,
		n:        -1,
		clusters: opt.Clusters,
	}
	if pr.rel == 0 {
		pr.rel = DefaultRelStep
	}
	for j := range p {
		pr.names[j] = fmt.Sprintf("theta[%d]", j)
		if opt.Names != nil && opt.Names[j] != "" {
			pr.names[j] = opt.Names[j]
		}
		pr.lo[j], pr.hi[j] = math.Inf(-1), math.Inf(1)
		if opt.Lower != nil {
			pr.lo[j] = opt.Lower[j]
		}
		if opt.Upper != nil {
			pr.hi[j] = opt.Upper[j]
		}
		if math.IsNaN(pr.lo[j]) || math.IsNaN(pr.hi[j]) || pr.lo[j] > pr.hi[j] {
			return nil, nil, nil, fmt.Errorf("calibrate: bounds of %s are [%g, %g]", pr.names[j], pr.lo[j], pr.hi[j])
		}
		if math.IsNaN(theta0[j]) || math.IsInf(theta0[j], 0) {
			return nil, nil, nil, fmt.Errorf("calibrate: starting value of %s is %g", pr.names[j], theta0[j])
		}
	}
	theta := clone(theta0)
	var notes []string
	for j := range theta {
		if c := clamp(theta[j], pr.lo[j], pr.hi[j]); c != theta[j] {
			notes = append(notes, fmt.Sprintf("starting value %s=%g moved into its bounds, to %g", pr.names[j], theta[j], c))
			theta[j] = c
		}
		pr.scale[j] = math.Abs(theta[j])
		if pr.scale[j] == 0 {
			pr.scale[j] = 1
		}
	}
	return pr, theta, notes, nil
}

// eval calls the model and checks what it returns.
func (pr *problem) eval(theta []float64) ([]float64, error) {
	pr.evals++
	r, err := pr.m(clone(theta))
	if err != nil {
		return nil, fmt.Errorf("calibrate: model at theta=%v: %w", theta, err)
	}
	if pr.clusters != nil && len(r) != len(pr.clusters) {
		return nil, fmt.Errorf("calibrate: model returned %d residuals, Options.Clusters has %d", len(r), len(pr.clusters))
	}
	if pr.n >= 0 && len(r) != pr.n {
		return nil, fmt.Errorf("calibrate: model returned %d residuals at theta=%v, earlier %d (the observations must not depend on theta)", len(r), theta, pr.n)
	}
	for i, v := range r {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("calibrate: residual %d is %g at theta=%v: %w", i, v, theta, errNonFinite)
		}
	}
	return r, nil
}

// jacobian returns ∂r/∂theta by finite differences: central where the
// bounds allow, one-sided next to a bound, and across the whole interval
// when it is narrower than two steps. r0 are the residuals at theta.
func (pr *problem) jacobian(theta, r0 []float64) (*mat.Dense, error) {
	n, p := len(r0), len(theta)
	J := mat.NewDense(n, p, nil)
	t := clone(theta)
	at := func(j int, v float64) ([]float64, error) {
		t[j] = v
		defer func() { t[j] = theta[j] }()
		r, err := pr.eval(t)
		if err != nil {
			return nil, fmt.Errorf("%w (finite difference of %s)", err, pr.names[j])
		}
		return r, nil
	}
	for j := 0; j < p; j++ {
		if pr.lo[j] == pr.hi[j] {
			continue // fixed parameter: zero column
		}
		h := pr.rel * math.Max(math.Abs(theta[j]), 1e-2*pr.scale[j])
		up, dn := theta[j]+h, theta[j]-h
		var rUp, rDn []float64
		var err error
		switch okUp, okDn := up <= pr.hi[j], dn >= pr.lo[j]; {
		case okUp && okDn:
		case okUp:
			dn = theta[j]
			rDn = r0
		case okDn:
			up = theta[j]
			rUp = r0
		default:
			up, dn = pr.hi[j], pr.lo[j]
		}
		if rUp == nil {
			if rUp, err = at(j, up); err != nil {
				return nil, err
			}
		}
		if rDn == nil {
			if rDn, err = at(j, dn); err != nil {
				return nil, err
			}
		}
		d := up - dn
		for i := 0; i < n; i++ {
			J.Set(i, j, (rUp[i]-rDn[i])/d)
		}
	}
	return J, nil
}

// uncertainty decides which parameters the Jacobian J at theta identifies
// and returns their standard errors.
func (pr *problem) uncertainty(J *mat.Dense, theta, res []float64, rss float64) (ident []bool, se []float64, notes []string) {
	n, p := J.Dims()
	ident = make([]bool, p)
	se = make([]float64, p)
	for j := range se {
		se[j] = math.NaN()
	}
	cn, active, notes := pr.nonZeroColumns(J, theta)
	active, sv, v, ok := pr.dropCollinear(J, cn, active, &notes)
	if !ok {
		return ident, se, notes
	}
	for _, j := range active {
		ident[j] = true
	}
	q := len(active)
	if q == 0 {
		return ident, se, notes
	}
	dof := n - q
	if dof <= 0 {
		notes = append(notes, fmt.Sprintf("%d observations for %d identifiable parameters leave no degrees of freedom: no standard errors", n, q))
		return ident, se, notes
	}
	s2 := rss / float64(dof)
	bread := normalCov(sv, v, q)
	for k, j := range active {
		se[j] = math.Sqrt(s2*bread.At(k, k)) / cn[j]
	}
	if pr.clusters == nil {
		return ident, se, notes
	}
	notes = append(notes, pr.clusterRobust(J, cn, active, res, bread, dof, se))
	return ident, se, notes
}

// nonZeroColumns returns the Jacobian's column norms (in units of theta)
// and the parameters whose column is not (numerically) zero per relative
// change of theta, with a note naming the others.
func (pr *problem) nonZeroColumns(J *mat.Dense, theta []float64) (cn []float64, active []int, notes []string) {
	_, p := J.Dims()
	cn = make([]float64, p)   // column norms in units of theta
	rcn := make([]float64, p) // column norms per relative change of theta
	maxRcn := 0.0
	for j := 0; j < p; j++ {
		cn[j] = math.Sqrt(sumSq(mat.Col(nil, j, J)))
		mag := math.Abs(theta[j])
		if mag == 0 {
			mag = pr.scale[j]
		}
		rcn[j] = cn[j] * mag
		maxRcn = math.Max(maxRcn, rcn[j])
	}
	var zero []int
	for j := 0; j < p; j++ {
		if rcn[j] == 0 || rcn[j] <= zeroColTol*maxRcn {
			zero = append(zero, j)
		} else {
			active = append(active, j)
		}
	}
	if len(zero) > 0 {
		verb := "does"
		if len(zero) > 1 {
			verb = "do"
		}
		notes = append(notes, fmt.Sprintf("not identifiable: %s %s not affect the residuals (zero Jacobian column at the fit); left where the fit stopped", pr.list(zero), verb))
	}
	return cn, active, notes
}

// dropCollinear drops (near-)collinear groups from active until the rest is
// well-conditioned, noting each group. It returns the rest and the SVD of
// its unit-norm columns; ok is false (with a note) when an SVD failed.
func (pr *problem) dropCollinear(J *mat.Dense, cn []float64, active []int, notes *[]string) (rest []int, sv []float64, v *mat.Dense, ok bool) {
	n, _ := J.Dims()
	v = new(mat.Dense)
	for len(active) > 0 {
		jn := mat.NewDense(n, len(active), nil)
		for k, j := range active {
			for i := 0; i < n; i++ {
				jn.Set(i, k, J.At(i, j)/cn[j])
			}
		}
		var svd mat.SVD
		if !svd.Factorize(jn, mat.SVDThin) {
			*notes = append(*notes, "SVD of the final Jacobian failed: no standard errors")
			return active, sv, v, false
		}
		sv = svd.Values(nil)
		v.Reset()
		svd.VTo(v)
		drop := collinear(sv, v, len(active))
		if len(drop) == 0 {
			break
		}
		var keep, group []int
		for k, j := range active {
			if drop[k] {
				group = append(group, j)
			} else {
				keep = append(keep, j)
			}
		}
		*notes = append(*notes, fmt.Sprintf("not identifiable: %s are (nearly) collinear, the data determine only a combination of them; the other standard errors are conditional on their values", pr.list(group)))
		active = keep
	}
	return active, sv, v, true
}

// collinear marks, for each singular value (sv, right singular vectors v
// over m columns) negligible next to the largest, the columns that weigh in
// its singular vector, and at least the heaviest one.
func collinear(sv []float64, v *mat.Dense, m int) map[int]bool {
	drop := make(map[int]bool)
	for i, s := range sv {
		if s > collinearTol*sv[0] {
			continue
		}
		best, bestW := 0, -1.0
		for k := 0; k < m; k++ {
			w := math.Abs(v.At(k, i))
			if w >= collinearMember {
				drop[k] = true
			}
			if w > bestW {
				best, bestW = k, w
			}
		}
		drop[best] = true
	}
	return drop
}

// normalCov is the covariance of the normalised parameters, up to s²:
// V·diag(1/σ²)·Vᵀ, q×q.
func normalCov(sv []float64, v *mat.Dense, q int) *mat.Dense {
	bread := mat.NewDense(q, q, nil)
	for a := 0; a < q; a++ {
		for b := 0; b < q; b++ {
			c := 0.0
			for i, s := range sv {
				c += v.At(a, i) * v.At(b, i) / (s * s)
			}
			bread.Set(a, b, c)
		}
	}
	return bread
}

// clusterRobust raises se to the cluster-robust standard error where that
// is larger: the sandwich bread·meat·bread with the scores Jnᵀr summed
// within each cluster, and the CR1 factor. It returns the note to add.
func (pr *problem) clusterRobust(J *mat.Dense, cn []float64, active []int, res []float64, bread *mat.Dense, dof int, se []float64) string {
	n, _ := J.Dims()
	q := len(active)
	scores := map[int][]float64{}
	for i := 0; i < n; i++ {
		g := pr.clusters[i]
		sc := scores[g]
		if sc == nil {
			sc = make([]float64, q)
			scores[g] = sc
		}
		for k, j := range active {
			sc[k] += J.At(i, j) / cn[j] * res[i]
		}
	}
	groups := len(scores)
	if groups < 2 {
		return "one cluster of residuals: standard errors assume independent residuals"
	}
	// Sum the clusters in a fixed order: a map's order is random, and
	// float addition is not associative, so the last digit of a standard
	// error would change from run to run.
	meat := mat.NewDense(q, q, nil)
	for _, g := range slices.Sorted(maps.Keys(scores)) {
		sc := scores[g]
		for a := 0; a < q; a++ {
			for b := 0; b < q; b++ {
				meat.Set(a, b, meat.At(a, b)+sc[a]*sc[b])
			}
		}
	}
	var cov mat.Dense
	cov.Mul(bread, meat)
	cov.Mul(&cov, bread)
	cr1 := float64(groups) / float64(groups-1) * float64(n-1) / float64(dof)
	raised := 0
	for k, j := range active {
		if c := math.Sqrt(cr1*cov.At(k, k)) / cn[j]; c > se[j] {
			se[j] = c
			raised++
		}
	}
	note := fmt.Sprintf("standard errors cluster-robust over %d clusters of residuals (requests of one level of one run), %d of %d above the independent-residual formula", groups, raised, q)
	if groups <= 2*q {
		note += fmt.Sprintf("; with %d clusters for %d parameters they are themselves uncertain (give more runs or levels)", groups, q)
	}
	return note
}

func (pr *problem) list(idx []int) string {
	s := make([]string, len(idx))
	for k, j := range idx {
		s[k] = pr.names[j]
	}
	return strings.Join(s, ", ")
}

func sumSq(x []float64) float64 { return dot(x, x) }

func dot(x, y []float64) float64 {
	s := 0.0
	for i := range x {
		s += x[i] * y[i]
	}
	return s
}

func clone(x []float64) []float64 { return append([]float64(nil), x...) }

func clamp(x, lo, hi float64) float64 { return math.Min(math.Max(x, lo), hi) }

func equal(x, y []float64) bool {
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
