package sim

import (
	"errors"
	"strings"
	"testing"

	"github.com/hone-llm/hone/internal/usage"
)

// The exercise's colocated scan prints its levels and the exact model's
// objective.
func TestCommandTable(t *testing.T) {
	var out strings.Builder
	if err := Command(CommandOptions{Scan: DefaultScan(Config{Mode: Colocated, PrefixCache: true}), Format: "table", Out: &out}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 9 || !strings.HasPrefix(lines[0], "kind: simulation_only  mode: colocated  prefix_cache: true") ||
		lines[8] != "objective: 8.01670146137787 req/s (largest effective QPS among passing levels)" {
		t.Errorf("table:\n%s", out.String())
	}
}

// A scan without levels names --qps; an unknown format names -o; both are
// bad input.
func TestCommandErrors(t *testing.T) {
	sc := DefaultScan(Config{Mode: Colocated})
	for _, tc := range []struct {
		o    CommandOptions
		want string
	}{
		{CommandOptions{Scan: ScanConfig{Config: sc.Config}, Format: "table"}, "--qps: [] is invalid: want at least one offered rate"},
		{CommandOptions{Scan: sc, Format: "xml"}, `-o/--output: "xml" is not an output format: want table, json`},
	} {
		err := Command(tc.o)
		var ue usage.Error
		if !errors.As(err, &ue) || err.Error() != tc.want {
			t.Errorf("err %v, want usage error %q", err, tc.want)
		}
	}
}
