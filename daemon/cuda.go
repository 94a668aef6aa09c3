//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/daemon/probes"
)

// maxCUDALibraries bounds the distinct libcuda files probed (a target
// could map any number of files named libcuda.so*).
const maxCUDALibraries = 64

// maxCUDASkipped bounds the libcuda files beyond maxCUDALibraries counted.
const maxCUDASkipped = 4096

// cudaProber finds the libcuda files targets map and probes each once,
// and opens and closes the kernel-launch window. It has its own lock.
type cudaProber struct {
	objs *bpf.Objects // set by Start, before any probe
	log  *slog.Logger

	mu          sync.Mutex
	libs        map[[2]uint64]*cudaLib
	skipped     map[[2]uint64]bool // libcuda files beyond maxCUDALibraries (up to maxCUDASkipped)
	launchUntil uint64             // the end of the kernel-launch window, 0: none
}

type cudaLib struct {
	info        CUDALibrary
	path        string
	links       bpf.Links
	launchLinks bpf.Links
}

func newCUDAProber(log *slog.Logger) *cudaProber {
	return &cudaProber{log: log, libs: map[[2]uint64]*cudaLib{}, skipped: map[[2]uint64]bool{}}
}

// setLaunchWindow opens the kernel-launch window until the monotonic time
// until (0: no window).
func (c *cudaProber) setLaunchWindow(until uint64) {
	c.mu.Lock()
	c.launchUntil = until
	c.mu.Unlock()
}

// close detaches every library's probes.
func (c *cudaProber) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, l := range c.libs {
		errs = append(errs, l.links.Close(), l.launchLinks.Close())
	}
	return errors.Join(errs...)
}

// snapshot adds the libraries probed (by path) and the launch window to s.
func (c *cudaProber) snapshot(s *Snapshot) {
	c.mu.Lock()
	for _, l := range c.libs {
		s.CUDA.Libraries = append(s.CUDA.Libraries, l.info)
	}
	s.CUDA.LaunchProbesUntil = c.launchUntil
	s.CUDA.Skipped = len(c.skipped)
	c.mu.Unlock()
	sort.Slice(s.CUDA.Libraries, func(i, j int) bool { return s.CUDA.Libraries[i].Path < s.CUDA.Libraries[j].Path })
}

// unreachableCUDA records, once, a libcuda a target maps that the daemon
// cannot reach: the file at the same path in the daemon's view is another
// one (the target runs in its own mount namespace, and /proc/PID/root is
// out of reach with the privileges kept).
func (c *cudaProber) unreachable(pid int, m mappedLib, own syscall.Stat_t) {
	id := [2]uint64{unix.Mkdev(m.major, m.minor), m.inode}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.libs[id]; seen || len(c.libs) >= maxCUDALibraries {
		return
	}
	c.libs[id] = &cudaLib{info: CUDALibrary{Path: m.path, Dev: id[0], Inode: m.inode,
		Error: fmt.Sprintf("not probed: pid %d maps it from its own mount namespace (dev %d:%d inode %d), which the daemon "+
			"cannot open after dropping privileges; %s in the daemon's view is another file (inode %d): start the daemon "+
			"after the target has loaded libcuda, or run it with --keep-capabilities", pid, m.major, m.minor, m.inode, m.path, own.Ino)}}
	c.log.Warn("libcuda not reachable", "pid", pid, "path", m.path)
}

// alwaysCUDA are the call kinds probed whenever libcuda is found: graph
// launches, async copies, and every call the host waits in (stream,
// context and event synchronizes, synchronous copies); kernel launches are
// probed only inside the --cuda-launches window.
var alwaysCUDA = []int{bpf.CUDAGraph, bpf.CUDAStreamSync, bpf.CUDACtxSync, bpf.CUDAMemcpy, bpf.CUDAEventSync, bpf.CUDAMemcpySync}

// scanCUDA probes the libcuda files the live targets map.
func (d *Daemon) scanCUDA() {
	if !d.attached(probes.CUDA) {
		return // the kernel has no uprobes: logged and reported at start
	}
	var live []int
	for pid := range d.table.live() {
		live = append(live, pid)
	}
	d.cuda.scan(live)
}

// scan finds libcuda files mapped by the live targets and probes each
// file once (by device and inode: one uprobe covers every process mapping
// it). It also opens and closes the kernel-launch window.
func (c *cudaProber) scan(live []int) {
	now := monotonicNow()
	for _, pid := range live {
		for _, m := range mappedLibs(pid, "libcuda.so") {
			c.probe(pid, m)
		}
	}
	c.launchWindow(now)
}

// probe probes the libcuda m that pid maps, unless it is probed already
// or there are too many.
func (c *cudaProber) probe(pid int, m mappedLib) {
	p := m.path
	// The path as the target sees it, through its root, or the daemon's
	// own view of the same path when it names the same file (shorter, and
	// what people expect to read). Once privileges are dropped,
	// /proc/PID/root of another user's process is out of reach: the
	// daemon's own path is used then, only if it is the very file the
	// target maps.
	path := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), p)
	var st, own syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		if err := syscall.Stat(p, &st); err != nil {
			return
		}
		path = p
		if m.inode != 0 && (st.Ino != m.inode || unix.Major(st.Dev) != m.major || unix.Minor(st.Dev) != m.minor) {
			c.unreachable(pid, m, st)
			return
		}
	} else if syscall.Stat(p, &own) == nil && own.Dev == st.Dev && own.Ino == st.Ino {
		path = p
	}
	id := [2]uint64{st.Dev, st.Ino}
	c.mu.Lock()
	_, seen := c.libs[id]
	full := len(c.libs) >= maxCUDALibraries
	if full && !seen && len(c.skipped) < maxCUDASkipped {
		c.skipped[id] = true
	}
	c.mu.Unlock()
	if seen || full {
		return
	}
	lib := &cudaLib{path: path, info: CUDALibrary{Path: p, Dev: st.Dev, Inode: st.Ino}}
	links, syms, err := c.objs.AttachCUDA(path, alwaysCUDA)
	if err != nil {
		lib.info.Error = err.Error()
		c.log.Warn("libcuda probes", "path", p, "err", err)
	}
	lib.links, lib.info.Symbols = links, syms
	c.mu.Lock()
	c.libs[id] = lib
	c.mu.Unlock()
	c.log.Info("libcuda probed", "path", p, "pid", pid, "symbols", len(syms))
}

// launchWindow attaches the kernel-launch probes while the window is open
// at now, and detaches them once it has closed.
func (c *cudaProber) launchWindow(now uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	launchOn := c.launchUntil != 0 && now < c.launchUntil
	for _, lib := range c.libs {
		switch {
		case launchOn && lib.launchLinks == nil && lib.info.Error == "":
			links, syms, err := c.objs.AttachCUDA(lib.path, []int{bpf.CUDALaunch})
			if err != nil {
				lib.info.Error = err.Error()
				continue
			}
			lib.launchLinks, lib.info.Launch = links, syms
			if len(links) == 0 {
				lib.launchLinks = bpf.Links{} // none exported: do not retry
			}
		case !launchOn && lib.launchLinks != nil:
			lib.launchLinks.Close()
			lib.launchLinks = nil
			lib.info.Launch = nil
		}
	}
}
