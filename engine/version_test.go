package engine_test

import (
	"strings"
	"testing"

	"github.com/hone-llm/hone/engine"
)

func TestParseVersion(t *testing.T) {
	for _, c := range []struct {
		in                  string
		maj, min, pat, micr int
		pre                 bool
	}{
		{"0.11.1", 0, 11, 1, 0, false},
		{"0.10.1.1", 0, 10, 1, 1, false},
		{"0.8.5.post1", 0, 8, 5, 0, false},
		{"0.17.0rc1", 0, 17, 0, 0, true},
		{"0.16.1.dev42+g1a2b3c4", 0, 16, 1, 0, true},
		{"0.11.0+cu128", 0, 11, 0, 0, false},
		{"v0.26.0", 0, 26, 0, 0, false},
		{"vllm 0.12.0", 0, 12, 0, 0, false},
		{" 1.0 ", 1, 0, 0, 0, false},
	} {
		v, err := engine.ParseVLLMVersion(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if v.Major != c.maj || v.Minor != c.min || v.Patch != c.pat || v.Micro != c.micr || v.Pre != c.pre {
			t.Errorf("%q = %+v", c.in, v)
		}
		if g, err := engine.ParseVersion(c.in); (err == nil) == strings.HasPrefix(c.in, "vllm ") || err == nil && g != v {
			t.Errorf("generic ParseVersion(%q) = %+v, %v", c.in, g, err)
		}
	}
	for _, bad := range []string{"", "vllm", "0", "0.11.x", "INFO 08-09 starting", "0.11.0garbage", "sglang 0.4.1", "vllm v0.11.1", "v 0.11.1"} {
		if _, err := engine.ParseVLLMVersion(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := engine.ParseVLLMVersion("nightly"); err == nil || err.Error() != `"nightly" is not a vLLM version` {
		t.Errorf("error %v", err)
	}
	if v, _ := engine.ParseVLLMVersion("vllm 0.12.0"); v.Raw != "0.12.0" {
		t.Errorf("Raw %q", v.Raw)
	}
}

func TestVersionOrder(t *testing.T) {
	order := []string{"0.9.2", "0.10.1", "0.10.1.1", "0.11.0rc1", "0.11.0", "0.11.0.post1", "0.11.1.dev3", "0.11.1", "0.16.1.dev9+gabc", "0.17.0", "1.0.0"}
	for i := range order {
		for j := range order {
			a, b := engine.MustVersion(order[i]), engine.MustVersion(order[j])
			if got := a.AtLeast(b); got != (i >= j) {
				t.Errorf("%s.AtLeast(%s) = %v", a, b, got)
			}
		}
	}
}
