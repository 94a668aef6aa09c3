package optimizer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/deploy"
	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/schema"
)

// --time-scale is a factor only for an emulator spec, and only a positive
// one up to deploy.MaxTimeScale; auto and spec are no fixed factor.
func TestFixedScale(t *testing.T) {
	emu, vllm := &deploy.Spec{Engine: engine.Emulator}, &deploy.Spec{Engine: engine.VLLM}
	for _, tc := range []struct {
		scale string
		base  *deploy.Spec
		want  float64
		bad   string
	}{
		{"auto", vllm, 0, ""},
		{"spec", emu, 0, ""},
		{"2", emu, 2, ""},
		{"0", emu, 0, "positive factor"},
		{"1e9", emu, 0, "positive factor"},
		{"bogus", emu, 0, "positive factor"},
		{"2", vllm, 0, "only an emulator spec"},
	} {
		got, err := fixedScale(tc.scale, tc.base)
		var ue usage.Error
		switch {
		case tc.bad == "" && (err != nil || got != tc.want):
			t.Errorf("%s on %s: %v, %v; want %v", tc.scale, tc.base.Engine, got, err, tc.want)
		case tc.bad != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s on %s: %v, want a usage error saying %q", tc.scale, tc.base.Engine, err, tc.bad)
		}
	}
}

// A run without a verified selection prints its log and fails the check
// (exit 1); one stopped by a signal is an interruption (exit 130).
func TestPrintOptimizedAndStopped(t *testing.T) {
	var out bytes.Buffer
	lg := &Log{Kind: schema.KindSimulationOnly, Trials: []Trial{{N: 1}}, NotMeasured: []string{"trial 2"}}
	err := printOptimized(&out, lg, "o/log.json", 0)
	var failed usage.Failed
	if !errors.As(err, &failed) {
		t.Fatalf("unverified: %v, want usage.Failed", err)
	}
	want := "experiment log: o/log.json (1 trials, simulation_only)\nnot measured (--time-budget 0s): trial 2\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cause := errors.New("trial 1")
	if err := stopped(ctx, cause); err != cause {
		t.Errorf("not cancelled: %v, want the error itself", err)
	}
	cancel()
	var in usage.Interrupted
	if err := stopped(ctx, cause); !errors.As(err, &in) || !errors.Is(err, cause) || err.Error() != "interrupted: trial 1" {
		t.Errorf("cancelled: %v, want usage.Interrupted wrapping it", err)
	}
}

// keepEarlierRun moves what an earlier run left aside, all with one time,
// and leaves empty directories and other files where they are.
func TestKeepEarlierRun(t *testing.T) {
	out := t.TempDir()
	for _, d := range []string{"records", "traces"} {
		if err := os.Mkdir(filepath.Join(out, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"log.json", "records/r.json", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(out, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var errw bytes.Buffer
	if err := keepEarlierRun(out, &errw); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(out)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 4 || names[0] != "log.json."+strings.TrimPrefix(names[0], "log.json.") || names[1] != "notes.txt" ||
		names[2] != "records."+strings.TrimPrefix(names[0], "log.json.") || names[3] != "traces" {
		t.Fatalf("--out holds %v, want log.json and records kept with one stamp, notes.txt and the empty traces left", names)
	}
	if msg := errw.String(); !strings.HasPrefix(msg, "optimize: --out "+out+" held an earlier run; kept its log.json as log.json.") || !strings.Contains(msg, ", records as records.") {
		t.Errorf("said %q", msg)
	}
	errw.Reset()
	if err := keepEarlierRun(t.TempDir(), &errw); err != nil || errw.Len() != 0 {
		t.Errorf("an empty --out: %v, %q; want nothing done or said", err, errw.String())
	}
}
