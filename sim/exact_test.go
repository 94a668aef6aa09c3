package sim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/slo"
)

// The brief's isolated request: 4096 input, 3968 cached, 128 output, at 0.
func TestIsolatedRequestGolden(t *testing.T) {
	req := []replay.Request{{ID: 0, ArrivalMs: 0, InputTokens: 4096, CachedTokens: 3968, OutputTokens: 128}}
	for _, tc := range []struct {
		mode Mode
		ttft float64
	}{{Colocated, 31.73828125}, {Disaggregated, 39.73828125}} {
		tl, err := Run(Config{Mode: tc.mode, PrefixCache: true}, req)
		if err != nil {
			t.Fatal(err)
		}
		o := tl[0].Outcome()
		if o.TTFT() != tc.ttft || o.TPOT() != 0.48828125 {
			t.Errorf("%s: TTFT %v TPOT %v, want %v and 0.48828125", tc.mode, o.TTFT(), o.TPOT(), tc.ttft)
		}
	}
	// Without the cache the whole 4096-token prompt is prefilled: 1000 ms.
	tl, _ := Run(Config{Mode: Colocated}, req)
	if got := tl[0].Outcome().TTFT(); got != 1000.48828125 {
		t.Errorf("cache off: TTFT %v, want 1000.48828125", got)
	}
}

func TestPublicScanGolden(t *testing.T) {
	for _, tc := range []struct {
		cfg    Config
		obj    float64
		passes []bool
	}{
		{Config{Colocated, true}, 8.01670146137787, []bool{true, true, true, true, false, false}},
		{Config{Disaggregated, true}, 15.91670258978015, []bool{true, true, true, true, true, false}},
	} {
		res, err := Scan(DefaultScan(tc.cfg))
		if err != nil {
			t.Fatal(err)
		}
		if res.Kind != "simulation_only" || res.Objective != tc.obj {
			t.Errorf("%+v: kind %q objective %v, want simulation_only %v", tc.cfg, res.Kind, res.Objective, tc.obj)
		}
		for i, l := range res.Levels {
			if l.Passed != tc.passes[i] {
				t.Errorf("%+v at %v QPS: passed %v, want %v", tc.cfg, l.OfferedQPS, l.Passed, tc.passes[i])
			}
		}
	}
}

// Derived by hand from the equations: colocated at 16 QPS, requests arrive
// every 62.5 ms but each holds the queue 31.25+128*0.48828125 = 93.75 ms, so
// request i (>= 8) starts at 16000 + (i-8)*93.75 (the queue is free at 16000:
// the last warm-up ended at 14000+93.75). Request 126 (the p99 entry, rank
// 119 of 120 by TTFT) waits (118)*(93.75-62.5) = 3687.5 ms: TTFT 3718.75 +
// 0.48828125.
func TestColocatedQueueingByHand(t *testing.T) {
	res, err := Scan(ScanConfig{Config: Config{Colocated, true}, Requests: 128, InputTokens: 4096, OutputTokens: 128,
		QPS: []float64{16}, SLO: slo.Default})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Levels[0].P99TTFTMs, 118*(93.75-62.5)+31.25+0.48828125; got != want {
		t.Errorf("p99 TTFT %v, want %v", got, want)
	}
	// 120 requests finish at 16000 + 120*93.75 → effective 120/11.25 s.
	if got, want := res.Levels[0].EffectiveQPS, 120/(120*93.75/1000); got != want {
		t.Errorf("effective QPS %v, want %v", got, want)
	}
}

func TestEqualArrivalsByID(t *testing.T) {
	reqs := []replay.Request{
		{ID: 2, ArrivalMs: 5, InputTokens: 4096, OutputTokens: 2},
		{ID: 1, ArrivalMs: 5, InputTokens: 4096, OutputTokens: 2},
	}
	tl, err := Run(Config{Mode: Colocated}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !(tl[1].FinishMs <= tl[0].PrefillStartMs) {
		t.Errorf("id 1 should be served before id 2: %+v", tl)
	}
}

func randomInstance(r *rand.Rand) (Config, replay.Params) {
	cfg := Config{Mode: []Mode{Colocated, Disaggregated}[r.IntN(2)], PrefixCache: r.IntN(2) == 0}
	p := replay.Params{
		Requests:       9 + r.IntN(250),
		InputTokens:    []int{4096, 6144, 8192, 128 + r.IntN(10000)}[r.IntN(4)],
		UncachedTokens: 128,
		OutputTokens:   []int{1, 2, 64, 128, 256, 1 + r.IntN(400)}[r.IntN(6)],
		OfferedQPS:     0.25 + r.Float64()*40,
	}
	return cfg, p
}

func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 500; trial++ {
		cfg, p := randomInstance(r)
		reqs, err := replay.Generate(p)
		if err != nil {
			t.Fatal(err)
		}
		tl, err := Run(cfg, reqs)
		if err != nil {
			t.Fatal(err)
		}
		outs := make([]replay.Outcome, len(tl))
		var prevFinish, prevPrefill float64
		for i, x := range tl {
			outs[i] = x.Outcome()
			// Arrivals are increasing in id, so service order is id order.
			if x.FirstMs < x.ArrivalMs || x.FinishMs < x.FirstMs {
				t.Fatalf("%+v %+v: request %d out of order: %+v", cfg, p, i, x)
			}
			if cfg.Mode == Disaggregated {
				if x.FirstMs < x.PrefillEndMs+TransferMillis {
					t.Fatalf("disaggregated first token %v precedes prefill end %v + 8", x.FirstMs, x.PrefillEndMs)
				}
				if x.PrefillStartMs < prevPrefill {
					t.Fatalf("prefill queue overlap at %d", i)
				}
				prevPrefill = x.PrefillEndMs
			}
			if x.FirstMs-DecodeStepMillis < prevFinish-1e-9 {
				t.Fatalf("%s: request %d decodes before request %d finished", cfg.Mode, i, i-1)
			}
			prevFinish = x.FinishMs
			// No batching: every token takes exactly d (up to float rounding
			// of first + n*d - first).
			if x.OutputTokens > 1 && math.Abs(outs[i].TPOT()-1000.0/2048) > 1e-9 {
				t.Fatalf("TPOT %v, want 1000/2048", outs[i].TPOT())
			}
			// TTFT decomposes into its intervals.
			sum := x.PrefillQueueMs + x.PrefillMs + x.TransferMs + x.DecodeQueueMs + DecodeStepMillis
			if math.Abs(sum-outs[i].TTFT()) > 1e-6 {
				t.Fatalf("intervals sum to %v, TTFT %v", sum, outs[i].TTFT())
			}
		}
		lvl := replay.Summarize(p.OfferedQPS, outs, slo.Default)
		// Warm-up requests never enter statistics: make them absurd.
		for i := 0; i < replay.Sessions; i++ {
			outs[i].FirstMs, outs[i].FinishMs = 1e12, 2e12
		}
		if again := replay.Summarize(p.OfferedQPS, outs, slo.Default); again != lvl {
			t.Fatalf("warm-up requests changed the level: %+v vs %+v", again, lvl)
		}
	}
}

func TestRunRejects(t *testing.T) {
	if _, err := Run(Config{Mode: "batched"}, nil); err == nil {
		t.Error("unknown mode accepted")
	}
	bad := []replay.Request{{ID: 0, InputTokens: 10, CachedTokens: 10, OutputTokens: 1}}
	if _, err := Run(Config{Mode: Colocated}, bad); err == nil {
		t.Error("cached == input accepted")
	}
	if _, err := Scan(ScanConfig{Config: Config{Mode: Colocated}, Requests: 128, InputTokens: 4096, OutputTokens: 128}); err == nil {
		t.Error("empty QPS list accepted")
	}
}
