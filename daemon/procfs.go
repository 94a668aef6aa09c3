//go:build linux

package daemon

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/internal/procstat"
)

// procCmdline is a process's command line with NULs read as spaces: what
// --match-cmdline matches. It may hold secrets: store procCmdlineRedacted.
func procCmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// procCmdlineRedacted is the command line as the snapshot shows it: likely
// secrets replaced (redactArgs), argument by argument.
func procCmdlineRedacted(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	return strings.TrimSpace(strings.Join(redactArgs(args), " "))
}

func procComm(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// procPPID reads the parent pid from /proc/PID/stat (after the comm's ')').
func procPPID(pid int) int {
	f := procstat.Fields(pid)
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// procAlive says whether a process exists and has not exited (a zombie
// has: its sched_process_exit has passed).
func procAlive(pid int) bool { return procstat.Alive(pid) }

// allPIDs lists the processes in /proc.
func allPIDs() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// descendants returns the pids below root in the process tree.
func descendants(roots []int) []int {
	children := map[int][]int{}
	for _, p := range allPIDs() {
		children[procPPID(p)] = append(children[procPPID(p)], p)
	}
	var out []int
	seen := map[int]bool{}
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// cgroupPIDs lists the processes of a cgroup v2 directory (absolute, or
// relative to /sys/fs/cgroup).
func cgroupPIDs(dir string) ([]int, error) {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("/sys/fs/cgroup", dir)
	}
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// mappedLib is a file a process maps, with the device and inode
// /proc/PID/maps gives for it.
type mappedLib struct {
	path         string
	major, minor uint32
	inode        uint64
}

// mappedLibs returns the files a process maps whose base name starts with
// prefix.
func mappedLibs(pid int, prefix string) []mappedLib {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []mappedLib
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		path := fields[5]
		if !strings.HasPrefix(filepath.Base(path), prefix) || seen[path] {
			continue
		}
		seen[path] = true
		l := mappedLib{path: path}
		if ma, mi, ok := strings.Cut(fields[3], ":"); ok {
			a, _ := strconv.ParseUint(ma, 16, 32)
			b, _ := strconv.ParseUint(mi, 16, 32)
			l.major, l.minor = uint32(a), uint32(b)
		}
		l.inode, _ = strconv.ParseUint(fields[4], 10, 64)
		out = append(out, l)
	}
	return out
}
