package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	if err := Write(filepath.Join(dir, "missing", "f.json"), nil); err == nil {
		t.Error("wrote into a missing directory")
	}
	for _, body := range []string{"one\n", "two, longer\n"} {
		if err := Write(p, []byte(body)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != body {
			t.Fatalf("read %q, %v; want %q", got, err, body)
		}
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 {
		t.Errorf("%d entries in the directory, want 1", len(ents))
	}
	// A directory in the way fails without touching anything.
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "d"), []byte("x")); err == nil {
		t.Error("renaming over a directory succeeded")
	}
}

func TestWriteFunc(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.pb")
	err := WriteFunc(p, 0o600, func(w io.Writer) error {
		_, err := io.WriteString(w, "first\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "first\n" {
		t.Fatalf("read %q, %v", got, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode())
	}
	// A failing fill is the caller's error, and the old content stays.
	boom := errors.New("boom")
	err = WriteFunc(p, 0o600, func(w io.Writer) error {
		io.WriteString(w, "half")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want one wrapping %v", err, boom)
	}
	if got, _ := os.ReadFile(p); string(got) != "first\n" {
		t.Errorf("a failed fill changed the file to %q", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries in the directory, want 1", len(ents))
	}
}

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".log.json.tmp-123", ".r.json.tmp-9", "log.json", ".hidden", "x.tmp-1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".d.tmp-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveStale(dir)
	if err != nil || len(removed) != 2 || removed[0] != ".log.json.tmp-123" || removed[1] != ".r.json.tmp-9" {
		t.Errorf("removed %v, %v", removed, err)
	}
	for _, keep := range []string{"log.json", ".hidden", "x.tmp-1", ".d.tmp-1"} {
		if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
			t.Errorf("%s: %v", keep, err)
		}
	}
}

func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("x"), 0o644)
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	if os.Geteuid() == 0 {
		ro = "/proc" // root writes into a 0555 directory; nobody creates files in /proc
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing", "run.json"), "directory " + filepath.Join(dir, "missing") + ": "},
		{dir, dir + " is a directory"},
		{filepath.Join(file, "run.json"), file + " is not a directory"},
		{filepath.Join(ro, "run.json"), "cannot create a file in " + ro},
	} {
		if err := CheckWritable(tc.path); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q...", tc.path, err, tc.want)
		}
	}
	if err := CheckWritable(filepath.Join(dir, "run.json")); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("left behind %q", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "run.json")); !os.IsNotExist(err) {
		t.Errorf("the check created the file itself: %v", err)
	}
}
