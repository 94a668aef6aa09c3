package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/predict"
	"github.com/hone-llm/hone/replay"
	"github.com/hone-llm/hone/schema"
	"github.com/hone-llm/hone/sim/emulator"
	"github.com/hone-llm/hone/slo"
)

// calibrateRecord writes a "measured" record of a colocated spec at three
// rates: a prediction under the L4 profile's linear approximation with a
// step base ×0.8 and prefill ×1.3, with what a replay records and a
// prediction does not (so that replay.ReadRecord's schema holds). It
// returns the path and the hidden profile.
func calibrateRecord(t *testing.T, dir string) (string, *emulator.Profile) {
	t.Helper()
	spec, err := deploy.LoadSpec(predictSpec(t, "colocated"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := emulator.LookupProfile("qwen2.5-coder-0.5b-l4")
	if err != nil {
		t.Fatal(err)
	}
	l := h.LinearApprox()
	l.StepBaseMs *= 0.8
	l.PrefillPerTokenMs *= 1.3
	h.Linear = &l
	rec, err := predict.Run(spec, predict.Options{Profile: h, KeepRequests: true, SLO: slo.Default, QPS: []float64{2, 25, 70},
		Workload: schema.Workload{Seed: 1, Requests: 24, InputTokens: 4096, UncachedTokens: 128, OutputTokens: 16}})
	if err != nil {
		t.Fatal(err)
	}
	rec.Kind, rec.RequestTimeoutMs, rec.Cache.Procedure = schema.KindEmulated, 600000, schema.CacheReset
	for _, r := range rec.Runs {
		for li := range r.Levels {
			lv := &r.Levels[li]
			lv.PromptsSHA256 = strings.Repeat("0", 64)
			for k := range lv.Requests {
				lv.Requests[k].PromptSHA256, lv.Requests[k].Status = fmt.Sprintf("%064x", k), 200
			}
		}
	}
	p := filepath.Join(dir, "colocated.json")
	if err := replay.WriteRecord(p, rec); err != nil {
		t.Fatal(err)
	}
	return p, h
}

// TestCalibrateCommand: hone calibrate on a record writes a linear profile
// that recovers the hidden step base and prefill cost, and that hone
// predict reads; -o json prints the result.
func TestCalibrateCommand(t *testing.T) {
	dir := t.TempDir()
	rec, h := calibrateRecord(t, dir)
	out := filepath.Join(dir, "fit.yaml")
	stdout, errs, code := runCLI(t, "", "calibrate", "--records", rec, "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"calibrated qwen2.5-coder-0.5b-l4 from 1 records:",
		"coefficient", "step_base_ms", "prefill_per_context_ms",
		"transfer_fixed_ms", "no: no disaggregated input",
		"eager_step_ms", "no: no input runs eager",
		"residual RMS (relative error):",
		"ttft_ms measured", rec + "  70",
		"profile qwen2.5-coder-0.5b-l4-calibrated written to " + out,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	p, err := emulator.LoadProfileFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Linear == nil || p.Name != "qwen2.5-coder-0.5b-l4-calibrated" {
		t.Fatalf("profile %q, linear %v", p.Name, p.Linear)
	}
	for name, c := range map[string][2]float64{
		"step_base_ms":         {p.Linear.StepBaseMs, h.Linear.StepBaseMs},
		"prefill_per_token_ms": {p.Linear.PrefillPerTokenMs, h.Linear.PrefillPerTokenMs},
		"decode_per_seq_ms":    {p.Linear.DecodePerSeqMs, h.Linear.DecodePerSeqMs},
	} {
		if math.Abs(c[0]-c[1]) > 0.05*c[1] {
			t.Errorf("%s = %g in %s, hidden %g", name, c[0], out, c[1])
		}
	}
	if _, errs, code := runCLI(t, "", "predict", "--profile", out, "--qps", "4", "--requests", "16", predictSpec(t, "colocated")); code != exitOK {
		t.Errorf("hone predict --profile %s: exit %d: %s", out, code, errs)
	}

	stdout, errs, code = runCLI(t, "", "calibrate", "--records", rec, "--out", out, "--max-iter", "2", "-o", "json",
		"--profile", "qwen2.5-coder-0.5b-l4")
	if code != exitOK {
		t.Fatalf("-o json: exit %d: %s", code, errs)
	}
	var res struct {
		Profile      string `json:"profile"`
		Coefficients []struct {
			Name   string   `json:"name"`
			StdErr *float64 `json:"std_err"`
			Fitted bool     `json:"fitted"`
		} `json:"coefficients"`
		Observations    int               `json:"observations"`
		PredictionError []json.RawMessage `json:"prediction_error"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if res.Profile != "qwen2.5-coder-0.5b-l4-calibrated" || len(res.Coefficients) != 7 || res.Observations == 0 || len(res.PredictionError) != 3 {
		t.Errorf("%+v", res)
	}
	for _, c := range res.Coefficients {
		if c.Fitted != (c.StdErr != nil) {
			t.Errorf("%s: fitted %t, std_err %v", c.Name, c.Fitted, c.StdErr)
		}
	}
}

// TestCalibrateBadInput: usage mistakes exit 2 naming the flag.
func TestCalibrateBadInput(t *testing.T) {
	dir := t.TempDir()
	rec, _ := calibrateRecord(t, dir)
	junk := filepath.Join(dir, "junk.json")
	if err := os.WriteFile(junk, []byte(`{"schema_version": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", "p.yaml"}, "--records"},
		{[]string{"--records", "r.json"}, "--out"},
		{[]string{"--records", "r.json", "--out", "p.json"}, "--out p.json: want a .yaml"},
		{[]string{"--records", "r.json", "--out", "p.yaml", "-o", "xml"}, "-o/--output"},
		{[]string{"--records", "r.json", "--out", "p.yaml", "--max-iter", "0"}, "--max-iter"},
		{[]string{"--records", missing, "--out", "p.yaml"}, missing},
		{[]string{"--records", ",", "--out", "p.yaml"}, "--records"},
		{[]string{"--records", junk, "--out", "p.yaml"}, junk},
		{[]string{"--records", rec, "--out", filepath.Join(dir, "p.yaml"), "--profile", "nope"}, "--profile"},
		{[]string{"--records", rec, "--out", filepath.Join(dir, "p.yaml"), "--profile", "exercise"}, "exercise"},
		{[]string{"extra"}, "unknown command"},
	} {
		_, errs, code := runCLI(t, "", append([]string{"calibrate"}, tc.args...)...)
		if code != exitBadInput || !strings.Contains(errs, tc.want) {
			t.Errorf("hone calibrate %v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, errs, tc.want)
		}
	}
}

// TestCalibrateHelp: --help says what is fitted, from what, and where the
// result goes.
func TestCalibrateHelp(t *testing.T) {
	out, _, code := runCLI(t, "", "calibrate", "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"step_base_ms", "transfer_ms_per_mib", "per-request-metrics", "warm-ups",
		"hone predict --profile", "hone sim serve --profile", "emulator.profile", "Exit codes", "--records", "--out"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}
