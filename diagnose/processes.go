package diagnose

import (
	"fmt"
	"sort"
	"strings"
)

// KernelProcess is one process the daemon traced (a snapshot's "targets").
type KernelProcess struct {
	PID     int    `json:"pid"`
	PPID    int    `json:"ppid"`
	RootPID int    `json:"root_pid"`
	Comm    string `json:"comm"`
}

// StepOwner is the process whose CUDA steps split the exchanges of one
// API server process.
type StepOwner struct {
	APIPID, StepPID int
	// How: "same process" (hone sim serve: one process answers and
	// steps), "descendant" (vLLM: the engine core or a worker the API
	// server started), "relative" (a process under a common ancestor),
	// "--step-pid" (the user's).
	How string
	// Others are further candidates of the same rank, by most steps: a
	// tensor-parallel engine's other ranks, which step in lockstep with
	// the one chosen, or another engine (data parallel behind one API
	// server), which --step-pid can choose.
	Others []int
	// Lockstep: every other candidate stepped as often as the one chosen
	// within 10% (tensor-parallel ranks do; separate engines need not).
	Lockstep bool
}

// StepOwners maps each API server process of the exchanges to the process
// whose CUDA steps are its engine's. On hone's emulator one process does
// both. On vLLM the API server (uvicorn, the HTTP exchanges) starts the
// engine core as a child process, and with tensor parallelism the core
// starts one worker per rank: the CUDA launches, and so the steps, are the
// core's or the workers' (other PIDs under the same traced root). The
// nearest stepping processes in the traced process tree win: first the
// exchange's own process, then its descendants, then those of its nearest
// traced ancestor (never processes that answer exchanges themselves, nor
// their descendants); among several, the one with the most steps (TP ranks
// step together). override (API server PID → stepping PID, --step-pid)
// decides first. An API server with no stepping process found is left out
// (its exchanges get no kernel split).
func StepOwners(xs []KernelExchange, steps map[int][]EngineStep, procs []KernelProcess, override map[int]int) (map[int]StepOwner, error) {
	parent := map[int]int{}
	for _, p := range procs {
		if p.PPID > 0 && p.PPID != p.PID {
			parent[p.PID] = p.PPID
		}
	}
	api := map[int]bool{}
	for _, x := range xs {
		api[x.PID] = true
	}
	// ancestors(q) lists q and the traced processes above it, nearest
	// first (bounded: a snapshot is outside input).
	ancestors := func(q int) []int {
		out := []int{q}
		for len(out) < 64 {
			pp, ok := parent[q]
			if !ok || pp <= 0 {
				break
			}
			out, q = append(out, pp), pp
		}
		return out
	}
	var stepping []int
	for q, ss := range steps {
		if len(ss) > 0 {
			stepping = append(stepping, q)
		}
	}
	sort.Ints(stepping)
	owners := map[int]StepOwner{}
	for a := range api {
		if s, ok := override[a]; ok {
			if len(steps[s]) == 0 {
				return nil, fmt.Errorf("--step-pid %d=%d: the snapshot has no CUDA steps of pid %d", a, s, s)
			}
			owners[a] = StepOwner{APIPID: a, StepPID: s, How: "--step-pid"}
			continue
		}
		if len(steps[a]) > 0 {
			owners[a] = StepOwner{APIPID: a, StepPID: a, How: "same process"}
			continue
		}
		// Walk up from a: at each level, the stepping processes below it
		// that no other API server's subtree holds.
		for depth, anc := range ancestors(a) {
			var cands []int
			for _, q := range stepping {
				up := ancestors(q)
				under, foreign := false, false
				for _, u := range up {
					if u == anc {
						under = true
						break
					}
					if api[u] && u != a {
						foreign = true // another API server's engine
					}
				}
				if under && !foreign && !api[q] {
					cands = append(cands, q)
				}
			}
			if len(cands) == 0 {
				continue
			}
			sort.SliceStable(cands, func(i, j int) bool { return len(steps[cands[i]]) > len(steps[cands[j]]) })
			o := StepOwner{APIPID: a, StepPID: cands[0], How: "descendant", Others: cands[1:], Lockstep: true}
			if depth > 0 {
				o.How = "relative"
			}
			n := len(steps[cands[0]])
			for _, q := range cands[1:] {
				if m := len(steps[q]); 10*(n-m) > n {
					o.Lockstep = false
				}
			}
			owners[a] = o
			break
		}
	}
	return owners, nil
}

// String says which process's steps split an API server's exchanges and
// why, for a report's sources and the CLI's notes.
func (o StepOwner) String() string {
	if o.StepPID == o.APIPID {
		return fmt.Sprintf("pid %d (answers and steps)", o.APIPID)
	}
	s := fmt.Sprintf("API server pid %d: steps of pid %d (%s)", o.APIPID, o.StepPID, o.How)
	if len(o.Others) > 0 {
		ps := make([]string, len(o.Others))
		for i, q := range o.Others {
			ps[i] = fmt.Sprint(q)
		}
		if o.Lockstep {
			s += fmt.Sprintf("; pids %s stepped as often (tensor-parallel ranks in lockstep)", strings.Join(ps, ", "))
		} else {
			s += fmt.Sprintf("; pids %s stepped too but not in lockstep: separate engines? choose with --step-pid %d=PID", strings.Join(ps, ", "), o.APIPID)
		}
	}
	return s
}
