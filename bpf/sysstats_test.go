//go:build linux && (386 || amd64 || arm64)

package bpf_test

import (
	"testing"

	"github.com/hone-llm/hone/bpf"
)

// TestMergeSysStats: counts, timed calls, totals and histograms add; the
// slowest call is the slower; the timed window is the union of the timed
// ones: an empty side or one with no timed call (every call sampled out)
// leaves the other's window as it was.
func TestMergeSysStats(t *testing.T) {
	timed := func(count, n, total, maxNs, first, last uint64, slot int) bpf.SysStats {
		s := bpf.SysStats{Count: count, Timed: n, TotalNs: total, MaxNs: maxNs, FirstNs: first, LastNs: last}
		s.Hist[slot] = uint32(n)
		return s
	}
	a := timed(10, 2, 300, 200, 1000, 5000, 7)
	b := timed(5, 3, 900, 400, 500, 4000, 8)
	bpf.MergeSysStats(&a, b)
	want := bpf.SysStats{Count: 15, Timed: 5, TotalNs: 1200, MaxNs: 400, FirstNs: 500, LastNs: 5000}
	want.Hist[7], want.Hist[8] = 2, 3
	if a != want {
		t.Errorf("merged %+v, want %+v", a, want)
	}

	// Into one with calls but none timed: b's window.
	a = bpf.SysStats{Count: 4}
	bpf.MergeSysStats(&a, timed(6, 1, 50, 50, 700, 800, 5))
	if a.Count != 10 || a.Timed != 1 || a.FirstNs != 700 || a.LastNs != 800 {
		t.Errorf("untimed + timed: %+v", a)
	}
	// b with calls but none timed: a's window stands.
	a = timed(3, 1, 50, 50, 700, 800, 5)
	bpf.MergeSysStats(&a, bpf.SysStats{Count: 9})
	if a.Count != 12 || a.Timed != 1 || a.FirstNs != 700 || a.LastNs != 800 {
		t.Errorf("timed + untimed: %+v", a)
	}
	// Empty sides.
	a = bpf.SysStats{}
	b = timed(2, 2, 20, 15, 1, 9, 3)
	bpf.MergeSysStats(&a, b)
	if a != b {
		t.Errorf("empty + b: %+v, want %+v", a, b)
	}
	bpf.MergeSysStats(&a, bpf.SysStats{})
	if a != b {
		t.Errorf("b + empty: %+v, want %+v", a, b)
	}
}
