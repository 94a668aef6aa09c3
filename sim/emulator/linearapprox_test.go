package emulator

import (
	"math"
	"testing"
)

// decodeEntries is n decode entries at context ctx.
func decodeEntries(n, ctx int) []StepEntry {
	en := make([]StepEntry, n)
	for i := range en {
		en[i] = StepEntry{Tokens: 1, Context: ctx, Decode: true, Samples: true}
	}
	return en
}

// TestLinearApprox: on every built-in roofline profile, at TP 1, 2 and 4,
// the linear approximation reproduces the steps it is read at exactly
// (decode at 4096 context is memory-bound, hence linear in the batch, up to
// 256 sequences; a cold 2048-token chunk; eager decode), and the other
// typical steps within the stated bounds: the roofline's max(compute,
// memory) bends where the form is straight (context of a decode step,
// attention of a long chunk, small memory-bound chunks).
func TestLinearApprox(t *testing.T) {
	type step struct {
		name  string
		en    []StepEntry
		eager bool
		tol   float64 // relative
	}
	steps := []step{
		{"decode x1", decodeEntries(1, 4096), false, 1e-9},
		{"decode x8", decodeEntries(8, 4096), false, 1e-9},
		{"decode x64", decodeEntries(64, 4096), false, 1e-9},
		{"decode x256", decodeEntries(256, 4096), false, 1e-9},
		{"decode x1 eager", decodeEntries(1, 4096), true, 1e-9},
		{"decode x8 eager", decodeEntries(8, 4096), true, 1e-9},
		{"cold chunk 2048", []StepEntry{{Tokens: 2048}}, false, 1e-9},
		{"decode x8 at 1024", decodeEntries(8, 1024), false, 0.25},
		{"decode x8 at 8192", decodeEntries(8, 8192), false, 0.25},
		{"chunk 2048 on 2048", []StepEntry{{Tokens: 2048, Context: 2048}}, false, 0.20},
		{"cold chunk 1024", []StepEntry{{Tokens: 1024}}, false, 0.20},
		{"warm chunk 128 on 3968", []StepEntry{{Tokens: 128, Context: 3968}}, false, 0.45},
		{"warm chunk 128 + decode x8", append(decodeEntries(8, 4096), StepEntry{Tokens: 128, Context: 3968}), false, 0.55},
	}
	for _, name := range ProfileNames() {
		base, _ := LookupProfile(name)
		if base.Exercise != nil || base.Linear != nil || base.Steps != nil {
			continue
		}
		for _, tp := range []int{1, 2, 4} {
			p := base.clone()
			p.TP = tp
			l := p.LinearApprox()
			for _, v := range []float64{l.StepBaseMs, l.DecodePerSeqMs, l.PrefillPerTokenMs, l.PrefillPerContextMs, l.EagerStepMs} {
				if !(v > 0) {
					t.Fatalf("%s TP %d: %+v: want every coefficient > 0", name, tp, l)
				}
			}
			lin := p.clone()
			lin.Linear = &l
			for _, s := range steps {
				want, got := p.StepMs(s.en, s.eager), lin.StepMs(s.en, s.eager)
				if e := math.Abs(got-want) / want; e > s.tol {
					t.Errorf("%s TP %d, %s: linear %.4f ms, roofline %.4f ms (%+.1f%%, tolerance %g%%)",
						name, tp, s.name, got, want, 100*(got-want)/want, 100*s.tol)
				}
			}
			// The context coefficient is the warm chunk's slope.
			warm := p.StepMs([]StepEntry{{Tokens: 128, Context: 3968}}, false) - p.StepMs([]StepEntry{{Tokens: 128}}, false)
			if d := lin.StepMs([]StepEntry{{Tokens: 128, Context: 3968}}, false) - lin.StepMs([]StepEntry{{Tokens: 128}}, false); math.Abs(d-warm) > 1e-9*warm {
				t.Errorf("%s TP %d: 3968 context adds %g ms, the roofline %g", name, tp, d, warm)
			}
		}
	}
}

// TestLinearApproxExercise: the exercise's rates as a linear form are
// exact for decode steps and for chunks that sample nothing; a prompt's
// last chunk, which samples, is d short (the form has no per-sample term).
func TestLinearApproxExercise(t *testing.T) {
	p, _ := LookupProfile("exercise")
	l := p.LinearApprox()
	e := p.Exercise
	if want := (LinearCosts{DecodePerSeqMs: e.DecodeMsPerToken, PrefillPerTokenMs: 1000 / e.PrefillTokensPerSec}); l != want {
		t.Fatalf("%+v, want %+v", l, want)
	}
	lin := p.clone()
	lin.Exercise, lin.Linear = nil, &l
	for _, c := range []struct {
		name  string
		en    []StepEntry
		short float64
	}{
		{"decode", decodeEntries(1, 4096), 0},
		{"decode x4", decodeEntries(4, 100), 0},
		{"chunk", []StepEntry{{Tokens: 2048, Context: 2048}}, 0},
		{"remote-decode last chunk", []StepEntry{{Tokens: 4096, Samples: true, RemoteDecode: true}}, 0},
		{"last chunk", []StepEntry{{Tokens: 128, Context: 3968, Samples: true}}, e.DecodeMsPerToken},
	} {
		for _, eager := range []bool{false, true} {
			want, got := p.StepMs(c.en, eager), lin.StepMs(c.en, eager)
			if math.Abs(want-c.short-got) > 1e-12*want {
				t.Errorf("%s (eager %t): linear %v ms, exercise %v ms, want %v short", c.name, eager, got, want, c.short)
			}
		}
	}
}

// TestLinearApproxOfLinear: a linear profile is its own approximation.
func TestLinearApproxOfLinear(t *testing.T) {
	p, _ := LookupProfile(DefaultProfile)
	l := LinearCosts{StepBaseMs: 1.5, DecodePerSeqMs: 0.1, PrefillPerTokenMs: 0.02, PrefillPerContextMs: 1e-4, EagerStepMs: 2}
	p.Linear = &l
	p.TP = 4
	if got := p.LinearApprox(); got != l {
		t.Errorf("%+v, want %+v", got, l)
	}
}
