//go:build linux

package daemon

import (
	"fmt"
	"os"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/daemon/probes"
)

// attachProbes attaches each probe family (package probes) on its own, so
// that one the kernel cannot attach costs what it measures and nothing
// else: it is logged with what is lost, reported in snapshots and metrics
// (Snapshot.Probes), and the others go on. A required family that fails
// fails the start.
func (d *Daemon) attachProbes(windows bool) error {
	for _, f := range probes.All {
		st := ProbeStatus{Family: f.Name, Status: ProbeAttached}
		if f.Name == probes.Sched && !d.cfg.Sched {
			st.Status = ProbeOff
			d.probes = append(d.probes, st)
			continue
		}
		err := d.cfg.attachFault[f.Name]
		if err == nil {
			err = d.attachFamily(f.Name, windows)
		}
		if err != nil {
			if f.Required {
				return fmt.Errorf("attach the %s probes (%s %v; the daemon needs %s): %w", f.Name, f.Kind, f.Hooks, f.Needs, err)
			}
			st.Status, st.Error, st.Lost = ProbeUnavailable, err.Error(), f.Lost
			d.log.Warn("probes unavailable on this kernel; carrying on without them", "family", f.Name, "lost", f.Lost,
				"needs", f.Needs, "err", err)
		}
		d.probes = append(d.probes, st)
	}
	return nil
}

// attachFamily attaches one family's programs. CUDA uprobes are attached
// per library as targets map it (scanCUDA); here the kernel's support for
// them is checked once.
func (d *Daemon) attachFamily(name string, windows bool) error {
	if err := d.objs.LoadError(name); err != nil {
		return err // the kernel refused its programs at load
	}
	var p bpf.Probes
	switch name {
	case probes.Procs:
		p.Procs = true
	case probes.Syscalls:
		p.Syscalls, p.SyscallTimingWindows = true, windows
	case probes.Sched:
		p.Sched = true
	case probes.Sockets:
		p.Sockets = true
	case probes.CUDA:
		if d.objs.UprobeMulti() {
			return nil
		}
		if _, err := os.Stat("/sys/bus/event_source/devices/uprobe/type"); err != nil {
			return fmt.Errorf("no uprobe_multi links and no uprobe PMU: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("unknown probe family %q", name)
	}
	ls, err := d.objs.Attach(p)
	d.links = append(d.links, ls...)
	return err
}

// loaded says whether the family's programs and maps were loaded: the
// kernel can refuse an optional family's at load as well as at attach
// (bpf.Objects.LoadError), and then it has no maps to read.
func (d *Daemon) loaded(family string) bool {
	return d.objs.LoadError(family) == nil
}

// attached says whether the family is attached. d.probes is written by
// Start only, before anything reads it.
func (d *Daemon) attached(family string) bool {
	for _, p := range d.probes {
		if p.Family == family {
			return p.Status == ProbeAttached
		}
	}
	return false
}
