package gate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/sim"
)

// CreateBaseline and UpdateBaseline write the baseline and say so on Log;
// missing flags and unreadable records are the caller's (usage.Error).
func TestCreateAndUpdateBaseline(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "run.json")
	if err := os.WriteFile(rec, simDoc(t, sim.Colocated, true), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "colo.json")
	var log bytes.Buffer
	if err := CreateBaseline(context.Background(), CreateOptions{Records: []string{rec}, Out: out, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if want := `baseline "colo": 1 runs, `; !strings.HasPrefix(log.String(), want) || !strings.HasSuffix(log.String(), "→ "+out+"\n") {
		t.Errorf("create says %q, want %q... → %s", log.String(), want, out)
	}
	log.Reset()
	if err := UpdateBaseline(context.Background(), UpdateOptions{Records: []string{rec, rec}, Baseline: out, Keep: 2, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if want := `baseline "colo": now 2 runs → ` + out + "\n"; log.String() != want {
		t.Errorf("update says %q, want %q", log.String(), want)
	}
	if bl, err := ReadBaseline(out); err != nil || bl.Runs != 2 {
		t.Errorf("updated baseline: %v, err %v; want 2 runs", bl, err)
	}
	for name, err := range map[string]error{
		"create without --out":      CreateBaseline(context.Background(), CreateOptions{Records: []string{rec}, Log: &log}),
		"create without records":    CreateBaseline(context.Background(), CreateOptions{Out: out, Log: &log}),
		"update without --baseline": UpdateBaseline(context.Background(), UpdateOptions{Records: []string{rec}, Keep: 1, Log: &log}),
		"update --keep 0":           UpdateBaseline(context.Background(), UpdateOptions{Records: []string{rec}, Baseline: out, Log: &log}),
		"update, no such record":    UpdateBaseline(context.Background(), UpdateOptions{Records: []string{rec + ".missing"}, Baseline: out, Keep: 1, Log: &log}),
	} {
		if !errors.As(err, new(usage.Error)) {
			t.Errorf("%s: err %v, want a usage.Error", name, err)
		}
	}
}

// hone gate check's unreadable baseline is bad input (exit 2), named.
func TestCheckCommandBadBaseline(t *testing.T) {
	err := CheckCommand(CheckOptions{Baseline: filepath.Join(t.TempDir(), "none.json"), Candidates: []string{"x.json"}, Format: "table", Out: io.Discard})
	var ue usage.Error
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "none.json") {
		t.Fatalf("got %v, want a usage error naming none.json", err)
	}
}
