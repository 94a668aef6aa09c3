package slo

import "strconv"

// SLO is the pair of latency objectives a load level must meet. The
// defaults (Default) are p99 TTFT <= 2000 ms and p99 TPOT <= 50 ms.
type SLO struct {
	TTFTMillis float64 `json:"ttft_slo_ms" jsonschema:"exclusiveMinimum=0"`
	TPOTMillis float64 `json:"tpot_slo_ms" jsonschema:"exclusiveMinimum=0"`
	// Goodput, when set, holds the per-request limits goodput counts
	// against (hone --goodput); unset, Limits applies the two above to
	// each request.
	Goodput PerRequest `json:"goodput,omitzero"`
}

// Default is the seed SLO: what hone judges the seed workload (the
// coding-agent workload it replays by default) and the CPU exercise
// against unless told otherwise.
var Default = SLO{TTFTMillis: 2000, TPOTMillis: 50}

// Met reports whether a level's p99 TTFT and p99 TPOT (milliseconds) are
// both within s. A NaN figure does not meet it.
func (s SLO) Met(p99TTFTMs, p99TPOTMs float64) bool {
	return p99TTFTMs <= s.TTFTMillis && p99TPOTMs <= s.TPOTMillis
}

// Level is the summary of one load level, in the exercise's JSON shape.
type Level struct {
	OfferedQPS float64 `json:"offered_qps" jsonschema:"minimum=0"`
	// Concurrency, for a closed-loop level, is its clients in flight
	// (OfferedQPS is then 0: a closed loop offers no rate).
	Concurrency  int     `json:"concurrency,omitempty" jsonschema:"minimum=1"`
	P99TTFTMs    float64 `json:"p99_ttft_ms" jsonschema:"minimum=0"`
	P99TPOTMs    float64 `json:"p99_tpot_ms" jsonschema:"minimum=0"`
	EffectiveQPS float64 `json:"effective_qps" jsonschema:"minimum=0"`
	Passed       bool    `json:"passed"`
}

// Name is the level's load: "16 req/s" (open loop) or "4 clients"
// (closed loop).
func (l Level) Name() string {
	if l.Concurrency > 0 {
		return strconv.Itoa(l.Concurrency) + " clients"
	}
	return strconv.FormatFloat(l.OfferedQPS, 'g', -1, 64) + " req/s"
}

// Objective is the largest effective QPS among passing levels, or 0 when
// none pass.
func Objective(levels []Level) float64 {
	best := 0.0
	for _, l := range levels {
		if l.Passed && l.EffectiveQPS > best {
			best = l.EffectiveQPS
		}
	}
	return best
}

// Presets are SLOs a user would recognise by name (hone's --slo flag):
// interactive (a coding assistant's chat: first token within half a
// second), seed (Default, the seed workload's SLO), batch (latency barely
// matters; throughput does).
var Presets = map[string]SLO{
	"interactive": {TTFTMillis: 500, TPOTMillis: 50},
	"seed":        Default,
	"batch":       {TTFTMillis: 10000, TPOTMillis: 200},
}

// PresetAliases are older names of Presets, still accepted (not listed):
// "brief" was the seed SLO's name before it was called seed.
var PresetAliases = map[string]string{"brief": "seed"}

// Preset returns the SLO named name (a Presets name or an alias).
func Preset(name string) (SLO, bool) {
	if n, ok := PresetAliases[name]; ok {
		name = n
	}
	p, ok := Presets[name]
	return p, ok
}
