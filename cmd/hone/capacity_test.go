package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/capacity"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
)

// startEmulator starts an in-process emulator (profile
// qwen2.5-coder-0.5b-l4, time scale 0.25, cached tokens reported, logs
// discarded) on loopback, stopped when the test ends, and returns its URL.
func startEmulator(t *testing.T, ctx context.Context) string {
	t.Helper()
	e, err := emulator.Start(ctx, emulator.Config{Profile: "qwen2.5-coder-0.5b-l4", TimeScale: 0.25, EnablePromptTokensDetails: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e.URL()
}

func TestCapacityBadFlags(t *testing.T) {
	spec := "../../examples/emulator-l4-colocated.yaml"
	for flag, args := range map[string][]string{
		"--capacity-mode":      {"predict", "--capacity", "--capacity-mode", "half", spec},
		"--capacity-precision": {"predict", "--capacity", "--capacity-precision", "1.5", spec},
		"--qps":                {"predict", "--capacity", "--qps", "4", spec},
		"--capacity-start":     {"predict", "--capacity-start", "4", spec},
		"--slo":                {"predict", "--capacity", "--slo", "snappy", spec},
		"--max-concurrency":    {"replay", "--capacity", "--max-concurrency", "4", "--endpoint", "http://127.0.0.1:1", "--model", "m"},
		"--out":                {"replay", "--capacity", "--out", "c.json.gz", "--endpoint", "http://127.0.0.1:1", "--model", "m"},
	} {
		_, stderr, code := runHone(context.Background(), args...)
		if code != exitBadInput || !strings.Contains(stderr, flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", args, code, stderr, flag)
		}
	}
}

func TestPredictCapacityJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cap.json")
	stdout, stderr, code := runHone(context.Background(), "predict", "--capacity", "--slo", "interactive", "-o", "json", "--out", out,
		"../../examples/emulator-l4-colocated.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got capacity.Record
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	c := got.Capacity
	if got.Kind != schema.KindPredicted || c == nil || c.Mode != capacity.Open || c.Unit != capacity.UnitRate || !c.Bounded ||
		c.SLO.TTFTMillis != 500 || c.SLO.TPOTMillis != 50 || c.Precision != capacity.DefaultPrecision || c.Upper > c.Value*(1+c.Precision) {
		t.Fatalf("capacity output: %s", stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), `"capacity"`) {
		t.Fatalf("--out: %v %s", err, b)
	}
	if !strings.Contains(stderr, "capacity: ") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
}

// TestReplayCapacityOnEmulator probes a live emulator as the search does.
// The host may distort the probe (the search then ends, exit 1, naming the
// verdict); whatever it measured must follow the window rule.
func TestReplayCapacityOnEmulator(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startEmulator(t, ctx)
	out := filepath.Join(t.TempDir(), "cap.json")
	stdout, stderr, code := runHone(ctx, "replay", "--capacity", "--slo", "interactive", "--endpoint", url, "--model", "Qwen/Qwen2.5-Coder-0.5B-Instruct",
		"--input-tokens", "512", "--output-tokens", "16", "--capacity-start", "16", "--capacity-max", "16", "--capacity-precision", "0.3", "-o", "json", "--out", out)
	var got capacity.Record
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("exit %d, stdout %q: %v\n%s", code, stdout, err, stderr)
	}
	c := got.Capacity
	if got.Kind != schema.KindEmulated || c == nil || len(c.Probes) == 0 {
		t.Fatalf("output: %s", stdout)
	}
	// What hone gate compares: the first probe's record without its runs
	// or the probe's own load and request count.
	if h := got.Header; h == nil || h.Workload.InputTokens != 512 || h.Workload.OutputTokens != 16 || h.Kind != schema.KindEmulated ||
		h.Runs != nil || h.Workload.QPS != nil || h.Workload.Requests != 0 {
		t.Errorf("record header: %+v", got.Header)
	}
	hostBound := code == exitFailed && strings.Contains(stderr, "invalid")
	if code != 0 && !hostBound {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	for _, p := range c.Probes {
		want := capacity.PlanFor(capacity.Open, p.Load, capacity.Options{SLO: c.SLO, Precision: 0.3, MinRequests: 120}, 0)
		if p.Plan.WindowS != want.WindowS && !p.Retried || p.Valid && p.Measured+p.Failed != int(p.Plan.WindowS*p.Load+0.999) {
			t.Errorf("probe at %g: plan %+v (want window %g s), measured %d", p.Load, p.Plan, want.WindowS, p.Measured)
		}
	}
	// One probe: 16 req/s is well within one L4 replica's capacity for
	// these short requests (hone predict --capacity: ~360 req/s), and --capacity-max 16
	// makes its pass a lower bound.
	t.Logf("exit %d, %g %s, note %q", code, c.Value, c.Unit, c.Note)
	if code == 0 && (c.Bounded || c.Value != 16 || len(c.Probes) != 1 || !c.Probes[0].Pass || !strings.Contains(c.Note, "lower bound")) {
		t.Errorf("capacity %+v", c)
	}
}

// TestGateCapacityCLI gates capacity results as a user would: two
// predicted searches of one spec make a baseline, a third passes against
// it, and the same spec with a tighter TPOT SLO is refused as another
// measurement (exit 2, naming the slo).
func TestGateCapacityCLI(t *testing.T) {
	dir := t.TempDir()
	spec := "../../examples/emulator-l4-colocated.yaml"
	predictCap := func(name string, start string, extra ...string) string {
		out := filepath.Join(dir, name)
		args := append([]string{"predict", "--capacity", "--tpot-slo-ms", "12", "--requests", "48", "--capacity-start", start, "--out", out, spec}, extra...)
		if _, stderr, code := runHone(context.Background(), args...); code != 0 {
			t.Fatalf("predict %s: exit %d: %s", name, code, stderr)
		}
		return out
	}
	a, b, c := predictCap("a.json", "8"), predictCap("b.json", "20"), predictCap("c.json", "11")
	bl := filepath.Join(dir, "bl.json")
	if _, stderr, code := runHone(context.Background(), "gate", "baseline", "create", a, b, "--out", bl); code != 0 {
		t.Fatalf("baseline create: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := runHone(context.Background(), "gate", "check", "--baseline", bl, "--candidate", c)
	if code != 0 || !strings.Contains(stdout, "capacity") || !strings.Contains(stdout, "brackets overlap") {
		t.Fatalf("check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	tight := predictCap("d.json", "8", "--ttft-slo-ms", "1000")
	stdout, stderr, code = runHone(context.Background(), "gate", "check", "--baseline", bl, "--candidate", tight)
	if code != 2 || !strings.Contains(stdout+stderr, "slo") {
		t.Fatalf("another SLO: exit %d, want 2 naming the slo\n%s\n%s", code, stdout, stderr)
	}
}

// TestWriteCapacityUnfinished: a search the host cut short says so, not
// "capacity: 0 req/s".
func TestWriteCapacityUnfinished(t *testing.T) {
	var b strings.Builder
	res := &capacity.Result{Mode: capacity.Open, Unit: capacity.UnitRate, Outcome: capacity.OutcomeUnfinished,
		Probes: []capacity.Probe{{Load: 1, Note: "invalid: [client_bound: late]"}}}
	if err := capacity.Write(&b, "table", "", &capacity.Record{Kind: schema.KindEmulated, Capacity: res}); err != nil {
		t.Fatal(err)
	}
	if want := "capacity: not found: the search ended before its rule did (1 probes; the last: 1 req/s: invalid: [client_bound: late])"; !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
}
