package slo

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// PerRequest holds per-request limits, model milliseconds, that goodput
// counts requests against; 0 leaves a limit unset. They are the three
// vLLM's `bench serve --goodput` takes (ttft, tpot, e2el), with its
// meanings: TTFT, TPOT over the output tokens after the first, and the
// request's end-to-end latency.
type PerRequest struct {
	TTFTMs float64 `json:"ttft_ms,omitempty" jsonschema:"exclusiveMinimum=0"`
	TPOTMs float64 `json:"tpot_ms,omitempty" jsonschema:"exclusiveMinimum=0"`
	E2EMs  float64 `json:"e2e_ms,omitempty" jsonschema:"exclusiveMinimum=0"`
}

// Limits is s's per-request limits: Goodput when set, else the TTFT and
// TPOT limits applied to each request (the SLO bounds their p99).
func (s SLO) Limits() PerRequest {
	if s.Goodput.Set() {
		return s.Goodput
	}
	return PerRequest{TTFTMs: s.TTFTMillis, TPOTMs: s.TPOTMillis}
}

// ParsePerRequest reads limits as vLLM's --goodput writes them, comma or
// space separated: "ttft:500,tpot:50,e2el:3000" (e2e is accepted for
// e2el). Each is optional; at least one is required.
func ParsePerRequest(s string) (PerRequest, error) {
	var g PerRequest
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

// String is the limits as ParsePerRequest reads them.
func (g PerRequest) String() string {
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
func (g PerRequest) Set() bool { return g.TTFTMs > 0 || g.TPOTMs > 0 || g.E2EMs > 0 }

// Met reports whether one completed request is within every set limit.
// tpotMs is nil for a request of one output token: it has no TPOT, and
// that limit does not apply (vLLM counts its TPOT as 0).
func (g PerRequest) Met(ttftMs float64, tpotMs *float64, e2eMs float64) bool {
	return !(g.TTFTMs > 0 && ttftMs > g.TTFTMs) &&
		!(g.TPOTMs > 0 && tpotMs != nil && *tpotMs > g.TPOTMs) &&
		!(g.E2EMs > 0 && e2eMs > g.E2EMs)
}
