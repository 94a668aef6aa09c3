//go:build linux

package daemon

import (
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/hone-llm/hone/bpf"
)

// alwaysCUDA are the call kinds probed whenever libcuda is found; kernel
// launches are probed only inside the --cuda-launches window.
var alwaysCUDA = []int{bpf.CUDAGraph, bpf.CUDAStreamSync, bpf.CUDACtxSync, bpf.CUDAMemcpy}

// scanCUDA finds libcuda files mapped by live targets and probes each file
// once (by device and inode: one uprobe covers every process mapping it).
// It also opens and closes the kernel-launch window.
func (d *Daemon) scanCUDA() {
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
		for _, p := range mappedLibs(pid, "libcuda.so") {
			// The path as the target sees it, through its root, or the
			// daemon's own view of the same path when it names the same
			// file (shorter, and what people expect to read).
			path := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), p)
			var st, own syscall.Stat_t
			if err := syscall.Stat(path, &st); err != nil {
				if err := syscall.Stat(p, &st); err != nil {
					continue
				}
				path = p
			} else if syscall.Stat(p, &own) == nil && own.Dev == st.Dev && own.Ino == st.Ino {
				path = p
			}
			id := [2]uint64{st.Dev, st.Ino}
			d.mu.Lock()
			_, seen := d.cuda[id]
			d.mu.Unlock()
			if seen {
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
