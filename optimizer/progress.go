package optimizer

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hone-llm/hone/replay"
)

// ProgressEvery is how often a trial in progress says where it is: a
// trial takes minutes, and a log that is silent for them cannot be told
// from a hung one.
const ProgressEvery = 10 * time.Second

type expectedKey struct{}

// withExpected carries how long the loop expects a trial to take per unit
// of time scale to the evaluator's progress lines (the evaluator knows the
// scale it runs at; 1 for vLLM).
func withExpected(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, expectedKey{}, d)
}

// expectedFrom is withExpected's duration; 0 when none was set.
func expectedFrom(ctx context.Context) time.Duration {
	d, _ := ctx.Value(expectedKey{}).(time.Duration)
	return d
}

// meter writes one line about a trial in progress every interval until
// Stop: its phase, the run and the level or capacity probe, the requests
// done, and the time elapsed against the time expected. Line-oriented, so
// that it reads the same in a terminal, a pipe and CI.
type meter struct {
	w        io.Writer
	what     string
	now      func() time.Time
	start    time.Time
	expected time.Duration

	mu         sync.Mutex
	phase      string
	p          replay.Progress
	seen       bool // p is set
	run, runs  int  // capacity: the run (1-based) and runs; 0: from p
	probe      int  // capacity: the probe within its run (1-based); 0: levels
	stop, done chan struct{}
}

// startMeter starts a meter writing to w every interval about what ("trial
// 03-coloc...", "the host floor"; nil now: time.Now).
func startMeter(w io.Writer, every time.Duration, what string, expected time.Duration, now func() time.Time) *meter {
	if now == nil {
		now = time.Now
	}
	m := &meter{w: w, what: what, now: now, start: now(), expected: expected, phase: "starting",
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
				fmt.Fprintln(m.w, m.line())
			}
		}
	}()
	return m
}

// Stop ends the meter's lines; after it returns, none is written. A nil
// meter (no progress output) does nothing, here and in its setters.
func (m *meter) Stop() {
	if m == nil {
		return
	}
	close(m.stop)
	<-m.done
}

// setPhase names what the trial does now (deploying, replaying, ...).
func (m *meter) setPhase(phase string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.phase, m.seen = phase, false
}

// setProbe says that capacity probe probe of run run (of runs) starts.
func (m *meter) setProbe(run, runs, probe int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.phase, m.seen, m.run, m.runs, m.probe = "replaying", false, run, runs, probe
}

// update is replay.Options.Progress.
func (m *meter) update(p replay.Progress) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.p, m.seen = p, true
}

// line is where the trial is now.
func (m *meter) line() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	where := m.phase
	if m.seen {
		p := m.p
		load := fmt.Sprintf("%.4g req/s", p.QPS)
		if n := replay.ClosedClients(p.QPS); n > 0 {
			load = fmt.Sprintf("%d clients", n)
		}
		if m.probe > 0 {
			where = fmt.Sprintf("run %d/%d, probe %d at %s", m.run, m.runs, m.probe, load)
		} else {
			where = fmt.Sprintf("run %d/%d, level %d/%d at %s", p.Run+1, p.Runs, p.Level+1, p.Levels, load)
		}
		where += fmt.Sprintf(": %d/%d requests done", p.Done, p.Planned)
		if p.Failed > 0 {
			where += fmt.Sprintf(", %d failed", p.Failed)
		}
		if p.ETA > 0 {
			where += fmt.Sprintf(", level ETA %s", p.ETA.Round(time.Second))
		}
	} else if m.probe > 0 {
		where = fmt.Sprintf("run %d/%d, probe %d: %s", m.run, m.runs, m.probe, m.phase)
	}
	elapsed := m.now().Sub(m.start).Round(time.Second)
	if m.expected > 0 {
		return fmt.Sprintf("optimize:   %s: %s; %s elapsed of ~%s expected", m.what, where, elapsed, m.expected.Round(time.Second))
	}
	// The first trial has no trial before it to estimate from.
	return fmt.Sprintf("optimize:   %s: %s; %s elapsed (no estimate before a trial has finished)", m.what, where, elapsed)
}
