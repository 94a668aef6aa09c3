package daemon

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
)

// Profile views: each is additive within itself (syscall time and off-CPU
// time overlap, so they are separate views).
const (
	ViewSyscalls = "syscalls" // time in syscalls, by class
	ViewSched    = "sched"    // on CPU, waiting for a CPU, blocked
	ViewCUDA     = "cuda"     // time waiting in CUDA synchronize calls
)

// Views are the profile views, in the order they are documented.
var Views = []string{ViewSyscalls, ViewSched, ViewCUDA}

// checkView refuses a view that is not one of Views, quoting it (a
// caller's raw input) rather than echoing it.
func checkView(view string) error {
	if !slices.Contains(Views, view) {
		return fmt.Errorf("want one of %s; got %s", strings.Join(Views, ", "), strconv.Quote(view))
	}
	return nil
}

// Profile turns a snapshot's traced time into a pprof profile: one sample
// per thread and category, with the stack [category, thread, process], so
// `go tool pprof -top` ranks categories and `-traces` shows who spent them.
// Sample values: events (count) and time (nanoseconds).
func Profile(s *Snapshot, view string) (*profile.Profile, error) {
	// Checked before any row: a snapshot without threads has no row to
	// reach the switch's default with.
	if err := checkView(view); err != nil {
		return nil, fmt.Errorf("profile view: %w", err)
	}
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "events", Unit: "count"}, {Type: "time", Unit: "nanoseconds"}},
		DefaultSampleType: "time",
		TimeNanos:         s.TakenWall.UnixNano(),
		DurationNanos:     int64(s.TakenMonotonicNS - s.StartedMonotonicNS),
		Comments:          []string{"hone daemon traced time, view " + view, "clock CLOCK_MONOTONIC"},
	}
	locs := map[string]*profile.Location{}
	loc := func(name string) *profile.Location {
		if l := locs[name]; l != nil {
			return l
		}
		id := uint64(len(locs) + 1)
		f := &profile.Function{ID: id, Name: name, SystemName: name}
		l := &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
		p.Function = append(p.Function, f)
		p.Location = append(p.Location, l)
		locs[name] = l
		return l
	}
	names := processNames(s)
	nthreads := len(s.Threads)
	var groups []ExitedGroup
	rows := s.Threads
	if len(s.Exited) > 0 {
		groups = s.Exited
		rows = append(append(make([]Thread, 0, len(s.Threads)+len(s.Exited)), s.Threads...), exitedRows(s)...)
	}
	var row int
	add := func(th Thread, what string, n, ns uint64) {
		if n == 0 && ns == 0 {
			return
		}
		proc := fmt.Sprintf("process %s (%d)", nameOf(names, th.PID, th.Comm), th.PID)
		thread := fmt.Sprintf("thread %s (%d)", th.Comm, th.TID)
		if row >= nthreads { // an exited group: its root's frame, then the group's
			g := groups[row-nthreads]
			proc = fmt.Sprintf("process %s (%d)", nameOf(names, g.RootPID, g.Comm), g.RootPID)
			if g.RootPID == 0 {
				proc = "process (root unknown)"
			}
			thread = fmt.Sprintf("exited %s: %d processes, %d threads", g.Comm, g.Processes, g.Threads)
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: []*profile.Location{loc(what), loc(thread), loc(proc)},
			Value:    []int64{int64(n), int64(ns)},
		})
	}
	for i, th := range rows {
		row = i
		switch view {
		case ViewSyscalls:
			classes := make([]string, 0, len(th.Syscalls))
			for c := range th.Syscalls {
				classes = append(classes, c)
			}
			sort.Strings(classes)
			for _, c := range classes {
				add(th, "syscall "+c, th.Syscalls[c].Count, th.Syscalls[c].EstimatedNS())
			}
		case ViewSched:
			if sc := th.Sched; sc != nil {
				add(th, "on cpu", sc.Switches, sc.OnCPUNS)
				add(th, "run queue", sc.Preemptions, sc.RunQueueNS)
				if sc.OffCPUNS > sc.RunQueueNS {
					add(th, "blocked", sc.Switches-min(sc.Preemptions, sc.Switches), sc.OffCPUNS-sc.RunQueueNS)
				}
			}
		case ViewCUDA:
			calls := make([]string, 0, len(th.CUDA))
			for c := range th.CUDA {
				calls = append(calls, c)
			}
			sort.Strings(calls)
			for _, c := range calls {
				if st := th.CUDA[c]; st.WaitCount > 0 {
					add(th, "cuda "+c, st.WaitCount, st.WaitSumNS)
				}
			}
		}
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return p, nil
}
