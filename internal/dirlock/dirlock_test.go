package dirlock

import (
	"errors"
	"testing"
)

// Each Lock opens the directory anew, so two locks in one process conflict
// as two processes' would: shared with shared is allowed, exclusive with
// anything is ErrBusy, and unlocking frees the directory.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	s1, err := Lock(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Lock(dir, false)
	if err != nil {
		t.Fatalf("a second shared lock: %v", err)
	}
	if _, err := Lock(dir, true); !errors.Is(err, ErrBusy) {
		t.Fatalf("exclusive while shared are held: %v, want ErrBusy", err)
	}
	s1()
	s2()
	x, err := Lock(dir, true)
	if err != nil {
		t.Fatalf("exclusive after the shared ones were released: %v", err)
	}
	if _, err := Lock(dir, false); !errors.Is(err, ErrBusy) {
		t.Fatalf("shared while exclusive is held: %v, want ErrBusy", err)
	}
	if _, err := Lock(dir, true); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second exclusive: %v, want ErrBusy", err)
	}
	x()
	if _, err := Lock(dir+"/missing", true); err == nil || errors.Is(err, ErrBusy) {
		t.Fatalf("a missing directory: %v, want its open error", err)
	}
}
