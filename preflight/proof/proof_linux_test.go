//go:build linux

package proof

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/bpf"
	"github.com/hone-llm/hone/bpf/bpftest"
)

// workloadEnv makes this test binary the proof's workload (TestMain).
const workloadEnv = "HONE_PROOF_TEST_WORKLOAD"

func TestMain(m *testing.M) {
	if os.Getenv(workloadEnv) == "1" {
		if err := RunWorkload(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The counts the tests configure: odd numbers, none equal, so a count in
// the wrong kind or phase cannot pass for another.
const (
	tLaunches = 37
	tGraphs   = 23
	tCopies   = 11
	tSyncs    = 7
	tMaxBusy  = 400
)

func testOptions(lib string, env ...string) Options {
	return Options{LibCUDA: lib, Workload: []string{os.Args[0]}, WorkloadEnv: append([]string{workloadEnv + "=1"}, env...),
		Launches: tLaunches, Graphs: tGraphs, Copies: tCopies, Syncs: tSyncs, Busy: 300 * time.Millisecond, MaxBusyLaunches: tMaxBusy,
		Timeout: time.Minute}
}

// fakeLib builds the fake libcuda (bpftest's), which the workload loads.
func fakeLib(t *testing.T) string {
	t.Helper()
	_, lib := bpftest.Workload(t)
	return lib
}

func TestClassesAreTheDaemons(t *testing.T) {
	if !slices.Equal(Classes, bpf.CUDACalls) {
		t.Fatalf("proof classes %v, daemon's %v", Classes, bpf.CUDACalls)
	}
	for i, c := range Classes {
		if waitClasses[c] != bpf.CUDAWaits(i) {
			t.Errorf("%s: waits %t here, %t in the daemon", c, waitClasses[c], bpf.CUDAWaits(i))
		}
	}
}

// wantPhases are the calls, by kind, each phase makes with testOptions
// (the busy phase's count is its own: launches = stream synchronizes).
var wantPhases = map[string]map[string]uint64{
	PhaseLaunchExported:    {"launch": tLaunches},
	PhaseLaunchProcAddress: {"launch": tLaunches},
	PhaseGraph:             {"graph_launch": tGraphs},
	PhaseMemcpyAsync:       {"memcpy_async": 2 * tCopies},
	PhaseMemcpySync:        {"memcpy_sync": 2 * tCopies},
	PhaseSynchronize:       {"ctx_synchronize": tSyncs, "stream_synchronize": tSyncs, "event_synchronize": tSyncs},
}

// TestWorkloadCountsItsCalls drives the workload alone (no daemon, no
// privilege) against the fake libcuda: it reports the configured calls,
// phase by phase, and what cuGetProcAddress returned.
func TestWorkloadCountsItsCalls(t *testing.T) {
	lib := fakeLib(t)
	o, _ := testOptions(lib).withDefaults()
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), o.WorkloadEnv...)
	in, _ := c.StdinPipe()
	out, _ := c.StdoutPipe()
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	rd := bufio.NewScanner(out)
	next := func() workloadEvent {
		t.Helper()
		if !rd.Scan() {
			t.Fatalf("workload output ended: %v\n%s", rd.Err(), stderr.String())
		}
		var ev workloadEvent
		if err := json.Unmarshal(rd.Bytes(), &ev); err != nil {
			t.Fatalf("%q: %v", rd.Text(), err)
		}
		return ev
	}
	b, _ := json.Marshal(o.config())
	fmt.Fprintf(in, "%s\n", b)
	ready := next()
	if ready.Event != "ready" || ready.Status != "ok" || ready.Device == nil || ready.Device.Name != "hone fake libcuda" ||
		ready.Device.UUID != "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff" || ready.DriverVersion != 12040 || ready.Library != lib {
		t.Fatalf("ready = %+v (device %+v)", ready, ready.Device)
	}
	if pa := ready.ProcAddress; pa == nil || pa.Function != "cuGetProcAddress_v2" || len(pa.Symbols) != len(procQueries) {
		t.Fatalf("proc address = %+v", pa)
	}
	for _, s := range ready.ProcAddress.Symbols {
		if !s.Same || s.MatchesExport != s.Export || s.ProcAddress == "" {
			t.Errorf("cuGetProcAddress(%q) = %+v, want the exported entry point", s.Name, s)
		}
	}
	for _, ph := range Phases {
		fmt.Fprintln(in, "go")
		ev := next()
		if ev.Event != "phase" || ev.Phase != ph || ev.Error != "" {
			t.Fatalf("phase %s: %+v", ph, ev)
		}
		want := wantPhases[ph]
		if ph == PhaseBusy {
			n := ev.Calls["launch"]
			want = map[string]uint64{"launch": n, "stream_synchronize": n}
			if n == 0 || n > tMaxBusy {
				t.Errorf("busy launches %d, want 1..%d", n, tMaxBusy)
			}
		}
		if fmt.Sprint(ev.Calls) != fmt.Sprint(want) {
			t.Errorf("phase %s calls = %v, want %v", ph, ev.Calls, want)
		}
	}
	fmt.Fprintln(in, "done")
	if ev := next(); ev.Event != "done" {
		t.Fatalf("last event %+v", ev)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, stderr.String())
	}
}

// TestProveFakeExact runs the whole proof against the fake libcuda: every
// phase's calls are counted exactly by the daemon, with a uretprobe return
// per call the host waits in, and the launches through cuGetProcAddress's
// pointer (the fake returns its export) hit the probe.
func TestProveFakeExact(t *testing.T) {
	bpftest.Require(t)
	lib := fakeLib(t)
	r := Prove(context.Background(), testOptions(lib))
	var text strings.Builder
	r.WriteText(&text)
	t.Logf("\n%s", text.String())
	if r.Verdict != Pass || r.Status != "ok" || r.ExitCode() != 0 || len(r.Failures) != 0 {
		t.Fatalf("verdict %s status %q reason %q failures %v", r.Verdict, r.Status, r.Reason, r.Failures)
	}
	if len(r.Phases) != len(Phases) {
		t.Fatalf("%d phases, want %d", len(r.Phases), len(Phases))
	}
	var busy uint64
	for _, ph := range r.Phases {
		want := wantPhases[ph.Name]
		if ph.Name == PhaseBusy {
			busy = ph.Probes["launch"].Expected
			want = map[string]uint64{"launch": busy, "stream_synchronize": busy}
		}
		if len(ph.Probes) != len(want) {
			t.Errorf("phase %s probes %v, want kinds %v", ph.Name, ph.Probes, want)
		}
		for c, n := range want {
			p := ph.Probes[c]
			if p.Expected != n || p.Counted != n || p.Verdict != Exact {
				t.Errorf("phase %s %s: %+v, want %d exact", ph.Name, c, p, n)
			}
			if waitClasses[c] != (p.Waits != nil) || (p.Waits != nil && *p.Waits != n) {
				t.Errorf("phase %s %s waits %v, want %d", ph.Name, c, p.Waits, n)
			}
		}
	}
	if busy == 0 || busy > tMaxBusy {
		t.Errorf("busy launches %d, want 1..%d", busy, tMaxBusy)
	}
	total := map[string]uint64{"launch": 2*tLaunches + busy, "graph_launch": tGraphs, "stream_synchronize": tSyncs + busy,
		"ctx_synchronize": tSyncs, "memcpy_async": 2 * tCopies, "event_synchronize": tSyncs, "memcpy_sync": 2 * tCopies}
	for c, n := range total {
		if p := r.Probes[c]; p.Expected != n || p.Counted != n || p.Verdict != Exact {
			t.Errorf("total %s: %+v, want %d exact", c, p, n)
		}
	}
	if len(r.OutsidePhases) != 0 {
		t.Errorf("counted outside the phases: %v", r.OutsidePhases)
	}
	pa := r.ProcAddress
	if pa == nil || pa.LaunchViaPointer == nil || pa.LaunchViaPointer.Counted != tLaunches ||
		!strings.Contains(pa.Finding, "hit the daemon's uprobe") {
		t.Errorf("cuGetProcAddress finding: %+v", pa)
	}
	if r.Daemon == nil || len(r.Daemon.Libraries) != 1 || filepath.Base(r.Daemon.Libraries[0].Path) != "libcuda.so.1" ||
		fmt.Sprint(r.Daemon.Libraries[0].LaunchSymbols) != "[cuLaunchKernel]" {
		t.Errorf("daemon probed %+v", r.Daemon)
	}
	if r.NVML == nil || r.NVML.Required {
		t.Errorf("NVML %+v: with HONE_LIBCUDA overridden it is not required", r.NVML)
	}
	if r.ElapsedS <= 0 || r.ElapsedS > 60 {
		t.Errorf("elapsed %v s", r.ElapsedS)
	}
	// The verdict file round-trips.
	path := filepath.Join(t.TempDir(), "proof.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || back.Verdict != Pass || back.Probes["memcpy_sync"].Counted != 2*tCopies {
		t.Errorf("round trip: %v %+v", err, back.Probes)
	}
	if !strings.Contains(text.String(), "--prove: PASS") {
		t.Errorf("text:\n%s", text.String())
	}
}

// TestProveFakeProcAddressMissed: where cuGetProcAddress hands out an
// entry point that is not an export (FAKECUDA_PROC_INTERNAL=1), launches
// through it escape the daemon's uprobes. The proof says so: that phase
// missed, every other exact, the verdict fail (exit 1), and the finding
// names the runtime's path.
func TestProveFakeProcAddressMissed(t *testing.T) {
	bpftest.Require(t)
	lib := fakeLib(t)
	r := Prove(context.Background(), testOptions(lib, "FAKECUDA_PROC_INTERNAL=1"))
	var text strings.Builder
	r.WriteText(&text)
	t.Logf("\n%s", text.String())
	if r.Verdict != Fail || r.ExitCode() != 1 || len(r.Phases) != len(Phases) {
		t.Fatalf("verdict %s status %q reason %q, %d phases", r.Verdict, r.Status, r.Reason, len(r.Phases))
	}
	for _, ph := range r.Phases {
		for c, p := range ph.Probes {
			want := Exact
			if ph.Name == PhaseLaunchProcAddress {
				want = Missed
			}
			if p.Verdict != want {
				t.Errorf("phase %s %s: %+v, want %s", ph.Name, c, p, want)
			}
		}
	}
	if p := r.Phases[1].Probes["launch"]; p.Expected != tLaunches || p.Counted != 0 {
		t.Errorf("launches via the pointer: %+v, want %d made, 0 counted", p, tLaunches)
	}
	want := fmt.Sprintf("phase %s: launch missed: %d made, 0 counted", PhaseLaunchProcAddress, tLaunches)
	if len(r.Failures) != 1 || r.Failures[0] != want {
		t.Errorf("failures %q, want [%q]", r.Failures, want)
	}
	s := r.ProcAddress.Symbols[0]
	if s.Name != "cuLaunchKernel" || s.Same || s.MatchesExport != "" || !strings.Contains(r.ProcAddress.Finding, "invisible to the daemon's uprobes") {
		t.Errorf("cuGetProcAddress: %+v, finding %q", s, r.ProcAddress.Finding)
	}
}

// TestProveNoDriver: a libcuda whose cuInit finds no GPU, and a host where
// libcuda.so.1 cannot be loaded, are skipped (exit 0) as "no NVIDIA
// driver"; a HONE_LIBCUDA override that cannot be loaded is a failure.
// None of it needs privilege: the daemon is never started.
func TestProveNoDriver(t *testing.T) {
	lib := fakeLib(t)
	r := Prove(context.Background(), testOptions(lib, "FAKECUDA_NO_DEVICE=1"))
	if r.Verdict != Skipped || r.Status != StatusNoDriver || r.ExitCode() != 0 || !strings.Contains(r.Reason, "CUDA_ERROR_NO_DEVICE") ||
		r.Daemon != nil || len(r.Phases) != 0 {
		t.Errorf("no device: %+v", r)
	}
	var text strings.Builder
	r.WriteText(&text)
	if !strings.Contains(text.String(), "SKIPPED: no NVIDIA driver") {
		t.Errorf("text: %s", text.String())
	}

	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	r = Prove(context.Background(), testOptions(missing))
	if r.Verdict != Fail || r.Status != "libcuda override unusable" || r.ExitCode() != 1 || !strings.Contains(r.Reason, missing) {
		t.Errorf("missing override: %+v", r)
	}
}
