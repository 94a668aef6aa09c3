package calibrate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"gonum.org/v1/gonum/mat"

	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// Fitting measured steps (hone calibrate --steps).
//
// The form is emulator.StepCosts: a host part every rank pays, a GPU part
// split across the TP ranks, and all-reduces taken from measured tables
// (or the GPU's spec), not fitted. Each step's latency less its all-reduce
// time is linear in the coefficients, so the fit is weighted least squares
// on relative errors (weight 1/measured²: a 14 ms decode step counts as
// much as a 400 ms mixed one), made robust three ways:
//
//   - Mis-booked pairs. With async scheduling vLLM sometimes books one
//     step's time on its neighbour (807.6 ms then 11.5 ms where two ~410 ms
//     steps are expected). After a first fit, two consecutive steps (step
//     counters n, n+1) whose measured times are > 1.5× and < 1/1.5× of the
//     prediction (either order) while their sum is within 20% of the
//     predicted sum become one observation: the sum of both steps'
//     features against the sum of their times. Refit; repeat until the
//     pairs (and the GEMM knee, below) settle.
//   - The GEMMs' roofline knee (StepCosts.Knee) is where a step's
//     features switch from WeightsMs to TokenMs; it is refitted the same
//     way, from a start of 256 tokens.
//   - Other outliers (a stalled step): Huber weights on the relative
//     residual scaled by its MAD (k = 1.345), iterated (IRLS).
//   - Physical signs: every coefficient but the GEMM offset is >= 0; one
//     that fits negative is held at 0 and the rest refitted (reported as
//     not fitted).
//
// Standard errors come from a moving-block bootstrap: the residuals of
// consecutive steps are not independent (a phase of the probe, a batch
// that grows step by step), so the classical formula, which assumes they
// are, understates the errors. Blocks of BlockLen consecutive observations
// are resampled within each directory and the whole robust fit is
// repeated; the standard error is the bootstrap replicates' standard
// deviation.

// StepFitConfig configures FitSteps.
type StepFitConfig struct {
	Model      emulator.Model          // for the all-reduce message size (hidden)
	AllReduces int                     // all-reduces per step (2 per layer)
	AllReduce  emulator.AllReduceModel // their latency by TP and size
	Bootstrap  int                     // replicates for standard errors (0: DefaultBootstrap)
	BlockLen   int                     // consecutive observations per block (0: DefaultBlockLen)
	Seed       uint64                  // of the bootstrap's resampling
}

// Defaults of StepFitConfig.
const (
	DefaultBootstrap = 100
	DefaultBlockLen  = 64
	maxKneeIter      = 20
	initialKnee      = 256 // tokens: where a bf16 GEMM turns compute-bound on recent GPUs (FLOP/s ÷ bytes/s ≈ 300)
	huberK           = 1.345
	pairRatio        = 1.5
	pairSumTol       = 0.20
)

// StepTerm is one fitted coefficient.
type StepTerm struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	StdErr float64 `json:"std_err"`
	Fitted bool    `json:"fitted"`
	Why    string  `json:"why,omitempty"` // why it was not fitted
}

// StepFit is the result of FitSteps.
type StepFit struct {
	Costs        emulator.StepCosts    `json:"-"`
	Terms        []StepTerm            `json:"terms"`
	Observations int                   `json:"observations"` // after pairing
	Steps        int                   `json:"steps"`
	MergedPairs  int                   `json:"merged_pairs"`
	Downweighted int                   `json:"downweighted"` // observations the Huber weights cut below 1/2
	Residuals    []emulator.PhaseError `json:"residuals"`
	Notes        []string              `json:"notes,omitempty"`
}

// stepObs is one observation of the fit: a step, or a mis-booked pair.
type stepObs struct {
	x        []float64
	y        float64 // measured ms less the all-reduce time
	measured float64
	dir      int
	phase    string
	pw       float64 // the phase's weight: each phase of a directory weighs the same in the fit
}

// FitSteps fits StepCosts to the steps of one or more directories.
func FitSteps(data []*StepData, cfg StepFitConfig) (*StepFit, error) {
	if len(data) == 0 {
		return nil, errors.New("no step data")
	}
	if cfg.Bootstrap == 0 {
		cfg.Bootstrap = DefaultBootstrap
	}
	if cfg.BlockLen == 0 {
		cfg.BlockLen = DefaultBlockLen
	}
	costs := emulator.StepCosts{AllReduces: cfg.AllReduces, AllReduce: cfg.AllReduce}
	hold, err := heldTerms(data, costs)
	if err != nil {
		return nil, err
	}
	res := &StepFit{}
	for _, d := range data {
		res.Steps += len(d.Steps)
	}

	costs.WeightsMs, costs.TokenMs = initialKnee, 1
	kf, err := fitKnee(data, &costs, hold, cfg.Model.Hidden)
	if err != nil {
		return nil, err
	}
	res.MergedPairs = kf.merged
	if !kf.converged {
		res.Notes = append(res.Notes, fmt.Sprintf("the GEMM knee and the mis-booked pairs did not settle in %d rounds; the last fit is kept", maxKneeIter))
	}
	hold = kf.held
	res.Costs = costs
	res.Observations = len(kf.rows)
	for _, wi := range kf.w {
		if wi < 0.5 {
			res.Downweighted++
		}
	}

	se := bootstrapSE(kf.rows, hold, kf.beta, cfg)
	for j, name := range emulator.StepCostTerms {
		t := StepTerm{Name: name, Value: kf.beta[j], StdErr: se[j], Fitted: hold[j] == ""}
		if !t.Fitted {
			t.Why = hold[j]
			t.StdErr = 0
		}
		res.Terms = append(res.Terms, t)
	}
	for _, d := range data {
		sc := ScoreSteps(d, func(s emulator.StepSummary) float64 { return costs.SummaryMs(s, d.TP, cfg.Model.Hidden, false) })
		res.Residuals = append(res.Residuals, sc.PhaseErrors(d.Dir)...)
	}
	return res, nil
}

// heldTerms says why each term of emulator.StepCostTerms is held at 0 (""
// where it is fitted): the host part with one TP size, and terms no step
// exercises. It refuses a TP size the costs have no all-reduce figures for.
func heldTerms(data []*StepData, costs emulator.StepCosts) ([]string, error) {
	nt := len(emulator.StepCostTerms)
	hold := make([]string, nt) // why a term is held at 0; "" is fitted
	tps := map[int]bool{}
	for _, d := range data {
		tps[d.TP] = true
		if d.TP > 1 && !costs.CanAllReduce(d.TP) {
			return nil, fmt.Errorf("%s: TP %d: no all-reduce figures for TP %d (give an all-reduce table or the GPU's interconnect)", d.Dir, d.TP, d.TP)
		}
	}
	if len(tps) == 1 {
		hold[0] = "one TP size: the host part cannot be told from the GPU part; all of it is booked as GPU (weights_ms), so the profile holds for this TP only"
	}
	// Terms that no step exercises cannot be fitted.
	used := make([]bool, nt)
	for _, d := range data {
		for _, s := range d.Steps {
			for j, v := range emulator.StepFeatures(s.Summary, d.TP, 0) {
				if v != 0 {
					used[j] = true
				}
			}
			used[3], used[4], used[5] = true, true, true // the GEMM roofline: every step is on one side of the knee
		}
	}
	for j := range used {
		if !used[j] && hold[j] == "" {
			hold[j] = "no step exercises it"
		}
	}
	return hold, nil
}

// kneeFit is the last round of fitKnee.
type kneeFit struct {
	rows      []stepObs
	beta, w   []float64
	held      []string
	merged    int // mis-booked pairs merged
	converged bool
}

// fitKnee alternates: fit with the GEMM knee and the mis-booked pairs
// fixed, then move the knee to the fit's WeightsMs/TokenMs and find the
// pairs under the new prediction, until neither changes. costs holds the
// last fit's coefficients on return.
func fitKnee(data []*StepData, costs *emulator.StepCosts, hold []string, hidden int) (kneeFit, error) {
	var (
		kf    kneeFit
		pairs []map[int]bool
	)
	for it := 0; it < maxKneeIter; it++ {
		kf.rows = buildObs(data, costs, pairs, hidden)
		var err error
		if kf.beta, kf.w, kf.held, err = robustFit(kf.rows, hold, nil); err != nil {
			return kf, err
		}
		oldKnee := costs.Knee()
		costs.SetCoefficients(kf.beta)
		np := make([]map[int]bool, len(data))
		merged := 0
		for i, d := range data {
			np[i] = findMisbooked(d, func(s emulator.StepSummary) float64 { return costs.SummaryMs(s, d.TP, hidden, false) })
			merged += len(np[i])
		}
		same := sameRegime(data, oldKnee, costs.Knee()) && samePairs(pairs, np)
		pairs, kf.merged = np, merged
		if same {
			kf.converged = true
			break
		}
	}
	return kf, nil
}

// sameRegime says whether every step is on the same side of both knees.
func sameRegime(data []*StepData, a, b float64) bool {
	for _, d := range data {
		for _, s := range d.Steps {
			if t := float64(s.Summary.Tokens()); (t > a) != (t > b) {
				return false
			}
		}
	}
	return true
}

func samePairs(a, b []map[int]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for k := range a[i] {
			if !b[i][k] {
				return false
			}
		}
	}
	return true
}

// buildObs makes the observations: one per step, a mis-booked pair (its
// first step's index in pairs[dir]) as one.
func buildObs(data []*StepData, costs *emulator.StepCosts, pairs []map[int]bool, hidden int) []stepObs {
	var rows []stepObs
	knee := costs.Knee()
	for di, d := range data {
		for i := 0; i < len(d.Steps); i++ {
			s := d.Steps[i]
			o := stepObs{x: emulator.StepFeatures(s.Summary, d.TP, knee), dir: di}
			ar := costs.AllReduceMs(d.TP, s.Summary.Tokens(), hidden)
			o.measured = s.Ms
			if pairs != nil && pairs[di][i] {
				n := d.Steps[i+1]
				for j, v := range emulator.StepFeatures(n.Summary, d.TP, knee) {
					o.x[j] += v
				}
				ar += costs.AllReduceMs(d.TP, n.Summary.Tokens(), hidden)
				o.measured += n.Ms
				i++
			}
			o.y = o.measured - ar
			o.phase = s.Phase
			rows = append(rows, o)
		}
	}
	// Each phase of a directory weighs the same: the real workload's
	// thousands of decode steps would otherwise fit decode alone.
	count := map[[2]any]int{}
	phases := map[int]map[string]bool{}
	for _, o := range rows {
		count[[2]any{o.dir, o.phase}]++
		if phases[o.dir] == nil {
			phases[o.dir] = map[string]bool{}
		}
		phases[o.dir][o.phase] = true
	}
	for i := range rows {
		o := &rows[i]
		o.pw = 1 / float64(count[[2]any{o.dir, o.phase}]*len(phases[o.dir]))
	}
	return rows
}

// findMisbooked returns the indexes i of d.Steps whose step and the next
// are a mis-booked pair under predict (see the package's fitting notes).
func findMisbooked(d *StepData, predict func(emulator.StepSummary) float64) map[int]bool {
	out := map[int]bool{}
	for i := 0; i+1 < len(d.Steps); i++ {
		a, b := d.Steps[i], d.Steps[i+1]
		if b.Counter != a.Counter+1 {
			continue
		}
		pa, pb := predict(a.Summary), predict(b.Summary)
		long := func(y, p float64) bool { return y > pairRatio*p }
		short := func(y, p float64) bool { return y*pairRatio < p }
		if !((long(a.Ms, pa) && short(b.Ms, pb)) || (short(a.Ms, pa) && long(b.Ms, pb))) {
			continue
		}
		if math.Abs(a.Ms+b.Ms-(pa+pb)) <= pairSumTol*(pa+pb) {
			out[i] = true
			i++
		}
	}
	return out
}

// robustFit is IRLS with Huber weights on relative residuals and the
// non-negativity active set. start, when given, seeds the weights.
func robustFit(rows []stepObs, hold []string, start []float64) ([]float64, []float64, []string, error) {
	nt := len(hold)
	held := slices.Clone(hold)
	hw := make([]float64, len(rows))
	for i := range hw {
		hw[i] = 1
	}
	var beta []float64
	for {
		if start != nil {
			hw = huberWeights(rows, start)
		}
		for it := 0; it < 30; it++ {
			nb, err := wls(rows, hw, held)
			var ce collinearError
			if errors.As(err, &ce) {
				// Hold it and start over: the steps determine only a
				// combination of it with the others.
				held[ce.term] = fmt.Sprintf("the steps do not separate it from the other terms (condition number %.3g): held at 0; steps of more shapes would determine it", ce.cond)
				beta = nil
				it = -1
				continue
			}
			if err != nil {
				return nil, nil, nil, err
			}
			nw := huberWeights(rows, nb)
			conv := beta != nil && maxRelChange(beta, nb) < 1e-6
			beta, hw = nb, nw
			if conv {
				break
			}
		}
		// Hold the most negative coefficient at 0 and refit.
		worst, wv := -1, 0.0
		for j := 0; j < nt; j++ {
			if j != emulator.SignedTerm && held[j] == "" && beta[j] < wv {
				worst, wv = j, beta[j]
			}
		}
		if worst < 0 {
			return beta, hw, held, nil
		}
		held[worst] = fmt.Sprintf("fitted negative (%.3g): held at 0, as a cost cannot be", wv)
		beta = nil
	}
}

func maxRelChange(a, b []float64) float64 {
	m := 0.0
	for i := range a {
		d := math.Abs(a[i] - b[i])
		if s := math.Max(math.Abs(a[i]), math.Abs(b[i])); s > 0 {
			d /= s
		}
		m = math.Max(m, d)
	}
	return m
}

// huberWeights are the Huber weights of the rows' relative residuals
// under beta, scaled by 1.4826 × their median absolute deviation.
func huberWeights(rows []stepObs, beta []float64) []float64 {
	r := make([]float64, len(rows))
	for i, o := range rows {
		r[i] = (dot(o.x, beta) - o.y) / o.measured
	}
	abs := make([]float64, len(r))
	med := slo.Median(r)
	for i := range r {
		abs[i] = math.Abs(r[i] - med)
	}
	s := 1.4826 * slo.Median(abs)
	w := make([]float64, len(rows))
	for i := range r {
		w[i] = 1
		if s > 0 {
			if u := math.Abs(r[i]) / s; u > huberK {
				w[i] = huberK / u
			}
		}
	}
	return w
}

// wls solves min Σ w_i ((x_i·β − y_i)/measured_i)² over the terms not
// held (held ones are 0), by QR on the scaled, column-normalised design.
func wls(rows []stepObs, w []float64, held []string) ([]float64, error) {
	var free []int
	for j, h := range held {
		if h == "" {
			free = append(free, j)
		}
	}
	beta := make([]float64, len(held))
	if len(free) == 0 {
		return beta, nil
	}
	a := mat.NewDense(len(rows), len(free), nil)
	b := mat.NewVecDense(len(rows), nil)
	norm := make([]float64, len(free))
	for i, o := range rows {
		s := math.Sqrt(w[i]*o.pw) / o.measured
		for k, j := range free {
			v := o.x[j] * s
			a.Set(i, k, v)
			norm[k] += v * v
		}
		b.SetVec(i, o.y*s)
	}
	for k := range norm {
		norm[k] = math.Sqrt(norm[k])
		if norm[k] == 0 {
			return nil, fmt.Errorf("term %s has no data", emulator.StepCostTerms[free[k]])
		}
		for i := range rows {
			a.Set(i, k, a.At(i, k)/norm[k])
		}
	}
	var qr mat.QR
	qr.Factorize(a)
	var r mat.Dense
	qr.RTo(&r)
	if c := mat.Cond(&r, 1); c > 1e10 {
		// The term weighing most in the direction the steps do not
		// determine (the smallest singular value's right vector).
		var svd mat.SVD
		if !svd.Factorize(a, mat.SVDThin) {
			return nil, fmt.Errorf("the steps cannot separate the terms (condition number %.3g)", c)
		}
		var v mat.Dense
		svd.VTo(&v)
		last := len(free) - 1
		worst, wv := -1, 0.0
		for k, j := range free {
			if j == 0 && len(free) > 1 {
				continue // the fixed cost goes last: every step has it
			}
			if x := math.Abs(v.At(k, last)); x > wv {
				worst, wv = k, x
			}
		}
		return nil, collinearError{term: free[worst], cond: c}
	}
	var x mat.VecDense
	if err := qr.SolveVecTo(&x, false, b); err != nil {
		return nil, fmt.Errorf("least squares: %w", err)
	}
	for k, j := range free {
		beta[j] = x.AtVec(k) / norm[k]
	}
	return beta, nil
}

// collinearError says the steps do not separate term from the others.
type collinearError struct {
	term int
	cond float64
}

func (e collinearError) Error() string {
	return fmt.Sprintf("the steps do not separate %s from the other terms (condition number %.3g)", emulator.StepCostTerms[e.term], e.cond)
}

// bootstrapSE is the moving-block bootstrap standard error of each term.
func bootstrapSE(rows []stepObs, hold []string, beta []float64, cfg StepFitConfig) []float64 {
	byDir, dirs := groupBy(rows, func(o stepObs) int { return o.dir })
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x686f6e65))
	nt := len(beta)
	var reps [][]float64
	for b := 0; b < cfg.Bootstrap; b++ {
		var sample []stepObs
		for _, d := range dirs {
			rs := byDir[d]
			l := min(cfg.BlockLen, len(rs))
			for n := 0; n < len(rs); {
				start := rng.IntN(len(rs) - l + 1)
				k := min(l, len(rs)-n)
				sample = append(sample, rs[start:start+k]...)
				n += k
			}
		}
		h := slices.Clone(hold)
		bb, _, _, err := robustFit(sample, h, beta)
		if err != nil {
			continue
		}
		reps = append(reps, bb)
	}
	se := make([]float64, nt)
	if len(reps) < 2 {
		for j := range se {
			se[j] = math.NaN()
		}
		return se
	}
	for j := 0; j < nt; j++ {
		var m, ss float64
		for _, r := range reps {
			m += r[j]
		}
		m /= float64(len(reps))
		for _, r := range reps {
			ss += (r[j] - m) * (r[j] - m)
		}
		se[j] = math.Sqrt(ss / float64(len(reps)-1))
	}
	return se
}

// StepScore is the error of predicted against measured step latencies of
// one directory: per step, with mis-booked pairs scored as one.
type StepScore struct {
	TP     int
	Pairs  int          // mis-booked pairs scored as one step
	Points []ScorePoint // one per scored step or pair
}

// ScorePoint is one scored step (or pair).
type ScorePoint struct {
	Phase     string
	Segment   string
	Line      int // of the (first) step in the step file
	Measured  float64
	Predicted float64
	Paired    bool
}

// APE is the absolute percentage error.
func (p ScorePoint) APE() float64 { return 100 * math.Abs(p.Predicted-p.Measured) / p.Measured }

// ScoreSteps predicts every step of d. A mis-booked pair (as FitSteps finds
// them, under this prediction) is scored as one step against its sum: its
// measured time is the two steps' time, only booked on the wrong one.
func ScoreSteps(d *StepData, predict func(emulator.StepSummary) float64) StepScore {
	pairs := findMisbooked(d, predict)
	sc := StepScore{TP: d.TP, Pairs: len(pairs)}
	for i := 0; i < len(d.Steps); i++ {
		s := d.Steps[i]
		p := ScorePoint{Phase: s.Phase, Segment: s.Segment, Line: s.Line, Measured: s.Ms, Predicted: predict(s.Summary)}
		if pairs[i] {
			n := d.Steps[i+1]
			pn := predict(n.Summary)
			if pn > p.Predicted {
				p.Phase = n.Phase
			}
			p.Measured += n.Ms
			p.Predicted += pn
			p.Paired = true
			i++
		}
		sc.Points = append(sc.Points, p)
	}
	return sc
}

// Phases is the order phases are reported in.
var Phases = []string{"context", "decode", "mixed"}

// PhaseErrors summarises the score per phase and over all steps.
func (sc StepScore) PhaseErrors(data string) []emulator.PhaseError {
	var out []emulator.PhaseError
	for _, ph := range append(slices.Clone(Phases), "all") {
		var apes []float64
		for _, p := range sc.Points {
			if ph == "all" || p.Phase == ph {
				apes = append(apes, p.APE())
			}
		}
		e := emulator.PhaseError{Data: data, TP: sc.TP, Phase: ph, Steps: len(apes)}
		if len(apes) > 0 {
			sort.Float64s(apes)
			e.MedianAPE = round4(slo.Median(apes))
			e.P90APE = round4(slo.NearestRank(apes, 90))
		}
		out = append(out, e)
	}
	return out
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }
