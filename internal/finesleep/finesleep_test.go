package finesleep

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestUntilNeverEarly(t *testing.T) {
	for _, d := range []time.Duration{0, 50 * time.Microsecond, 300 * time.Microsecond, Margin, 3 * time.Millisecond} {
		for range 20 {
			deadline := time.Now().Add(d)
			if !Until(context.Background(), deadline) {
				t.Fatalf("Until(%v) reported false without a cancelled context", d)
			}
			if now := time.Now(); now.Before(deadline) {
				t.Fatalf("Until(%v) returned %v early", d, deadline.Sub(now))
			}
		}
	}
}

func TestUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Until(ctx, time.Now().Add(time.Hour)) {
		t.Fatal("Until reported true with a cancelled context")
	}
	if Until(ctx, time.Now().Add(-time.Second)) {
		t.Fatal("Until reported true for a past deadline with a cancelled context")
	}
	// Cancelled while waiting: in the coarse phase and in the fine one.
	for _, d := range []time.Duration{time.Hour, Margin / 2} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan bool)
		go func() { done <- Until(ctx, time.Now().Add(d)) }()
		time.Sleep(Margin / 4)
		cancel()
		select {
		case ok := <-done:
			if ok && d == time.Hour {
				t.Fatal("Until reported true after its context was cancelled")
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Until(%v) did not return after cancel", d)
		}
	}
}

func TestTimerWake(t *testing.T) {
	tm := NewTimer()
	defer tm.Close()
	// A Wake before the Wait ends it at once.
	tm.Wake()
	t0 := time.Now()
	tm.Wait(t0.Add(time.Hour))
	if el := time.Since(t0); el > 5*time.Second {
		t.Fatalf("Wait after Wake took %v", el)
	}
	// A Wake during the Wait ends it.
	done := make(chan time.Duration)
	go func() {
		t0 := time.Now()
		tm.Wait(t0.Add(time.Hour))
		done <- time.Since(t0)
	}()
	time.Sleep(20 * time.Millisecond)
	tm.Wake()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wake did not end the Wait")
	}
	// After the Wake is consumed, a Wait lasts until its deadline again.
	for range 20 {
		deadline := time.Now().Add(300 * time.Microsecond)
		for time.Now().Before(deadline) {
			tm.Wait(deadline)
		}
	}
	deadline := time.Now().Add(2 * time.Millisecond)
	tm.Wait(deadline)
	if now := time.Now(); now.Before(deadline) {
		t.Errorf("Wait returned %v before its deadline with no Wake", deadline.Sub(now))
	}
}

// BenchmarkLateness compares how late Until and time.Sleep wake for waits
// of a decode step's length; it reports the median and p99 lateness of
// each and their ratio (sleep/until) at p99.
func BenchmarkLateness(b *testing.B) {
	for _, d := range []time.Duration{100 * time.Microsecond, 488 * time.Microsecond, 5 * time.Millisecond} {
		b.Run(d.String(), func(b *testing.B) {
			var until, sleep []float64
			for b.Loop() {
				t0 := time.Now()
				Until(context.Background(), t0.Add(d))
				until = append(until, float64(time.Since(t0)-d)/1e3)
				t0 = time.Now()
				time.Sleep(d)
				sleep = append(sleep, float64(time.Since(t0)-d)/1e3)
			}
			slices.Sort(until)
			slices.Sort(sleep)
			q := func(v []float64, p float64) float64 { return v[int(p*float64(len(v)-1))] }
			b.ReportMetric(q(until, 0.5), "until-p50-µs")
			b.ReportMetric(q(until, 0.99), "until-p99-µs")
			b.ReportMetric(q(sleep, 0.5), "sleep-p50-µs")
			b.ReportMetric(q(sleep, 0.99), "sleep-p99-µs")
			b.ReportMetric(q(sleep, 0.99)/q(until, 0.99), "sleep/until-p99")
		})
	}
}
