//go:build linux

package daemon

import (
	"bufio"
	"fmt"
	"io/fs"
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
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return nil, err
	}
	// cgroup.procs lists a cgroup's own members only; a pod's or a
	// service's processes sit in cgroups below it.
	var out []int
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // a child cgroup removed while walking
		}
		if !e.IsDir() {
			return nil
		}
		f, err := os.Open(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if p, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
				out = append(out, p)
			}
		}
		return nil
	})
	return out, err
}

// procCgroup is /proc/PID/cgroup ("" when unreadable).
func procCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	return string(b)
}

// podOfCgroup returns the UID of the pod in pods whose cgroup a process's
// /proc/PID/cgroup text names, or "" (see PodSet for the two spellings).
func podOfCgroup(text string, pods map[string]string) string {
	if text == "" {
		return ""
	}
	for _, line := range strings.Split(text, "\n") {
		_, path, ok := strings.Cut(line, ":") // hierarchy-ID:controllers:path
		if !ok {
			continue
		}
		if _, path, ok = strings.Cut(path, ":"); !ok {
			continue
		}
		for _, comp := range strings.Split(path, "/") {
			i := strings.LastIndex(comp, "pod")
			if i < 0 {
				continue
			}
			id := strings.TrimSuffix(comp[i+3:], ".slice")
			if _, ok := pods[id]; ok {
				return id
			}
			if alt := strings.ReplaceAll(id, "_", "-"); alt != id {
				if _, ok := pods[alt]; ok {
					return alt
				}
			}
		}
	}
	return ""
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
