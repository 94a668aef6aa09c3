package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// runCLI runs hone in process and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.Execute()
	if err != nil {
		errb.WriteString("hone: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), exitCodeQuiet(err)
}

func exitCodeQuiet(err error) int {
	old := os.Stderr
	os.Stderr, _ = os.Open(os.DevNull)
	defer func() { os.Stderr = old }()
	return exitCode(err)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from golden:\n got: %s\nwant: %s", name, got, want)
	}
}

func TestSimJSONGolden(t *testing.T) {
	for _, tc := range []struct{ file, mode, cache string }{
		{"sim_colocated.json", "colocated", "true"},
		{"sim_disaggregated.json", "disaggregated", "true"},
		{"sim_disaggregated_nocache.json", "disaggregated", "false"},
	} {
		out, errs, code := runCLI(t, "", "sim", "--mode", tc.mode, "--prefix-cache="+tc.cache, "--output", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		golden(t, tc.file, out)
	}
	out, _, _ := runCLI(t, "", "sim", "--mode", "disaggregated", "--output", "json")
	// Floats in full, shortest round-trip form.
	if !strings.Contains(out, `"objective": 15.91670258978015`) || !strings.Contains(out, `"p99_ttft_ms": 39.73828125`) {
		t.Errorf("JSON lacks the brief's golden values:\n%s", out)
	}
}

func TestSimTable(t *testing.T) {
	out, _, code := runCLI(t, "", "sim")
	if code != 0 || !strings.Contains(out, "objective: 8.01670146137787 req/s") || !strings.Contains(out, "kind: simulation_only") {
		t.Errorf("exit %d, table:\n%s", code, out)
	}
}

func TestBadInputExitsTwoNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--requests", "8"}, "--requests"},
		{[]string{"--requests", "abc"}, "--requests"},
		{[]string{"--input-tokens", "100"}, "--input-tokens"},
		{[]string{"--output-tokens", "0"}, "--output-tokens"},
		{[]string{"--qps", "0"}, "--qps"},
		{[]string{"--qps", "-1,2"}, "--qps"},
		{[]string{"--qps", "NaN"}, "--qps"},
		{[]string{"--qps", "Inf"}, "--qps"},
		{[]string{"--qps", "fast"}, "--qps"},
		{[]string{"--qps", ""}, "--qps"},
		{[]string{"--mode", "batched"}, "--mode"},
		{[]string{"--output", "xml"}, "--output"},
		{[]string{"--ttft-slo-ms", "-5"}, "--ttft-slo-ms"},
		{[]string{"--tpot-slo-ms", "0"}, "--tpot-slo-ms"},
		{[]string{"--prefix-cache=maybe"}, "--prefix-cache"},
		{[]string{"--no-such-flag"}, "--no-such-flag"},
	} {
		_, errs, code := runCLI(t, "", append([]string{"sim"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.flag) {
			t.Errorf("hone sim %v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, errs, tc.flag)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, code := runCLI(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "hone ") || !strings.Contains(out, "commit ") {
		t.Errorf("exit %d: %q", code, out)
	}
}

func TestBridgeProtocol(t *testing.T) {
	// A full exchange cannot be scripted up front (answers depend on the
	// requests), but a broken peer must end in a fatal message and exit 2.
	out, _, code := runCLI(t, `{"type":"start","baseline":{"mode":"colocated","prefix_cache":true}}`+"\n", "exercise", "bridge")
	if code != 2 || !strings.Contains(out, `"type":"evaluate"`) || !strings.Contains(out, `"type":"fatal"`) {
		t.Errorf("exit %d, out %s", code, out)
	}
	out, _, code = runCLI(t, `{"type":"start","baseline":{"cache":true}}`+"\n", "exercise", "bridge")
	if code != 2 || !strings.Contains(out, "no deployment-mode value") {
		t.Errorf("exit %d, out %s", code, out)
	}
}

func TestGateExitCodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	on, _, _ := runCLI(t, "", "sim", "--output", "json", "--qps", "4,16")
	off, _, _ := runCLI(t, "", "sim", "--output", "json", "--qps", "4,16", "--prefix-cache=false")
	dis, _, _ := runCLI(t, "", "sim", "--output", "json", "--qps", "4,16", "--mode", "disaggregated")
	onP, disP := write("on.json", on), write("dis.json", dis)
	// Plant a regression under the same scenario name.
	offP := write("off.json", strings.Replace(off, `"prefix_cache": false`, `"prefix_cache": true`, 1))
	bl := filepath.Join(dir, "baselines", "b.json")
	if _, errs, code := runCLI(t, "", "gate", "baseline", "create", onP, "--out", bl); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--baseline", bl, "--candidate", onP}, 0},
		{[]string{"--baseline", bl, "--candidate", offP}, 1},
		{[]string{"--baseline", bl, "--candidate", disP}, 2}, // another scenario: metrics missing
		{[]string{"--baseline", bl}, 2},
		{[]string{"--baseline", bl, "--candidate", onP, "-o", "xml"}, 2},
		{[]string{"--baseline", write("bad.json", "{"), "--candidate", onP}, 2},
		{[]string{"--baseline", bl, "--candidate", write("junk.json", `{"x":1}`)}, 2},
	} {
		_, errs, code := runCLI(t, "", append([]string{"gate", "check"}, tc.args...)...)
		if code != tc.code {
			t.Errorf("gate check %v: exit %d, want %d (%s)", tc.args, code, tc.code, errs)
		}
	}
}

// Replay records: a suspect measurement exits 1 under its own label; a
// record made with another cache procedure, or with no valid level, exits 2.
// replay's example record was made against a test server whose 0.03 ms
// TPOT no GPU reaches.
func TestGateSuspectAndUnusable(t *testing.T) {
	dir := t.TempDir()
	rec, err := os.ReadFile(filepath.Join("..", "..", "replay", "testdata", "record.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	recP := write("rec.json", string(rec))
	bl := filepath.Join(dir, "b.json")
	if _, errs, code := runCLI(t, "", "gate", "baseline", "create", recP, "--out", bl); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	for _, tc := range []struct {
		name, from, to string
		code           int
		out, errs      string
	}{
		{"suspect", "", "", 1, "gate: SUSPECT", "suspect measurement"},
		{"cache procedure", `"procedure":"fresh_prefixes"`, `"procedure":"reset_prefix_cache"`, 2, "", `cache: "fresh_prefixes" → "reset_prefix_cache"`},
		{"no valid level", `"verdict":{"valid":true,"reasons":[]},"p50_ttft_ms"`, `"verdict":{"valid":false,"reasons":[{"code":"warm_start","detail":"warm"}]},"p50_ttft_ms"`,
			2, "gate: UNUSABLE", "no level is valid in both the candidate and baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := string(rec)
			if tc.from != "" {
				if !strings.Contains(body, tc.from) {
					t.Fatalf("the example record has no %s", tc.from)
				}
				body = strings.ReplaceAll(body, tc.from, tc.to)
			}
			out, errs, code := runCLI(t, "", "gate", "check", "--baseline", bl, "--candidate", write(tc.name+".json", body))
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errs, tc.errs) {
				t.Errorf("exit %d, want %d; stdout %q; stderr %q", code, tc.code, out, errs)
			}
		})
	}
}

func TestOptimizeAndReportBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"optimize", "--out", t.TempDir()}, "--spec"},
		{[]string{"optimize", "--spec", "x.yaml", "--out", t.TempDir(), "--runs", "0"}, "--runs"},
		{[]string{"optimize", "--spec", "x.yaml", "--out", t.TempDir(), "--budget", "3"}, "--budget"},
		{[]string{"optimize", "--spec", "x.yaml", "--out", t.TempDir(), "--max-time-scale", "-1"}, "--max-time-scale"},
		{[]string{"optimize", "--spec", "x.yaml", "--out", t.TempDir(), "--max-time-scale", "NaN"}, "--max-time-scale"},
		{[]string{"optimize", "--spec", "x.yaml", "--out", t.TempDir(), "--uncached-tokens", "0"}, "--uncached-tokens"},
		{[]string{"optimize", "--spec", "x.yaml", "--out", t.TempDir(), "--qps", "0"}, "--qps"},
		{[]string{"optimize", "--spec", filepath.Join(t.TempDir(), "missing.yaml"), "--out", t.TempDir()}, "missing.yaml"},
		{[]string{"report", "--log", "nope.json"}, "--out"},
		{[]string{"report", "--log", filepath.Join(t.TempDir(), "nope.json"), "--out", filepath.Join(t.TempDir(), "r.md")}, "nope.json"},
		{[]string{"diagnose", "report"}, "--record"},
		{[]string{"diagnose", "report", "--record", "r.json", "-o", "xml"}, "-o/--output"},
		{[]string{"diagnose", "report", "--record", "r.json", "--http-head", "first"}, "--http-head"},
		{[]string{"diagnose", "report", "--record", "r.json", "--evidence", "nvml"}, "--evidence: want auto, engine or kernel"},
		{[]string{"diagnose", "report", "--record", "r.json", "--evidence", "kernel"}, "--evidence kernel: needs --daemon"},
		{[]string{"diagnose", "report", "--record", "r.json", "--max-num-batched-tokens", "-1"}, "--max-num-batched-tokens"},
		{[]string{"diagnose", "report", "--record", "r.json", "--max-num-seqs", "-1"}, "--max-num-seqs: want >= 0"},
		{[]string{"diagnose", "report", "--record", "r.json", "--step-pid", "7=9"}, "--step-pid: needs --daemon"},
		{[]string{"sim", "serve", "--port", "0", "--cuda-worker"}, "--cuda-worker: needs --cuda-lib"},
		{[]string{"sim", "cuda-worker"}, "--cuda-lib: required"},
		{[]string{"diagnose", "report", "--record", "r.json", "--daemon", "s.json", "--step-pid", "7:9"}, "--step-pid: want API_PID=STEP_PID"},
		{[]string{"diagnose", "report", "--record", "r.json", "--daemon", "s.json", "--step-pid", "7=-1"}, "--step-pid: want API_PID=STEP_PID"},
		{[]string{"diagnose", "report", "--record", "r.json", "--daemon", "s.json", "--step-pid", "7=9", "--step-pid", "7=10"}, "--step-pid: API server pid 7 given twice"},
	} {
		_, errs, code := runCLI(t, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("hone %v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, errs, tc.want)
		}
	}
}

// TestUsageMistakesExit2: every usage mistake exits 2, as --help promises:
// an unknown command or subcommand (with a suggestion), a command group
// without its subcommand, a missing or extra argument, an unknown flag.
func TestUsageMistakesExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simm"}, `unknown command "simm" for "hone" (did you mean sim?)`},
		{[]string{"gate", "chek"}, `unknown command "chek" for "hone gate" (did you mean check?)`},
		{[]string{"gate"}, "hone: gate: a subcommand is required"},
		{[]string{"deploy"}, "hone: deploy: a subcommand is required"},
		{[]string{"deploy", "render"}, "hone: deploy render: accepts 1 arg(s), received 0"},
		{[]string{"report", "extra"}, `hone: report: unknown command "extra"`},
		{[]string{"sim", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"sim", "-o", "yaml"}, `-o/--output: "yaml" is not an output format: want table, json`},
	} {
		_, errs, code := runCLI(t, "", tc.args...)
		if code != exitBadInput || !strings.Contains(errs, tc.want) {
			t.Errorf("hone %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	// Help is not a mistake.
	for _, args := range [][]string{{"--help"}, {"gate", "--help"}, {"help", "gate"}} {
		if _, errs, code := runCLI(t, "", args...); code != exitOK {
			t.Errorf("hone %v: exit %d (%s), want 0", args, code, errs)
		}
	}
}

// TestOutputMeansFormat: -o/--output is a format on every command that has
// one, and no command takes a file path under that name (that is --out).
func TestOutputMeansFormat(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if f := c.Flags().Lookup("output"); f != nil {
			if f.Shorthand != "o" || !strings.HasPrefix(f.Usage, "output format: ") {
				t.Errorf("%s: --output (-%s) %q: want -o/--output, an output format", c.CommandPath(), f.Shorthand, f.Usage)
			}
		}
		if f := c.Flags().ShorthandLookup("o"); f != nil && f.Name != "output" {
			t.Errorf("%s: -o is --%s, want -o only for --output (the format)", c.CommandPath(), f.Name)
		}
		for _, name := range []string{"output-file", "format"} {
			if f := c.Flags().Lookup(name); f != nil && f.Deprecated == "" {
				t.Errorf("%s: --%s: a file is --out and a format is -o/--output", c.CommandPath(), name)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
}

func TestDaemonOnceBindsNoPort(t *testing.T) {
	for _, tc := range []struct {
		once, explicit bool
		listen, want   string
	}{
		{true, false, "127.0.0.1:9464", "off"},
		{true, true, "127.0.0.1:9999", "127.0.0.1:9999"},
		{false, false, "127.0.0.1:9464", "127.0.0.1:9464"},
	} {
		if got := daemonListen(tc.once, tc.listen, tc.explicit); got != tc.want {
			t.Errorf("once=%t listen=%q given=%t: %q, want %q", tc.once, tc.listen, tc.explicit, got, tc.want)
		}
	}
}

// hone optimize --backend model runs the whole loop on the exact model
// (deterministic): its pick and its kind are exact.
func TestOptimizeOnTheModel(t *testing.T) {
	out := t.TempDir()
	stdout, errs, code := runCLI(t, "", "optimize", "--spec", "../../examples/emulator-l4-colocated.yaml", "--out", out, "--backend", "model",
		"--qps", "2,4,8,16,24,32")
	if code != exitOK || !strings.Contains(stdout, "selected: trial 2 disagg-1p1d-cache-sessionaffinity, median objective 15.917 req/s (simulation_only)") {
		t.Errorf("exit %d\n%s\n%s", code, stdout, errs)
	}
	if _, errs, code := runCLI(t, "", "optimize", "--spec", "x.yaml", "--out", out, "--backend", "gpu"); code != exitBadInput || !strings.Contains(errs, "--backend") {
		t.Errorf("--backend gpu: exit %d %s", code, errs)
	}
}

// A closed-loop record (predict --concurrency) is not compared with an
// open-loop baseline: exit 2, naming workload.load. A closed loop with
// rates, zero clients or shards is bad input naming the flag.
func TestGateRefusesClosedLoop(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join("..", "..", "examples", "emulator-l4-colocated.yaml")
	open, closed := filepath.Join(dir, "open.json"), filepath.Join(dir, "closed.json")
	if _, errs, code := runCLI(t, "", "predict", spec, "--qps", "4", "--requests", "24", "--out", open); code != 0 {
		t.Fatalf("predict --qps: %d %s", code, errs)
	}
	if _, errs, code := runCLI(t, "", "predict", spec, "--concurrency", "4", "--requests", "24", "--out", closed); code != 0 {
		t.Fatalf("predict --concurrency: %d %s", code, errs)
	}
	bl := filepath.Join(dir, "b.json")
	if _, errs, code := runCLI(t, "", "gate", "baseline", "create", open, "--out", bl); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	_, errs, code := runCLI(t, "", "gate", "check", "--baseline", bl, "--candidate", closed)
	if code != 2 || !strings.Contains(errs, "workload.load") {
		t.Errorf("gate check of a closed-loop candidate: exit %d, stderr %q; want 2 naming workload.load", code, errs)
	}
	if _, errs, code := runCLI(t, "", "predict", spec, "--qps", "4", "--concurrency", "4"); code != 2 || !strings.Contains(errs, "--concurrency") {
		t.Errorf("predict --qps --concurrency: exit %d, stderr %q; want 2 naming --concurrency", code, errs)
	}
	for _, args := range [][]string{{"--max-concurrency", "2", "--qps", "3"}, {"--max-concurrency", "0"}, {"--max-concurrency", "2", "--shard", "0/2"}} {
		args = append([]string{"replay", "--endpoint", "http://127.0.0.1:1", "--model", "m", "--out", filepath.Join(dir, "r.json")}, args...)
		if _, errs, code := runCLI(t, "", args...); code != 2 || !strings.Contains(errs, "--max-concurrency") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming --max-concurrency", args, code, errs)
		}
	}
}

// TestVersionFlag: hone --version (and -v) print exactly what hone version
// prints.
func TestVersionFlag(t *testing.T) {
	want, _, code := runCLI(t, "", "version")
	if code != 0 {
		t.Fatalf("hone version: exit %d", code)
	}
	for _, flag := range []string{"--version", "-v"} {
		out, errs, code := runCLI(t, "", flag)
		if code != 0 || out != want {
			t.Errorf("hone %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", flag, code, out, errs, want)
		}
	}
}

// TestErrorLineHasOnePrefix: what a failing command prints to stderr (as
// main prints it) ends in one error line that starts with exactly one
// "hone: ", whether the mistake is on the root, on a subcommand, or in a
// message that already names the program.
func TestErrorLineHasOnePrefix(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag"}, "hone: unknown flag: --no-such-flag (see 'hone --help')"},
		{[]string{}, "hone: a subcommand is required (see 'hone --help')"},
		{[]string{"gate", "--no-such-flag"}, "hone: gate: unknown flag: --no-such-flag (see 'hone gate --help')"},
		{[]string{"gate"}, "hone: gate: a subcommand is required (see 'hone gate --help')"},
		{[]string{"gate", "check", "--no-such-flag"}, "hone: gate check: unknown flag: --no-such-flag (see 'hone gate check --help')"},
		{[]string{"version", "extra"}, `hone: version: unknown command "extra" for "hone version" (see 'hone version --help')`},
		{[]string{"simm"}, `hone: unknown command "simm" for "hone" (did you mean sim?); see 'hone --help'`},
		{[]string{"sim", "--mode", "batched"}, `hone: --mode: "batched" is invalid: want colocated or disaggregated`},
	} {
		stderr, code := mainStderr(t, tc.args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if last := lines[len(lines)-1]; code != exitBadInput || last != tc.want {
			t.Errorf("hone %v: exit %d, last stderr line %q; want exit 2 and %q", tc.args, code, last, tc.want)
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "hone: hone") {
				t.Errorf("hone %v: stderr line %q names hone twice", tc.args, l)
			}
		}
	}
	if got := errorLine(errors.New("hone: hone: bad")); got != "hone: bad" {
		t.Errorf("errorLine: %q, want %q", got, "hone: bad")
	}
}

// mainStderr runs hone in process as main does, stderr included (cobra's
// help and exitCode's error line both go to os.Stderr), and returns what
// it wrote there and the exit code.
func mainStderr(t *testing.T, args ...string) (string, int) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := os.Stderr
	os.Stderr = f
	root := newRootCmd()
	root.SetOut(io.Discard)
	root.SetArgs(args)
	code := exitCode(root.Execute())
	os.Stderr = old
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b), code
}
