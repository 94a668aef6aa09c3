package replay

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/schema"
)

// TestCommandShardFlags checks --shard, --start-at and --level-gap as
// hone replay reads them: each mistake is a usage error naming its flag.
func TestCommandShardFlags(t *testing.T) {
	changed := func(names ...string) func(string) bool {
		return func(f string) bool {
			for _, n := range names {
				if n == f {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name string
		o    CommandOptions
		want string // "" : no error
	}{
		{"none", CommandOptions{Changed: changed()}, ""},
		{"start-at alone", CommandOptions{StartAt: "1", Changed: changed("start-at")}, "--start-at: only with --shard"},
		{"level-gap alone", CommandOptions{Changed: changed("level-gap")}, "--level-gap: only with --shard"},
		{"bad index", CommandOptions{Shard: "3/3"}, "--shard: want INDEX/COUNT"},
		{"no slash", CommandOptions{Shard: "1"}, "--shard: want INDEX/COUNT"},
		{"no start", CommandOptions{Shard: "0/2"}, "--start-at: required with --shard"},
		{"bad start", CommandOptions{Shard: "0/2", StartAt: "tomorrow"}, "--start-at: want an RFC 3339 instant"},
		{"bad gap", CommandOptions{Shard: "0/2", StartAt: "2026-12-01T07:00:00Z"}, "--level-gap: want a positive duration"},
		{"auto cache", CommandOptions{Shard: "0/2", StartAt: "2026-12-01T07:00:00Z", LevelGap: time.Second}, "--cache: with --shard"},
		{"ok", CommandOptions{Shard: "1/2", StartAt: "1700000000000000000", LevelGap: time.Second, Replay: Options{Cache: schema.CacheReset}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.o.shard()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.o.Shard != "" && (s == nil || s.Index != 1 || s.Count != 2 || s.StartAt.UnixNano() != 1700000000000000000 || s.LevelGap != time.Second) {
					t.Fatalf("shard %+v", s)
				}
				return
			}
			var ue usage.Error
			if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error starting %q", err, tc.want)
			}
		})
	}
}

// TestCommandModelNotGiven checks that without --model the endpoint's one
// model is taken, and that an endpoint serving two is bad input.
func TestCommandModelNotGiven(t *testing.T) {
	models := []string{"a"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var data []map[string]string
		for _, m := range models {
			data = append(data, map[string]string{"id": m})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	}))
	defer srv.Close()
	var log strings.Builder
	o := CommandOptions{Replay: Options{Endpoint: srv.URL}, Log: &log}
	if err := o.resolveModel(context.Background()); err != nil || o.Replay.Model != "a" {
		t.Fatalf("model %q, err %v", o.Replay.Model, err)
	}
	if want := "replay: --model not given: a, the one model the endpoint serves\n"; log.String() != want {
		t.Fatalf("log %q, want %q", log.String(), want)
	}
	models = []string{"a", "b"}
	err := Command(context.Background(), CommandOptions{Replay: Options{Endpoint: srv.URL}, Log: &log})
	var ue usage.Error
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "the endpoint serves 2 models (a, b): name one") {
		t.Fatalf("got %v", err)
	}
}

// TestCommandConfig checks --config and --scenario: the file's object is
// the record's config, named by the scenario; a file that is not a JSON
// object is bad input.
func TestCommandConfig(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	writeFile(t, good, `{"name": "x"}`)
	writeFile(t, bad, `[1]`)
	o := CommandOptions{Config: good, Scenario: "s", Hardware: func() map[string]any { return map[string]any{"cpu": "c"} }}
	run, pp, err := o.options()
	if err != nil || pp == nil {
		t.Fatal(err)
	}
	if run.Config["name"] != "x" || run.Config[schema.ConfigScenario] != "s" || run.Hardware["cpu"] != "c" || run.Progress == nil {
		t.Fatalf("options %+v", run)
	}
	o.Config = bad
	if _, _, err := o.options(); err == nil || !strings.HasPrefix(err.Error(), "--config "+bad+": want a JSON object") {
		t.Fatalf("got %v", err)
	}
}

// TestMergeChecksArguments checks hone replay merge's argument checks.
func TestMergeChecksArguments(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run.json")
	for _, tc := range []struct {
		o    MergeOptions
		want string
	}{
		{MergeOptions{}, "--out: want a path for the merged record"},
		{MergeOptions{Record: filepath.Join(t.TempDir(), "missing", "run.json")}, "--out: "},
		{MergeOptions{Record: out}, "want every shard's record"},
		{MergeOptions{Record: out, Shards: []string{filepath.Join(t.TempDir(), "none.json")}}, ""},
	} {
		err := Merge(context.Background(), tc.o)
		var ue usage.Error
		if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Fatalf("%+v: got %v, want a usage error starting %q", tc.o, err, tc.want)
		}
	}
}

// TestWriteSummary prints a record's summary in each format.
func TestWriteSummary(t *testing.T) {
	rec, err := ReadRecord(filepath.Join("testdata", "record.example.v3.json"))
	if err != nil {
		t.Fatal(err)
	}
	bad := rec.InvalidLevels()
	var table, js, vb strings.Builder
	if err := writeSummary(&table, "table", rec, "run.json", bad); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run 1: objective ", "\n== ", "request throughput", "TTFT", "\ncache: ", ") written to run.json\n"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if err := writeSummary(&js, "json", rec, "run.json", bad); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(js.String()), &m); err != nil || m["record"] != "run.json" || m["kind"] != string(rec.Kind) {
		t.Fatalf("json %v: %s", err, js.String())
	}
	if err := writeSummary(&vb, FormatVLLMBench, rec, "run.json", bad); err != nil || !strings.Contains(vb.String(), "request_throughput") {
		t.Fatalf("vllm-bench-json %v: %s", err, vb.String())
	}
	if got, want := verdict(rec, bad) == nil, len(bad) == 0 && len(rec.FailedLevels()) == 0; got != want {
		t.Fatalf("verdict nil %t, want %t", got, want)
	}
}

// TestOutcomeSummary lists the outcomes in their fixed order, zeros left out.
func TestOutcomeSummary(t *testing.T) {
	got := outcomeSummary(map[string]int{schema.OutcomeTimeout: 2, schema.OutcomeOK: 5, schema.OutcomeStreamCut: 0})
	if want := "5 " + schema.OutcomeOK + ", 2 " + schema.OutcomeTimeout; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
