package diagnose

import (
	"slices"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// Each reason a level was invalid for brings its own remedies: an
// emulator-bound level gets emulator_bound's, not client_bound's.
func TestInvalidRemediesPerCode(t *testing.T) {
	rule := func(c schema.Code) []string { r, _ := schema.RuleOf(c); return r.Remedies }
	for _, tc := range []struct {
		codes []string
		want  []string
	}{
		{[]string{string(schema.ReasonEmulatorBound)}, rule(schema.ReasonEmulatorBound)},
		{[]string{string(schema.ReasonClientBound)}, rule(schema.ReasonClientBound)},
		{nil, rule(schema.ReasonClientBound)},
		{[]string{string(schema.ReasonWarmStart), string(schema.ReasonClientBound)},
			append(slices.Clone(rule(schema.ReasonClientBound)), rule(schema.ReasonWarmStart)...)},
	} {
		got := invalidRemedies([]*level{{codes: map[int][]string{0: tc.codes}}})
		if !slices.Equal(got, tc.want) {
			t.Errorf("codes %v: remedies %q, want %q", tc.codes, got, tc.want)
		}
	}
}
