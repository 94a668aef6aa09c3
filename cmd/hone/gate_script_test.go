//go:build unix

package main

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/honetest"
	"github.com/hone-llm/hone/schema"
)

// gateJUnit is the part of `hone gate check -o junit` the test reads.
type gateJUnit struct {
	Tests    int        `xml:"tests,attr"`
	Failures int        `xml:"failures,attr"`
	Errors   int        `xml:"errors,attr"`
	Skipped  int        `xml:"skipped,attr"`
	Cases    []gateCase `xml:"testcase"`
}

type gateCase struct {
	Name      string    `xml:"name,attr"`
	Classname string    `xml:"classname,attr"`
	Failure   *struct{} `xml:"failure"`
	Error     *struct {
		Message string `xml:"message,attr"`
		Body    string `xml:",chardata"`
	} `xml:"error"`
	Skipped *struct{} `xml:"skipped"`
}

// runGateScript runs scripts/ci-gate.sh with hone, writing into a fresh
// directory, and returns its exit code, its output and the JUnit report
// (nil when none was written).
func runGateScript(t *testing.T, hone, simFlags string) (int, string, *gateJUnit) {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "scripts/ci-gate.sh")
	c.Dir = "../.."
	// On a timeout, stop the script and what it started (the emulator).
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); !strings.HasPrefix(k, "GATE_") && k != "GITHUB_STEP_SUMMARY" && k != "HONE" {
			c.Env = append(c.Env, e)
		}
	}
	c.Env = append(c.Env, "HONE="+hone, "GATE_OUT="+out, "GATE_SIM_FLAGS="+simFlags)
	b, err := c.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("scripts/ci-gate.sh: %v\n%s", err, b)
	}
	x, err := os.ReadFile(filepath.Join(out, "junit.xml"))
	if err != nil {
		return code, string(b), nil
	}
	var j gateJUnit
	if err := xml.Unmarshal(x, &j); err != nil {
		t.Fatalf("junit.xml: %v\n%s", err, x)
	}
	return code, string(b), &j
}

// hostUnusable reports whether the gate refused to decide (unusable, exit
// 2) because the host made levels invalid, for reasons the host causes
// alone (replay.HostReason): a loaded machine may give that verdict, and
// it is not a failure of the gate.
func hostUnusable(code int, j *gateJUnit) bool {
	if code != 2 || j == nil {
		return false
	}
	for _, c := range j.Cases {
		if c.Error == nil || !strings.HasPrefix(c.Error.Message, "unusable") {
			continue
		}
		for _, r := range []schema.Code{schema.ReasonWarmStart, schema.ReasonTimeScaleMismatch, schema.ReasonIncomplete, schema.ReasonCounterContamination} {
			if strings.Contains(c.Error.Body, string(r)) {
				return false
			}
		}
		return strings.Contains(c.Error.Body, string(schema.ReasonClientBound)) || strings.Contains(c.Error.Body, string(schema.ReasonEmulatorBound))
	}
	return false
}

// TestCIGateScript runs the CI gate (scripts/ci-gate.sh, as
// .github/workflows/gate.yml does) twice against hone's emulator and the
// committed baseline: unchanged, it exits 0 with a JUnit report of one
// passing testcase per scenario-wide metric and per level × metric; with
// a regression planted in the emulator (prefix caching off), it exits 1
// and the report, still written, fails the cache hit rate at every level.
// A host too busy to keep the replay's schedule may make the gate
// unusable (exit 2, said in the report); that is logged, not failed.
func TestCIGateScript(t *testing.T) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("scripts/ci-gate.sh needs %s: %v", tool, err)
		}
	}
	hone := honetest.Binary(t)
	if !filepath.IsAbs(hone) {
		abs, err := filepath.Abs(hone)
		if err != nil {
			t.Fatal(err)
		}
		hone = abs
	}
	script, err := os.ReadFile("../../scripts/ci-gate.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SCENARIO=(\S+)$`).FindSubmatch(script)
	q := regexp.MustCompile(`(?m)^QPS=(\S+)$`).FindSubmatch(script)
	if m == nil || q == nil {
		t.Fatal("scripts/ci-gate.sh: no SCENARIO= or QPS= line")
	}
	scenario, levels := string(m[1]), strings.Split(string(q[1]), ",")
	var want []string
	for _, name := range []string{"objective", "objective_level_qps"} {
		want = append(want, "hone.gate."+scenario+" "+name)
	}
	perLevel := []string{"cache_hit_rate", "effective_qps", "failed_requests", "gpu_seconds_per_request", "p50_tpot_ms",
		"p50_ttft_ms", "p99_tpot_ms", "p99_ttft_ms", "passed"}
	for _, l := range levels {
		for _, name := range perLevel {
			want = append(want, fmt.Sprintf("hone.gate.%s @ %s req/s %s", scenario, l, name))
		}
	}
	slices.Sort(want)

	t.Run("unchanged", func(t *testing.T) {
		start := time.Now()
		code, out, j := runGateScript(t, hone, "")
		t.Logf("exit %d in %v", code, time.Since(start).Round(time.Second))
		if j == nil {
			t.Fatalf("exit %d and no junit.xml\n%s", code, out)
		}
		if hostUnusable(code, j) {
			t.Logf("this host made the replay's levels invalid; the gate refused to decide, as it must:\n%s", out)
			return
		}
		if code != 0 || j.Failures != 0 || j.Errors != 0 {
			t.Fatalf("exit %d, %d failures, %d errors; want a pass\n%s", code, j.Failures, j.Errors, out)
		}
		var got []string
		for _, c := range j.Cases {
			got = append(got, c.Classname+" "+c.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) || j.Tests != len(want) {
			t.Errorf("testcases (%d, tests=%d):\n%s\nwant (%d):\n%s", len(got), j.Tests, strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
		}
	})

	t.Run("planted regression", func(t *testing.T) {
		start := time.Now()
		code, out, j := runGateScript(t, hone, "--no-enable-prefix-caching")
		t.Logf("exit %d in %v", code, time.Since(start).Round(time.Second))
		if j == nil {
			t.Fatalf("exit %d and no junit.xml: the report must be written when the gate fails\n%s", code, out)
		}
		if hostUnusable(code, j) {
			t.Logf("this host made the replay's levels invalid; the gate refused to decide:\n%s", out)
			return
		}
		if code != 1 || j.Failures == 0 {
			t.Fatalf("exit %d, %d failures; want exit 1 with failures\n%s", code, j.Failures, out)
		}
		// The hit rate is the model's: 0 with caching off, against > 90%.
		for _, l := range levels {
			class := fmt.Sprintf("hone.gate.%s @ %s req/s", scenario, l)
			i := slices.IndexFunc(j.Cases, func(c gateCase) bool { return c.Classname == class && c.Name == "cache_hit_rate" })
			if i < 0 {
				t.Errorf("%s: no cache_hit_rate testcase", class)
			} else if j.Cases[i].Failure == nil && j.Cases[i].Skipped == nil {
				t.Errorf("%s: cache_hit_rate did not fail with prefix caching off", class)
			}
		}
	})
}
