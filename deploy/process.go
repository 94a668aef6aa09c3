package deploy

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hone-llm/hone/internal/procstat"
)

// startTicks reads a process's start time (field 22 of /proc/PID/stat, in
// clock ticks since boot); 0 when unknown.
func startTicks(pid int) uint64 {
	f := procstat.Fields(pid)
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// groupMembers lists the live (non-zombie) processes of a process group.
// Zombies are left out: they hold no resources and their parent (or init)
// reaps them. ok is false when /proc cannot be read.
func groupMembers(pgid int) (pids []int, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := procstat.Split(b)
		// f[0] state, f[1] ppid, f[2] pgrp
		if len(f) > 2 && f[2] == want && f[0] != "Z" && f[0] != "X" {
			pids = append(pids, pid)
		}
	}
	return pids, true
}

// groupAlive reports whether any live process remains in the group.
func groupAlive(pgid int) bool {
	if pids, ok := groupMembers(pgid); ok {
		return len(pids) > 0
	}
	return syscall.Kill(-pgid, 0) == nil
}

// ours reports whether p still names the process we started: its leader is
// gone (the group may live on), or alive with the recorded start time.
func (p Process) ours() bool {
	if p.PGID <= 1 {
		return false
	}
	if p.StartTicks == 0 {
		return true
	}
	now := startTicks(p.PID)
	return now == 0 || now == p.StartTicks
}

// stopGroups sends SIGTERM to every group, waits up to grace for them to
// empty, then SIGKILLs what is left and waits again. It returns the groups
// still alive at the end (none, unless a process is stuck in the kernel).
func stopGroups(procs []Process, grace time.Duration) []Process {
	var live []Process
	for _, p := range procs {
		if !p.ours() {
			continue
		}
		if err := syscall.Kill(-p.PGID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			continue
		}
		live = append(live, p)
	}
	wait := func(d time.Duration) {
		deadline := time.Now().Add(d)
		for {
			n := live[:0]
			for _, p := range live {
				if groupAlive(p.PGID) {
					n = append(n, p)
				}
			}
			live = n
			if len(live) == 0 || time.Now().After(deadline) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait(grace)
	for _, p := range live {
		syscall.Kill(-p.PGID, syscall.SIGKILL)
	}
	wait(5 * time.Second)
	return live
}
