package report

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hone-llm/hone/internal/usage"
)

// hone report's bad input is a usage error naming what is wrong, and
// nothing is written.
func TestCommandBadInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "r.md")
	cases := []struct {
		o    CommandOptions
		want string
	}{
		{CommandOptions{Out: out}, "--log and --out are required"},
		{CommandOptions{Log: filepath.Join(dir, "missing.json"), Out: out}, "missing.json"},
	}
	for _, c := range cases {
		c.o.Note = io.Discard
		err := Command(c.o)
		var ue usage.Error
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want a usage error containing %q", c.o, err, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%+v: %s written", c.o, out)
		}
	}
}
