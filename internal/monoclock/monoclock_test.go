package monoclock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A stamp's monotonic part agrees with clock_gettime within a bracket.
func TestAgreesWithClockGettime(t *testing.T) {
	for range 100 {
		var a, b unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		s := Now()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		// Allow 50 µs of offset error on top of the bracket itself.
		if s.MonoNs < a.Nano()-50_000 || s.MonoNs > b.Nano()+50_000 {
			t.Fatalf("mono %d outside [%d, %d]", s.MonoNs, a.Nano(), b.Nano())
		}
	}
	t0 := time.Now()
	t1 := t0.Add(1500 * time.Millisecond)
	if d := Of(t1).Sub(Of(t0)); d != 1500*time.Millisecond {
		t.Errorf("Sub %v, want 1.5s", d)
	}
}

// Read is clock_gettime's own reading: never before one taken earlier, never
// after one taken later.
func TestRead(t *testing.T) {
	for range 100 {
		var a, b unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		ns, err := Read()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		if err != nil {
			t.Fatal(err)
		}
		if ns < a.Nano() || ns > b.Nano() {
			t.Fatalf("Read %d outside [%d, %d]", ns, a.Nano(), b.Nano())
		}
	}
}

// Of stamps t with the process-wide base.
func Of(t time.Time) Stamp { return process.Stamp(t) }
