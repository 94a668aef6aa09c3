package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/optimizer"
	"github.com/hone-llm/hone/slo"
)

// A metric is one per-level figure the report tabulates and plots.
type metric struct {
	name   string // "p99 TTFT"
	unit   string // "ms" or "req/s"; time units gain the kind's clock
	file   string // plot file name
	runs   func(*optimizer.LevelSummary) []float64
	median func(*optimizer.LevelSummary) float64 // the log's median, for logs without per-run values
}

var (
	ttft = metric{name: "p99 TTFT", unit: "ms", file: "p99_ttft.png",
		runs:   func(l *optimizer.LevelSummary) []float64 { return l.RunP99TTFTMs },
		median: func(l *optimizer.LevelSummary) float64 { return l.P99TTFTMs }}
	tpot = metric{name: "p99 TPOT", unit: "ms", file: "p99_tpot.png",
		runs:   func(l *optimizer.LevelSummary) []float64 { return l.RunP99TPOTMs },
		median: func(l *optimizer.LevelSummary) float64 { return l.P99TPOTMs }}
	effective = metric{name: "effective load", unit: "req/s", file: "effective_qps.png",
		runs:   func(l *optimizer.LevelSummary) []float64 { return l.RunEffectiveQPS },
		median: func(l *optimizer.LevelSummary) float64 { return l.EffectiveQPS }}
	// goodput is a share, in percent; a log without it has no median to
	// fall back on (levelTable leaves the column out).
	goodput = metric{name: "goodput", unit: "%",
		runs: func(l *optimizer.LevelSummary) []float64 {
			out := make([]float64, len(l.RunGoodput))
			for i, f := range l.RunGoodput {
				out[i] = 100 * f
			}
			return out
		},
		median: func(l *optimizer.LevelSummary) float64 { return math.NaN() }}
)

// A run is one run's value of a metric at one level, and its verdict.
type run struct {
	value float64
	valid bool
}

// levelRuns returns every run's value of m at l, in run order. A log
// written before per-run values existed gives its median as one valid run.
func levelRuns(l *optimizer.LevelSummary, m metric) []run {
	vs := m.runs(l)
	if len(vs) == 0 {
		return []run{{value: m.median(l), valid: true}}
	}
	out := make([]run, len(vs))
	for i, v := range vs {
		out[i] = run{value: v, valid: runValid(l, i)}
	}
	return out
}

// runValid is run i's (zero-based) verdict at l. Without RunValid the
// reasons decide: a run they name is invalid.
func runValid(l *optimizer.LevelSummary, i int) bool {
	if i < len(l.RunValid) {
		return l.RunValid[i]
	}
	for _, r := range l.Invalid {
		if n, _, ok := parseInvalid(r); ok && n == i+1 {
			return false
		}
	}
	return true
}

// spread is a level's median and range over its valid runs.
type spread struct {
	median, min, max float64
	n                int // valid runs; 0: none, and the fields are zero
}

func validSpread(rs []run) spread {
	var v []float64
	for _, r := range rs {
		if r.valid {
			v = append(v, r.value)
		}
	}
	if len(v) == 0 {
		return spread{}
	}
	sort.Float64s(v)
	return spread{min: v[0], max: v[len(v)-1], n: len(v), median: slo.Median(v)}
}

// invalidRuns returns the one-based numbers of l's invalid runs and its
// run count.
func invalidRuns(l *optimizer.LevelSummary) (bad []int, runs int) {
	runs = max(l.Runs, len(l.RunValid), len(l.RunP99TTFTMs))
	for i := range runs {
		if !runValid(l, i) {
			bad = append(bad, i+1)
		}
	}
	return bad, runs
}

// reasonCodes returns the distinct codes of l's reasons, in order
// ("client_bound").
func reasonCodes(l *optimizer.LevelSummary) []string {
	var codes []string
	for _, r := range l.Invalid {
		_, code, _ := parseInvalid(r)
		if !slices.Contains(codes, code) {
			codes = append(codes, code)
		}
	}
	return codes
}

// parseInvalid splits a reason as the optimizer writes it, "run 2:
// client_bound: detail", into the run number and the code. A reason of
// another shape is its own code.
func parseInvalid(r string) (run int, code string, ok bool) {
	parts := strings.SplitN(r, ": ", 3)
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "run ") {
		return 0, r, false
	}
	n, err := strconv.Atoi(strings.TrimPrefix(parts[0], "run "))
	if err != nil {
		return 0, r, false
	}
	return n, parts[1], true
}

// verdictCell is a level's validity as a table cell.
func verdictCell(l *optimizer.LevelSummary) string {
	bad, runs := invalidRuns(l)
	if len(bad) == 0 && len(l.Invalid) == 0 {
		return "valid"
	}
	codes := strings.Join(reasonCodes(l), ", ")
	if codes == "" {
		codes = "no reason logged"
	}
	if len(bad) == runs {
		return "**invalid: " + codes + "**"
	}
	return fmt.Sprintf("**invalid: %s** (run %s of %d)", codes, joinInts(bad), runs)
}

// levelInvalid reports whether any run of l is invalid.
func levelInvalid(l *optimizer.LevelSummary) bool {
	bad, _ := invalidRuns(l)
	return len(bad) > 0 || len(l.Invalid) > 0
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
