//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// churnParentCmd is the hidden subcommand the churn parent runs as.
const churnParentCmd = "churn-parent"

// churnReport is `hone-soak churn`'s JSON report (results/soak/churn.json).
type churnReport struct {
	Kind    string      `json:"kind"` // "churn"
	Started time.Time   `json:"started"`
	Config  churnConfig `json:"config"`
	Host    hostInfo    `json:"host"`
	Parent  struct {
		PID      int     `json:"pid"`
		Comm     string  `json:"comm"`
		Threads  int     `json:"threads"`
		ChurnS   float64 `json:"churn_seconds"`
		ForkRate float64 `json:"children_per_second"`
	} `json:"parent"`
	// Expected is what the children did (see soak_fork_wave); Daemon what
	// the daemon's snapshot sums over its exited groups.
	Expected syscallTotals `json:"expected"`
	Daemon   syscallTotals `json:"daemon"`
	Exact    bool          `json:"totals_exact"`
	Groups   int           `json:"exited_groups"`
	// Table: during the churn (max) and after it (settled).
	Table struct {
		MaxEntries int `json:"capacity"`
		// PeakBound is what the table may hold at most during the churn:
		// the parent, a wave of live children, and up to 1024 exited
		// processes kept in detail (daemon.maxExitedDetail) before folding.
		PeakBound          int     `json:"peak_bound"`
		PeakEntries        int     `json:"peak_entries"`
		PeakTargetsListed  int     `json:"peak_targets_listed"`
		PeakThreadsListed  int     `json:"peak_threads_listed"`
		AfterEntries       int     `json:"after_entries"`
		AfterTargetsListed int     `json:"after_targets_listed"`
		AfterThreadsListed int     `json:"after_threads_listed"`
		LiveProcesses      int     `json:"live_processes_after"` // the parent
		LiveThreads        int     `json:"live_threads_after"`   // its threads, from /proc
		Bounded            bool    `json:"bounded"`
		SettleS            float64 `json:"settle_seconds"`
	} `json:"table"`
	Memory struct {
		BeforeBytes    uint64     `json:"before_bytes"` // median before the churn
		PeakBytes      uint64     `json:"peak_bytes"`
		AfterBytes     uint64     `json:"after_bytes"` // median of the samples after settling
		BoundBytes     uint64     `json:"bound_bytes"`
		BoundRule      string     `json:"bound_rule"`
		Within         bool       `json:"within_bound"`
		MaxRSSByDaemon uint64     `json:"daemon_reported_max_rss_bytes"`
		Flatness       RSSSummary `json:"churn_flatness"` // FlatRule over the churn window (informational)
	} `json:"memory"`
	Snapshot struct {
		BeforeBytes int `json:"before_bytes"`
		PeakBytes   int `json:"peak_bytes"`
		AfterBytes  int `json:"after_bytes"`
	} `json:"snapshot"`
	Drops    map[string]float64 `json:"drops"`
	BPF      map[string]uint64  `json:"bpf"`
	Samples  []churnSample      `json:"samples"`
	Pass     bool               `json:"pass"`
	Failures []string           `json:"failures,omitempty"`
}

type churnConfig struct {
	Children    int    `json:"children"`
	Wave        int    `json:"wave"`
	Pause       string `json:"pause"`
	SampleEvery string `json:"sample_every"`
	RSSGrowth   string `json:"rss_growth_bound"`
}

type syscallTotals struct {
	Processes uint64            `json:"processes"`
	Syscalls  map[string]uint64 `json:"syscalls"`
}

type churnSample struct {
	T             float64 `json:"t_s"`
	Phase         string  `json:"phase"` // before | churn | after
	RSS           uint64  `json:"daemon_rss_bytes"`
	SnapshotBytes int     `json:"snapshot_bytes"`
	TableEntries  int     `json:"table_entries"`
	Targets       int     `json:"targets_listed"`
	Threads       int     `json:"threads_listed"`
	Exited        uint64  `json:"exited_processes_total"`
}

// churnSnapshot is the part of the daemon's snapshot the churn reads.
type churnSnapshot struct {
	Targets []struct {
		PID int `json:"pid"`
	} `json:"targets"`
	Threads     []json.RawMessage `json:"threads"`
	TargetTable struct {
		Entries    int    `json:"entries"`
		MaxEntries int    `json:"max_entries"`
		Overflow   uint64 `json:"overflow_total"`
		Exited     uint64 `json:"exited_processes_total"`
	} `json:"target_table"`
	Exited []struct {
		RootPID   int    `json:"root_pid"`
		Comm      string `json:"comm"`
		Processes uint64 `json:"processes"`
		Syscalls  map[string]struct {
			Count uint64 `json:"count"`
		} `json:"syscalls"`
	} `json:"exited"`
	BPF struct {
		RingbufDrops uint64 `json:"ringbuf_dropped_events"`
		MapFull      uint64 `json:"map_full_updates"`
		EventsRead   uint64 `json:"events_read"`
	} `json:"bpf"`
	Daemon struct {
		MaxRSS uint64 `json:"max_rss_bytes"`
	} `json:"daemon"`
}

func runChurn(args []string) int {
	fs := flag.NewFlagSet("churn", flag.ExitOnError)
	hone := fs.String("hone", "bin/hone", "the hone binary")
	children := fs.Int("children", 30_000, "short-lived children to fork in all")
	wave := fs.Int("wave", 1000, "children per wave (alive together, then exiting together)")
	pause := fs.Duration("pause", 200*time.Millisecond, "pause between waves")
	sampleEvery := fs.Duration("sample", 500*time.Millisecond, "daemon RSS and snapshot sampling period")
	growth := fs.Int("rss-growth-mib", 64, "bound: the daemon's RSS may exceed its pre-churn median by at most this many MiB, at its peak and after")
	out := fs.String("out", "results/soak", "report directory (churn.json, logs/)")
	fs.Parse(args)
	rep, err := churn(*hone, *children, *wave, *pause, *sampleEvery, uint64(*growth)<<20, *out)
	if rep == nil {
		return exitCode(err, false)
	}
	return exitCode(err, rep.Pass)
}

func churn(honePath string, children, wave int, pause, sampleEvery time.Duration, growth uint64, out string) (*churnReport, error) {
	if children < 1 || wave < 1 {
		return nil, fail("--children and --wave must be positive")
	}
	if err := requireRoot(); err != nil {
		return nil, err
	}
	hone, err := honeBinary(honePath)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(out, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	rep := &churnReport{Kind: "churn", Started: time.Now().UTC(),
		Config: churnConfig{Children: children, Wave: wave, Pause: pause.String(), SampleEvery: sampleEvery.String(), RSSGrowth: fmt.Sprintf("%d MiB", growth>>20)},
		Host:   hostInfo{CPUs: runtime.NumCPU(), Kernel: kernelRelease(), GoArch: runtime.GOARCH},
	}
	rep.Expected = syscallTotals{Processes: uint64(children), Syscalls: map[string]uint64{}}
	for i := range children {
		o, f := childSyscalls(i)
		rep.Expected.Syscalls["other"] += o
		rep.Expected.Syscalls["file"] += f
	}

	// The parent: this binary, waiting for "go" on stdin.
	pcmd := exec.Command(self, churnParentCmd, "--children", strconv.Itoa(children), "--wave", strconv.Itoa(wave), "--pause", pause.String())
	pcmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pcmd.Stderr = os.Stderr
	stdin, err := pcmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := pcmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := pcmd.Start(); err != nil {
		return nil, err
	}
	ppid := pcmd.Process.Pid
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { pcmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			pcmd.Process.Kill()
			<-done
		}
	}()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		return nil, fail("churn parent did not start: %q %v", lines.Text(), lines.Err())
	}
	rep.Parent.PID = ppid
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	rep.Parent.Comm = strings.TrimSpace(string(comm))

	d, base, err := startDaemon(hone, logDir, []int{ppid})
	if err != nil {
		return nil, setupError{err}
	}
	defer d.stop(10 * time.Second)
	fmt.Printf("churn: hone daemon (pid %d) traces parent %d (%s); %d children in waves of %d, %s apart; %d CPUs\n",
		d.pid(), ppid, rep.Parent.Comm, children, wave, pause, runtime.NumCPU())

	t0 := time.Now()
	var (
		mu      sync.Mutex
		phase   = "before"
		samples []churnSample
	)
	takeSample := func(ctx context.Context) (churnSample, *churnSnapshot) {
		s := churnSample{T: time.Since(t0).Seconds(), RSS: rssBytes(d.pid())}
		b, err := getBody(ctx, base+"/v1/snapshot")
		if err != nil {
			return s, nil
		}
		s.SnapshotBytes = len(b)
		var snap churnSnapshot
		if json.Unmarshal(b, &snap) != nil {
			return s, nil
		}
		s.TableEntries, s.Targets, s.Threads, s.Exited = snap.TargetTable.Entries, len(snap.Targets), len(snap.Threads), snap.TargetTable.Exited
		return s, &snap
	}
	bg, bgCancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			s, _ := takeSample(bg)
			mu.Lock()
			s.Phase = phase
			if bg.Err() == nil {
				samples = append(samples, s)
			}
			mu.Unlock()
			select {
			case <-bg.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { bgCancel(); wg.Wait() }()

	time.Sleep(3 * time.Second) // baseline
	mu.Lock()
	phase = "churn"
	mu.Unlock()
	churnStart := time.Now()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return nil, err
	}
	var parentErr string
	for lines.Scan() {
		l := lines.Text()
		if strings.HasPrefix(l, "wave ") {
			fmt.Printf("  %s (daemon RSS %.1f MiB)\n", l, mib(rssBytes(d.pid())))
			continue
		}
		if strings.HasPrefix(l, "error ") {
			parentErr = strings.TrimPrefix(l, "error ")
		}
		if strings.HasPrefix(l, "done") || strings.HasPrefix(l, "error ") {
			break
		}
	}
	churnEnd := time.Now()
	rep.Parent.ChurnS = churnEnd.Sub(churnStart).Seconds()
	rep.Parent.ForkRate = float64(children) / rep.Parent.ChurnS
	mu.Lock()
	phase = "settling"
	mu.Unlock()
	if parentErr != "" {
		return nil, setupError{fmt.Errorf("churn parent: %s", parentErr)}
	}

	// Settle: every child folded, only the parent left in the table.
	var last *churnSnapshot
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, snap := takeSample(context.Background())
		if snap != nil {
			last = snap
			if snap.TargetTable.Exited+snap.TargetTable.Overflow >= uint64(children) && len(snap.Targets) <= 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	rep.Table.SettleS = time.Since(churnEnd).Seconds()
	mu.Lock()
	phase = "after"
	mu.Unlock()
	time.Sleep(5 * time.Second) // after-churn samples
	if _, snap := takeSample(context.Background()); snap != nil {
		last = snap
	}
	bgCancel()
	wg.Wait()
	if last == nil {
		return nil, setupError{fmt.Errorf("daemon: no snapshot after the churn\n%s", d.tail())}
	}
	rep.Samples = samples
	rep.Parent.Threads = threadCount(ppid)

	// Totals.
	rep.Daemon = syscallTotals{Syscalls: map[string]uint64{}}
	for _, g := range last.Exited {
		rep.Groups++
		rep.Daemon.Processes += g.Processes
		for class, st := range g.Syscalls {
			rep.Daemon.Syscalls[class] += st.Count
		}
	}
	rep.Exact = rep.Daemon.Processes == rep.Expected.Processes && len(rep.Daemon.Syscalls) == len(rep.Expected.Syscalls)
	for class, n := range rep.Expected.Syscalls {
		rep.Exact = rep.Exact && rep.Daemon.Syscalls[class] == n
	}

	// Table.
	rep.Table.MaxEntries = last.TargetTable.MaxEntries
	rep.Table.AfterEntries, rep.Table.AfterTargetsListed, rep.Table.AfterThreadsListed = last.TargetTable.Entries, len(last.Targets), len(last.Threads)
	rep.Table.LiveProcesses, rep.Table.LiveThreads = 1, rep.Parent.Threads
	for _, s := range samples {
		rep.Table.PeakEntries = max(rep.Table.PeakEntries, s.TableEntries)
		rep.Table.PeakTargetsListed = max(rep.Table.PeakTargetsListed, s.Targets)
		rep.Table.PeakThreadsListed = max(rep.Table.PeakThreadsListed, s.Threads)
	}
	rep.Table.PeakBound = min(rep.Table.MaxEntries, 1+wave+1024)
	rep.Table.Bounded = rep.Table.PeakEntries <= rep.Table.PeakBound &&
		rep.Table.AfterEntries == rep.Table.LiveProcesses && rep.Table.AfterTargetsListed == rep.Table.LiveProcesses &&
		rep.Table.AfterThreadsListed <= rep.Table.LiveThreads

	// Memory and snapshot size.
	var before, after []uint64
	var churnSeries Series
	churnSeries.Name, churnSeries.PID = "daemon", d.pid()
	cs, ce := churnStart.Sub(t0).Seconds(), churnEnd.Sub(t0).Seconds()
	for _, s := range samples {
		switch s.Phase {
		case "before":
			before = append(before, s.RSS)
			rep.Snapshot.BeforeBytes = max(rep.Snapshot.BeforeBytes, s.SnapshotBytes)
		case "after":
			after = append(after, s.RSS)
			rep.Snapshot.AfterBytes = s.SnapshotBytes
		case "churn":
			churnSeries.Samples = append(churnSeries.Samples, Sample{T: s.T, RSS: s.RSS})
		}
		rep.Memory.PeakBytes = max(rep.Memory.PeakBytes, s.RSS)
		rep.Snapshot.PeakBytes = max(rep.Snapshot.PeakBytes, s.SnapshotBytes)
	}
	rep.Memory.BeforeBytes, rep.Memory.AfterBytes = median(before), median(after)
	rep.Memory.BoundBytes = rep.Memory.BeforeBytes + growth
	rep.Memory.BoundRule = fmt.Sprintf("peak and after-churn RSS <= pre-churn median + %d MiB", growth>>20)
	rep.Memory.Within = rep.Memory.PeakBytes <= rep.Memory.BoundBytes && rep.Memory.AfterBytes <= rep.Memory.BoundBytes
	rep.Memory.MaxRSSByDaemon = last.Daemon.MaxRSS
	rep.Memory.Flatness = summarize(churnSeries, cs+(ce-cs)/3, ce)

	// Drops.
	if dr, err := daemonDrops(base); err == nil {
		rep.Drops = dr
	} else {
		rep.Failures = append(rep.Failures, "daemon /metrics: "+err.Error())
	}
	rep.BPF = map[string]uint64{"ringbuf_dropped_events": last.BPF.RingbufDrops, "map_full_updates": last.BPF.MapFull,
		"events_read": last.BPF.EventsRead, "target_table_overflow_total": last.TargetTable.Overflow, "exited_processes_total": last.TargetTable.Exited}

	if !rep.Exact {
		rep.Failures = append(rep.Failures, fmt.Sprintf("syscall totals not exact: expected %d processes %v, daemon %d processes %v",
			rep.Expected.Processes, rep.Expected.Syscalls, rep.Daemon.Processes, rep.Daemon.Syscalls))
	}
	if !rep.Table.Bounded {
		rep.Failures = append(rep.Failures, fmt.Sprintf("table not bounded to the live processes: peak %d entries (bound %d); after: %d entries, %d targets, %d threads listed for %d live process(es) with %d threads",
			rep.Table.PeakEntries, rep.Table.PeakBound, rep.Table.AfterEntries, rep.Table.AfterTargetsListed, rep.Table.AfterThreadsListed, rep.Table.LiveProcesses, rep.Table.LiveThreads))
	}
	if !rep.Memory.Within {
		rep.Failures = append(rep.Failures, fmt.Sprintf("daemon RSS out of bound (%s): before %.1f MiB, peak %.1f MiB, after %.1f MiB",
			rep.Memory.BoundRule, mib(rep.Memory.BeforeBytes), mib(rep.Memory.PeakBytes), mib(rep.Memory.AfterBytes)))
	}
	if d.exited() {
		rep.Failures = append(rep.Failures, fmt.Sprintf("daemon exited: %v", d.err))
	}
	rep.Pass = len(rep.Failures) == 0
	printChurnReport(rep)
	path := filepath.Join(out, "churn.json")
	if err := writeJSON(path, rep); err != nil {
		return rep, err
	}
	fmt.Printf("report: %s\n", path)
	return rep, nil
}

func printChurnReport(r *churnReport) {
	fmt.Printf("\n== churn report (%d children in waves of %d, %s apart, %d CPUs)\n", r.Config.Children, r.Config.Wave, r.Config.Pause, r.Host.CPUs)
	fmt.Printf("parent %d (%s): forked and reaped %d children in %.1f s (%.0f/s); %d threads\n",
		r.Parent.PID, r.Parent.Comm, r.Config.Children, r.Parent.ChurnS, r.Parent.ForkRate, r.Parent.Threads)
	fmt.Printf("syscall totals: expected %d processes, %s; daemon (%d exited groups) %d processes, %s => %s\n",
		r.Expected.Processes, fmtCounts(r.Expected.Syscalls), r.Groups, r.Daemon.Processes, fmtCounts(r.Daemon.Syscalls), exactWord(r.Exact))
	t := r.Table
	fmt.Printf("table: capacity %d; peak %d entries (bound: parent + wave + 1024 exited = %d; %d targets, %d threads listed); after %.1f s settling: %d entries, %d targets, %d threads listed; live: %d process, %d threads => %s\n",
		t.MaxEntries, t.PeakEntries, t.PeakBound, t.PeakTargetsListed, t.PeakThreadsListed, t.SettleS, t.AfterEntries, t.AfterTargetsListed, t.AfterThreadsListed, t.LiveProcesses, t.LiveThreads, boundWord(t.Bounded))
	m := r.Memory
	fmt.Printf("daemon RSS: before %.1f MiB, peak %.1f MiB, after %.1f MiB; bound (%s) %.1f MiB => %s; daemon's own max_rss %.1f MiB\n",
		mib(m.BeforeBytes), mib(m.PeakBytes), mib(m.AfterBytes), m.BoundRule, mib(m.BoundBytes), boundWord(m.Within), mib(m.MaxRSSByDaemon))
	fmt.Printf("            over the churn (informational): %s\n", m.Flatness.Verdict)
	fmt.Printf("snapshot size: before %d B, peak %d B, after %d B\n", r.Snapshot.BeforeBytes, r.Snapshot.PeakBytes, r.Snapshot.AfterBytes)
	fmt.Printf("drops (/metrics): %s; snapshot bpf/table: %s\n", fmtFloats(r.Drops), fmtCounts(r.BPF))
	if r.Pass {
		fmt.Println("churn: PASS")
	} else {
		fmt.Println("churn: FAIL")
		for _, f := range r.Failures {
			fmt.Println("  -", f)
		}
	}
}

func exactWord(ok bool) string {
	if ok {
		return "EXACT"
	}
	return "NOT EXACT"
}

func boundWord(ok bool) string {
	if ok {
		return "bounded"
	}
	return "OUT OF BOUND"
}

// runChurnParent is the traced parent: it says "ready", waits for "go" on
// stdin, forks the waves, says "done", and stays alive (so its children
// stay folded under it) until stdin closes.
func runChurnParent(args []string) int {
	fs := flag.NewFlagSet(churnParentCmd, flag.ExitOnError)
	children := fs.Int("children", 30_000, "")
	wave := fs.Int("wave", 1000, "")
	pause := fs.Duration("pause", 200*time.Millisecond, "")
	fs.Parse(args)
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if l, err := in.ReadString('\n'); err != nil || strings.TrimSpace(l) != "go" {
		return 2
	}
	for first, w := 0, 1; first < *children; first, w = first+*wave, w+1 {
		n := min(*wave, *children-first)
		t := time.Now()
		if err := forkWave(n, first); err != nil {
			fmt.Printf("error wave %d: %v\n", w, err)
			io.Copy(io.Discard, in)
			return 1
		}
		fmt.Printf("wave %d: %d children (%d..%d) forked and reaped in %s\n", w, n, first, first+n-1, time.Since(t).Round(time.Millisecond))
		if first+n < *children {
			time.Sleep(*pause)
		}
	}
	fmt.Println("done")
	io.Copy(io.Discard, in)
	return 0
}
