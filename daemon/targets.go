//go:build linux

package daemon

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// targetTable is the daemon's table of traced processes: which processes
// are traced and how they were found, their exits, the exited ones folded
// into groups (retire), and the names of their threads. It has its own
// lock; no method calls out of the table while holding it but for the
// untarget callback of fold.
type targetTable struct {
	mu            sync.Mutex
	targets       map[int]*tracked // live targets and those exited < retireAfter ago
	exitedPending int              // entries of targets that have exited
	orphanExits   map[int]orphanExit
	pidsDone      map[int]bool // --pid targets that exited
	exited        map[exitedKey]*ExitedGroup
	counts        TargetTable // Overflow and ExitedProcesses
	maxTargets    int
	comms         map[int]string // tid -> comm, remembered for threads that exit
	log           targetLog
	// askFold asks the daemon's loop to fold exited processes before
	// their time: the table holds too many of them. Called with mu held;
	// it must not block.
	askFold func()
}

// tracked is a target as the table holds it.
type tracked struct {
	Target
	exitUnreported bool // exit found by the daemon, not reported by the kernel
}

// targetLog is what the next log line about targets says.
type targetLog struct {
	names   []string // "pid (how)" of targets added since the last log line, the first few
	added   int
	exited  int
	addErrs int
}

// orphanExit is the exit of a traced process that is not in the table
// (it overflowed, or its fork event was lost).
type orphanExit struct {
	ts   uint64
	comm string
}

func newTargetTable(askFold func()) *targetTable {
	return &targetTable{targets: map[int]*tracked{}, orphanExits: map[int]orphanExit{}, pidsDone: map[int]bool{},
		exited: map[exitedKey]*ExitedGroup{}, maxTargets: defaultMaxTargets, comms: map[int]string{}, askFold: askFold}
}

// notDone returns the --pid targets that have not exited: an exited --pid
// is not traced again under a reused pid.
func (tt *targetTable) notDone(pids []int) []int {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	var out []int
	for _, p := range pids {
		if !tt.pidsDone[p] {
			out = append(out, p)
		}
	}
	return out
}

// tracing says whether pid is a live target.
func (tt *targetTable) tracing(pid int) bool {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	t, ok := tt.targets[pid]
	return ok && t.ExitMonotonicNS == 0
}

// insert puts t in the table (inherit: under its parent's root, when the
// parent is a target) and returns the entry.
func (tt *targetTable) insert(t Target, inherit bool) *tracked {
	e := &tracked{Target: t}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if inherit {
		if p := tt.targets[t.PPID]; p != nil {
			e.RootPID = p.RootPID
		}
	}
	tt.insertLocked(e)
	return e
}

// insertLocked puts t in the table, or counts an overflow when the table
// is full even after folding exited entries. The caller holds tt.mu.
func (tt *targetTable) insertLocked(t *tracked) {
	if old, ok := tt.targets[t.PID]; ok && old.ExitMonotonicNS != 0 {
		// A reused pid before the old process was folded: the kernel
		// keys measurements by pid and tid, so the old ones add up with
		// the new process's and are folded with them; count the process.
		tt.exitedPending--
		tt.groupLocked(old.RootPID, old.Comm, "").Processes++
		tt.counts.ExitedProcesses++
	} else if !ok && len(tt.targets) >= tt.maxTargets {
		tt.counts.Overflow++
		tt.askFold()
		return
	}
	tt.targets[t.PID] = t
	tt.log.added++
	if len(tt.log.names) < logNewMax {
		tt.log.names = append(tt.log.names, fmt.Sprintf("%d (%s)", t.PID, t.How))
	}
}

// addFailed counts a target the kernel's map had no room for.
func (tt *targetTable) addFailed() {
	tt.mu.Lock()
	tt.log.addErrs++
	tt.mu.Unlock()
}

// exitedUnseen marks e, if still pid's live entry, exited now without an
// exit event from the kernel.
func (tt *targetTable) exitedUnseen(pid int, e *tracked) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if e.ExitMonotonicNS == 0 && tt.targets[pid] == e {
		e.ExitMonotonicNS = monotonicNow()
		e.exitUnreported = true
		tt.exitedPending++
	}
}

// execed records a target's new command.
func (tt *targetTable) execed(pid int, comm, cmdline string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if t := tt.targets[pid]; t != nil {
		t.Comm = comm
		t.Cmdline = cmdline
	}
}

// exit records the kernel's exit event of pid at ts.
func (tt *targetTable) exit(pid int, ts uint64, comm string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.log.exited++
	if t := tt.targets[pid]; t != nil {
		if t.ExitMonotonicNS == 0 {
			t.ExitMonotonicNS = ts
			tt.exitedPending++
		}
		if t.How == "pid" {
			tt.pidsDone[pid] = true
		}
	} else {
		tt.orphanExits[pid] = orphanExit{ts: ts, comm: comm}
	}
	if tt.exitedPending > maxExitedDetail || len(tt.orphanExits) > maxExitedDetail {
		tt.askFold()
	}
}

// live returns the live targets by pid.
func (tt *targetTable) live() map[int]*tracked {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	out := map[int]*tracked{}
	for pid, t := range tt.targets {
		if t.ExitMonotonicNS == 0 {
			out[pid] = t
		}
	}
	return out
}

// lostExit marks t, if still pid's live entry, exited at now: it is gone
// with no exit event seen.
func (tt *targetTable) lostExit(pid int, t *tracked, now uint64) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if tt.targets[pid] == t && t.ExitMonotonicNS == 0 {
		t.ExitMonotonicNS = now
		t.exitUnreported = true
		tt.exitedPending++
		tt.log.exited++
		if t.How == "pid" {
			tt.pidsDone[pid] = true
		}
	}
}

// origin is where an exited process's measurements fold: its root target
// and its name.
type origin struct {
	root int
	comm string
}

// exitedSet is what takeExited took out of the table.
type exitedSet struct {
	fold       map[int]origin // the processes to fold
	known      map[int]bool   // the processes the table still knows
	unreported []int          // folded processes whose exit the kernel did not report
}

// takeExited takes the processes that exited before cut out of the table
// (and out of the orphan exits).
func (tt *targetTable) takeExited(cut uint64) exitedSet {
	x := exitedSet{fold: map[int]origin{}, known: map[int]bool{}}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for pid, t := range tt.targets {
		if t.ExitMonotonicNS != 0 && t.ExitMonotonicNS < cut {
			x.fold[pid] = origin{t.RootPID, t.Comm}
			if t.exitUnreported {
				x.unreported = append(x.unreported, pid)
			}
			delete(tt.targets, pid)
			tt.exitedPending--
		} else {
			x.known[pid] = true
		}
	}
	for pid, o := range tt.orphanExits {
		if o.ts < cut {
			x.fold[pid] = origin{0, o.comm}
			delete(tt.orphanExits, pid)
		} else {
			x.known[pid] = true
		}
	}
	return x
}

// fold adds the threads of thr whose process del selects, and every
// process of x, to their exited groups, and forgets those threads' names.
// untarget takes a pid out of the kernel's targets map: a folded process
// whose exit the kernel never reported (it ended while the daemon added
// it) may have left its pid there.
func (tt *targetTable) fold(thr map[threadID]*Thread, del func(pid int) bool, x exitedSet, untarget func(pid int)) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	counted := map[int]bool{}
	ids := make([]threadID, 0, len(thr))
	for id := range thr {
		if del(id.pid) {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		return ids[i].pid < ids[j].pid || ids[i].pid == ids[j].pid && ids[i].tid < ids[j].tid
	})
	for _, id := range ids {
		t := thr[id]
		o := x.fold[id.pid]
		g := tt.groupLocked(o.root, o.comm, t.Comm)
		addThread(g, t)
		if !counted[id.pid] {
			counted[id.pid] = true
			g.Processes++
		}
		delete(tt.comms, id.tid)
	}
	for pid, o := range x.fold {
		if !counted[pid] { // exited without a measured thread
			counted[pid] = true
			tt.groupLocked(o.root, o.comm, "").Processes++
		}
	}
	for _, pid := range x.unreported {
		if t := tt.targets[pid]; t == nil || t.ExitMonotonicNS != 0 {
			untarget(pid)
		}
	}
	tt.counts.ExitedProcesses += uint64(len(counted))
}

// groupLocked returns the exited group of root and name (the target's
// name, else the thread's, else "unknown"), created if need be. The caller
// holds tt.mu.
func (tt *targetTable) groupLocked(root int, name, threadName string) *ExitedGroup {
	if name == "" {
		name = threadName
	}
	if name == "" {
		name = "unknown"
	}
	k := exitedKey{root, name}
	if g := tt.exited[k]; g != nil {
		return g
	}
	if len(tt.exited) >= maxExitedGroups {
		k = exitedKey{0, "other"}
		if g := tt.exited[k]; g != nil {
			return g
		}
	}
	g := &ExitedGroup{RootPID: k.root, Comm: k.comm}
	tt.exited[k] = g
	return g
}

// nameThreads sets each thread's name: remembered, else read from /proc
// and remembered for when the thread is gone.
func (tt *targetTable) nameThreads(thr map[threadID]*Thread) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for id, t := range thr {
		c, ok := tt.comms[id.tid]
		if !ok {
			c = procComm(id.pid, id.tid)
			if c != "" {
				tt.comms[id.tid] = c
			}
		}
		t.Comm = c
	}
}

// list returns the targets by pid.
func (tt *targetTable) list() []Target {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	out := make([]Target, 0, len(tt.targets))
	for _, t := range tt.targets {
		out = append(out, t.Target)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// snapshot adds the exited groups (unsorted) and the table's counts to s.
func (tt *targetTable) snapshot(s *Snapshot) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for _, g := range tt.exited {
		s.Exited = append(s.Exited, cloneGroup(g))
	}
	s.TargetTable = tt.counts
	s.TargetTable.Entries = len(tt.targets)
	s.TargetTable.MaxEntries = tt.maxTargets
}

// takeLog returns the log line for the targets added and exited since the
// last call, or "" when there are none, and starts the next.
func (tt *targetTable) takeLog() (string, []any) {
	tt.mu.Lock()
	l, live, overflow := tt.log, len(tt.targets)-tt.exitedPending, tt.counts.Overflow
	tt.log = targetLog{}
	tt.mu.Unlock()
	return l.line(live, overflow)
}

// line is the log line for l (live targets now, overflow so far), or ""
// when there is nothing to say.
func (l targetLog) line(live int, overflow uint64) (string, []any) {
	if l.added == 0 && l.exited == 0 && l.addErrs == 0 {
		return "", nil
	}
	attrs := []any{"live", live}
	if len(l.names) > 0 {
		more := ""
		if l.added > len(l.names) {
			more = fmt.Sprintf(" and %d more", l.added-len(l.names))
		}
		attrs = append(attrs, "new", strings.Join(l.names, ", ")+more)
	}
	if overflow > 0 {
		attrs = append(attrs, "table_overflow_total", overflow)
	}
	if l.addErrs > 0 {
		attrs = append(attrs, "kernel_map_full", l.addErrs)
	}
	return fmt.Sprintf("traced %d new processes (%d exited)", l.added, l.exited), attrs
}
