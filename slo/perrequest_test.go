package slo

import (
	"strings"
	"testing"
)

func TestParsePerRequestBadInput(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "want KEY:MS",
		"ttft=500":          "want KEY:MS",
		"ttft:-1":           "positive number",
		"ttft:abc":          "positive number",
		"ttft:5,ttft:6":     "given twice",
		"itl:5":             "unknown key",
		"tpot:NaN":          "positive number",
		"e2e:100 ttft:+Inf": "positive number",
	} {
		if _, err := ParsePerRequest(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	g, err := ParsePerRequest("TTFT:250 e2e:4000")
	if s := g.String(); s != "ttft:250,e2el:4000" {
		t.Errorf("String %q", s)
	}
	if err != nil || g != (PerRequest{TTFTMs: 250, E2EMs: 4000}) {
		t.Errorf("space separated, e2e alias: %+v %v", g, err)
	}
}

// FuzzParsePerRequest: any --goodput text either parses to limits that
// print back to themselves, or is refused; it never panics.
func FuzzParsePerRequest(f *testing.F) {
	for _, s := range []string{"ttft:500,tpot:50,e2el:3000", "TTFT:250 e2e:4000", "", "ttft:", ":5", "ttft:1e308", "tpot:0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParsePerRequest(s)
		if err != nil {
			return
		}
		if !g.Set() {
			t.Fatalf("%q parsed to no limit", s)
		}
		back, err := ParsePerRequest(g.String())
		if err != nil || back != g {
			t.Fatalf("%q: %+v prints as %q, which parses to %+v (%v)", s, g, g.String(), back, err)
		}
	})
}
