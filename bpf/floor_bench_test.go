//go:build linux

package bpf_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/bpf/bpftest"
	"github.com/hone-llm/hone/slo"
)

// runStats sums the run count and run time (bpf_stats) of programs.
func runStats(tb testing.TB, ps ...*ebpf.Program) (runs, ns uint64) {
	tb.Helper()
	for _, p := range ps {
		st, err := p.Stats()
		if err != nil {
			tb.Fatal(err)
		}
		runs += st.RunCount
		ns += uint64(st.Runtime.Nanoseconds())
	}
	return runs, ns
}

// statsOn turns the kernel's run-time statistics (bpf_stats) on until the
// returned function is called.
func statsOn(tb testing.TB) (off func()) {
	tb.Helper()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		tb.Fatal(err)
	}
	return func() { stats.Close() }
}

// floorSpins is the getppid loop's length: ~20-60 ms per spin.
const floorSpins = 200_000

// floorSample is the "sampled" mode's Options.SyscallSample: the daemon's
// default.
const floorSample = bpf.DefaultSyscallSample

// BenchmarkSyscallFloor puts hone's syscall programs (sys_enter and
// sys_exit, as the daemon attaches them) beside two floors
// (reference.bpf.c), in one run: the counting floor ("ref": a raw
// sys_enter program with a PID filter on a constant and a per-CPU counter,
// the least a program that sees each syscall can do) and the timing floor
// ("lat": the same filter on sys_enter and sys_exit, a clock read at each,
// the entry time in an array slot, a per-CPU count and total: the least a
// program that times each syscall can do, which hone must). Each round
// (b.N of them) measures, in ABBA order so that drift cancels:
//
//   - the added nanoseconds per getppid of a traced process (the workload's
//     tight loop, timed by itself, minus the same loop with nothing
//     attached), for hone's programs and for each floor: over the whole
//     loop ("added-ns", what the process paid), and in the loop's fastest
//     batch of bpftest.SpinBatch calls ("-fastest", the least a call costs:
//     the host's interference only adds, so this one holds still where the
//     whole loop's spread is ±20-50% on a VM);
//   - the same for a process that is not a target, with the programs
//     attached: what every other process on the host pays;
//   - with BPF statistics on (which add their own clock reads, so not
//     during the latency rounds), the kernel's run time per program run:
//     ns/event.
//
// "sampled" is hone's programs loaded with Options.SyscallSample
// floorSample (hone daemon's default --syscall-sample): every call
// counted, one in floorSample timed; "hone" times every call
// (--syscall-sample 1). "windowed" is sampled's programs attached with
// Probes.SyscallTimingWindows outside a timing window: sys_enter alone,
// counting. The daemon's default (--syscall-timing-window 1s of every
// --syscall-timing-period 8s) is windowed 7/8 of the time and sampled
// 1/8: "daemon" is that mix of their medians.
//
// It reports the medians and hone's ratios to each floor. Targets (issue
// 17, against the counting floor): ns/event and added ns per traced
// syscall ≤ 1.5×, added ns per untraced syscall ≤ 1.2×.
func BenchmarkSyscallFloor(b *testing.B) {
	bpftest.Require(b)
	prog, _ := bpftest.Workload(b)
	objs, err := bpf.Load(bpf.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer objs.Close()
	sampled, err := bpf.Load(bpf.Options{SyscallSample: floorSample})
	if err != nil {
		b.Fatal(err)
	}
	defer sampled.Close()
	windowed, err := bpf.Load(bpf.Options{SyscallSample: floorSample})
	if err != nil {
		b.Fatal(err)
	}
	defer windowed.Close()
	loaded := func(mode string) *bpf.Objects {
		switch {
		case strings.HasPrefix(mode, "sampled"):
			return sampled
		case strings.HasPrefix(mode, "windowed"):
			return windowed
		}
		return objs
	}

	// attached attaches mode's programs (hone's or sampled's) until the
	// returned function is called.
	attached := func(mode string) (o *bpf.Objects, enter, exit *ebpf.Program, detach func()) {
		o = loaded(mode)
		links, err := o.Attach(bpf.Probes{Syscalls: true, SyscallTimingWindows: strings.HasPrefix(mode, "windowed")})
		if err != nil {
			b.Fatal(err)
		}
		progs := o.Programs()
		return o, progs["sys_enter"], progs["sys_exit"], func() { links.Close() }
	}
	// spin runs the loop with what mode attaches: its mean and fastest
	// batch's ns per call.
	type spun struct{ mean, fastest float64 }
	spin := func(mode string) spun {
		switch mode {
		case "off":
			m, f := bpftest.Spin(b, prog, floorSpins, nil)
			return spun{m, f}
		case "hone", "hone-untraced", "sampled", "sampled-untraced", "windowed", "windowed-untraced":
			o, _, _, detach := attached(mode)
			defer detach()
			m, f := bpftest.Spin(b, prog, floorSpins, func(pid int) {
				if !strings.HasSuffix(mode, "-untraced") {
					if err := o.AddTarget(uint32(pid)); err != nil {
						b.Fatal(err)
					}
				}
			})
			return spun{m, f}
		case "ref", "ref-untraced", "lat", "lat-untraced":
			latency := strings.HasPrefix(mode, "lat")
			var ref *bpf.Reference
			defer func() {
				if ref != nil {
					ref.Close()
				}
			}()
			m, f := bpftest.Spin(b, prog, floorSpins, func(pid int) {
				tgid := uint32(pid)
				if strings.HasSuffix(mode, "-untraced") {
					tgid = 1 // init: attached, but filtering another process
				}
				var err error
				if ref, err = bpf.LoadReference(tgid, latency); err != nil {
					b.Fatal(err)
				}
			})
			if n, err := ref.Count(); err != nil || !strings.HasSuffix(mode, "-untraced") && n < floorSpins {
				b.Fatalf("%s counted %d of the loop's %d syscalls (%v)", mode, n, floorSpins, err)
			}
			return spun{m, f}
		}
		b.Fatalf("mode %q", mode)
		return spun{}
	}
	// perEvent is the run time per program run while a target spins:
	// the reference's, or hone's sys_enter and sys_exit together (with
	// each one's in split, by mode).
	split := map[string][]float64{}
	// perCall is the programs' run time per syscall of a process that is
	// not a target (bpf_stats, while it spins): the first program's runs
	// are the syscalls, and every attached program runs once for each.
	// What the target check costs where it says no, without the loop's
	// noise (the added-ns figures' spread is ±20-50%); the tracepoint's
	// own dispatch is outside it.
	perCall := func(mode string) float64 {
		defer statsOn(b)()
		var progs []*ebpf.Program
		switch mode {
		case "ref", "lat":
			ref, err := bpf.LoadReference(1, mode == "lat") // init: attached, filtering another process
			if err != nil {
				b.Fatal(err)
			}
			defer ref.Close()
			progs = ref.Programs()
		default:
			_, enter, exit, detach := attached(mode)
			defer detach()
			progs = []*ebpf.Program{enter, exit}
		}
		var r0, t0 uint64
		bpftest.Spin(b, prog, floorSpins, func(int) {
			r0, _ = runStats(b, progs[0])
			_, t0 = runStats(b, progs...)
		})
		r1, _ := runStats(b, progs[0])
		_, t1 := runStats(b, progs...)
		return float64(t1-t0) / float64(r1-r0)
	}
	perEvent := func(mode string) float64 {
		defer statsOn(b)()
		if mode == "ref" || mode == "lat" {
			var r0, t0 uint64
			var got *bpf.Reference
			bpftest.Spin(b, prog, floorSpins, func(pid int) {
				var err error
				if got, err = bpf.LoadReference(uint32(pid), mode == "lat"); err != nil {
					b.Fatal(err)
				}
				r0, t0 = runStats(b, got.Programs()...)
			})
			r1, t1 := runStats(b, got.Programs()...)
			got.Close()
			return float64(t1-t0) / float64(r1-r0)
		}
		o, enter, exit, detach := attached(mode)
		defer detach()
		var r0, t0, er0, et0 uint64
		bpftest.Spin(b, prog, floorSpins, func(pid int) {
			if err := o.AddTarget(uint32(pid)); err != nil {
				b.Fatal(err)
			}
			r0, t0 = runStats(b, enter, exit)
			er0, et0 = runStats(b, enter)
		})
		r1, t1 := runStats(b, enter, exit)
		er1, et1 := runStats(b, enter)
		split[mode+"-enter"] = append(split[mode+"-enter"], float64(et1-et0)/float64(er1-er0))
		if exits := (r1 - er1) - (r0 - er0); exits > 0 { // none while windowed
			split[mode+"-exit"] = append(split[mode+"-exit"], float64((t1-et1)-(t0-et0))/float64(exits))
		}
		return float64(t1-t0) / float64(r1-r0)
	}

	modes := []string{"ref", "hone", "lat", "sampled", "windowed", "ref-untraced", "hone-untraced", "lat-untraced", "sampled-untraced", "windowed-untraced"}
	ns := map[string][]float64{}   // added ns per call, whole loops
	fast := map[string][]float64{} // added ns per call, fastest batches
	event := map[string][]float64{}
	call := map[string][]float64{}
	spin("off") // the first spin pays for cold caches
	b.ResetTimer()
	for i := range b.N {
		// Each mode against a loop with nothing attached next to it,
		// before it in even rounds and after it in odd ones (ABBA), so
		// that a host's drift, or a CPU's clock ramping up after a pause,
		// cancels in the median.
		for k, m := range modes {
			var on, off spun
			if (i+k)%2 == 0 {
				off = spin("off")
				on = spin(m)
			} else {
				on = spin(m)
				off = spin("off")
			}
			ns[m] = append(ns[m], on.mean-off.mean)
			fast[m] = append(fast[m], on.fastest-off.fastest)
		}
		order := []string{"ref", "hone", "lat", "sampled", "windowed"}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			event[m] = append(event[m], perEvent(m))
		}
		untraced := []string{"ref", "hone", "lat", "windowed"} // sampled's untraced path is hone's
		if i%2 == 1 {
			slices.Reverse(untraced)
		}
		for _, m := range untraced {
			call[m] = append(call[m], perCall(m))
		}
	}
	b.StopTimer()
	med := slo.Median
	for _, floor := range []string{"ref", "lat"} {
		b.ReportMetric(med(event[floor]), floor+"-ns/event")
		b.ReportMetric(med(ns[floor]), floor+"-added-ns/traced")
		b.ReportMetric(med(ns[floor+"-untraced"]), floor+"-added-ns/untraced")
		b.ReportMetric(med(fast[floor]), floor+"-added-ns/traced-fastest")
		b.ReportMetric(med(fast[floor+"-untraced"]), floor+"-added-ns/untraced-fastest")
		b.ReportMetric(med(call[floor]), floor+"-untraced-ns/call")
	}
	b.ReportMetric(med(call["hone"]), "hone-untraced-ns/call")
	b.ReportMetric(med(call["hone"])/med(call["ref"]), "x-ref-untraced-ns/call")
	b.ReportMetric(med(call["hone"])/med(call["lat"]), "x-lat-untraced-ns/call")
	b.ReportMetric(med(call["windowed"]), "windowed-untraced-ns/call")
	b.ReportMetric(med(call["windowed"])/med(call["ref"]), "windowed-x-ref-untraced-ns/call")
	// The daemon's default: windowed outside the timing windows (7/8 of
	// the time), sampled inside them.
	const open = 1.0 / 8
	mix := func(m map[string][]float64, suffix string) float64 {
		return (1-open)*med(m["windowed"+suffix]) + open*med(m["sampled"+suffix])
	}
	for _, floor := range []string{"ref", "lat"} {
		b.ReportMetric(mix(event, "")/med(event[floor]), "daemon-x-"+floor+"-ns/event")
		b.ReportMetric(mix(ns, "")/med(ns[floor]), "daemon-x-"+floor+"-added/traced")
		b.ReportMetric(mix(ns, "-untraced")/med(ns[floor+"-untraced"]), "daemon-x-"+floor+"-added/untraced")
		b.ReportMetric(mix(fast, "")/med(fast[floor]), "daemon-x-"+floor+"-added/traced-fastest")
		b.ReportMetric(mix(fast, "-untraced")/med(fast[floor+"-untraced"]), "daemon-x-"+floor+"-added/untraced-fastest")
	}
	for _, who := range []string{"hone", "sampled", "windowed"} {
		pre := map[string]string{"hone": "", "sampled": "sampled-", "windowed": "windowed-"}[who]
		for _, floor := range []string{"ref", "lat"} {
			b.ReportMetric(med(event[who])/med(event[floor]), pre+"x-"+floor+"-ns/event")
			b.ReportMetric(med(ns[who])/med(ns[floor]), pre+"x-"+floor+"-added/traced")
			b.ReportMetric(med(ns[who+"-untraced"])/med(ns[floor+"-untraced"]), pre+"x-"+floor+"-added/untraced")
			b.ReportMetric(med(fast[who])/med(fast[floor]), pre+"x-"+floor+"-added/traced-fastest")
			b.ReportMetric(med(fast[who+"-untraced"])/med(fast[floor+"-untraced"]), pre+"x-"+floor+"-added/untraced-fastest")
		}
		b.ReportMetric(med(event[who]), who+"-ns/event")
		b.ReportMetric(med(split[who+"-enter"]), who+"-enter-ns/event")
		if len(split[who+"-exit"]) > 0 {
			b.ReportMetric(med(split[who+"-exit"]), who+"-exit-ns/event")
		}
		b.ReportMetric(med(ns[who]), who+"-added-ns/traced")
		b.ReportMetric(med(ns[who+"-untraced"]), who+"-added-ns/untraced")
		b.ReportMetric(med(fast[who]), who+"-added-ns/traced-fastest")
		b.ReportMetric(med(fast[who+"-untraced"]), who+"-added-ns/untraced-fastest")
	}
}

// BenchmarkProgramCost is the kernel's run time per program run (bpf_stats)
// of the sched, sockets and CUDA programs while a target and its followed
// child exchange bytes over a stream socketpair (workload "pingpong": a
// send, a receive, a wakeup and a context switch on either side per round
// trip) and while a target calls the fake libcuda's cuLaunchKernel in a
// loop (uprobes; usleep(0) between calls). Runs of other processes' events (the host's, which the
// programs only filter) are counted too, as a host running hone pays them.
func BenchmarkProgramCost(b *testing.B) {
	bpftest.Require(b)
	prog, libcuda := bpftest.Workload(b)
	objs, err := bpf.Load(bpf.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer objs.Close()
	links, err := objs.Attach(bpf.Probes{Syscalls: true, Procs: true, Sched: true, Sockets: true})
	if err != nil {
		b.Fatal(err)
	}
	defer links.Close()
	cuda, _, err := objs.AttachCUDA(libcuda, []int{bpf.CUDALaunch})
	if err != nil {
		b.Fatal(err)
	}
	defer cuda.Close()
	defer statsOn(b)()
	progs := objs.Programs()
	names := []string{"on_switch", "on_wakeup", "on_send", "on_recv", "sys_enter", "sys_exit", "cuda_launch"}
	per := map[string][]float64{}
	const rounds, launches = 20_000, 5_000
	b.ResetTimer()
	for range b.N {
		before := map[string][2]uint64{}
		for _, n := range names {
			r, t := runStats(b, progs[n])
			before[n] = [2]uint64{r, t}
		}
		target := func(pid int) {
			if err := objs.AddTarget(uint32(pid)); err != nil {
				b.Fatal(err)
			}
		}
		bpftest.Run(b, prog, []string{"pingpong", fmt.Sprint(rounds)}, target)
		bpftest.Run(b, prog, []string{"cuda", fmt.Sprint(launches), "0", "0", "0"}, target)
		for _, n := range names {
			r, t := runStats(b, progs[n])
			if dr := r - before[n][0]; dr > 0 {
				per[n] = append(per[n], float64(t-before[n][1])/float64(dr))
			}
		}
	}
	b.StopTimer()
	for _, n := range names {
		if len(per[n]) == 0 {
			b.Fatalf("%s never ran", n)
		}
		b.ReportMetric(slo.Median(per[n]), n+"-ns/event")
	}
}
