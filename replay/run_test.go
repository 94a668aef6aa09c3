package replay

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/slo"
)

// smallWorkload keeps live tests fast: 12 requests (8 warm-up, 4 measured)
// of 256 input tokens, 240 of them a session prefix, 8 output tokens.
func smallWorkload() schema.Workload {
	return schema.Workload{Seed: 7, Requests: 12, InputTokens: 256, UncachedTokens: 16, OutputTokens: 8}
}

func testOptions(endpoint string) Options {
	return Options{Endpoint: endpoint, Model: "test-model", Backend: "test",
		Workload: smallWorkload(), QPS: []float64{10, 20}, TimeScale: 0.01, GPUs: 2,
		// 10 model minutes: 6 s real at scale 0.01, so that a busy host's
		// lateness never turns a healthy request into a timeout (the fault
		// tests set their own short deadline).
		RequestTimeout: 10 * time.Minute, Hone: schema.Build{Version: "test", Commit: "abc"},
		PrefixNonce: 1, // reproducible prompts where the fake offers no reset
		// At time scale 0.01 the default 50 ms TPOT SLO is 0.5 ms real:
		// host noise, not the code, would decide pass/fail. TestSummarize
		// checks the SLO logic exactly.
		SLO: slo.SLO{TTFTMillis: 1e9, TPOTMillis: 1e9}}
}

// roundTrip writes rec, checks it against the schema and reads it back.
func roundTrip(t *testing.T, rec *schema.Record) *schema.Record {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.json")
	if err := WriteRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateRecord(data); err != nil {
		t.Fatalf("record does not match the schema: %v", err)
	}
	back, err := ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func TestRunAllOK(t *testing.T) {
	f := newFakeVLLM(t)
	srv := f.start()
	opts := testOptions(srv.URL + "/v1/") // a trailing /v1/ is tolerated
	opts.Runs = 2
	var levelsSeen int
	opts.Progress = func(p Progress) {
		if p.LevelDone != nil {
			levelsSeen++
		}
	}
	rec, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	rec = roundTrip(t, rec)
	if rec.Incomplete || rec.Kind != schema.KindDevice || rec.Engine.Version != "0.11.0-test" || rec.Engine.Endpoint != srv.URL {
		t.Fatalf("record header: incomplete=%t kind=%q engine=%+v", rec.Incomplete, rec.Kind, rec.Engine)
	}
	if levelsSeen != 4 {
		t.Errorf("progress reported %d finished levels, want 4", levelsSeen)
	}
	if f.requests != 48 || rec.Outcomes[schema.OutcomeOK] != 48 || len(rec.Outcomes) != 1 || rec.Validation.Valid != 48 {
		t.Fatalf("server saw %d requests; outcomes %v, validation %+v; want 48 ok and valid", f.requests, rec.Outcomes, rec.Validation)
	}
	// The wire body carries every field vLLM needs, temperature 0 included.
	b := f.bodies[0]
	for k, want := range map[string]any{"temperature": 0.0, "max_tokens": 8.0, "ignore_eos": true,
		"stream": true, "return_token_ids": true, "model": "test-model"} {
		if b[k] != want {
			t.Errorf("body[%q] = %v, want %v", k, b[k], want)
		}
	}
	if _, ok := b["min_tokens"]; ok {
		t.Errorf("body has min_tokens %v: vLLM refuses it with speculative decoding", b["min_tokens"])
	}
	// Request ids carry the replay's own nonce.
	if id := rec.Runs[0].Levels[0].Requests[0].RequestID; len(rec.RequestIDNonce) != 8 || id != "hone-"+rec.RequestIDNonce+"-0-10-0" {
		t.Errorf("request id %q, nonce %q", id, rec.RequestIDNonce)
	}
	if so, _ := b["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options = %v, want include_usage true", b["stream_options"])
	}
	if len(rec.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(rec.Runs))
	}
	hashes := map[string]bool{}
	for _, r := range rec.Runs {
		if len(r.Levels) != 2 {
			t.Fatalf("run %d has %d levels", r.Run, len(r.Levels))
		}
		for _, l := range r.Levels {
			hashes[l.PromptsSHA256] = true
			if !l.Complete || !l.Passed || l.Measured != 4 || l.Sent != 12 || l.Invalid != 0 {
				t.Errorf("run %d qps %g: complete=%t passed=%t measured=%d sent=%d invalid=%d", r.Run, l.OfferedQPS, l.Complete, l.Passed, l.Measured, l.Sent, l.Invalid)
			}
			// Measured prompts reuse exactly 240 of 256 tokens: 15 blocks of 16.
			if l.HitRateCachedTokens == nil || *l.HitRateCachedTokens != 240.0/256 {
				t.Errorf("hit rate from cached_tokens = %v, want 0.9375", l.HitRateCachedTokens)
			}
			if !l.WarmupOverlap && (l.HitRateMetricsMeasure == nil || *l.HitRateMetricsMeasure != 240.0/256) {
				t.Errorf("measurement-phase hit rate from /metrics = %v, want 0.9375", l.HitRateMetricsMeasure)
			}
			if l.CachePromiseMet == nil || !*l.CachePromiseMet {
				t.Errorf("cache promise = %v, want true", l.CachePromiseMet)
			}
			if l.GPUSecondsPerRequest == nil || math.Abs(*l.GPUSecondsPerRequest-2*l.WindowSeconds/4) > 1e-12 {
				t.Errorf("cost %v, want 2 GPUs x %g s / 4", l.GPUSecondsPerRequest, l.WindowSeconds)
			}
			if l.Counters.Before == nil || l.Counters.After["vllm:prefix_cache_queries_total"]-l.Counters.Before["vllm:prefix_cache_queries_total"] != 12*256 {
				t.Errorf("queries delta: before %v after %v, want %d", l.Counters.Before, l.Counters.After, 12*256)
			}
			for i, q := range l.Requests {
				if q.ID != i || q.InputTokens != 256 || q.OutputTokens != 8 || q.FinishReason != "length" || !q.Valid ||
					*q.PromptTokens != 256 || q.Chunks.Len() != 8 || q.Status != 200 || len(q.EngineMetrics) == 0 {
					t.Fatalf("request %d: %+v", i, q)
				}
				wantCached := 240
				if q.ID < Sessions {
					wantCached = 0 // every level starts cold: its warm-ups fill the cache
				}
				if *q.CachedTokens != wantCached {
					t.Errorf("run %d qps %g id %d: cached_tokens %d, want %d", r.Run, l.OfferedQPS, q.ID, *q.CachedTokens, wantCached)
				}
				// Scheduled stamps follow the brief's arrivals x time scale exactly.
				if got, want := q.Scheduled.MonoNs-l.StartedAt.MonoNs, int64(time.Duration(q.ScheduledMs*0.01*1e6)); got != want {
					t.Errorf("id %d scheduled %d ns after level start, want %d", q.ID, got, want)
				}
				if *q.TTFTMs <= 0 || *q.FinishMs < *q.FirstMs || q.Sent.MonoNs < q.Scheduled.MonoNs {
					t.Errorf("id %d: ttft %v first %v finish %v", q.ID, *q.TTFTMs, *q.FirstMs, *q.FinishMs)
				}
			}
		}
		if r.Objective <= 0 || r.GPUSecondsPerRequest == nil {
			t.Errorf("run %d: objective %g cost %v", r.Run, r.Objective, r.GPUSecondsPerRequest)
		}
	}
	if len(hashes) != 4 {
		t.Errorf("%d distinct prompt sets over 2 runs x 2 levels, want 4", len(hashes))
	}

	// A second replay of the same workload sends identical prompts and,
	// greedy and deterministic here, gets identical outputs.
	rec2, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for r := range rec.Runs {
		for l := range rec.Runs[r].Levels {
			if a, b := rec.Runs[r].Levels[l].PromptsSHA256, rec2.Runs[r].Levels[l].PromptsSHA256; a != b {
				t.Errorf("run %d level %d: prompts differ between replays: %s vs %s", r, l, a, b)
			}
		}
	}
	if rate, n := Agreement(rec, rec2); rate != 1 || n != 48 {
		t.Errorf("agreement %g over %d requests, want 1 over 48", rate, n)
	}
}

// TestOutcomes gives request 9 (a measured one) each fault and checks it
// becomes the right counted outcome while the run goes on; split events and
// keep-alive comments must not change anything.
func TestOutcomes(t *testing.T) {
	ref := newFakeVLLM(t)
	refRec, err := Run(context.Background(), oneLevel(testOptions(ref.start().URL)))
	if err != nil {
		t.Fatal(err)
	}
	refOut := refRec.Runs[0].Levels[0].Requests[9].OutputSHA256
	for _, tc := range []struct {
		fault, outcome string
		status         int
		errHas         string
		invalid        string // for an ok stream whose output fails validation
	}{
		{"5xx", schema.OutcomeHTTPError, 503, "engine overloaded", ""},
		{"wrong_model", schema.OutcomeHTTPError, 404, "does not exist", ""},
		{"non_sse", schema.OutcomeMalformed, 200, "not an event stream", ""},
		{"bad_json", schema.OutcomeMalformed, 200, "not a completion chunk", ""},
		{"error_event", schema.OutcomeHTTPError, 200, "engine died", ""},
		{"cut", schema.OutcomeStreamCut, 200, "stream", ""},
		{"hang", schema.OutcomeTimeout, 0, "deadline", ""},   // no headers before the timeout
		{"slow", schema.OutcomeTimeout, 200, "deadline", ""}, // 300 ms per token: the timeout hits mid-stream
		{"split", schema.OutcomeOK, 200, "", ""},
		{"comments", schema.OutcomeOK, 200, "", ""},
		{"short", schema.OutcomeOK, 200, "", "output_tokens: got 7, want 8"},
		{"no_finish", schema.OutcomeOK, 200, "", `finish_reason: got "", want "length"`},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			f := newFakeVLLM(t)
			f.fault = func(id int) string {
				if id == 9 {
					return tc.fault
				}
				return ""
			}
			opts := oneLevel(testOptions(f.start().URL))
			// Only the two timeout faults get a short deadline (x0.01: 1 s
			// real, against a server that never answers or takes 2.4 s; the
			// healthy requests of the level, 2 ms each, must finish within
			// it on a busy host too: 50 ms did not, in CI); every other fault
			// must be classified by what the server sent, however late a
			// busy host lets the client read it.
			opts.RequestTimeout = time.Minute
			if tc.outcome == schema.OutcomeTimeout {
				opts.RequestTimeout = 100 * time.Second
			}
			rec, err := Run(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			rec = roundTrip(t, rec)
			l := rec.Runs[0].Levels[0]
			q := l.Requests[9]
			if q.Outcome != tc.outcome || q.Status != tc.status || !strings.Contains(q.Error, tc.errHas) {
				t.Fatalf("request 9: outcome %q status %d error %q; want %q %d containing %q", q.Outcome, q.Status, q.Error, tc.outcome, tc.status, tc.errHas)
			}
			if l.Sent != 12 || l.Outcomes[schema.OutcomeOK] != map[bool]int{true: 12, false: 11}[tc.outcome == schema.OutcomeOK] {
				t.Errorf("outcomes %v over %d sent: the run must go on around one fault", l.Outcomes, l.Sent)
			}
			if tc.invalid != "" {
				if q.Valid || q.Invalid != tc.invalid || l.Passed || l.Invalid != 1 || rec.Validation.Reasons[strings.Split(tc.invalid, ":")[0]] != 1 {
					t.Errorf("valid=%t invalid=%q passed=%t level invalid=%d reasons %v; want invalid %q, failing the level",
						q.Valid, q.Invalid, l.Passed, l.Invalid, rec.Validation.Reasons, tc.invalid)
				}
				return
			}
			if tc.outcome == schema.OutcomeOK {
				if !l.Passed || q.OutputSHA256 != refOut || q.Chunks.Len() != 8 {
					t.Errorf("passed=%t output %s (want %s), %d chunks", l.Passed, q.OutputSHA256, refOut, q.Chunks.Len())
				}
				return
			}
			if l.Passed || l.Failures[tc.outcome] != 1 || l.Measured != 3 || q.Valid || rec.Outcomes[tc.outcome] != 1 {
				t.Errorf("passed=%t failures %v measured %d valid %t totals %v", l.Passed, l.Failures, l.Measured, q.Valid, rec.Outcomes)
			}
		})
	}
}

func oneLevel(o Options) Options {
	o.QPS = []float64{10}
	return o
}

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestUnreachable(t *testing.T) {
	t.Run("everything", func(t *testing.T) {
		rec, err := Run(context.Background(), testOptions(closedPort(t)))
		if err == nil || !strings.Contains(err.Error(), "tokenize") || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("err = %v, want a tokenize error saying the connection was refused", err)
		}
		if rec == nil || !rec.Incomplete || rec.Error != err.Error() || rec.Engine.Error == "" {
			t.Fatalf("record %+v: want incomplete, with the error", rec)
		}
		roundTrip(t, rec)
	})
	t.Run("completions", func(t *testing.T) {
		// The tokenizer answers but the completion endpoint is gone: every
		// request is a counted connect_error and the run completes.
		tok := newFakeVLLM(t)
		opts := oneLevel(testOptions(closedPort(t)))
		opts.TokenizeEndpoint = tok.start().URL
		rec, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		rec = roundTrip(t, rec)
		l := rec.Runs[0].Levels[0]
		if rec.Outcomes[schema.OutcomeConnectError] != 12 || l.Failures[schema.OutcomeConnectError] != 4 || l.Passed || l.Measured != 0 {
			t.Fatalf("outcomes %v, level failures %v passed %t", rec.Outcomes, l.Failures, l.Passed)
		}
		if !strings.Contains(l.Requests[0].Error, "refused") || rec.Validation.Invalid != 12 || rec.Validation.Reasons["failed"] != 12 {
			t.Errorf("error %q, invalid %d", l.Requests[0].Error, rec.Validation.Invalid)
		}
	})
}

func TestSetupErrors(t *testing.T) {
	t.Run("wrong model listed", func(t *testing.T) {
		f := newFakeVLLM(t)
		opts := testOptions(f.start().URL)
		opts.Model = "nope"
		rec, err := Run(context.Background(), opts)
		var me *ModelError
		if !errors.As(err, &me) || me.Model != "nope" || len(me.Served) != 1 || me.Served[0] != "test-model" {
			t.Fatalf("err = %v, want a ModelError naming the served model", err)
		}
		if !rec.Incomplete || f.requests != 0 {
			t.Errorf("incomplete=%t, %d completions sent; want incomplete and none", rec.Incomplete, f.requests)
		}
	})
	t.Run("wrong model unlisted", func(t *testing.T) {
		f := newFakeVLLM(t)
		f.noModels = true
		opts := testOptions(f.start().URL)
		opts.Model = "nope"
		_, err := Run(context.Background(), opts)
		if err == nil || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "--model") {
			t.Fatalf("err = %v, want the tokenizer's 404 with a hint about --model", err)
		}
	})
	t.Run("no tokenize", func(t *testing.T) {
		f := newFakeVLLM(t)
		f.noTokenize = true
		_, err := Run(context.Background(), testOptions(f.start().URL))
		if err == nil || !strings.Contains(err.Error(), "no /tokenize route") {
			t.Fatalf("err = %v, want a missing /tokenize message", err)
		}
	})
	t.Run("prefix too short", func(t *testing.T) {
		f := newFakeVLLM(t)
		f.tokenize = func(s string) []int { return wordTokens(s)[:100] }
		_, err := Run(context.Background(), testOptions(f.start().URL))
		if err == nil || !strings.Contains(err.Error(), "tokenized to 100 tokens, fewer than the 240 cached tokens") {
			t.Fatalf("err = %v, want a too-short prefix error", err)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		for field, mod := range map[string]func(*Options){
			"endpoint":   func(o *Options) { o.Endpoint = "localhost:8000" },
			"model":      func(o *Options) { o.Model = "" },
			"kind":       func(o *Options) { o.Kind = "simulation_only" },
			"qps":        func(o *Options) { o.QPS = []float64{1, -2} },
			"runs":       func(o *Options) { o.Runs = -1 },
			"time-scale": func(o *Options) { o.TimeScale = math.Inf(1) },
			"gpus":       func(o *Options) { o.GPUs = -1 },
		} {
			o := testOptions("http://127.0.0.1:1")
			mod(&o)
			rec, err := Run(context.Background(), o)
			var pe *ParamError
			if rec != nil || !errors.As(err, &pe) || pe.Field != field {
				t.Errorf("%s: err = %v, want a ParamError for %q and no record", field, err, field)
			}
		}
	})
}

// TestCancel interrupts a level mid-way: the record keeps what was
// measured, marked incomplete, and still validates.
func TestCancel(t *testing.T) {
	f := newFakeVLLM(t)
	opts := testOptions(f.start().URL)
	opts.TimeScale = 0.1 // the level's schedule lasts 1.9 s
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel) // after ~3 warm-ups
	rec, err := Run(ctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	rec = roundTrip(t, rec)
	if !rec.Incomplete || !strings.Contains(rec.Error, "interrupted") || len(rec.Runs) != 1 || len(rec.Runs[0].Levels) != 1 {
		t.Fatalf("incomplete=%t error=%q runs=%d", rec.Incomplete, rec.Error, len(rec.Runs))
	}
	l := rec.Runs[0].Levels[0]
	if l.Complete || l.Passed || l.Sent == 0 || l.Sent >= 12 || len(l.Requests) != l.Sent || l.Planned != 12 {
		t.Errorf("level complete=%t passed=%t sent=%d of %d, %d kept", l.Complete, l.Passed, l.Sent, l.Planned, len(l.Requests))
	}
	if rec.Runs[0].Objective != 0 {
		t.Errorf("objective %g of an interrupted level, want 0", rec.Runs[0].Objective)
	}
	if !l.Verdict.Has(schema.ReasonIncomplete) || l.Verdict.Valid || rec.Verdict.Valid || !rec.Verdict.Has(schema.ReasonIncomplete) {
		t.Errorf("verdicts: level %v, record %v; want both invalid: incomplete", l.Verdict, rec.Verdict)
	}
}

// TestTimeScale checks the one code path for compressed time: a server
// that waits 20 ms real between tokens, replayed at scale 0.1, reports
// 200 ms model TPOT.
func TestTimeScale(t *testing.T) {
	f := newFakeVLLM(t)
	f.tokenDelay = 20 * time.Millisecond
	opts := oneLevel(testOptions(f.start().URL))
	opts.TimeScale = 0.1
	opts.Workload.OutputTokens = 4
	rec, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var tpot []float64
	for _, q := range rec.Runs[0].Levels[0].Requests {
		tpot = append(tpot, *q.TPOTMs)
	}
	// The median over 12 requests. The server sleeps at least 20 ms real
	// between tokens, so at least 200 model ms (less a few ms of read
	// jitter); unscaled it would be 20. A busy host only adds: the upper
	// side is loose, enough to catch the scale applied twice (2000).
	if m := slo.NearestRank(tpot, 50); m < 180 || m > 1000 {
		t.Errorf("median TPOT %g model ms, want 200 (20 ms real / 0.1); all: %v", m, tpot)
	}
	if rec.TimeScale != 0.1 {
		t.Errorf("time_scale %g", rec.TimeScale)
	}
}

// vLLM omits prompt_tokens_details when no token was cached. Requests
// without it count as 0 cached once the engine is known to report them:
// from the options (hone's deployments render the flag), or because a
// request carried them. Otherwise a cache-off level had no hit rate at all
// and a cold warm-up dropped out of the sums (biasing the rate upward).
func TestCachedTokensAbsentMeansZero(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noCache  bool
		reported bool
		want     *float64 // measured hit rate from cached_tokens
		rule     string
	}{
		{"cache on, discovered", false, false, fp(240.0 / 256), CachedTokensZeroWhenAbsent},
		{"cache off, declared", true, true, fp(0.0), CachedTokensZeroWhenAbsent},
		{"cache off, unknown", true, false, nil, CachedTokensAsReported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeVLLM(t)
			f.noPrefixCache = tc.noCache
			opts := oneLevel(testOptions(f.start().URL))
			opts.CachedTokensReported = tc.reported
			rec, err := Run(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			l := rec.Runs[0].Levels[0]
			if (l.HitRateCachedTokens == nil) != (tc.want == nil) || (tc.want != nil && *l.HitRateCachedTokens != *tc.want) || rec.CachedTokensRule != tc.rule {
				t.Errorf("hit rate %v, rule %q; want %v, %q", l.HitRateCachedTokens, rec.CachedTokensRule, tc.want, tc.rule)
			}
			for _, q := range l.Requests {
				if tc.want != nil && (q.CachedTokens == nil || (q.ID < Sessions && *q.CachedTokens != 0)) {
					t.Errorf("request %d: cached_tokens %v, want a count (0 for a cold warm-up)", q.ID, q.CachedTokens)
				}
			}
			if tc.want != nil && (l.WarmupHitRate == nil || *l.WarmupHitRate != 0) {
				t.Errorf("warm-up hit rate %v, want 0 from the warm-ups' own (absent = 0) counts", l.WarmupHitRate)
			}
		})
	}
}
