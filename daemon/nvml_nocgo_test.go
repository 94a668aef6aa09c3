//go:build !cgo

package daemon

import "testing"

func TestNVMLWithoutCgo(t *testing.T) {
	s := OpenNVML(func() any { t.Error("opener called without cgo"); return nil })
	defer s.Close()
	const want = "unavailable (hone was built without cgo: CGO_ENABLED=0 or a cross build)"
	if s.Status() != want || s.Available() || s.Sample() != nil || s.Report().Status != want {
		t.Errorf("status %q available %v", s.Status(), s.Available())
	}
}
