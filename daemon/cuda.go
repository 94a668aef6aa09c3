//go:build linux

package daemon

import (
	"fmt"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/daemon/probes"
)

// maxCUDALibraries bounds the distinct libcuda files probed (a target
// could map any number of files named libcuda.so*).
const maxCUDALibraries = 64

// unreachableCUDA records, once, a libcuda a target maps that the daemon
// cannot reach: the file at the same path in the daemon's view is another
// one (the target runs in its own mount namespace, and /proc/PID/root is
// out of reach with the privileges kept).
func (d *Daemon) unreachableCUDA(pid int, m mappedLib, own syscall.Stat_t) {
	id := [2]uint64{unix.Mkdev(m.major, m.minor), m.inode}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, seen := d.cuda[id]; seen || len(d.cuda) >= maxCUDALibraries {
		return
	}
	d.cuda[id] = &cudaLib{info: CUDALibrary{Path: m.path, Dev: id[0], Inode: m.inode,
		Error: fmt.Sprintf("not probed: pid %d maps it from its own mount namespace (dev %d:%d inode %d), which the daemon "+
			"cannot open after dropping privileges; %s in the daemon's view is another file (inode %d): start the daemon "+
			"after the target has loaded libcuda, or run it with --keep-capabilities", pid, m.major, m.minor, m.inode, m.path, own.Ino)}}
	d.log.Warn("libcuda not reachable", "pid", pid, "path", m.path)
}

// alwaysCUDA are the call kinds probed whenever libcuda is found: graph
// launches, async copies, and every call the host waits in (stream,
// context and event synchronizes, synchronous copies); kernel launches are
// probed only inside the --cuda-launches window.
var alwaysCUDA = []int{bpf.CUDAGraph, bpf.CUDAStreamSync, bpf.CUDACtxSync, bpf.CUDAMemcpy, bpf.CUDAEventSync, bpf.CUDAMemcpySync}

// scanCUDA finds libcuda files mapped by live targets and probes each file
// once (by device and inode: one uprobe covers every process mapping it).
// It also opens and closes the kernel-launch window.
func (d *Daemon) scanCUDA() {
	if !d.attached(probes.CUDA) {
		return // the kernel has no uprobes: logged and reported at start
	}
	now := monotonicNow()
	launchOn := d.launchUntil != 0 && now < d.launchUntil
	var live []int
	d.mu.Lock()
	for pid, t := range d.targets {
		if t.ExitMonotonicNS == 0 {
			live = append(live, pid)
		}
	}
	d.mu.Unlock()
	for _, pid := range live {
		for _, m := range mappedLibs(pid, "libcuda.so") {
			p := m.path
			// The path as the target sees it, through its root, or the
			// daemon's own view of the same path when it names the same
			// file (shorter, and what people expect to read). Once
			// privileges are dropped, /proc/PID/root of another user's
			// process is out of reach: the daemon's own path is used
			// then, only if it is the very file the target maps.
			path := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), p)
			var st, own syscall.Stat_t
			if err := syscall.Stat(path, &st); err != nil {
				if err := syscall.Stat(p, &st); err != nil {
					continue
				}
				path = p
				if m.inode != 0 && (st.Ino != m.inode || unix.Major(st.Dev) != m.major || unix.Minor(st.Dev) != m.minor) {
					d.unreachableCUDA(pid, m, st)
					continue
				}
			} else if syscall.Stat(p, &own) == nil && own.Dev == st.Dev && own.Ino == st.Ino {
				path = p
			}
			id := [2]uint64{st.Dev, st.Ino}
			d.mu.Lock()
			_, seen := d.cuda[id]
			full := len(d.cuda) >= maxCUDALibraries
			if full && !seen && len(d.cudaSkipped) < 4096 {
				d.cudaSkipped[id] = true
			}
			d.mu.Unlock()
			if seen || full {
				continue
			}
			lib := &cudaLib{path: path, info: CUDALibrary{Path: p, Dev: st.Dev, Inode: st.Ino}}
			links, syms, err := d.objs.AttachCUDA(path, alwaysCUDA)
			if err != nil {
				lib.info.Error = err.Error()
				d.log.Warn("libcuda probes", "path", p, "err", err)
			}
			lib.links, lib.info.Symbols = links, syms
			d.mu.Lock()
			d.cuda[id] = lib
			d.mu.Unlock()
			d.log.Info("libcuda probed", "path", p, "pid", pid, "symbols", len(syms))
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, lib := range d.cuda {
		switch {
		case launchOn && lib.launchLinks == nil && lib.info.Error == "":
			links, syms, err := d.objs.AttachCUDA(lib.path, []int{bpf.CUDALaunch})
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
