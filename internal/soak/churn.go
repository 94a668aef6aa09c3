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
	c := &churnRun{children: children, wave: wave, pause: pause, sampleEvery: sampleEvery, growth: growth}
	c.rep = c.newReport()

	if err := c.startParent(self); err != nil {
		return nil, err
	}
	defer c.stopParent()
	if err := c.awaitParent(); err != nil {
		return nil, err
	}
	d, base, err := startDaemon(hone, logDir, []int{c.rep.Parent.PID})
	if err != nil {
		return nil, setupError{err}
	}
	defer d.stop(10 * time.Second)
	c.d, c.base = d, base
	fmt.Printf("churn: hone daemon (pid %d) traces parent %d (%s); %d children in waves of %d, %s apart; %d CPUs\n",
		d.pid(), c.rep.Parent.PID, c.rep.Parent.Comm, children, wave, pause, runtime.NumCPU())

	last, err := c.run()
	if err != nil {
		return nil, err
	}
	c.totals(last)
	c.table(last)
	c.memory(last)
	c.lossCounters(last)
	c.verdict()

	rep := c.rep
	printChurnReport(rep)
	path := filepath.Join(out, "churn.json")
	if err := writeJSON(path, rep); err != nil {
		return rep, err
	}
	fmt.Printf("report: %s\n", path)
	return rep, nil
}

// churnRun is one `hone-soak churn` run: the traced parent, the daemon, and
// the samples taken while the parent forks.
type churnRun struct {
	children, wave     int
	pause, sampleEvery time.Duration
	growth             uint64 // the RSS bound above the pre-churn median
	rep                *churnReport

	parent *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner // the parent's stdout
	d      *proc          // the daemon
	base   string         // the daemon's URL

	t0, churnStart, churnEnd time.Time

	mu      sync.Mutex
	phase   string // before | churn | settling | after
	samples []churnSample
}

// newReport is the report before the run: its configuration, host and the
// syscalls the children will make.
func (c *churnRun) newReport() *churnReport {
	rep := &churnReport{Kind: "churn", Started: time.Now().UTC(),
		Config: churnConfig{Children: c.children, Wave: c.wave, Pause: c.pause.String(), SampleEvery: c.sampleEvery.String(), RSSGrowth: fmt.Sprintf("%d MiB", c.growth>>20)},
		Host:   hostInfo{CPUs: runtime.NumCPU(), Kernel: kernelRelease(), GoArch: runtime.GOARCH},
	}
	rep.Expected = syscallTotals{Processes: uint64(c.children), Syscalls: map[string]uint64{}}
	for i := range c.children {
		o, f := childSyscalls(i)
		rep.Expected.Syscalls["other"] += o
		rep.Expected.Syscalls["file"] += f
	}
	return rep
}

// startParent starts the parent: this binary, waiting for "go" on stdin.
func (c *churnRun) startParent(self string) error {
	pcmd := exec.Command(self, churnParentCmd, "--children", strconv.Itoa(c.children), "--wave", strconv.Itoa(c.wave), "--pause", c.pause.String())
	pcmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pcmd.Stderr = os.Stderr
	stdin, err := pcmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := pcmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := pcmd.Start(); err != nil {
		return err
	}
	c.parent, c.stdin, c.lines = pcmd, stdin, bufio.NewScanner(stdout)
	return nil
}

// stopParent closes the parent's stdin, which ends it, and kills it if it
// has not ended within 10 s.
func (c *churnRun) stopParent() {
	c.stdin.Close()
	done := make(chan struct{})
	go func() { c.parent.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.parent.Process.Kill()
		<-done
	}
}

// awaitParent waits for the parent's "ready" and notes its pid and comm.
func (c *churnRun) awaitParent() error {
	if !c.lines.Scan() || c.lines.Text() != "ready" {
		return fail("churn parent did not start: %q %v", c.lines.Text(), c.lines.Err())
	}
	ppid := c.parent.Process.Pid
	c.rep.Parent.PID = ppid
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	c.rep.Parent.Comm = strings.TrimSpace(string(comm))
	return nil
}

func (c *churnRun) setPhase(p string) {
	c.mu.Lock()
	c.phase = p
	c.mu.Unlock()
}

// takeSample reads the daemon's RSS and snapshot; the snapshot is nil when
// it could not be read.
func (c *churnRun) takeSample(ctx context.Context) (churnSample, *churnSnapshot) {
	s := churnSample{T: time.Since(c.t0).Seconds(), RSS: rssBytes(c.d.pid())}
	b, err := getBody(ctx, c.base+"/v1/snapshot")
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

// sampleLoop samples every --sample until ctx ends, each sample tagged with
// the phase it was taken in.
func (c *churnRun) sampleLoop(ctx context.Context) {
	tick := time.NewTicker(c.sampleEvery)
	defer tick.Stop()
	for {
		s, _ := c.takeSample(ctx)
		c.mu.Lock()
		s.Phase = c.phase
		if ctx.Err() == nil {
			c.samples = append(c.samples, s)
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// run samples a baseline, lets the parent fork its waves, waits for the
// daemon to settle, samples after it, and returns the last snapshot.
func (c *churnRun) run() (*churnSnapshot, error) {
	c.t0 = time.Now()
	c.phase = "before"
	bg, bgCancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.sampleLoop(bg)
	}()
	defer func() { bgCancel(); wg.Wait() }()

	time.Sleep(3 * time.Second) // baseline
	c.setPhase("churn")
	c.churnStart = time.Now()
	if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
		return nil, err
	}
	parentErr := c.followParent()
	c.churnEnd = time.Now()
	c.rep.Parent.ChurnS = c.churnEnd.Sub(c.churnStart).Seconds()
	c.rep.Parent.ForkRate = float64(c.children) / c.rep.Parent.ChurnS
	c.setPhase("settling")
	if parentErr != "" {
		return nil, setupError{fmt.Errorf("churn parent: %s", parentErr)}
	}

	last := c.settle()
	c.rep.Table.SettleS = time.Since(c.churnEnd).Seconds()
	c.setPhase("after")
	time.Sleep(5 * time.Second) // after-churn samples
	if _, snap := c.takeSample(context.Background()); snap != nil {
		last = snap
	}
	bgCancel()
	wg.Wait()
	if last == nil {
		return nil, setupError{fmt.Errorf("daemon: no snapshot after the churn\n%s", c.d.tail())}
	}
	c.rep.Samples = c.samples
	c.rep.Parent.Threads = threadCount(c.rep.Parent.PID)
	return last, nil
}

// followParent prints the parent's waves until it is done, and returns its
// error line's text, if any.
func (c *churnRun) followParent() (parentErr string) {
	for c.lines.Scan() {
		l := c.lines.Text()
		if strings.HasPrefix(l, "wave ") {
			fmt.Printf("  %s (daemon RSS %.1f MiB)\n", l, mib(rssBytes(c.d.pid())))
			continue
		}
		if strings.HasPrefix(l, "error ") {
			parentErr = strings.TrimPrefix(l, "error ")
		}
		if strings.HasPrefix(l, "done") || strings.HasPrefix(l, "error ") {
			break
		}
	}
	return parentErr
}

// settle waits (up to 60 s) until every child is folded and only the
// parent is left in the table, and returns the last snapshot read.
func (c *churnRun) settle() *churnSnapshot {
	var last *churnSnapshot
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, snap := c.takeSample(context.Background())
		if snap != nil {
			last = snap
			if snap.TargetTable.Exited+snap.TargetTable.Overflow >= uint64(c.children) && len(snap.Targets) <= 1 {
				return last
			}
		}
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// totals sums the daemon's exited groups and compares them with what the
// children did.
func (c *churnRun) totals(last *churnSnapshot) {
	rep := c.rep
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
}

// table judges the target table: bounded during the churn, back to the
// live processes after it.
func (c *churnRun) table(last *churnSnapshot) {
	t := &c.rep.Table
	t.MaxEntries = last.TargetTable.MaxEntries
	t.AfterEntries, t.AfterTargetsListed, t.AfterThreadsListed = last.TargetTable.Entries, len(last.Targets), len(last.Threads)
	t.LiveProcesses, t.LiveThreads = 1, c.rep.Parent.Threads
	for _, s := range c.samples {
		t.PeakEntries = max(t.PeakEntries, s.TableEntries)
		t.PeakTargetsListed = max(t.PeakTargetsListed, s.Targets)
		t.PeakThreadsListed = max(t.PeakThreadsListed, s.Threads)
	}
	t.PeakBound = min(t.MaxEntries, 1+c.wave+1024)
	t.Bounded = t.PeakEntries <= t.PeakBound &&
		t.AfterEntries == t.LiveProcesses && t.AfterTargetsListed == t.LiveProcesses &&
		t.AfterThreadsListed <= t.LiveThreads
}

// memory judges the daemon's RSS against its bound and sums up the
// snapshot sizes, by phase.
func (c *churnRun) memory(last *churnSnapshot) {
	rep := c.rep
	var before, after []uint64
	var churnSeries Series
	churnSeries.Name, churnSeries.PID = "daemon", c.d.pid()
	cs, ce := c.churnStart.Sub(c.t0).Seconds(), c.churnEnd.Sub(c.t0).Seconds()
	for _, s := range c.samples {
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
	m := &rep.Memory
	m.BeforeBytes, m.AfterBytes = median(before), median(after)
	m.BoundBytes = m.BeforeBytes + c.growth
	m.BoundRule = fmt.Sprintf("peak and after-churn RSS <= pre-churn median + %d MiB", c.growth>>20)
	m.Within = m.PeakBytes <= m.BoundBytes && m.AfterBytes <= m.BoundBytes
	m.MaxRSSByDaemon = last.Daemon.MaxRSS
	m.Flatness = summarize(churnSeries, cs+(ce-cs)/3, ce)
}

// lossCounters reads the daemon's drop counters from /metrics and its
// snapshot's BPF and table counters.
func (c *churnRun) lossCounters(last *churnSnapshot) {
	rep := c.rep
	if dr, err := daemonDrops(c.base); err == nil {
		rep.Drops = dr
	} else {
		rep.Failures = append(rep.Failures, "daemon /metrics: "+err.Error())
	}
	rep.BPF = map[string]uint64{"ringbuf_dropped_events": last.BPF.RingbufDrops, "map_full_updates": last.BPF.MapFull,
		"events_read": last.BPF.EventsRead, "target_table_overflow_total": last.TargetTable.Overflow, "exited_processes_total": last.TargetTable.Exited}
}

// verdict lists the run's failures and passes it when there are none.
func (c *churnRun) verdict() {
	rep := c.rep
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
	if c.d.exited() {
		rep.Failures = append(rep.Failures, fmt.Sprintf("daemon exited: %v", c.d.err))
	}
	rep.Pass = len(rep.Failures) == 0
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
