package replay

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/slo"
)

// GoodputSLO holds per-request limits, model milliseconds; 0 leaves that
// limit unset. They are the three vLLM's `bench serve --goodput` takes
// (ttft, tpot, e2el), with its meanings: TTFT and TPOT as the record
// defines them (TTFT from the scheduled send; TPOT over the output tokens
// after the first), E2E from the scheduled send to the last token.
type GoodputSLO struct {
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	TPOTMs float64 `json:"tpot_ms,omitempty"`
	E2EMs  float64 `json:"e2e_ms,omitempty"`
}

// GoodputFromSLO is the default per-request limits: the run SLO's TTFT and
// TPOT limits applied to each request (the SLO bounds their p99).
func GoodputFromSLO(target slo.SLO) GoodputSLO {
	return GoodputSLO{TTFTMs: target.TTFTMillis, TPOTMs: target.TPOTMillis}
}

// ParseGoodput reads limits as vLLM's --goodput writes them, comma or
// space separated: "ttft:500,tpot:50,e2el:3000" (e2e is accepted for
// e2el). Each is optional; at least one is required.
func ParseGoodput(s string) (GoodputSLO, error) {
	var g GoodputSLO
	seen := map[string]bool{}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	if len(fields) == 0 {
		return g, fmt.Errorf("want KEY:MS pairs, e.g. ttft:500,tpot:50,e2el:3000")
	}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, ":")
		if !ok {
			return g, fmt.Errorf("%q: want KEY:MS (keys ttft, tpot, e2el)", f)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if k == "e2e" {
			k = "e2el"
		}
		ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(ms > 0) || math.IsInf(ms, 0) {
			return g, fmt.Errorf("%s: %q: want a positive number of milliseconds", k, v)
		}
		if seen[k] {
			return g, fmt.Errorf("%s: given twice", k)
		}
		seen[k] = true
		switch k {
		case "ttft":
			g.TTFTMs = ms
		case "tpot":
			g.TPOTMs = ms
		case "e2el":
			g.E2EMs = ms
		default:
			return g, fmt.Errorf("%q: unknown key (want ttft, tpot or e2el)", k)
		}
	}
	return g, nil
}

// String is the limits as ParseGoodput reads them.
func (g GoodputSLO) String() string {
	var parts []string
	for _, p := range []struct {
		k string
		v float64
	}{{"ttft", g.TTFTMs}, {"tpot", g.TPOTMs}, {"e2el", g.E2EMs}} {
		if p.v > 0 {
			parts = append(parts, p.k+":"+strconv.FormatFloat(p.v, 'g', -1, 64))
		}
	}
	return strings.Join(parts, ",")
}

// Set reports whether any limit is set.
func (g GoodputSLO) Set() bool { return g.TTFTMs > 0 || g.TPOTMs > 0 || g.E2EMs > 0 }

// Met reports whether a request completed within every set limit. A
// request that did not complete never meets them; one of a single output
// token has no TPOT, and that limit does not apply to it (vLLM counts its
// TPOT as 0).
func (g GoodputSLO) Met(q RequestRecord) bool {
	if q.Outcome != OutcomeOK || q.TTFTMs == nil {
		return false
	}
	if g.TTFTMs > 0 && *q.TTFTMs > g.TTFTMs {
		return false
	}
	if g.TPOTMs > 0 && q.TPOTMs != nil && q.OutputTokens > 1 && *q.TPOTMs > g.TPOTMs {
		return false
	}
	if g.E2EMs > 0 && (q.FinishMs == nil || *q.FinishMs-q.ScheduledMs > g.E2EMs) {
		return false
	}
	return true
}

// Goodput is a level's requests that met every per-request limit: the
// fraction of its measured requests (failed ones count, as not met) and
// the rate, good requests over the level's window (the effective rate's
// denominator, so QPS = effective rate x the fraction of completed
// requests that were good).
type Goodput struct {
	SLO      GoodputSLO `json:"slo"`
	Good     int        `json:"good"`
	Measured int        `json:"measured"`
	Fraction float64    `json:"fraction"`
	QPS      float64    `json:"qps"`
}

// GoodputOf counts reqs' measured requests (ids >= warmups) against g;
// nil when g sets nothing or no request was measured.
func GoodputOf(reqs []RequestRecord, warmups int, g GoodputSLO, windowSeconds float64) *Goodput {
	if !g.Set() {
		return nil
	}
	out := &Goodput{SLO: g}
	for _, q := range reqs {
		if q.ID < warmups {
			continue
		}
		out.Measured++
		if g.Met(q) {
			out.Good++
		}
	}
	if out.Measured == 0 {
		return nil
	}
	out.Fraction = float64(out.Good) / float64(out.Measured)
	if windowSeconds > 0 {
		out.QPS = float64(out.Good) / windowSeconds
	}
	return out
}
