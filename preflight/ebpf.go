package preflight

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/daemon/probes"
)

// Linux capability numbers (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// EffectiveCaps reads the process's effective capability set.
func EffectiveCaps() (uint64, error) {
	v := procField("/proc/self/status", "CapEff")
	if v == "" {
		return 0, errors.New("no CapEff in /proc/self/status")
	}
	return strconv.ParseUint(v, 16, 64)
}

func hasCap(set uint64, c int) bool { return set&(1<<c) != 0 }

// EBPFChecks probes every eBPF feature the daemon uses by loading and
// attaching trivial programs, so a pass means the daemon can really do it:
// each probe family on its hooks (probes-FAMILY: a family the daemon can
// run without is a warning naming what it then lacks), the ring buffer,
// and what the daemon's options need.
func EBPFChecks() []Check {
	var cs []Check
	add := func(name string, st Status, detail, fix string) {
		cs = append(cs, Check{Section: "ebpf", Name: name, Status: st, Detail: detail, Fix: fix})
	}

	caps, err := EffectiveCaps()
	switch {
	case err != nil:
		add("privileges", Fail, err.Error(), "run on Linux")
	case hasCap(caps, capBPF) && hasCap(caps, capPerfmon) || hasCap(caps, capSysAdmin):
		who := fmt.Sprintf("uid %d with CAP_BPF and CAP_PERFMON", os.Geteuid())
		if os.Geteuid() == 0 {
			who = "root"
		}
		add("privileges", Pass, who, "")
	default:
		var missing []string
		if !hasCap(caps, capBPF) {
			missing = append(missing, "CAP_BPF")
		}
		if !hasCap(caps, capPerfmon) {
			missing = append(missing, "CAP_PERFMON")
		}
		add("privileges", Fail, fmt.Sprintf("uid %d lacks %s (effective caps %#x)", os.Geteuid(), strings.Join(missing, " and "), caps),
			"run as root, or grant them: setcap cap_bpf,cap_perfmon+ep $(which hone) (CAP_PERFMON also reads other users' /proc/PID/maps, for libcuda: daemon.StartCapabilities)")
	}

	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		add("btf", Fail, "no /sys/kernel/btf/vmlinux: "+err.Error(), "use a kernel built with CONFIG_DEBUG_INFO_BTF=y")
	} else if _, err := btf.LoadKernelSpec(); err != nil {
		add("btf", Fail, "kernel BTF unreadable: "+err.Error(), "run as root")
	} else {
		add("btf", Pass, "/sys/kernel/btf/vmlinux", "")
	}

	cs = append(cs, familyChecks(attachFamily)...)
	if m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 1 << 12}); err != nil {
		add("ringbuf", Fail, "ring buffer map: "+short(err), "event streams need BPF ring buffers (Linux >= 5.8)")
	} else {
		m.Close()
		add("ringbuf", Pass, "ring buffer map: created", "")
	}

	if _, err := os.Stat("/sys/bus/event_source/devices/kprobe/type"); err != nil {
		add("kprobes", Skip, "absent (no kprobe PMU; CONFIG_KPROBES off?); not required: hone uses tracepoints, tp_btf and uprobes only", "")
	} else {
		add("kprobes", Pass, "present (not required)", "")
	}

	switch {
	case exists("/sys/kernel/tracing/events"):
		add("tracefs", Pass, "mounted at /sys/kernel/tracing (not required by the daemon)", "")
	case strings.Contains(readFile("/proc/filesystems"), "tracefs"):
		add("tracefs", Pass, "not mounted, mountable; not required (raw_tp, tp_btf and uprobes need no tracefs)", "mount -t tracefs nodev /sys/kernel/tracing, only for manual tracing")
	default:
		add("tracefs", Warn, "tracefs not available; not required by the daemon", "")
	}

	if f, err := os.OpenFile("/proc/sys/kernel/bpf_stats_enabled", os.O_WRONLY, 0); err != nil {
		add("bpf-stats", Warn, "kernel.bpf_stats_enabled not writable: "+short(err)+"; the daemon's --bpf-stats (its own cost) is unavailable", "run as root or with CAP_SYS_ADMIN")
	} else {
		f.Close()
		add("bpf-stats", Pass, "kernel.bpf_stats_enabled writable (checked without writing)", "")
	}

	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err == nil {
		lim := "unlimited"
		if rl.Cur != unix.RLIM_INFINITY {
			lim = fmt.Sprintf("%d KiB", rl.Cur/1024)
		}
		maj, min := kernelVersion(HostInfo("", "").Kernel)
		if maj > 5 || (maj == 5 && min >= 11) || rl.Cur == unix.RLIM_INFINITY {
			add("memlock", Pass, "RLIMIT_MEMLOCK "+lim+"; BPF memory is charged to the cgroup on Linux >= 5.11", "")
		} else {
			add("memlock", Warn, "RLIMIT_MEMLOCK "+lim+" on a kernel < 5.11 may be too small for the daemon's maps", "ulimit -l unlimited")
		}
	}
	return cs
}

// entryFileOffset returns the file offset of an ELF executable's entry
// point: an instruction every executable has, stripped or not, so a uprobe
// can be attached there to probe the feature.
func entryFileOffset(path string) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && f.Entry >= p.Vaddr && f.Entry < p.Vaddr+p.Filesz {
			return f.Entry - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("%s: entry point %#x is in no executable segment", path, f.Entry)
}

func short(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

// familyChecks checks each of the daemon's probe families (package
// probes) with attach: the daemon does not start without a required one
// (fail); without another it runs and lacks what the family measures
// (warn, naming it).
func familyChecks(attach func(probes.Family) (string, error)) []Check {
	var cs []Check
	for _, f := range probes.All {
		c := Check{Section: "ebpf", Name: "probes-" + f.Name}
		how, err := attach(f)
		switch {
		case err == nil:
			c.Status, c.Detail = Pass, how+": loaded and attached"
		case f.Required:
			c.Status, c.Detail, c.Fix = Fail, fmt.Sprintf("%s unavailable: %s; the daemon needs it", f.Name, short(err)),
				"the "+f.Name+" probes need "+f.Needs+", and CAP_BPF+CAP_PERFMON"
		default:
			c.Status, c.Detail, c.Fix = Warn, fmt.Sprintf("%s unavailable on this kernel: %s; the daemon runs without it and lacks %s", f.Name, short(err), f.Lost),
				"the "+f.Name+" probes need "+f.Needs
		}
		cs = append(cs, c)
	}
	return cs
}

// attachFamily loads a trivial program of the family's kind for each of
// its hooks and attaches it, as the daemon's would be, and says what it
// attached.
func attachFamily(f probes.Family) (string, error) {
	ret0 := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	load := func(spec *ebpf.ProgramSpec) (*ebpf.Program, error) {
		spec.Instructions, spec.License = ret0, "Dual MIT/GPL"
		return ebpf.NewProgram(spec)
	}
	how := string(f.Kind) + " " + strings.Join(f.Hooks, ", ")
	for _, hook := range f.Hooks {
		var l interface{ Close() error }
		var err error
		switch f.Kind {
		case probes.RawTracepoint:
			var p *ebpf.Program
			if p, err = load(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint}); err == nil {
				l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: hook, Program: p})
				p.Close()
			}
		case probes.BTFTracepoint:
			var p *ebpf.Program
			if p, err = load(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: hook}); err == nil {
				l, err = link.AttachTracing(link.TracingOptions{Program: p})
				p.Close()
			}
		case probes.Uprobe:
			// The daemon attaches uprobe_multi links where the kernel has
			// them (the feature probe loads and attaches one), perf-event
			// uprobes elsewhere: one on this executable's entry point.
			if features.HaveBPFLinkUprobeMulti() == nil {
				return "uprobe_multi links", nil
			}
			how = "uprobe on this executable's entry point (perf PMU)"
			l, err = attachUprobe(load)
		default:
			err = fmt.Errorf("unknown kind %q", f.Kind)
		}
		if err != nil {
			return how, fmt.Errorf("%s %s: %w", f.Kind, hook, err)
		}
		l.Close()
	}
	return how, nil
}

// attachUprobe attaches a perf-event uprobe on this executable's entry
// point.
func attachUprobe(load func(*ebpf.ProgramSpec) (*ebpf.Program, error)) (interface{ Close() error }, error) {
	p, err := load(&ebpf.ProgramSpec{Type: ebpf.Kprobe})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	exe, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	off, err := entryFileOffset("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	return exe.Uprobe("", p, &link.UprobeOptions{Address: off})
}
