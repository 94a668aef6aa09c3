// Package calibrate fits model parameters to measurements by nonlinear least
// squares.
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
	"math"
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
	p := len(theta)
	maxIter := opt.MaxIter
	if maxIter == 0 {
		maxIter = DefaultMaxIter
	}
	tol := opt.Tol
	if tol == 0 {
		tol = DefaultTol
	}

	r, err := pr.eval(theta)
	if err != nil {
		return Fit{}, fmt.Errorf("calibrate: at the starting point: %w", err)
	}
	n := len(r)
	if n < p {
		return Fit{}, fmt.Errorf("calibrate: %d observations (residuals) for %d parameters: need at least as many observations as parameters", n, p)
	}
	pr.n = n
	cost := sumSq(r)

	var (
		lambda      = lambda0
		diag        = make([]float64, p) // Marquardt scaling, running max of scaled column norms
		J           *mat.Dense
		jAt         []float64 // theta at which J was evaluated
		iter        int
		converged   bool
		stopped     bool
		reason      string
		nanNoted    bool
		lastRelDrop = math.NaN()
	)

outer:
	for iter < maxIter {
		iter++
		J, err = pr.jacobian(theta, r)
		if err != nil {
			return Fit{}, err
		}
		jAt = clone(theta)
		if cost == 0 {
			converged, reason = true, "residuals are exactly zero"
			break
		}

		// Work in scaled coordinates x = theta/scale: Js = J·diag(scale).
		js := mat.NewDense(n, p, nil)
		js.Apply(func(i, j int, v float64) float64 { return v * pr.scale[j] }, J)
		g := make([]float64, p) // gradient of cost/2 in x: Jsᵀr
		cn := make([]float64, p)
		anyNonZero := false
		for j := 0; j < p; j++ {
			col := mat.Col(nil, j, js)
			cn[j] = math.Sqrt(sumSq(col))
			g[j] = dot(col, r)
			if cn[j] > 0 {
				anyNonZero = true
			}
		}
		if !anyNonZero {
			reason = fmt.Sprintf("the Jacobian is zero at the current point: no parameter changes the residuals within RelStep=%g (a piecewise model needs a step large enough to cross its steps)", pr.rel)
			stopped = true
			break
		}

		// Gradient test: every column (nearly) orthogonal to the residuals.
		rn := math.Sqrt(cost)
		gmax := 0.0
		for j := 0; j < p; j++ {
			if cn[j] > 0 {
				gmax = math.Max(gmax, math.Abs(g[j])/(cn[j]*rn))
			}
		}
		if gmax <= tol {
			converged, reason = true, fmt.Sprintf("the residuals are orthogonal to the Jacobian (max cosine %.3g)", gmax)
			break
		}

		// Free parameters: not pinned at a bound the gradient pushes against.
		var free []int
		for j := 0; j < p; j++ {
			if pr.lo[j] == pr.hi[j] ||
				(theta[j] <= pr.lo[j] && g[j] > 0) ||
				(theta[j] >= pr.hi[j] && g[j] < 0) {
				continue
			}
			free = append(free, j)
			diag[j] = math.Max(diag[j], cn[j])
			if diag[j] == 0 {
				diag[j] = 1
			}
		}
		if len(free) == 0 {
			converged, reason = true, "every parameter is held at a bound by the gradient"
			break
		}

		// Jd = Js[:, free]·diag(1/D); with y = D·x the damped step is
		// y = −V·diag(σ/(σ²+λ))·Uᵀr.
		q := len(free)
		jd := mat.NewDense(n, q, nil)
		for k, j := range free {
			for i := 0; i < n; i++ {
				jd.Set(i, k, js.At(i, j)/diag[j])
			}
		}
		var svd mat.SVD
		if !svd.Factorize(jd, mat.SVDThin) {
			return Fit{}, fmt.Errorf("calibrate: SVD of the Jacobian failed at theta=%v", theta)
		}
		sv := svd.Values(nil)
		var u, v mat.Dense
		svd.UTo(&u)
		svd.VTo(&v)
		var utr mat.VecDense
		utr.MulVec(u.T(), mat.NewVecDense(n, r))

		for {
			step := make([]float64, p) // in x
			for k, j := range free {
				s := 0.0
				for i, sig := range sv {
					if sig > 0 {
						s += v.At(k, i) * sig / (sig*sig + lambda) * utr.AtVec(i)
					}
				}
				step[j] = -s / diag[j]
			}
			trial := clone(theta)
			for j := range trial {
				trial[j] = clamp(theta[j]+step[j]*pr.scale[j], pr.lo[j], pr.hi[j])
			}
			if equal(trial, theta) {
				converged, reason = true, "no step lowers the cost any more (the damped step fell below floating-point resolution)"
				break outer
			}
			rt, err := pr.eval(trial)
			switch {
			case errors.Is(err, errNonFinite):
				if !nanNoted {
					nanNoted = true
					notes = append(notes, fmt.Sprintf("the model gave a non-finite residual at a trial point (%v); such steps were rejected", err))
				}
			case err != nil:
				return Fit{}, err
			default:
				ct := sumSq(rt)
				if ct < cost {
					drop := (cost - ct) / cost
					lastRelDrop = drop
					dx, xn := 0.0, 0.0
					for j := range trial {
						d := (trial[j] - theta[j]) / pr.scale[j]
						dx += d * d
						xn += (theta[j] / pr.scale[j]) * (theta[j] / pr.scale[j])
					}
					theta, r, cost = trial, rt, ct
					lambda = math.Max(lambda/10, lambdaMin)
					switch {
					case cost == 0:
						converged, reason = true, "residuals are exactly zero"
						break outer
					case drop <= tol:
						converged, reason = true, fmt.Sprintf("relative change in cost %.3g ≤ Tol", drop)
						break outer
					case math.Sqrt(dx) <= tol*(math.Sqrt(xn)+tol):
						converged, reason = true, "relative step ≤ Tol"
						break outer
					}
					continue outer
				}
			}
			lambda *= 10
			if lambda > lambdaMax {
				converged, reason = true, "no step lowers the cost any more (local minimum at the resolution of the model and of the finite differences)"
				break outer
			}
		}
	}
	switch {
	case converged:
		notes = append([]string{"converged: " + reason}, notes...)
	case stopped:
		notes = append([]string{"not converged: " + reason}, notes...)
	default:
		notes = append([]string{fmt.Sprintf("not converged: MaxIter=%d reached (last relative change in cost %.3g)", maxIter, lastRelDrop)}, notes...)
	}

	if jAt == nil || !equal(jAt, theta) {
		if J, err = pr.jacobian(theta, r); err != nil {
			return Fit{}, err
		}
	}
	ident, se, more := pr.uncertainty(J, theta, r, cost)
	notes = append(notes, more...)

	fit := Fit{
		Theta:        theta,
		StdErr:       se,
		RelStdErr:    make([]float64, p),
		Residuals:    r,
		RSS:          cost,
		Iter:         iter,
		Converged:    converged,
		Evals:        pr.evals,
		Identifiable: ident,
	}
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
	return fit, nil
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
	cn := make([]float64, p)  // column norms in units of theta
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
	var active, zero []int
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

	// Drop (near-)collinear groups until the rest is well-conditioned.
	var (
		sv []float64
		v  mat.Dense
	)
	for len(active) > 0 {
		jn := mat.NewDense(n, len(active), nil)
		for k, j := range active {
			for i := 0; i < n; i++ {
				jn.Set(i, k, J.At(i, j)/cn[j])
			}
		}
		var svd mat.SVD
		if !svd.Factorize(jn, mat.SVDThin) {
			notes = append(notes, "SVD of the final Jacobian failed: no standard errors")
			return ident, se, notes
		}
		sv = svd.Values(nil)
		v.Reset()
		svd.VTo(&v)
		drop := make(map[int]bool)
		for i, s := range sv {
			if s > collinearTol*sv[0] {
				continue
			}
			best, bestW := 0, -1.0
			for k := range active {
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
		notes = append(notes, fmt.Sprintf("not identifiable: %s are (nearly) collinear, the data determine only a combination of them; the other standard errors are conditional on their values", pr.list(group)))
		active = keep
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
	// cov of the normalised parameters: V·diag(1/σ²)·Vᵀ.
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
	for k, j := range active {
		se[j] = math.Sqrt(s2*bread.At(k, k)) / cn[j]
	}
	if pr.clusters == nil {
		return ident, se, notes
	}
	// Cluster-robust: the scores Jnᵀr summed within each cluster.
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
		notes = append(notes, "one cluster of residuals: standard errors assume independent residuals")
		return ident, se, notes
	}
	meat := mat.NewDense(q, q, nil)
	for _, sc := range scores {
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
	notes = append(notes, note)
	return ident, se, notes
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
