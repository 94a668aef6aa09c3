package diagnose

import (
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// Summarize is SummarizeKnobs for a configuration whose knobs are not
// known: the tests' shorthand.
func Summarize(kind schema.Kind, atts []Attribution, target slo.SLO, tpotP99 map[float64]float64) Diagnosis {
	return SummarizeKnobs(kind, atts, target, tpotP99, Knobs{})
}
