package gate

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/perf/benchmath"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// Verdict is the outcome for one metric or a whole check.
type Verdict string

const (
	Pass     Verdict = "pass"
	Improved Verdict = "improved"
	Warn     Verdict = "warn"
	Fail     Verdict = "fail"
	// Suspect: the values are physically implausible (see
	// PlausibilityRule), so the comparison says more about the measurement
	// than the deployment. It fails CI like Fail.
	Suspect Verdict = "suspect"
	// Invalid: a metric not compared because its level is invalid on one
	// side (or, for the objective, not every level is valid); never pass
	// or fail.
	Invalid Verdict = "invalid"
	// Incomparable: the candidate was measured in another environment or
	// with another procedure, or lacks metrics (exit 2).
	Incomparable Verdict = "incomparable"
	// Unusable: no level is valid on both sides (exit 2).
	Unusable Verdict = "unusable"
)

// Config tunes a check. The zero value means the defaults.
type Config struct {
	Alpha    float64              `yaml:"alpha" json:"alpha"`
	Compared []string             `yaml:"compare_fingerprint" json:"compare_fingerprint"`
	Metrics  map[string]Threshold `yaml:"metrics" json:"metrics"`
}

// Threshold overrides a metric's relative fail and warn changes.
type Threshold struct {
	Fail *float64 `yaml:"fail" json:"fail"`
	Warn *float64 `yaml:"warn" json:"warn"`
}

// ReadConfig reads a gate config file (YAML or JSON).
func ReadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read gate config: %w", err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("gate config %s: %w", path, err)
	}
	if !(c.Alpha >= 0 && c.Alpha < 0.5) { // (NaN fails every comparison)
		return c, fmt.Errorf("gate config %s: alpha %v: want 0 < alpha < 0.5", path, c.Alpha)
	}
	for name, t := range c.Metrics {
		if _, ok := Metrics[name]; !ok {
			return c, fmt.Errorf("gate config %s: metrics.%s: unknown metric (known: %s)", path, name, knownMetrics())
		}
		for _, f := range []struct {
			field string
			v     *float64
		}{{"fail", t.Fail}, {"warn", t.Warn}} {
			// An infinite threshold would reach the report, whose JSON
			// cannot hold it.
			if f.v != nil && !(*f.v >= 0 && !math.IsInf(*f.v, 1)) {
				return c, fmt.Errorf("gate config %s: metrics.%s.%s: %v: want a finite relative change >= 0 (0.05 = 5%%)", path, name, f.field, *f.v)
			}
		}
	}
	return c, nil
}

func knownMetrics() string {
	var s []string
	for m := range Metrics {
		s = append(s, m)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func (c Config) alpha() float64 {
	if c.Alpha > 0 {
		return c.Alpha
	}
	return 0.05
}

func (c Config) compared() []string {
	if len(c.Compared) > 0 {
		return withProcedure(c.Compared)
	}
	return withProcedure(DefaultCompared)
}

// withProcedure adds ProcedureCompared to a list of compared fields.
func withProcedure(compared []string) []string {
	out := append([]string(nil), compared...)
	for _, p := range ProcedureCompared {
		found := false
		for _, c := range compared {
			found = found || c == p
		}
		if !found {
			out = append(out, p)
		}
	}
	return out
}

func (c Config) thresholds(metric string) (fail, warn float64) {
	m := Metrics[metric]
	fail, warn = m.Fail, m.Warn
	if m.Fail == 0 && !m.Hard { // an unknown metric
		fail, warn = 0.10, 0.05
	}
	if t, ok := c.Metrics[metric]; ok {
		if t.Fail != nil {
			fail = *t.Fail
		}
		if t.Warn != nil {
			warn = *t.Warn
		}
	}
	return fail, warn
}

// Result is the comparison of one series.
type Result struct {
	Series     Series    `json:"series"`
	Candidate  []float64 `json:"candidate"`
	BaseCenter float64   `json:"baseline_center"`
	CandCenter float64   `json:"candidate_center"`
	Change     float64   `json:"change"` // relative, (cand−base)/base; positive is an increase
	Worse      bool      `json:"worse"`
	Test       string    `json:"test"`
	P          float64   `json:"p,omitempty"`          // one-sided, in the direction of the change; tested metrics only
	PAdjusted  float64   `json:"p_adjusted,omitempty"` // Holm
	Threshold  float64   `json:"threshold"`
	NoiseFloor float64   `json:"noise_floor"`
	Verdict    Verdict   `json:"verdict"`
	Reason     string    `json:"reason"`
	// Excluded says which runs' values were left out as invalid; the
	// rest were compared.
	Excluded string `json:"excluded,omitempty"`
	// Tail is set for a tail metric compared on pooled per-request values
	// (TailRule); its centers are then the pooled figures.
	Tail *Tail `json:"tail,omitempty"`
	// Bracket is set for CapacityMetric (CapacityRule).
	Bracket *Bracket `json:"bracket,omitempty"`
	tested  bool
	// perRun says why a tail metric was compared per run, or "".
	perRun string
}

// Report is the outcome of a check.
type Report struct {
	Baseline     string   `json:"baseline"`
	Kind         string   `json:"kind"`
	BaseRuns     int      `json:"baseline_runs"`
	CandRuns     int      `json:"candidate_runs"`
	Verdict      Verdict  `json:"verdict"`
	Incomparable []string `json:"incomparable,omitempty"`
	// InvalidLevels lists each level with invalid runs on either side and
	// why: skipped, or compared without those runs.
	InvalidLevels []string `json:"invalid_levels,omitempty"`
	Results       []Result `json:"results"`
	Notes         []string `json:"notes"`
}

// ExitCode is 0 for pass, warn or improved; 1 for a regression or a
// suspect measurement; 2 when the candidate cannot be compared or no level
// is valid on both sides.
func (r *Report) ExitCode() int {
	switch r.Verdict {
	case Fail, Suspect:
		return 1
	case Incomparable, Unusable:
		return 2
	}
	return 0
}

// Check compares candidate runs against a baseline. A metric is compared
// on the runs whose level is valid on each side; a level with no valid run
// on a side is skipped (Invalid), and when no level is left the check is
// Unusable. Compared metrics whose values are implausible are Suspect.
func Check(bl *Baseline, runs []Run, cfg Config) *Report {
	rep := &Report{Baseline: bl.Name, Kind: bl.Kind, BaseRuns: bl.Runs, CandRuns: len(runs)}
	if len(runs) == 0 {
		rep.Verdict, rep.Incomparable = Incomparable, []string{"no candidate runs"}
		return rep
	}
	rep.Incomparable = incomparableRuns(bl, runs, cfg)
	cand, order, bounds := poolCandidate(runs)
	for _, s := range bl.Series {
		if _, ok := cand[s.Key()]; !ok {
			rep.Incomparable = append(rep.Incomparable, "missing metric in the candidate: "+s.Key())
		}
	}
	if len(rep.Incomparable) > 0 {
		rep.Verdict = Incomparable
		return rep
	}
	exact := bl.Kind == string(schema.KindSimulationOnly)
	levels, comparable := rep.compareSeries(bl, cand, exact, cfg)
	holm(rep.Results, cfg.alpha())
	for i := range rep.Results {
		if rep.Results[i].Verdict != Invalid {
			decide(&rep.Results[i], cfg)
		}
	}
	if !exact { // simulation_only records come from the exact queueing model (package sim), not a measurement
		flagImplausible(rep.Results, bl.Bounds, bounds)
	}
	for i := range rep.Results {
		if r := &rep.Results[i]; r.Excluded != "" {
			r.Reason += "; compared without " + r.Excluded
		}
	}
	rep.InvalidLevels = invalidLevels(rep.Results)
	t := tallyResults(rep.Results)
	rep.Verdict = t.verdict(len(levels) > 0 && len(comparable) == 0, len(rep.Results))
	rep.Notes = append(rep.Notes, t.notes(rep.Verdict, exact, rep.Results, cfg)...)
	extra := 0
	for _, k := range order {
		if !bl.has(k) {
			extra++
		}
	}
	if extra > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d candidate metrics have no baseline and were not compared", extra))
	}
	return rep
}

// incomparableRuns is why runs cannot be compared with bl: a kind or a
// compared fingerprint field that differs.
func incomparableRuns(bl *Baseline, runs []Run, cfg Config) []string {
	var why []string
	for i, r := range runs {
		if r.Kind != bl.Kind {
			why = append(why, fmt.Sprintf("run %d: kind %q, baseline kind %q", i+1, r.Kind, bl.Kind))
		}
		for _, d := range DiffFingerprints(bl.Fingerprint, r.Fingerprint, cfg.compared()) {
			why = append(why, fmt.Sprintf("run %d: %s", i+1, d))
		}
	}
	return why
}

// poolCandidate merges the runs' series by key (order: first seen) and
// their bounds.
func poolCandidate(runs []Run) (cand map[string]*Series, order []string, bounds Bounds) {
	cand = map[string]*Series{}
	bounds = runs[0].Bounds
	for _, r := range runs {
		bounds = bounds.merge(r.Bounds)
		for _, s := range r.Series() {
			if c, ok := cand[s.Key()]; ok {
				c.merge(s)
				continue
			}
			s := s
			cand[s.Key()] = &s
			order = append(order, s.Key())
		}
	}
	return cand, order, bounds
}

// compareSeries adds a Result for each baseline series to rep: compared
// on the valid runs of both sides, else skipped. It returns the levels
// seen and those valid on both sides.
func (rep *Report) compareSeries(bl *Baseline, cand map[string]*Series, exact bool, cfg Config) (levels, comparable map[string]bool) {
	levels, comparable = map[string]bool{}, map[string]bool{}
	for _, s := range bl.Series {
		c := cand[s.Key()]
		lk := levelKey(s)
		if s.OfferedQPS > 0 {
			levels[lk] = true
		}
		bv, cv := s.valid(), c.valid()
		if !replay.EnoughValid(len(bv.Values), len(s.Values)) || !replay.EnoughValid(len(cv.Values), len(c.Values)) {
			rep.Results = append(rep.Results, skipped(s, *c))
			continue
		}
		if s.OfferedQPS > 0 {
			comparable[lk] = true
		}
		res, perRun, pooled := compareTail(bv, cv, cfg)
		if s.Metric == CapacityMetric {
			res, pooled = compareCapacity(bv, cv, cfg), true
		}
		if exact || !pooled {
			res = compare(bv, cv.Values, exact, cfg)
			if !exact && Metrics[s.Metric].Percentile > 0 {
				res.perRun = perRun
			}
		}
		res.Excluded = excluded(s, *c)
		rep.Results = append(rep.Results, res)
	}
	return levels, comparable
}

// flagImplausible makes Suspect each compared result whose figures the
// baseline's or the candidate's bounds cannot reach.
func flagImplausible(rs []Result, base, cand Bounds) {
	for i := range rs {
		r := &rs[i]
		if r.Verdict == Invalid {
			continue
		}
		if why := implausible(r, levelResult(rs, r), base, cand); why != "" {
			r.Reason = fmt.Sprintf("%s (the comparison alone: %s, %s)", why, r.Verdict, r.Reason)
			r.Verdict = Suspect
		}
	}
}

// tally counts a report's results: by verdict, with a pooled tail, with a
// capacity bracket, and compared per run (by why).
type tally struct {
	counts          map[Verdict]int
	tails, brackets int
	perRun          map[string]int
}

// tallyResults counts rs, dropping each one's samples: the report shows
// the pooled figures (Tail), not every request.
func tallyResults(rs []Result) tally {
	t := tally{counts: map[Verdict]int{}, perRun: map[string]int{}}
	for i := range rs {
		r := &rs[i]
		r.Series.Samples = nil // the report shows the pooled figures (Tail), not every request
		t.counts[r.Verdict]++
		if r.Tail != nil {
			t.tails++
		}
		if r.Bracket != nil {
			t.brackets++
		}
		if r.perRun != "" {
			t.perRun[r.perRun]++
		}
	}
	return t
}

// verdict is the report's verdict: Unusable when no level is valid on
// both sides (noLevel) or every one of the n results is Invalid, else the
// worst result's.
func (t tally) verdict(noLevel bool, n int) Verdict {
	switch {
	case noLevel, n > 0 && t.counts[Invalid] == n:
		return Unusable
	case t.counts[Suspect] > 0:
		return Suspect
	case t.counts[Fail] > 0:
		return Fail
	case t.counts[Warn] > 0:
		return Warn
	case t.counts[Improved] > 0:
		return Improved
	}
	return Pass
}

// notes explain a report of verdict v over rs: how it compared, the
// rules its tails and brackets followed, and what to do about invalid,
// suspect, failed and improved metrics.
func (t tally) notes(v Verdict, exact bool, rs []Result, cfg Config) []string {
	var notes []string
	tested := 0
	for _, r := range rs {
		if r.tested {
			tested++
		}
	}
	if v == Unusable {
		notes = append(notes, "no level is valid in both the baseline and the candidate: nothing could be compared (exit 2); "+
			"invalid levels never decide a verdict — see each level's reasons, and the record's verdict_rule")
	} else if exact {
		notes = append(notes, "simulation_only records are deterministic: every metric is compared exactly")
	} else {
		notes = append(notes, fmt.Sprintf("significance: one-sided at α=%g, Holm-adjusted over %d tested metrics (family-wise false-alarm rate ≤ α)", cfg.alpha(), tested))
	}
	if t.tails > 0 {
		notes = append(notes, "tails: "+TailRule)
	}
	if t.brackets > 0 {
		notes = append(notes, "capacity: "+CapacityRule)
	}
	for _, why := range sortedKeys(t.perRun) {
		notes = append(notes, fmt.Sprintf("%d tail metrics were compared per run, each run's p99 a maximum of its few requests: %s", t.perRun[why], why))
	}
	if n := t.counts[Invalid]; n > 0 && v != Unusable {
		notes = append(notes, fmt.Sprintf("%d metrics were not compared: their level is invalid on one side (or, for the objective, not every level is valid); invalid levels are never pass or fail", n))
	}
	if t.counts[Suspect] > 0 {
		notes = append(notes, fmt.Sprintf("%d metrics are suspect (%s): the figures are more likely a measurement artefact than the deployment's; "+
			"the check fails (exit 1) until the measurement is explained — check the records' cache procedure and time scale, and rebuild the baseline if its values are the implausible ones",
			t.counts[Suspect], PlausibilityRule))
		if t.counts[Fail] > 0 {
			notes = append(notes, fmt.Sprintf("%d metrics also failed; with a suspect measurement, check it before reading them as regressions", t.counts[Fail]))
		}
	}
	if t.counts[Improved] > 0 && v != Suspect {
		notes = append(notes, fmt.Sprintf("%d metrics improved beyond their thresholds: consider `hone gate baseline update`", t.counts[Improved]))
	}
	return notes
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func levelKey(s Series) string { return s.Scenario + "@" + fmtQPS(s.OfferedQPS) }

// skipped is the result of a series that has no valid value on a side: its
// figures are shown, nothing is decided on them.
func skipped(base, cand Series) Result {
	r := Result{Series: base, Candidate: cand.Values, Verdict: Invalid, Test: "skipped"}
	r.BaseCenter, r.CandCenter = slo.Median(base.Values), slo.Median(cand.Values)
	r.Change = relChange(r.BaseCenter, r.CandCenter)
	why := "the level is invalid"
	if len(base.valid().Values) > 0 && len(cand.valid().Values) > 0 {
		why = fmt.Sprintf("too few valid runs (at least %d of a side's runs must be valid)", replay.MinValidRuns)
	}
	if base.OfferedQPS == 0 {
		r.Reason = "not comparable: not every level is valid; " + excluded(base, cand)
		if why != "the level is invalid" {
			r.Reason = "not comparable: " + why + "; " + excluded(base, cand)
		}
	} else {
		r.Reason = "skipped: " + why + "; " + excluded(base, cand)
	}
	return r
}

// excluded describes the invalid values left out of a comparison, or "".
func excluded(base, cand Series) string {
	var why []string
	for _, side := range []struct {
		name string
		s    Series
	}{{"baseline", base}, {"candidate", cand}} {
		if d := describeInvalid(side.name, side.s); d != "" {
			why = append(why, d)
		}
	}
	return strings.Join(why, "; ")
}

// describeInvalid is "candidate runs 1, 3 of 3 invalid (reason; run 2:
// other reason)", or "" when every value is valid.
func describeInvalid(side string, s Series) string {
	var order []string
	runs := map[string][]string{}
	n := 0
	for i := range s.Values {
		why := s.invalidAt(i)
		if why == "" {
			continue
		}
		n++
		if _, ok := runs[why]; !ok {
			order = append(order, why)
		}
		runs[why] = append(runs[why], strconv.Itoa(i+1))
	}
	if n == 0 {
		return ""
	}
	var parts []string
	for _, why := range order {
		parts = append(parts, "run "+strings.Join(runs[why], ", ")+": "+why)
	}
	return fmt.Sprintf("%s: %d of %d runs invalid (%s)", side, n, len(s.Values), strings.Join(parts, "; "))
}

// levelResult is the objective_level_qps result paired with an objective
// result, or nil.
func levelResult(rs []Result, r *Result) *Result {
	if r.Series.Metric != "objective" {
		return nil
	}
	for i := range rs {
		if rs[i].Series.Metric == "objective_level_qps" && rs[i].Series.Scenario == r.Series.Scenario && rs[i].Verdict != Invalid {
			return &rs[i]
		}
	}
	return nil
}

// invalidLevels lists each level (and scenario-wide objective) with
// invalid runs, once.
func invalidLevels(rs []Result) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rs {
		k := levelKey(r.Series)
		if seen[k] {
			continue
		}
		switch {
		case r.Verdict == Invalid:
			out = append(out, r.where()+": "+r.Reason)
		case r.Excluded != "":
			out = append(out, r.where()+": compared without "+r.Excluded)
		default:
			continue
		}
		seen[k] = true
	}
	return out
}

func (bl *Baseline) has(key string) bool {
	for _, s := range bl.Series {
		if s.Key() == key {
			return true
		}
	}
	return false
}

// compare computes centers, change and the one-sided p-value of a series.
func compare(base Series, cand []float64, exact bool, cfg Config) Result {
	r := Result{Series: base, Candidate: cand}
	b := append([]float64(nil), base.Values...)
	c := append([]float64(nil), cand...)
	r.BaseCenter, r.CandCenter = slo.Median(b), slo.Median(c)
	r.Change = relChange(r.BaseCenter, r.CandCenter)
	r.Worse = (base.Direction == HigherIsBetter && r.CandCenter < r.BaseCenter) ||
		(base.Direction == LowerIsBetter && r.CandCenter > r.BaseCenter)
	r.NoiseFloor = 2 * cv(b)
	r.Threshold, _ = cfg.thresholds(base.Metric)
	switch {
	case Metrics[base.Metric].Hard:
		r.Test = "hard rule"
	case exact:
		r.Test = "exact"
	case len(b) < 2 || len(c) < 2:
		r.Test = fmt.Sprintf("threshold only (%d vs %d runs: too few for a test)", len(b), len(c))
	case spread(b) == 0 && spread(c) == 0:
		r.Test = "threshold only (no run-to-run spread on either side)"
	default:
		th := &benchmath.Thresholds{CompareAlpha: cfg.alpha()}
		var cmp benchmath.Comparison
		if len(b) >= 4 && len(c) >= 4 {
			cmp = benchmath.AssumeNothing.Compare(benchmath.NewSample(b, th), benchmath.NewSample(c, th))
			r.Test = fmt.Sprintf("Mann–Whitney U (%d vs %d runs)", len(base.Values), len(cand))
		} else if positive(b) && positive(c) {
			lb, lc := logs(b), logs(c)
			cmp = benchmath.AssumeNormal.Compare(benchmath.NewSample(lb, th), benchmath.NewSample(lc, th))
			r.BaseCenter, r.CandCenter = math.Exp(mean(lb)), math.Exp(mean(lc)) // geometric means
			r.Change = relChange(r.BaseCenter, r.CandCenter)
			r.Test = fmt.Sprintf("Welch t on logs (%d vs %d runs)", len(base.Values), len(cand))
		} else {
			cmp = benchmath.AssumeNormal.Compare(benchmath.NewSample(b, th), benchmath.NewSample(c, th))
			r.BaseCenter, r.CandCenter = mean(b), mean(c)
			r.Change = relChange(r.BaseCenter, r.CandCenter)
			r.Test = fmt.Sprintf("Welch t (%d vs %d runs; values not all positive)", len(base.Values), len(cand))
		}
		r.P = cmp.P / 2 // one-sided, in the observed direction: both statistics are symmetric under H0
		r.tested = true
	}
	return r
}

// holm adjusts the tested p-values with Holm's step-down method.
func holm(rs []Result, alpha float64) {
	var idx []int
	for i, r := range rs {
		if r.tested {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return rs[idx[a]].P < rs[idx[b]].P })
	m := len(idx)
	running := 0.0
	for k, i := range idx {
		adj := math.Min(1, float64(m-k)*rs[i].P)
		running = math.Max(running, adj) // adjusted p-values are monotone
		rs[i].PAdjusted = running
	}
	_ = alpha
}

// decide turns a compared series into a verdict.
func decide(r *Result, cfg Config) {
	fail, warn := cfg.thresholds(r.Series.Metric)
	size := math.Abs(r.Change)
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
	if Metrics[r.Series.Metric].Hard {
		hardRule(r)
		return
	}
	if r.Tail != nil {
		decideTail(r, cfg)
		return
	}
	if r.Bracket != nil {
		decideCapacity(r, cfg)
		return
	}
	bar := math.Max(fail, r.NoiseFloor)
	switch {
	case r.Test == "exact":
		switch {
		case r.CandCenter == r.BaseCenter && allEqual(r.Series.Values, r.Candidate):
			r.Verdict, r.Reason = Pass, "identical"
		case r.Worse:
			r.Verdict, r.Reason = Fail, fmt.Sprintf("worse by %s (deterministic: any change counts)", pct(size))
		default:
			r.Verdict, r.Reason = Improved, fmt.Sprintf("better by %s", pct(size))
		}
	case !r.tested:
		switch {
		case r.Worse && size > fail:
			r.Verdict, r.Reason = Fail, fmt.Sprintf("worse by %s > %s threshold (%s)", pct(size), pct(fail), r.Test)
		case r.Worse && warn > 0 && size > warn:
			r.Verdict, r.Reason = Warn, fmt.Sprintf("worse by %s > %s warn threshold (%s)", pct(size), pct(warn), r.Test)
		case !r.Worse && size > fail:
			r.Verdict, r.Reason = Improved, fmt.Sprintf("better by %s (%s)", pct(size), r.Test)
		default:
			r.Verdict, r.Reason = Pass, fmt.Sprintf("change %s within threshold (%s)", pct(r.Change), r.Test)
		}
	default:
		sig := r.PAdjusted < cfg.alpha()
		switch {
		case r.Worse && sig && size > bar:
			r.Verdict, r.Reason = Fail, fmt.Sprintf("worse by %s, significant (p=%.3g adjusted) and beyond max(threshold %s, noise floor %s)", pct(size), r.PAdjusted, pct(fail), pct(r.NoiseFloor))
		case r.Worse && warn > 0 && size > warn:
			why := "not significant"
			if sig {
				why = "significant but within max(threshold, noise floor) " + pct(bar)
			}
			r.Verdict, r.Reason = Warn, fmt.Sprintf("worse by %s > %s warn threshold; %s (p=%.3g adjusted)", pct(size), pct(warn), why, r.PAdjusted)
		case !r.Worse && sig && size > bar:
			r.Verdict, r.Reason = Improved, fmt.Sprintf("better by %s, significant (p=%.3g adjusted)", pct(size), r.PAdjusted)
		default:
			r.Verdict, r.Reason = Pass, fmt.Sprintf("change %s (p=%.3g adjusted)", pct(r.Change), r.PAdjusted)
		}
	}
}

func hardRule(r *Result) {
	b, c := r.Series.Values, r.Candidate
	switch r.Series.Metric {
	case "passed":
		if minOf(b) == 1 && minOf(c) == 0 {
			r.Verdict, r.Reason = Fail, fmt.Sprintf("SLO violated at %s req/s in %d of %d candidate runs; the baseline passed it in every run",
				fmtQPS(r.Series.OfferedQPS), countZero(c), len(c))
			return
		}
		if minOf(b) == 0 && minOf(c) == 1 {
			r.Verdict, r.Reason = Improved, "passes a level the baseline did not always pass"
			return
		}
	case "failed_requests":
		if maxOf(c) > maxOf(b) {
			r.Verdict, r.Reason = Fail, fmt.Sprintf("%g failed requests in the worst candidate run, baseline at most %g", maxOf(c), maxOf(b))
			return
		}
	case "objective_level_qps":
		if minOf(c) < minOf(b) {
			r.Verdict, r.Reason = Fail, fmt.Sprintf("highest passing level dropped from %s to %s req/s", fmtQPS(minOf(b)), fmtQPS(minOf(c)))
			return
		}
		if minOf(c) > minOf(b) {
			r.Verdict, r.Reason = Improved, fmt.Sprintf("highest passing level rose from %s to %s req/s", fmtQPS(minOf(b)), fmtQPS(minOf(c)))
			return
		}
	}
	r.Verdict, r.Reason = Pass, "hard rule holds"
}

func mean(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

// cv is the sample coefficient of variation; 0 for fewer than two values
// or a zero mean.
func cv(v []float64) float64 {
	if len(v) < 2 {
		return 0
	}
	m := mean(v)
	if m == 0 {
		return 0
	}
	ss := 0.0
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss/float64(len(v)-1)) / math.Abs(m)
}

func spread(v []float64) float64 { return maxOf(v) - minOf(v) }

func relChange(base, cand float64) float64 {
	switch {
	case base == cand:
		return 0
	case base == 0:
		return math.Copysign(1, cand) // from zero: count as a 100% change
	}
	return (cand - base) / math.Abs(base)
}

func positive(v []float64) bool {
	for _, x := range v {
		if !(x > 0) {
			return false
		}
	}
	return true
}

func logs(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Log(x)
	}
	return out
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

func countZero(v []float64) int {
	n := 0
	for _, x := range v {
		if x == 0 {
			n++
		}
	}
	return n
}

// allEqual reports whether every value of a and b is the same number.
func allEqual(a, b []float64) bool {
	for _, x := range b {
		for _, y := range a {
			if x != y {
				return false
			}
		}
	}
	return true
}
