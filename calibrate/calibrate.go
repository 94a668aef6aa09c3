package calibrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// Input is one measured record and the deployment it measured.
type Input struct {
	Spec   *deploy.Spec
	Record *schema.Record
	// Path names the input in errors, notes and PredictionError (the
	// record's file, or any label).
	Path string
}

// InputFromRecord reads the record at path (replay.ReadRecord) and decodes
// its config, which hone replay and the optimizer write as the deployment
// spec in JSON (plus keys of their own, such as "scenario", which are
// ignored), into the spec. An error names the file and, where it can, the
// config field and what was expected. A record without per-request records
// is refused: calibration compares request by request.
func InputFromRecord(path string) (Input, error) {
	rec, err := replay.ReadRecord(path)
	if err != nil {
		return Input{}, err
	}
	spec, err := specOf(rec.Config)
	if err != nil {
		return Input{}, fmt.Errorf("record %s: %w", path, err)
	}
	in := Input{Spec: spec, Record: rec, Path: path}
	if in.requests() == 0 {
		return Input{}, fmt.Errorf("record %s: no per-request records (calibration compares request by request: use a record from hone replay, hone optimize or hone predict --out)", path)
	}
	return in, nil
}

// specOf decodes a record's config as a deployment spec.
func specOf(cfg schema.Config) (*deploy.Spec, error) {
	if len(cfg) == 0 {
		return nil, errors.New("config: empty, want the deployment spec the record measured (hone optimize and hone replay --config write it)")
	}
	var s deploy.Spec
	if err := cfg.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: the config is not a deployment spec", err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("config is not a valid deployment spec: %w", err)
	}
	return &s, nil
}

func (in Input) requests() int {
	n := 0
	for _, r := range in.Record.Runs {
		for _, l := range r.Levels {
			n += len(l.Requests)
		}
	}
	return n
}

// Config tunes Calibrate (Options is LeastSquares'). The zero value is
// usable.
type Config struct {
	// Start is the profile to start from, and the one whose model, GPU
	// memory, serving defaults and whatever is not fitted the result
	// keeps; a roofline profile is converted with LinearApprox at the
	// first input's tensor parallelism. nil: the first input's spec's
	// emulator.profile, else emulator.DefaultProfile. An exercise profile
	// cannot start: it has no GPU memory to size the KV cache with.
	Start *emulator.Profile
	// MaxIter bounds the Levenberg–Marquardt iterations (default
	// DefaultMaxIter).
	MaxIter int
	// Progress, when set, gets a line whenever the fit finds a better
	// point.
	Progress io.Writer
}

// Coefficient names, in Result.Coefficients' order. The first five are
// the profile's linear.* keys, transfer_fixed_ms its own key;
// transfer_ms_per_mib is 1000 × 2^20 / gpu.link_bytes_sec (0: an unpaced
// link, where only the fixed cost is modelled).
const (
	StepBaseMs          = "step_base_ms"
	DecodePerSeqMs      = "decode_per_seq_ms"
	PrefillPerTokenMs   = "prefill_per_token_ms"
	PrefillPerContextMs = "prefill_per_context_ms"
	EagerStepMs         = "eager_step_ms"
	TransferFixedMs     = "transfer_fixed_ms"
	TransferMsPerMiB    = "transfer_ms_per_mib"
)

var coefNames = []string{StepBaseMs, DecodePerSeqMs, PrefillPerTokenMs, PrefillPerContextMs, EagerStepMs, TransferFixedMs, TransferMsPerMiB}

// Coefficient is one coefficient of the calibrated profile.
type Coefficient struct {
	Name string
	// Value is the fitted value, or Start when not fitted.
	Value float64
	// StdErr and RelStdErr (StdErr/|Value|) are the fit's standard errors
	// (see Fit.StdErr); NaN when not fitted or not determined.
	StdErr, RelStdErr float64
	// Start is the start profile's value (of its linear approximation).
	Start float64
	// Fitted says whether the data determined the coefficient; Why says
	// why not: no input exercises it, or the inputs do not separate it
	// from the others.
	Fitted bool
	Why    string
}

// Result is a calibration.
type Result struct {
	// Profile is the calibrated profile: linear, named
	// "<start>-calibrated", with the start profile's model, GPU memory,
	// serving defaults and KV-cache reserve.
	Profile *emulator.Profile
	// Start is the start profile as given (PredictionError's "before").
	Start        *emulator.Profile
	Coefficients []Coefficient
	// Observations counts the residuals: per measured request and run, the
	// quantities compared (see Calibrate).
	Observations int
	// RMSResidual is the root mean square of the scaled residuals (relative
	// errors, see Calibrate) at the fit; StartRMSResidual at the start's
	// linear approximation.
	RMSResidual, StartRMSResidual float64
	Iterations, Evaluations       int
	Converged                     bool
	// PredictionError compares, per input and level, the measured medians
	// with the predictions before (start profile) and after calibration.
	PredictionError []LevelError
	// Objective does the same for each input's objective.
	Objective []ObjectiveError
	// Notes carries the fit's notes (convergence, bounds, identifiability)
	// and the inputs' (what evidence was used).
	Notes []string
}

// LevelError is one level of one input: measured medians over the valid
// runs of the level against the predictions.
type LevelError struct {
	Input      string
	OfferedQPS float64
	// Runs counts the measured runs whose level is valid; 0 means none
	// was, and the measured figures are NaN.
	Runs                                 int
	MeasuredP50TTFTMs, MeasuredP50TPOTMs float64
	// Before and After predict from the schedule alone, as hone predict
	// does for a deployment not yet measured; AfterGivenArrivals is the
	// calibrated profile's prediction of each valid run with that run's
	// own arrivals (runHops), the median over them: the model's error
	// without the host's hops, which no prediction can know beforehand;
	// nil when no run had a valid level.
	Before, After      LevelPrediction
	AfterGivenArrivals *LevelPrediction
}

// LevelPrediction is one prediction of a level; the relative errors are
// (predicted − measured)/measured, NaN where the measured figure is 0 or
// unknown.
type LevelPrediction struct {
	P50TTFTMs, P50TPOTMs   float64
	TTFTRelErr, TPOTRelErr float64
}

// ObjectiveError is one input's objective (largest effective QPS among
// passing levels): the median over its measured runs, and the predictions
// before and after calibration, with their relative errors.
type ObjectiveError struct {
	Input                     string
	Measured, Before, After   float64
	BeforeRelErr, AfterRelErr float64
}

// quantity is one figure compared: a request's, or the mean over a
// level's requests.
type quantity uint8

const (
	qEngineTTFT quantity = iota // engine time_to_first_token_ms (first scheduled → first token)
	qITL                        // engine mean_itl_ms
	qTransfer                   // engine kv_transfer_time_ms (hone's emulator)
	qPrefillLeg                 // disaggregated: client TTFT − the decode worker's queue_time_ms and time_to_first_token_ms
	qTTFT                       // client TTFT
	qTPOT                       // client TPOT
	qTTFTMean                   // level mean of the measured requests' client TTFT
	nQuantities
)

var quantityNames = [nQuantities]string{"time_to_first_token_ms", "mean_itl_ms", "kv_transfer_time_ms",
	"prefill legs (client ttft_ms − queue_time_ms − time_to_first_token_ms)", "client ttft_ms", "client tpot_ms",
	"level means of client ttft_ms"}

// obs is one observation: a quantity of one request of one level, or its
// mean over several requests, with the measured value and the scale its
// residual is divided by.
type obs struct {
	run      int // index into predictAll's records of the input: 1 + the measured run
	level    int
	ids      []int
	q        quantity
	measured float64
	scale    float64
}

// value is q of one request: its engine metrics m, or the client's figures.
func (q quantity) value(rr *schema.RequestRecord, m *schema.EngineMetrics) float64 {
	switch q {
	case qEngineTTFT:
		return deref(m.TimeToFirstTokenMs)
	case qITL:
		return deref(m.MeanITLMs)
	case qTransfer:
		return deref(m.KVTransferTimeMs)
	case qTTFT, qTTFTMean:
		return deref(rr.TTFTMs)
	case qTPOT:
		return deref(rr.TPOTMs)
	case qPrefillLeg:
		return deref(rr.TTFTMs) - deref(m.QueueTimeMs) - deref(m.TimeToFirstTokenMs)
	}
	return math.NaN()
}

// relStep is the fit's finite-difference step, relative to each
// coefficient: 1%, ten times LeastSquares' default. A prediction is a
// discrete-event simulation: a step so small that it rarely moves an event
// past another gives a slope dominated by the few that do move; 1% crosses
// enough of them to average out, and the linear form itself is smooth
// enough that 1% loses nothing.
const relStep = 1e-2

// minScaleMs is the smallest scale of a residual: below a millisecond a
// relative error means nothing.
const minScaleMs = 1.0

// Calibrate fits a linear cost profile (emulator.LinearCosts, the KV
// transfer's fixed cost and the link's ms per MiB) to measured records, by
// predicting every input's deployment (predict.Run, with the input's
// workload, offered rates and SLO) under candidate coefficients and
// minimising the difference request by request (LeastSquares).
//
// Evidence. Every valid request of every valid level (verdict) of every
// measured run is compared with the same request (by id) of the
// prediction, warm-ups included: they carry the cold prefills that
// separate the per-token from the per-context cost. Where both carry the
// engine's per-request metrics (vLLM --enable-per-request-metrics, hone's
// emulator), a request gives the engine's time_to_first_token_ms (first
// scheduled → first token), mean_itl_ms and, disaggregated, its prefill
// leg: the client's TTFT less the decode worker's queue_time_ms and
// time_to_first_token_ms (the metrics are the decode worker's), and
// kv_transfer_time_ms where measured (hone's emulator). Otherwise a
// request gives the client's TPOT and, a warm-up, its TTFT, while the
// measured requests' TTFTs enter as their level's mean. Waiting is never
// compared request by request: how long a request waits for the step in
// flight depends on where its arrival falls within that step, a sawtooth
// in the coefficients that a fit would chase instead of the costs. So the
// engine's queue_time_ms is left out (the steps' costs are in the other
// figures), and a TTFT that may hold a wait enters as a level's mean,
// which smooths it. Engine figures are model time: those that carry
// time_scale are, the others are divided by the record's time scale.
//
// Weighting. Each residual is (predicted − measured) / max(measured, 1 ms),
// a relative error, so that a 40 ms TTFT and a 7 ms inter-token latency
// weigh alike and the fit cannot trade the many short figures for a
// sliver of the long ones; a level mean is one observation. RMSResidual
// is thus a relative error.
//
// What is fitted. step_base_ms, decode_per_seq_ms, prefill_per_token_ms
// and prefill_per_context_ms always; eager_step_ms only when some input
// runs eager (knobs.enforce_eager or cudagraph_mode NONE) and some does
// not (otherwise it is absent from the data, or indistinguishable from
// step_base_ms); transfer_fixed_ms and transfer_ms_per_mib only when some
// input is disaggregated. A coefficient the fit finds not identifiable is
// held at its start value and the rest refitted, one at a time, the last
// of a collinear group first, so that the others carry the combination
// the data do determine (Why says so). Bounds: every coefficient ≥ 0. A fitted coefficient whose start is 0 starts from the
// default profile's value instead (the fit scales by the start).
//
// Start. Config.Start, converted with LinearApprox at the first input's
// tensor parallelism when it is a roofline. A linear profile ignores
// tensor parallelism, so a fit holds for the deployment shape it was
// measured on; a note says when the inputs mix TP.
func Calibrate(inputs []Input, opts Config) (*Result, error) {
	if len(inputs) == 0 {
		return nil, errors.New("calibrate: no input records")
	}
	for i, in := range inputs {
		if in.Spec == nil || in.Record == nil {
			return nil, fmt.Errorf("calibrate: input %d (%s): no spec or no record", i, in.Path)
		}
	}
	start, err := startProfile(inputs, opts.Start)
	if err != nil {
		return nil, err
	}
	c := &calibration{inputs: inputs, progress: opts.Progress}
	c.base, c.theta0, c.notes = linearStart(start, inputs)

	why := c.undetermined()

	if err := c.observe(); err != nil {
		return nil, err
	}
	if c.nObs == 0 {
		return nil, errors.New("calibrate: no valid request in a valid level of any input: nothing to compare")
	}

	res := &Result{Start: start, Observations: c.nObs}
	theta, stdErr, fit, err := c.fitFree(why, opts.MaxIter, res)
	if err != nil {
		return nil, err
	}
	res.Evaluations = c.evals
	res.Converged = fit.Converged
	r, err := c.residuals(theta)
	if err != nil {
		return nil, fmt.Errorf("calibrate: at the fit: %w", err)
	}
	res.RMSResidual = rms(r)
	res.Coefficients = c.coefficients(theta, stdErr, why)
	res.Profile = c.profile(theta)
	res.Profile.Name = start.Name + "-calibrated"
	if err := res.Profile.Validate(); err != nil {
		return nil, fmt.Errorf("calibrate: the calibrated profile: %w", err)
	}
	res.Notes = append(append([]string{}, fit.Notes...), c.notes...)

	if err := c.compare(res, start); err != nil {
		return nil, err
	}
	return res, nil
}

// undetermined says, per coefficient (coefNames' order), why the inputs
// cannot determine it at all ("" where they can), and notes what in the
// inputs bears on the fit.
func (c *calibration) undetermined() []string {
	var eager, graphs, disagg bool
	tps := map[int]bool{}
	for _, in := range c.inputs {
		k := in.Spec.Knobs
		if k.EnforceEager || k.CUDAGraphMode == "NONE" {
			eager = true
		} else {
			graphs = true
		}
		t := in.Spec.Topology
		if t.Kind == deploy.Disaggregated {
			disagg = true
			tps[t.Prefill.TP] = true
			tps[t.Decode.TP] = true
		} else {
			tps[t.TP] = true
		}
		if in.Record.Kind == schema.KindPredicted {
			c.notes = append(c.notes, fmt.Sprintf("%s is a prediction (kind %q), not a measurement", in.Path, in.Record.Kind))
		}
		pooled := t.Replicas > 1
		if t.Kind == deploy.Disaggregated {
			pooled = t.Prefill.Replicas > 1 || t.Decode.Replicas > 1
		}
		if in.Record.Cache.Procedure == schema.CacheFreshPrefixes && pooled {
			c.notes = append(c.notes, fmt.Sprintf("%s was measured with fresh prefixes per level: with several workers in a pool, the prediction's session routing (by the workload's seed) may differ from the measured one", in.Path))
		}
	}
	if len(tps) > 1 {
		var l []string
		for tp := range tps {
			l = append(l, fmt.Sprint(tp))
		}
		sort.Strings(l)
		c.notes = append(c.notes, fmt.Sprintf("the inputs' workers use TP %s: a linear profile ignores TP, so the fit averages over them", strings.Join(l, ", ")))
	}
	why := make([]string, len(coefNames))
	switch {
	case !eager:
		why[4] = "no input runs eager (knobs.enforce_eager or cudagraph_mode NONE): not in the data"
	case !graphs:
		why[4] = "every input runs eager: indistinguishable from step_base_ms, which absorbs it (kept at the start value)"
	}
	if !disagg {
		why[5] = "no disaggregated input: no KV transfer was measured"
		why[6] = why[5]
	}

	return why
}

// fitFree fits the coefficients why leaves free, from their start (or
// fallbackStart where the start is 0). A coefficient the data do not
// determine is held at its start and the rest refitted, one at a time:
// of a (nearly) collinear group, the last in coefNames' order (the costs
// that fewer steps hold come later), until what remains is identifiable
// and carries the combinations the data do determine. Every pass holds
// one more, so this ends. why gets the held ones' reasons; res the start's
// residual and the iterations.
func (c *calibration) fitFree(why []string, maxIter int, res *Result) (theta, stdErr []float64, fit Fit, err error) {
	free := []int{}
	for j := range coefNames {
		if why[j] == "" {
			free = append(free, j)
		}
	}
	theta = slices.Clone(c.theta0)
	for j := range coefNames {
		if why[j] == "" && theta[j] <= 0 {
			theta[j] = fallbackStart[j]
			c.notes = append(c.notes, fmt.Sprintf("%s starts at %g instead of the start profile's 0 (the fit needs a scale)", coefNames[j], fallbackStart[j]))
		}
	}
	r0, err := c.residuals(c.theta0)
	if err != nil {
		return nil, nil, fit, fmt.Errorf("calibrate: at the start: %w", err)
	}
	res.StartRMSResidual = rms(r0)
	c.best = math.Inf(1)

	stdErr = make([]float64, len(coefNames))
	for len(free) > 0 {
		fit, err = c.fit(theta, free, maxIter)
		if err != nil {
			return nil, nil, fit, err
		}
		res.Iterations += fit.Iter
		var lost []int
		for k, j := range free {
			theta[j], stdErr[j] = fit.Theta[k], fit.StdErr[k]
			if !fit.Identifiable[k] {
				lost = append(lost, j)
			}
		}
		if len(lost) == 0 {
			break
		}
		hold := lost[len(lost)-1:]
		c.notes = append(c.notes, fmt.Sprintf("refitted with %s held at the start value (not identifiable: %s)",
			joinNames(hold), identNote(fit.Notes, coefNames[hold[0]])))
		for _, j := range hold {
			why[j] = "not identifiable from these inputs (" + identNote(fit.Notes, coefNames[j]) + "): kept at the start value"
			theta[j] = c.theta0[j]
			free = slices.DeleteFunc(free, func(f int) bool { return f == j })
		}
	}
	return theta, stdErr, fit, nil
}

// coefficients reports the fitted (or held) coefficients theta.
func (c *calibration) coefficients(theta, stdErr []float64, why []string) []Coefficient {
	var out []Coefficient
	for j, name := range coefNames {
		co := Coefficient{Name: name, Value: theta[j], Start: c.theta0[j], StdErr: math.NaN(), RelStdErr: math.NaN(), Why: why[j]}
		if why[j] == "" {
			co.Fitted = true
			co.StdErr = stdErr[j]
			co.RelStdErr = math.Abs(stdErr[j] / theta[j])
		}
		out = append(out, co)
	}
	return out
}

// fallbackStart is where a fitted coefficient starts when the start
// profile's is 0: the default profile's linear approximation and transfer.
var fallbackStart = func() []float64 {
	p, err := emulator.LookupProfile(emulator.DefaultProfile)
	if err != nil {
		panic(err)
	}
	_, th, _ := linearStart(p, nil)
	return th
}()

func joinNames(idx []int) string {
	s := make([]string, len(idx))
	for k, j := range idx {
		s[k] = coefNames[j]
	}
	return strings.Join(s, ", ")
}

// identNote is the fit's identifiability note that names coefficient
// name, shortened.
func identNote(notes []string, name string) string {
	for _, n := range notes {
		if strings.HasPrefix(n, "not identifiable") && strings.Contains(n, name) {
			n = strings.TrimPrefix(n, "not identifiable: ")
			if i := strings.Index(n, ";"); i > 0 {
				n = n[:i]
			}
			return n
		}
	}
	return "see notes"
}

// startProfile resolves Config.Start.
func startProfile(inputs []Input, p *emulator.Profile) (*emulator.Profile, error) {
	if p == nil {
		name := inputs[0].Spec.Emulator.Profile
		if name == "" {
			name = emulator.DefaultProfile
		}
		var err error
		if p, err = emulator.LookupProfile(name); err != nil {
			return nil, fmt.Errorf("calibrate: start profile from %s's emulator.profile: %w", inputs[0].Path, err)
		}
	}
	if p.Exercise != nil {
		return nil, fmt.Errorf("calibrate: start profile %s is a fixed-rate exercise model: it has no GPU memory to size a KV cache with; start from a roofline or linear profile", p.Name)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("calibrate: start profile %s: %w", p.Name, err)
	}
	return p, nil
}

// linearStart is the start as a linear profile with only what the linear
// form reads (the roofline's figures dropped), and its coefficients in
// coefNames' order. A roofline is approximated at the first input's TP.
func linearStart(p *emulator.Profile, inputs []Input) (*emulator.Profile, []float64, []string) {
	c := *p
	var notes []string
	if p.Linear == nil {
		if len(inputs) > 0 {
			t := inputs[0].Spec.Topology
			c.TP = t.TP
			if t.Kind == deploy.Disaggregated {
				c.TP = t.Prefill.TP
			}
		}
		notes = append(notes, fmt.Sprintf("start: the linear approximation of %s at TP %d (emulator.Profile.LinearApprox)", p.Name, max(c.TP, 1)))
	}
	l := c.LinearApprox()
	c.Linear, c.Exercise = &l, nil
	c.TP = 0
	c.MFU, c.MBU, c.StepOverheadMs, c.LaunchUs, c.KernelsPerLayer, c.GraphLaunchMs = 0, 0, 0, 0, 0, 0
	c.GPU.PeakFLOPS, c.GPU.MemBandwidth, c.GPU.InterconnectBytesSec, c.GPU.InterconnectLatencyUs = 0, 0, 0, 0
	perMiB := 0.0
	if c.GPU.LinkBytesSec > 0 {
		perMiB = 1000 * (1 << 20) / c.GPU.LinkBytesSec
	}
	return &c, []float64{l.StepBaseMs, l.DecodePerSeqMs, l.PrefillPerTokenMs, l.PrefillPerContextMs, l.EagerStepMs,
		c.TransferFixedMs, perMiB}, notes
}

// calibration is the state of one Calibrate.
type calibration struct {
	inputs   []Input
	base     *emulator.Profile // the linear start
	theta0   []float64         // its coefficients
	progress io.Writer
	notes    []string

	obs   [][]obs     // per input
	hops  [][]runHops // per input and run; nil for a run with no valid level
	nObs  int
	evals int
	best  float64
	mu    sync.Mutex
}

// profile is the base with every coefficient of theta (coefNames' order).
func (c *calibration) profile(theta []float64) *emulator.Profile {
	p := *c.base
	l := emulator.LinearCosts{StepBaseMs: theta[0], DecodePerSeqMs: theta[1], PrefillPerTokenMs: theta[2],
		PrefillPerContextMs: theta[3], EagerStepMs: theta[4]}
	p.Linear = &l
	p.TransferFixedMs = theta[5]
	p.GPU.LinkBytesSec = 0
	if theta[6] > 0 {
		p.GPU.LinkBytesSec = 1000 * (1 << 20) / theta[6]
	}
	return &p
}

// predictAll predicts every input under prof, in parallel: once from its
// schedule alone (Runs[0] of the first record of each input), and, where
// c.hops is set, once per measured run with a valid level, with that run's
// own arrivals (out[i][1+r] for run r; nil for a run with none).
func (c *calibration) predictAll(prof *emulator.Profile) ([][]*schema.Record, error) {
	out := make([][]*schema.Record, len(c.inputs))
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, in := range c.inputs {
		var hops []runHops
		if c.hops != nil {
			hops = c.hops[i]
		}
		out[i] = make([]*schema.Record, 1+len(hops))
		for k := range out[i] {
			if k > 0 && hops[k-1] == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := in.Record.Workload
				opts := predict.Options{Profile: prof, Workload: w.Workload, QPS: w.QPS, SLO: in.Record.SLO, KeepRequests: true}
				if k > 0 {
					h := hops[k-1]
					opts.Hops = func(qps float64, id int) predict.Hop { return h[hopKey{qps, id}] }
				}
				rec, err := predict.Run(in.Spec, opts)
				mu.Lock()
				defer mu.Unlock()
				out[i][k] = rec
				if err != nil {
					errs = append(errs, fmt.Errorf("predict %s: %w", in.Path, err))
				}
			}()
		}
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// hopKey names one request of a run: its level's offered rate and its id.
type hopKey struct {
	qps float64
	id  int
}

// runHops is what one measured run added to its requests' schedule, as
// far as its record shows (predict.Hop), by level rate and request id.
// The fit predicts each run with its own: where in a step a request
// reaches its engine decides which requests share its steps, and the
// arrivals of a prediction from the schedule alone are exactly periodic
// (their phase fixed), where a live run's are jittered by the client's
// lateness and the HTTP hops. Fitted against the schedule alone, that
// jitter reads as a cost: decode per sequence and prefill per context
// token came out 7% and 113% off on live records, and as far on virtual
// records with half a millisecond of jitter added.
type runHops map[hopKey]predict.Hop

// hopsOf estimates run's arrivals. A request reaches its first worker
// between the client's send (SentMs, before the hop to the worker) and
// its engine's receipt as its first token's arrival less the engine's
// receipt-to-first-token time (e2e_time_ms − generation_time_ms, after
// the hop back): the midpoint, as a clock offset is taken, where the
// engine reports both (the send otherwise), and the other half is the hop
// back (predict.Hop.BackMs), which the client's TTFT includes.
// Disaggregated, the engine is the decode worker, and the same estimate
// is the decode leg's receipt (predict.Hop.DecodeAtMs, late by the hop
// back, so the hop back is in its prediction already); the prefill leg
// leaves at the send.
func hopsOf(run schema.RunRecord, disagg bool, scale float64) runHops {
	h := runHops{}
	for _, l := range run.Levels {
		if !l.Verdict.Valid {
			continue
		}
		for _, q := range l.Requests {
			if q.Outcome != schema.OutcomeOK || q.FirstMs == nil {
				continue
			}
			hop := predict.Hop{ArriveMs: max(q.SentMs-q.ScheduledMs, 0)}
			if m, ok := schema.DecodeEngineMetrics(q.EngineMetrics); ok && m.E2ETimeMs != nil && m.GenerationTimeMs != nil {
				unit := 1 / scale
				if m.TimeScale != nil {
					unit = 1
				}
				receipt := *q.FirstMs - (*m.E2ETimeMs-*m.GenerationTimeMs)*unit
				switch {
				case disagg:
					hop.DecodeAtMs = receipt
				case receipt > q.SentMs:
					hop.ArriveMs = (q.SentMs+receipt)/2 - q.ScheduledMs
					hop.BackMs = (receipt - q.SentMs) / 2
				}
			}
			h[hopKey{l.OfferedQPS, q.ID}] = hop
		}
	}
	if len(h) == 0 {
		return nil
	}
	return h
}

// observe chooses the observations from the measured records and the
// start's predictions: which requests, which quantities, which scales.
func (c *calibration) observe() error {
	c.hops = make([][]runHops, len(c.inputs))
	for i, in := range c.inputs {
		for _, run := range in.Record.Runs {
			c.hops[i] = append(c.hops[i], hopsOf(run, in.Spec.Topology.Kind == deploy.Disaggregated, recordScale(in.Record)))
		}
	}
	preds, err := c.predictAll(c.base)
	if err != nil {
		return fmt.Errorf("calibrate: at the start: %w", err)
	}
	c.obs = make([][]obs, len(c.inputs))
	for i, in := range c.inputs {
		o := &observer{c: c, i: i, rec: in.Record, disagg: in.Spec.Topology.Kind == deploy.Disaggregated, scale: recordScale(in.Record)}
		for ri, run := range in.Record.Runs {
			o.run = ri
			var pl []schema.LevelRecord
			if p := preds[i][1+ri]; p != nil {
				pl = p.Runs[0].Levels
			}
			for li, l := range run.Levels {
				if err := o.level(in.Path, run.Run, li, l, pl); err != nil {
					return err
				}
			}
		}
		c.notes = append(c.notes, o.note(in.Path))
		c.nObs += len(c.obs[i])
	}
	return nil
}

// recordScale is a record's time scale, 1 where it states none.
func recordScale(rec *schema.Record) float64 {
	if !(rec.TimeScale > 0) {
		return 1
	}
	return rec.TimeScale
}

// observer chooses one input's observations (observe), and counts what it
// took and what it left out for the input's note.
type observer struct {
	c      *calibration
	i      int // the input
	rec    *schema.Record
	disagg bool
	scale  float64
	run    int // the run being observed (0-based)

	count                                [nQuantities]int
	skipped, lateWarmupLevels, latePulls int
}

// add records one observation of quantity k of the requests ids at level li.
func (o *observer) add(li int, ids []int, k quantity, v, floor float64) {
	o.c.obs[o.i] = append(o.c.obs[o.i], obs{run: 1 + o.run, level: li, ids: ids, q: k, measured: v, scale: math.Max(math.Abs(v), floor)})
	o.count[k]++
}

// level observes level li of the run (run is its number), against the
// start's prediction of the run's levels pl.
func (o *observer) level(path string, run, li int, l schema.LevelRecord, pl []schema.LevelRecord) error {
	if !l.Verdict.Valid {
		o.skipped++
		return nil
	}
	if li >= len(pl) || pl[li].OfferedQPS != l.OfferedQPS {
		return fmt.Errorf("calibrate: %s: run %d's level %d is %g req/s, the workload's %v", path, run, li, l.OfferedQPS, o.rec.Workload.QPS)
	}
	var (
		ttftIDs []int
		ttftSum float64
	)
	// The warm-ups' pulls carry whole prompts; where an emulated
	// engine's host delivered any of them after its modelled end
	// (its counters say so), their transfer times are host time,
	// not the link's.
	lateWarmups := false
	if l.Counters.Warmup != nil && !l.WarmupOverlap {
		if n, _, _, ok := replay.EmulatorLateness(l.Counters.Before, l.Counters.Warmup); ok && n > 0 {
			lateWarmups = true
			o.lateWarmupLevels++
		}
	}
	for _, q := range l.Requests {
		if !q.Valid || q.Outcome != schema.OutcomeOK || q.TTFTMs == nil || q.ID < 0 || q.ID >= len(pl[li].Requests) {
			continue
		}
		mm, ok := schema.DecodeEngineMetrics(q.EngineMetrics)
		_, pok := schema.DecodeEngineMetrics(pl[li].Requests[q.ID].EngineMetrics)
		if ok && pok && mm.QueueTimeMs != nil && mm.TimeToFirstTokenMs != nil {
			o.engineRequest(li, q, mm, lateWarmups)
			continue
		}
		// The client's figures. A measured request's TTFT goes
		// to its level's mean only: it may have waited for the
		// step in flight, and how long depends on where its
		// arrival falls within that step, a sawtooth in the
		// coefficients. The warm-ups reach an idle engine.
		id := []int{q.ID}
		if q.TPOTMs != nil && q.OutputTokens > 1 {
			o.add(li, id, qTPOT, *q.TPOTMs, minScaleMs)
		}
		if q.ID >= o.rec.Warmups() {
			ttftIDs = append(ttftIDs, q.ID)
			ttftSum += *q.TTFTMs
		} else {
			o.add(li, id, qTTFT, *q.TTFTMs, minScaleMs)
		}
	}
	if n := len(ttftIDs); n > 0 {
		o.add(li, ttftIDs, qTTFTMean, ttftSum/float64(n), minScaleMs)
	}
	return nil
}

// engineRequest observes a request whose engine reported its per-request
// metrics mm (queue_time_ms and time_to_first_token_ms at least).
func (o *observer) engineRequest(li int, q schema.RequestRecord, mm schema.EngineMetrics, lateWarmups bool) {
	id := []int{q.ID}
	// The engine's figures, without queue_time_ms, for the
	// same reason: the wait for the step in flight is a
	// sawtooth, and the steps' costs are in the others.
	unit := 1 / o.scale
	if mm.TimeScale != nil {
		unit = 1 // hone's emulator writes model time
	}
	o.add(li, id, qEngineTTFT, *mm.TimeToFirstTokenMs*unit, minScaleMs)
	if mm.MeanITLMs != nil && q.OutputTokens > 1 {
		o.add(li, id, qITL, *mm.MeanITLMs*unit, minScaleMs)
	}
	if !o.disagg {
		return
	}
	// The metrics are the decode worker's; the client's
	// TTFT less the decode worker's part is the prefill
	// leg (the prefill worker's queue and prefill).
	// A pull the emulator says ended late is host time.
	late := mm.KVTransferLateMs != nil && *mm.KVTransferLateMs > 0
	if late {
		o.latePulls++
	}
	if mm.KVTransferTimeMs != nil && !late && !(lateWarmups && q.ID < o.rec.Warmups()) {
		o.add(li, id, qTransfer, *mm.KVTransferTimeMs*unit, minScaleMs)
	}
	o.add(li, id, qPrefillLeg, *q.TTFTMs-(*mm.QueueTimeMs+*mm.TimeToFirstTokenMs)*unit, minScaleMs)
}

// note says what the input gave and what was left out.
func (o *observer) note(path string) string {
	var used []string
	for k, n := range o.count {
		if n > 0 {
			used = append(used, fmt.Sprintf("%d %s", n, quantityNames[k]))
		}
	}
	note := fmt.Sprintf("%s: %d observations (%s)", path, len(o.c.obs[o.i]), strings.Join(used, ", "))
	if o.skipped > 0 {
		note += fmt.Sprintf("; %d invalid levels left out", o.skipped)
	}
	if o.latePulls > 0 {
		note += fmt.Sprintf("; %d KV transfer times left out (the emulator's host delivered their pulls late: kv_transfer_late_ms)", o.latePulls)
	}
	if o.lateWarmupLevels > 0 {
		note += fmt.Sprintf("; the warm-ups' KV transfer times left out of %d levels (the emulator's host delivered their pulls late: emulator counters)", o.lateWarmupLevels)
	}
	return note
}

// residuals is the model LeastSquares fits: every observation's scaled,
// weighted residual under the coefficients theta (coefNames' order).
func (c *calibration) residuals(theta []float64) ([]float64, error) {
	preds, err := c.predictAll(c.profile(theta))
	if err != nil {
		return nil, err
	}
	r := make([]float64, 0, c.nObs)
	type reqKey struct{ run, level, id int }
	for i, list := range c.obs {
		metrics := map[reqKey]*schema.EngineMetrics{}
		for _, o := range list {
			reqs := preds[i][o.run].Runs[0].Levels[o.level].Requests
			sum := 0.0
			for _, id := range o.ids {
				k := reqKey{o.run, o.level, id}
				m := metrics[k]
				if m == nil {
					pm, _ := schema.DecodeEngineMetrics(reqs[id].EngineMetrics)
					m = &pm
					metrics[k] = m
				}
				sum += o.q.value(&reqs[id], m)
			}
			v := sum / float64(len(o.ids))
			r = append(r, (v-o.measured)/o.scale)
		}
	}
	return r, nil
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// fit runs LeastSquares over the free coefficients, the others held at
// theta's values.
func (c *calibration) fit(theta []float64, free []int, maxIter int) (Fit, error) {
	x0 := make([]float64, len(free))
	names := make([]string, len(free))
	lower := make([]float64, len(free))
	for k, j := range free {
		x0[k], names[k] = theta[j], coefNames[j]
	}
	model := func(x []float64) ([]float64, error) {
		th := slices.Clone(theta)
		for k, j := range free {
			th[j] = x[k]
		}
		r, err := c.residuals(th)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.evals++
		if err == nil && c.progress != nil {
			if v := rms(r); v < c.best {
				c.best = v
				fmt.Fprintf(c.progress, "calibrate: evaluation %d: rms relative residual %.4g\n", c.evals, v)
			}
		}
		return r, err
	}
	// Residuals of one level of one run share its queue: they are one
	// cluster for the standard errors.
	var clusters []int
	ids := map[[3]int]int{}
	for i, list := range c.obs {
		for _, o := range list {
			k := [3]int{i, o.run, o.level}
			if _, ok := ids[k]; !ok {
				ids[k] = len(ids)
			}
			clusters = append(clusters, ids[k])
		}
	}
	return LeastSquares(model, x0, Options{Lower: lower, MaxIter: maxIter, Names: names, RelStep: relStep, Clusters: clusters})
}

// compare fills PredictionError and Objective: the measured medians
// against the start profile's and the calibrated profile's predictions.
func (c *calibration) compare(res *Result, start *emulator.Profile) error {
	before, err := c.predictAll(start)
	if err != nil {
		return fmt.Errorf("calibrate: predict with the start profile: %w", err)
	}
	after, err := c.predictAll(res.Profile)
	if err != nil {
		return fmt.Errorf("calibrate: predict with the calibrated profile: %w", err)
	}
	for i, in := range c.inputs {
		rec := in.Record
		bl, al := before[i][0].Runs[0].Levels, after[i][0].Runs[0].Levels
		for li, qps := range rec.Workload.QPS {
			var ttft, tpot []float64
			for _, run := range rec.Runs {
				if li < len(run.Levels) && run.Levels[li].Verdict.Valid {
					ttft = append(ttft, run.Levels[li].P50TTFTMs)
					tpot = append(tpot, run.Levels[li].P50TPOTMs)
				}
			}
			e := LevelError{Input: in.Path, OfferedQPS: qps, Runs: len(ttft),
				MeasuredP50TTFTMs: median(ttft), MeasuredP50TPOTMs: median(tpot)}
			e.Before = levelPrediction(bl[li], e)
			e.After = levelPrediction(al[li], e)
			var pt, pp []float64
			for r, run := range rec.Runs {
				if p := after[i][1+r]; p != nil && li < len(run.Levels) && run.Levels[li].Verdict.Valid {
					pt, pp = append(pt, p.Runs[0].Levels[li].P50TTFTMs), append(pp, p.Runs[0].Levels[li].P50TPOTMs)
				}
			}
			if len(pt) > 0 {
				g := levelPrediction(schema.LevelRecord{P50TTFTMs: median(pt), P50TPOTMs: median(pp)}, e)
				e.AfterGivenArrivals = &g
			}
			res.PredictionError = append(res.PredictionError, e)
		}
		var objs []float64
		for _, run := range rec.Runs {
			objs = append(objs, run.Objective)
		}
		o := ObjectiveError{Input: in.Path, Measured: median(objs), Before: before[i][0].Runs[0].Objective, After: after[i][0].Runs[0].Objective}
		o.BeforeRelErr, o.AfterRelErr = relErr(o.Before, o.Measured), relErr(o.After, o.Measured)
		res.Objective = append(res.Objective, o)
	}
	return nil
}

func levelPrediction(l schema.LevelRecord, e LevelError) LevelPrediction {
	return LevelPrediction{P50TTFTMs: l.P50TTFTMs, P50TPOTMs: l.P50TPOTMs,
		TTFTRelErr: relErr(l.P50TTFTMs, e.MeasuredP50TTFTMs), TPOTRelErr: relErr(l.P50TPOTMs, e.MeasuredP50TPOTMs)}
}

// relErr is (predicted − measured)/measured; NaN when measured is 0 or
// not a number.
func relErr(pred, meas float64) float64 {
	if meas == 0 || math.IsNaN(meas) {
		return math.NaN()
	}
	return (pred - meas) / meas
}

// median interpolates between the two middle values (slo.Median's rule,
// which hone uses across runs); NaN for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func rms(r []float64) float64 {
	if len(r) == 0 {
		return 0
	}
	return math.Sqrt(sumSq(r) / float64(len(r)))
}

// JSONNumber is x for JSON: nil when x is NaN or infinite (JSON has
// neither). The optimizer's log uses it too.
func JSONNumber(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// MarshalJSON writes the coefficient with snake_case keys; an undefined
// standard error is null.
func (c Coefficient) MarshalJSON() ([]byte, error) {
	return json.Marshal(coefficientJSON{c.Name, c.Value, JSONNumber(c.StdErr), JSONNumber(c.RelStdErr), c.Start, c.Fitted, c.Why})
}

// coefficientJSON is a Coefficient on the wire.
type coefficientJSON struct {
	Name      string   `json:"name"`
	Value     float64  `json:"value"`
	StdErr    *float64 `json:"std_err"`
	RelStdErr *float64 `json:"rel_std_err"`
	Start     float64  `json:"start"`
	Fitted    bool     `json:"fitted"`
	Why       string   `json:"why,omitempty"`
}

// UnmarshalJSON reads what MarshalJSON writes (a null standard error is
// NaN again), so a log that embeds coefficients reads back whole.
func (c *Coefficient) UnmarshalJSON(b []byte) error {
	var v coefficientJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	num := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	*c = Coefficient{Name: v.Name, Value: v.Value, StdErr: num(v.StdErr), RelStdErr: num(v.RelStdErr), Start: v.Start, Fitted: v.Fitted, Why: v.Why}
	return nil
}

// MarshalJSON writes the level with snake_case keys; undefined figures are
// null.
func (e LevelError) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Input              string           `json:"input"`
		OfferedQPS         float64          `json:"offered_qps"`
		Runs               int              `json:"runs"`
		MeasuredP50TTFTMs  *float64         `json:"measured_p50_ttft_ms"`
		MeasuredP50TPOTMs  *float64         `json:"measured_p50_tpot_ms"`
		Before             LevelPrediction  `json:"before"`
		After              LevelPrediction  `json:"after"`
		AfterGivenArrivals *LevelPrediction `json:"after_given_arrivals,omitempty"`
	}{e.Input, e.OfferedQPS, e.Runs, JSONNumber(e.MeasuredP50TTFTMs), JSONNumber(e.MeasuredP50TPOTMs), e.Before, e.After, e.AfterGivenArrivals})
}

// MarshalJSON writes the prediction with snake_case keys; undefined
// relative errors are null.
func (p LevelPrediction) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		P50TTFTMs  float64  `json:"p50_ttft_ms"`
		P50TPOTMs  float64  `json:"p50_tpot_ms"`
		TTFTRelErr *float64 `json:"ttft_rel_err"`
		TPOTRelErr *float64 `json:"tpot_rel_err"`
	}{p.P50TTFTMs, p.P50TPOTMs, JSONNumber(p.TTFTRelErr), JSONNumber(p.TPOTRelErr)})
}

// MarshalJSON writes the objective with snake_case keys; undefined
// relative errors are null.
func (o ObjectiveError) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Input        string   `json:"input"`
		Measured     *float64 `json:"measured"`
		Before       float64  `json:"before"`
		After        float64  `json:"after"`
		BeforeRelErr *float64 `json:"before_rel_err"`
		AfterRelErr  *float64 `json:"after_rel_err"`
	}{o.Input, JSONNumber(o.Measured), o.Before, o.After, JSONNumber(o.BeforeRelErr), JSONNumber(o.AfterRelErr)})
}

// MarshalJSON writes the result with snake_case keys; the profiles by name
// (the calibrated one is what hone calibrate --out writes).
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Profile          string           `json:"profile"`
		Start            string           `json:"start"`
		Coefficients     []Coefficient    `json:"coefficients"`
		Observations     int              `json:"observations"`
		RMSResidual      float64          `json:"rms_residual"`
		StartRMSResidual float64          `json:"start_rms_residual"`
		Iterations       int              `json:"iterations"`
		Evaluations      int              `json:"evaluations"`
		Converged        bool             `json:"converged"`
		PredictionError  []LevelError     `json:"prediction_error"`
		Objective        []ObjectiveError `json:"objective"`
		Notes            []string         `json:"notes"`
	}{r.Profile.Name, r.Start.Name, r.Coefficients, r.Observations, r.RMSResidual, r.StartRMSResidual, r.Iterations,
		r.Evaluations, r.Converged, r.PredictionError, r.Objective, r.Notes})
}

// WorseTolerance is how much worse (in relative error, absolute) the
// calibrated profile may predict its own records than the start before
// Worse says so: less is noise of the comparison.
const WorseTolerance = 0.01

// Worse says why the calibrated profile predicts the records it was fitted
// to worse than the profile it started from, "" when it does not: the mean
// absolute relative error of the records' objectives, or of the levels'
// p50 TTFT and TPOT, is higher after than before by more than
// WorseTolerance. A fit can do that: it minimises the per-request
// residuals, not these summaries.
func (r *Result) Worse() string {
	meanAbs := func(vs []float64) (float64, int) {
		s, n := 0.0, 0
		for _, v := range vs {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				s += math.Abs(v)
				n++
			}
		}
		if n == 0 {
			return math.NaN(), 0
		}
		return s / float64(n), n
	}
	var why []string
	var ob, oa []float64
	for _, o := range r.Objective {
		ob, oa = append(ob, o.BeforeRelErr), append(oa, o.AfterRelErr)
	}
	if b, n := meanAbs(ob); n > 0 {
		if a, _ := meanAbs(oa); a > b+WorseTolerance {
			why = append(why, fmt.Sprintf("objective error %.1f%% after, %.1f%% before", 100*a, 100*b))
		}
	}
	var lb, la []float64
	for _, e := range r.PredictionError {
		lb = append(lb, e.Before.TTFTRelErr, e.Before.TPOTRelErr)
		la = append(la, e.After.TTFTRelErr, e.After.TPOTRelErr)
	}
	if b, n := meanAbs(lb); n > 0 {
		if a, _ := meanAbs(la); a > b+WorseTolerance {
			why = append(why, fmt.Sprintf("p50 TTFT/TPOT error %.1f%% after, %.1f%% before", 100*a, 100*b))
		}
	}
	return strings.Join(why, "; ")
}
