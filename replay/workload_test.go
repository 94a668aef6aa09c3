package replay

import (
	"errors"
	"math"
	"testing"
)

func TestGeneratePublicInstance(t *testing.T) {
	reqs, err := Generate(DefaultParams(8))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 128 {
		t.Fatalf("len = %d, want 128", len(reqs))
	}
	// The brief's example line: request 8 at 16000 ms, session 0, 3968 cached.
	want8 := Request{ID: 8, ArrivalMs: 16000, Session: 0, InputTokens: 4096, CachedTokens: 3968, OutputTokens: 128}
	if reqs[8] != want8 {
		t.Errorf("request 8 = %+v, want %+v", reqs[8], want8)
	}
	for i, r := range reqs {
		if r.ID != i || r.Session != i%8 || r.InputTokens != 4096 || r.OutputTokens != 128 {
			t.Errorf("request %d = %+v", i, r)
		}
		if i < 8 {
			if r.ArrivalMs != float64(i)*2000 || r.CachedTokens != 0 || !r.Warmup() {
				t.Errorf("warm-up %d = %+v", i, r)
			}
			continue
		}
		if want := 16000 + float64(i-8)*1000/8; r.ArrivalMs != want {
			t.Errorf("request %d arrives at %v, want %v", i, r.ArrivalMs, want)
		}
		if r.CachedTokens != 3968 || r.Warmup() {
			t.Errorf("request %d = %+v", i, r)
		}
	}
	// Measurement-phase hit rate 3968/4096 = 96.875%.
	if got := float64(reqs[8].CachedTokens) / float64(reqs[8].InputTokens); got != 0.96875 {
		t.Errorf("hit rate %v, want 0.96875", got)
	}
}

func TestGeneratePrivateShapes(t *testing.T) {
	for _, p := range []Params{
		{Requests: 96, InputTokens: 6144, UncachedTokens: 128, OutputTokens: 64, OfferedQPS: 3},
		{Requests: 192, InputTokens: 8192, UncachedTokens: 128, OutputTokens: 256, OfferedQPS: 29.5},
	} {
		reqs, err := Generate(p)
		if err != nil {
			t.Fatal(err)
		}
		last := reqs[len(reqs)-1]
		if last.CachedTokens != p.InputTokens-128 || last.OutputTokens != p.OutputTokens {
			t.Errorf("%+v: last request %+v", p, last)
		}
		// Same expression as the brief: 16000+(i-8)*1000/qps.
		if want := 16000 + float64((p.Requests-9)*1000)/p.OfferedQPS; last.ArrivalMs != want {
			t.Errorf("last arrival %v, want %v", last.ArrivalMs, want)
		}
	}
}

func TestGenerateRejects(t *testing.T) {
	ok := DefaultParams(1)
	for _, tc := range []struct {
		name  string
		edit  func(*Params)
		field string
	}{
		{"eight requests", func(p *Params) { p.Requests = 8 }, "requests"},
		{"negative requests", func(p *Params) { p.Requests = -1 }, "requests"},
		{"cached equals input", func(p *Params) { p.UncachedTokens = 0 }, "uncached-tokens"},
		{"input below uncached", func(p *Params) { p.InputTokens = 100 }, "input-tokens"},
		{"zero input", func(p *Params) { p.InputTokens = 0 }, "input-tokens"},
		{"zero output", func(p *Params) { p.OutputTokens = 0 }, "output-tokens"},
		{"zero qps", func(p *Params) { p.OfferedQPS = 0 }, "qps"},
		{"negative qps", func(p *Params) { p.OfferedQPS = -2 }, "qps"},
		{"NaN qps", func(p *Params) { p.OfferedQPS = math.NaN() }, "qps"},
		{"Inf qps", func(p *Params) { p.OfferedQPS = math.Inf(1) }, "qps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			tc.edit(&p)
			_, err := Generate(p)
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *ParamError", err)
			}
			if pe.Field != tc.field {
				t.Errorf("field = %q, want %q (%v)", pe.Field, tc.field, err)
			}
		})
	}
	if _, err := Generate(Params{Requests: 9, InputTokens: 128, UncachedTokens: 128, OutputTokens: 1, OfferedQPS: 1}); err != nil {
		t.Errorf("smallest valid instance rejected: %v", err)
	}
}

// TestGenerateLengthRatio: with a length ratio, measured requests' lengths
// are drawn within [ratio × L, L] (the input above its cached prefix),
// the same at every rate, spread over the range; warm-ups and ratio 0 keep
// the fixed lengths.
func TestGenerateLengthRatio(t *testing.T) {
	p := Params{Requests: 1008, InputTokens: 1000, UncachedTokens: 900, OutputTokens: 100, OfferedQPS: 4, LengthRatio: 0.8, Seed: 7}
	a, err := Generate(p)
	if err != nil {
		t.Fatal(err)
	}
	p.OfferedQPS = 32
	b, _ := Generate(p)
	inSeen, outSeen := map[int]bool{}, map[int]bool{}
	for i, r := range a {
		if r.Warmup() {
			if r.InputTokens != 1000 || r.OutputTokens != 100 {
				t.Fatalf("warm-up %d: %d/%d tokens", i, r.InputTokens, r.OutputTokens)
			}
			continue
		}
		if r.InputTokens < 800 || r.InputTokens > 1000 || r.OutputTokens < 80 || r.OutputTokens > 100 || r.InputTokens <= r.CachedTokens {
			t.Fatalf("request %d: %d input (%d cached), %d output", i, r.InputTokens, r.CachedTokens, r.OutputTokens)
		}
		if r.InputTokens != b[i].InputTokens || r.OutputTokens != b[i].OutputTokens {
			t.Fatalf("request %d: lengths depend on the rate", i)
		}
		inSeen[r.InputTokens], outSeen[r.OutputTokens] = true, true
	}
	if len(inSeen) < 150 || len(outSeen) != 21 {
		t.Errorf("%d distinct inputs, %d distinct outputs: want most of 201 and all 21", len(inSeen), len(outSeen))
	}
	p.LengthRatio = 0
	c, _ := Generate(p)
	for _, r := range c[Sessions:] {
		if r.InputTokens != 1000 || r.OutputTokens != 100 {
			t.Fatalf("ratio 0: %d/%d tokens", r.InputTokens, r.OutputTokens)
		}
	}
	for _, bad := range []float64{-0.1, 1.01, math.NaN()} {
		p.LengthRatio = bad
		if err := p.Validate(); err == nil || err.(*ParamError).Field != "length-ratio" {
			t.Errorf("ratio %v: %v", bad, err)
		}
	}
}
