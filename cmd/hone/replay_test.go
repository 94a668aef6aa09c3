package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
)

// miniVLLM answers /tokenize (one id per whitespace-separated word) and
// streams /v1/completions in vLLM's format after a 20 ms "prefill"; enough
// to drive the command. It has no /version: its kind is unverified.
func miniVLLM(t *testing.T) *httptest.Server {
	return miniEngine(t, nil)
}

// miniEngine is miniVLLM with more routes.
func miniEngine(t *testing.T, more func(*http.ServeMux)) *httptest.Server {
	mux := http.NewServeMux()
	if more != nil {
		more(mux)
	}
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var b struct{ Prompt string }
		json.NewDecoder(r.Body).Decode(&b)
		ids := []int{}
		for i := range strings.Fields(b.Prompt) {
			ids = append(ids, 1000+i%5000)
		}
		json.NewEncoder(w).Encode(map[string]any{"tokens": ids})
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Prompt    []int `json:"prompt"`
			MaxTokens int   `json:"max_tokens"`
		}
		json.NewDecoder(r.Body).Decode(&b)
		w.Header().Set("Content-Type", "text/event-stream")
		time.Sleep(20 * time.Millisecond)
		for i := range b.MaxTokens {
			fr := "null"
			if i == b.MaxTokens-1 {
				fr = `"length"`
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"token_ids\":[%d],\"finish_reason\":%s}]}\n\n", i, fr)
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":0,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n", len(b.Prompt), b.MaxTokens)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// runHone is runCLI with a context, for interrupts.
func runHone(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	root := newRootCmd()
	var o, e bytes.Buffer
	root.SetOut(&o)
	root.SetErr(&e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(&e, "hone:", err)
	}
	return o.String(), e.String(), exitCodeQuiet(err)
}

func TestReplayBadFlags(t *testing.T) {
	for flag, args := range map[string][]string{
		"--qps":             {"--qps", "1,fast"},
		"--kind":            {"--kind", "simulation_only"},
		"--endpoint":        {"--endpoint", "localhost:8000"},
		"--time-scale":      {"--time-scale", "0"},
		"--runs":            {"--runs", "0"},
		"--requests":        {"--requests", "4"},
		"--uncached-tokens": {"--uncached-tokens", "0"},
		"--output-tokens":   {"--output-tokens", "0"},
		"--ttft-slo-ms":     {"--ttft-slo-ms", "-1"},
		"--request-timeout": {"--request-timeout", "0s"},
		"--gpus":            {"--gpus", "two"},
	} {
		a := append([]string{"replay", "--endpoint", "http://127.0.0.1:1", "--model", "m", "--out", filepath.Join(t.TempDir(), "r.json")}, args...)
		_, stderr, code := runHone(context.Background(), a...)
		if code != exitBadInput || !strings.Contains(stderr, flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", args, code, stderr, flag)
		}
	}
}

// emulatorRoutes make miniEngine say it is hone's emulator at a time
// scale, with a prefix-cache reset.
func emulatorRoutes(scale float64) func(*http.ServeMux) {
	return func(mux *http.ServeMux) {
		mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"version":"hone-emulator/test","time_scale":%g}`, scale)
		})
		mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {})
	}
}

func TestReplayWritesRecord(t *testing.T) {
	srv := miniEngine(t, emulatorRoutes(0.01))
	dir := t.TempDir()
	out, cfg := filepath.Join(dir, "run.json"), filepath.Join(dir, "deploy.json")
	if err := os.WriteFile(cfg, []byte(`{"mode":"disaggregated","prefill":1,"decode":3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runHone(context.Background(), "replay", "--endpoint", srv.URL, "--model", "m", "--kind", "emulated",
		"--qps", "5,10", "--requests", "10", "--input-tokens", "256", "--output-tokens", "4", "--ttft-slo-ms", "1e6",
		"--runs", "2", "--gpus", "4", "--config", cfg, "--precision", "bf16", "--out", out)
	// At time scale 0.01 a millisecond of the host's lateness is 100 model
	// ms: a busy host can make a level client-bound, which is exit 1 with
	// the reason printed. Anything else is a failure.
	hostBound := code == exitFailed && strings.Contains(stdout, "INVALID") && hostOnly(stdout)
	if code != 0 && !hostBound {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != schema.KindEmulated || rec.Backend != "emulator" || rec.GPUs != 4 || rec.TimeScale != 0.01 || len(rec.Runs) != 2 ||
		rec.Outcomes[schema.OutcomeOK] != 40 || rec.Hone.Commit == "" || rec.Config["mode"] != "disaggregated" || rec.Model.Precision != "bf16" {
		t.Fatalf("record: kind %q backend %q gpus %d scale %g runs %d outcomes %v", rec.Kind, rec.Backend, rec.GPUs, rec.TimeScale, len(rec.Runs), rec.Outcomes)
	}
	if !strings.Contains(stdout, "written to "+out) || strings.Count(stderr, "qps ") != 4 || rec.Cache.Procedure != schema.CacheReset ||
		strings.Contains(stdout, "verdict: every level valid") == hostBound {
		t.Errorf("stdout %q\nstderr %q: want the record's path, one line per level and the verdict", stdout, stderr)
	}
	// vllm bench serve's figures per level, pooled over the valid runs.
	want := []string{"request throughput", "output token throughput", "total token throughput", "median", "p90", "TTFT", "TPOT", "ITL", "E2E"}
	if !hostBound {
		want = append(want, "== 5 req/s offered: 2 run(s), 4 completed, 0 failed (emulated, model time; valid)")
	}
	for _, w := range want {
		if !strings.Contains(stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, stdout)
		}
	}
	// -o json: the same statistics, machine-readable.
	stdout, stderr, code = runHone(context.Background(), "replay", "--endpoint", srv.URL, "--model", "m", "--kind", "emulated",
		"--qps", "5", "--requests", "10", "--input-tokens", "256", "--output-tokens", "4", "--ttft-slo-ms", "1e6", "-o", "json",
		"--out", filepath.Join(dir, "run2.json"))
	var sum struct {
		Levels        []replay.ServeStats `json:"levels"`
		InvalidLevels []string            `json:"invalid_levels"`
	}
	err = json.Unmarshal([]byte(stdout), &sum)
	if !(code == 0 || code == exitFailed && len(sum.InvalidLevels) > 0 && hostOnly(strings.Join(sum.InvalidLevels, "\n"))) ||
		err != nil || len(sum.Levels) != 1 || sum.Levels[0].Completed != 2 ||
		sum.Levels[0].TPOT.N != 2 || sum.Levels[0].ITL.N != 6 || !(sum.Levels[0].RequestThroughput > 0) {
		t.Errorf("-o json: exit %d, %v, %+v\n%s", code, err, sum, stderr)
	}
}

// hostOnly reports whether every line of a replay's output that names an
// invalid-level reason names only the host's (client_bound), which a busy
// test host may cause, and at least one does.
func hostOnly(out string) bool {
	seen := false
	for _, l := range strings.Split(out, "\n") {
		for _, r := range []schema.Code{schema.ReasonWarmStart, schema.ReasonTimeScaleMismatch, schema.ReasonIncomplete, schema.ReasonCounterContamination} {
			if strings.Contains(l, string(r)) {
				return false
			}
		}
		seen = seen || strings.Contains(l, string(schema.ReasonClientBound))
	}
	return seen
}

// An emulator at time scale 0.1 replayed at a stated scale of 1 gave
// numbers 10× too small with exit 0; now it is exit 2 naming the flag, and
// with no flag the engine's scale is adopted.
func TestReplayTimeScaleMismatch(t *testing.T) {
	srv := miniEngine(t, emulatorRoutes(0.1))
	out := filepath.Join(t.TempDir(), "run.json")
	_, stderr, code := runHone(context.Background(), "replay", "--endpoint", srv.URL, "--model", "m", "--qps", "5",
		"--requests", "10", "--input-tokens", "256", "--output-tokens", "4", "--time-scale", "1", "--out", out)
	if code != exitBadInput || !strings.Contains(stderr, "--time-scale") || !strings.Contains(stderr, "0.1") {
		t.Errorf("exit %d, stderr %q; want exit 2 naming --time-scale and the engine's 0.1", code, stderr)
	}
}

// A level that is invalid makes the command exit 1 and say which and why;
// the record is still written. Here: a kind nobody can vouch for is fine,
// but an engine whose counters say 113% of its prompt tokens hit the cache
// is not.
func TestReplayInvalidLevelExits1(t *testing.T) {
	var mu sync.Mutex
	scrapes := 0
	srv := miniEngine(t, func(mux *http.ServeMux) {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			scrapes++
			n := scrapes
			mu.Unlock()
			// Hits grow faster than queries: 1.13 per queried token.
			fmt.Fprintf(w, "vllm:prefix_cache_queries_total %d\nvllm:prefix_cache_hits_total %g\n", n*100000, float64(n)*113000)
		})
	})
	out := filepath.Join(t.TempDir(), "run.json")
	stdout, stderr, code := runHone(context.Background(), "replay", "--endpoint", srv.URL, "--model", "m", "--qps", "5",
		"--requests", "10", "--input-tokens", "256", "--output-tokens", "4", "--time-scale", "0.01", "--ttft-slo-ms", "1e6", "--out", out)
	if code != exitFailed || !strings.Contains(stdout, "INVALID run 1, 5 req/s") || !strings.Contains(stdout, "counter_contamination") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and the invalid level named", code, stdout, stderr)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != schema.KindUnverified || rec.Backend != "unknown" || rec.Verdict.Valid || rec.Runs[0].Objective != 0 {
		t.Errorf("kind %q backend %q verdict %v objective %g", rec.Kind, rec.Backend, rec.Verdict, rec.Runs[0].Objective)
	}
}

func TestReplayInterrupted(t *testing.T) {
	srv := miniVLLM(t)
	out := filepath.Join(t.TempDir(), "run.json")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, stderr, code := runHone(ctx, "replay", "--endpoint", srv.URL, "--model", "m", "--qps", "1",
		"--input-tokens", "256", "--output-tokens", "4", "--time-scale", "0.1", "--out", out)
	if code != exitFailed || !strings.Contains(stderr, "interrupted") {
		t.Fatalf("exit %d, stderr %q; want 1 and 'interrupted'", code, stderr)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Incomplete || rec.Runs[0].Levels[0].Complete {
		t.Errorf("record incomplete=%t, level complete=%t", rec.Incomplete, rec.Runs[0].Levels[0].Complete)
	}
}

// TestReplayUnreachableWritesNothing: a replay that never reached the
// endpoint sends no request and leaves no record behind.
func TestReplayUnreachableWritesNothing(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run.json")
	_, stderr, code := runHone(context.Background(), "replay", "--endpoint", "http://127.0.0.1:1", "--model", "m",
		"--qps", "1", "--requests", "10", "--out", out)
	if code != exitFailed || !strings.Contains(stderr, "no record written") {
		t.Errorf("exit %d, stderr %q; want 1 and no record written", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want no file", out, err)
	}
}

// `hone replay --shard` in two concurrent in-process shards against one
// engine, then `hone replay merge`: one record holding every request once,
// readable and valid under the schema.
func TestReplaySharded(t *testing.T) {
	srv := miniEngine(t, emulatorRoutes(0.01))
	dir := t.TempDir()
	startAt := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	paths := []string{filepath.Join(dir, "shard0.json.gz"), filepath.Join(dir, "shard1.json.gz")}
	var wg sync.WaitGroup
	var stdout, stderr [2]string
	var errs [2]error
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not runHone: its exit code borrows os.Stderr, which two
			// goroutines must not do at once.
			root := newRootCmd()
			var o, e bytes.Buffer
			root.SetOut(&o)
			root.SetErr(&e)
			root.SetArgs([]string{"replay", "--endpoint", srv.URL, "--model", "m", "--kind", "emulated", "--qps", "5,10", "--requests", "10",
				"--input-tokens", "256", "--output-tokens", "4", "--ttft-slo-ms", "1e6", "--cache", "reset",
				"--shard", fmt.Sprintf("%d/2", i), "--start-at", startAt, "--level-gap", "10s", "--out", paths[i]})
			errs[i] = root.ExecuteContext(context.Background())
			stdout[i], stderr[i] = o.String(), e.String()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		// A busy host can make a level client-bound (exit 1, named).
		if code := exitCodeQuiet(err); code != 0 && !(code == exitFailed && hostOnly(stdout[i])) {
			t.Fatalf("shard %d: exit %d (%v): %s\n%s", i, code, err, stderr[i], stdout[i])
		}
		if !strings.Contains(stderr[i], fmt.Sprintf("shard %d/2", i)) {
			t.Errorf("shard %d: stderr %q does not say which shard it was", i, stderr[i])
		}
	}
	merged := filepath.Join(dir, "run.json.gz")
	out, errOut, code := runHone(context.Background(), "replay", "merge", "--out", merged, paths[1], paths[0])
	if code != 0 && !(code == exitFailed && hostOnly(out)) {
		t.Fatalf("merge: exit %d: %s\n%s", code, errOut, out)
	}
	rec, err := replay.ReadRecord(merged)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Shard == nil || rec.Shard.Index != nil || rec.Shard.Count != 2 || rec.Kind != schema.KindEmulated || len(rec.Runs) != 1 ||
		len(rec.Runs[0].Levels) != 2 || rec.Outcomes[schema.OutcomeOK] != 20 || !strings.Contains(out, "written to "+merged) {
		t.Fatalf("merged record: shard %+v kind %q runs %d outcomes %v\n%s", rec.Shard, rec.Kind, len(rec.Runs), rec.Outcomes, out)
	}
	for _, l := range rec.Runs[0].Levels {
		if l.Sent != 10 || !l.Complete || len(l.Requests) != 10 {
			t.Errorf("%g req/s: sent %d complete %t", l.OfferedQPS, l.Sent, l.Complete)
		}
		for i, q := range l.Requests {
			if q.ID != i {
				t.Fatalf("%g req/s: request %d has id %d: want every id once, in order", l.OfferedQPS, i, q.ID)
			}
		}
	}

	// Shards that do not belong together, or no shards at all: exit 2,
	// naming what is wrong, and nothing written.
	example := filepath.Join("..", "..", "replay", "testdata", "record.example.v3.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{paths[0], paths[0]}, "shard.index"},
		{[]string{paths[1]}, "shard.count"},
		{[]string{example, paths[1]}, "not a shard's record"},
		{[]string{paths[0], filepath.Join(dir, "missing.json")}, "missing.json"},
		{nil, "every shard's record"},
	} {
		bad := filepath.Join(dir, "bad.json")
		_, errOut, code := runHone(context.Background(), append([]string{"replay", "merge", "--out", bad}, tc.args...)...)
		if _, err := os.Stat(bad); code != exitBadInput || !strings.Contains(errOut, tc.want) || err == nil {
			t.Errorf("merge %v: exit %d, stderr %q, out written: %t; want exit 2 naming %q", tc.args, code, errOut, err == nil, tc.want)
		}
	}
	if _, errOut, code := runHone(context.Background(), "replay", "merge", paths[0], paths[1]); code != exitBadInput || !strings.Contains(errOut, "--out") {
		t.Errorf("merge without --out: exit %d, %q", code, errOut)
	}
}

func TestReplayShardBadFlags(t *testing.T) {
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		flag string
		args []string
	}{
		{"--shard", []string{"--shard", "3/3", "--start-at", future}},
		{"--shard", []string{"--shard", "one/3", "--start-at", future}},
		{"--start-at", []string{"--shard", "0/3"}},
		{"--start-at", []string{"--shard", "0/3", "--start-at", "tomorrow"}},
		{"--start-at", []string{"--shard", "0/3", "--start-at", past}},
		{"--start-at", []string{"--start-at", future}},
		{"--level-gap", []string{"--level-gap", "5s"}},
		{"--level-gap", []string{"--shard", "0/3", "--start-at", future, "--level-gap", "0s"}},
		{"--cache", []string{"--shard", "0/3", "--start-at", future, "--cache", "auto"}},
	} {
		a := []string{"replay", "--endpoint", "http://127.0.0.1:1", "--model", "m", "--cache", "reset", "--out", filepath.Join(t.TempDir(), "r.json")}
		_, stderr, code := runHone(context.Background(), append(a, tc.args...)...)
		if code != exitBadInput || !strings.Contains(stderr, tc.flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, stderr, tc.flag)
		}
	}
}

// failingEngine is miniEngine (at time scale 0.01, emulator routes) whose
// n-th completion (from 1) fails with HTTP 500 when fail(n) says so; sent
// counts the completions asked for.
func failingEngine(t *testing.T, fail func(n int) bool) (url string, sent func() int) {
	inner := miniEngine(t, emulatorRoutes(0.01))
	var mu sync.Mutex
	n := 0
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/completions" {
			mu.Lock()
			n++
			k := n
			mu.Unlock()
			if fail(k) {
				http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
				return
			}
		}
		inner.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// The probe: a server whose every stream fails made replay exit 0 with
// "verdict: every level valid". It is exit 1 now, the record still
// written, and the summary names the level; so is one failure in 12
// (more than the 0 a p99 of 12 requests can leave out).
func TestReplayFailedRequestsExit1(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(n int) bool
		want string
	}{
		{"every request", func(int) bool { return true }, "FAILED run 1, 5 req/s: every one of 2 measured requests failed (2 http_error)"},
		{"one measured request", func(n int) bool { return n == 10 }, "FAILED run 1, 5 req/s: 1 of 2 measured requests failed (1 http_error), more than the 0 a p99 can leave out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := failingEngine(t, tc.fail)
			out := filepath.Join(t.TempDir(), "run.json")
			stdout, stderr, code := runHone(context.Background(), "replay", "--endpoint", url, "--model", "m", "--kind", "emulated",
				"--qps", "5", "--requests", "10", "--input-tokens", "256", "--output-tokens", "4", "--ttft-slo-ms", "1e6", "--out", out)
			if code != exitFailed || !strings.Contains(stdout, tc.want) || strings.Contains(stdout, "every level valid") ||
				!strings.Contains(stderr, "requests failed at 1 level(s)") {
				t.Fatalf("exit %d\nstdout %s\nstderr %s\nwant exit 1 and %q", code, stdout, stderr, tc.want)
			}
			if rec, err := replay.ReadRecord(out); err != nil || len(rec.FailedLevels()) != 1 {
				t.Fatalf("record: %v", err)
			}
		})
	}
}

// --out is checked before the first request: a missing or unwritable
// directory is exit 2 naming the flag, and nothing is sent.
func TestReplayOutCheckedFirst(t *testing.T) {
	url, sent := failingEngine(t, func(int) bool { return false })
	dir := t.TempDir()
	for _, out := range []string{filepath.Join(dir, "missing", "run.json"), dir, "/proc/run.json"} {
		_, stderr, code := runHone(context.Background(), "replay", "--endpoint", url, "--model", "m", "--kind", "emulated",
			"--qps", "5", "--requests", "10", "--input-tokens", "256", "--output-tokens", "4", "--out", out)
		if code != exitBadInput || !strings.Contains(stderr, "--out: ") {
			t.Errorf("--out %s: exit %d, stderr %q; want 2 naming --out", out, code, stderr)
		}
	}
	if n := sent(); n != 0 {
		t.Errorf("%d completions sent before --out was refused", n)
	}
}

// One output token has no TPOT and no inter-token gap: the table says so
// instead of printing 0.00 as if measured.
func TestReplayOneTokenTPOTIsNA(t *testing.T) {
	url, _ := failingEngine(t, func(int) bool { return false })
	out := filepath.Join(t.TempDir(), "run.json")
	stdout, stderr, code := runHone(context.Background(), "replay", "--endpoint", url, "--model", "m", "--kind", "emulated",
		"--qps", "5", "--requests", "10", "--input-tokens", "256", "--output-tokens", "1", "--ttft-slo-ms", "1e6", "--out", out)
	if code != 0 && !(code == exitFailed && hostOnly(stdout)) {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, m := range []string{"TPOT", "ITL"} {
		if !regexp.MustCompile(`(?m)^\s*` + m + `\s+n/a \(no request produced two tokens\)`).MatchString(stdout) {
			t.Errorf("no %s n/a line in\n%s", m, stdout)
		}
	}
}

// Without --model, replay asks the endpoint (GET /v1/models) and uses the
// one model it serves, as vllm bench serve does; two models, or no list,
// is exit 2 naming --model (and the models), nothing sent.
func TestReplayModelFromEndpoint(t *testing.T) {
	models := func(ids ...string) func(*http.ServeMux) {
		return func(mux *http.ServeMux) {
			emulatorRoutes(0.01)(mux)
			mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
				var data []map[string]any
				for _, id := range ids {
					data = append(data, map[string]any{"id": id, "object": "model", "max_model_len": 32768})
				}
				json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
			})
		}
	}
	args := func(url, out string) []string {
		return []string{"replay", "--endpoint", url + "/v1", "--kind", "emulated", "--qps", "5", "--requests", "10", "--input-tokens", "256",
			"--output-tokens", "4", "--ttft-slo-ms", "1e6", "--out", out}
	}
	dir := t.TempDir()
	one := miniEngine(t, models("Qwen/Qwen2.5-Coder-0.5B-Instruct"))
	out := filepath.Join(dir, "one.json")
	stdout, stderr, code := runHone(context.Background(), args(one.URL, out)...)
	if code != 0 && !(code == exitFailed && hostOnly(stdout)) {
		t.Fatalf("one model: exit %d\n%s\n%s", code, stderr, stdout)
	}
	rec, err := replay.ReadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Model.ID != "Qwen/Qwen2.5-Coder-0.5B-Instruct" || !strings.Contains(stderr, "--model not given: Qwen/Qwen2.5-Coder-0.5B-Instruct, the one model the endpoint serves") {
		t.Errorf("record's model %q; stderr %q", rec.Model.ID, stderr)
	}
	for name, srv := range map[string]*httptest.Server{"two models": miniEngine(t, models("a", "b")), "no list": miniVLLM(t)} {
		out := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		_, stderr, code := runHone(context.Background(), args(srv.URL, out)...)
		if code != exitBadInput || !strings.Contains(stderr, "--model") || name == "two models" && !strings.Contains(stderr, "serves 2 models (a, b)") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 naming --model", name, code, stderr)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: a record was written (%v)", name, err)
		}
	}
}
