package proof

import (
	"strings"
	"testing"
)

func u(v uint64) *uint64 { return &v }

// evaluate: a phase's count missed or extra, or a call the host waits in
// without its uretprobe return, fails the proof and says which; a required
// NVML that did not see the energy rise fails it; one not required (an
// overridden libcuda) is a note.
func TestEvaluate(t *testing.T) {
	phases := func() []Phase {
		return []Phase{
			{Name: PhaseLaunchExported, Probes: phaseProbes(map[string]uint64{"launch": 10}, map[string]classCount{"launch": {calls: 10}})},
			{Name: PhaseLaunchProcAddress, Probes: phaseProbes(map[string]uint64{"launch": 10}, map[string]classCount{"launch": {calls: 10}})},
			{Name: PhaseGraph, Probes: phaseProbes(map[string]uint64{"graph_launch": 5}, map[string]classCount{"graph_launch": {calls: 5}})},
			{Name: PhaseMemcpyAsync, Probes: phaseProbes(map[string]uint64{"memcpy_async": 4}, map[string]classCount{"memcpy_async": {calls: 4}})},
			{Name: PhaseMemcpySync, Probes: phaseProbes(map[string]uint64{"memcpy_sync": 4}, map[string]classCount{"memcpy_sync": {calls: 4, waits: 4}})},
			{Name: PhaseSynchronize, Probes: phaseProbes(map[string]uint64{"ctx_synchronize": 3, "stream_synchronize": 3, "event_synchronize": 3},
				map[string]classCount{"ctx_synchronize": {3, 3}, "stream_synchronize": {3, 3}, "event_synchronize": {3, 3}})},
			{Name: PhaseBusy, Probes: phaseProbes(map[string]uint64{"launch": 9, "stream_synchronize": 9},
				map[string]classCount{"launch": {calls: 9}, "stream_synchronize": {9, 9}})},
		}
	}
	okNVML := func(required bool) *NVML {
		inc := true
		return &NVML{Status: "ok", Verdict: NVMLPass, Required: required, EnergyBeforeMJ: u(1), EnergyAfterMJ: u(2), EnergyIncreased: &inc}
	}
	pa := func() *ProcAddress {
		return &ProcAddress{Function: "cuGetProcAddress_v2", Symbols: []ProcSymbol{{Name: "cuLaunchKernel", ProcAddress: "0x10",
			Export: "cuLaunchKernel", ExportAddress: "0x10", Same: true, MatchesExport: "cuLaunchKernel"}}}
	}

	r := &Result{Status: "ok", Phases: phases(), NVML: okNVML(true), ProcAddress: pa()}
	r.evaluate()
	if r.Verdict != Pass || len(r.Failures) != 0 || r.Probes["launch"] != (Probe{Expected: 29, Counted: 29, Verdict: Exact}) ||
		*r.Probes["stream_synchronize"].Waits != 12 || r.Probes["memcpy_async"].Waits != nil {
		t.Fatalf("all exact: %s %v %+v", r.Verdict, r.Failures, r.Probes)
	}
	if !strings.Contains(r.ProcAddress.Finding, "hit the daemon's uprobe (10 of 10 counted)") {
		t.Errorf("finding %q", r.ProcAddress.Finding)
	}

	// Missed, extra, a wait short, and a kind counted where none was made.
	ph := phases()
	ph[2].Probes = phaseProbes(map[string]uint64{"graph_launch": 5}, map[string]classCount{"graph_launch": {calls: 4}})
	ph[3].Probes = phaseProbes(map[string]uint64{"memcpy_async": 4}, map[string]classCount{"memcpy_async": {calls: 4}, "ctx_synchronize": {1, 1}})
	ph[4].Probes = phaseProbes(map[string]uint64{"memcpy_sync": 4}, map[string]classCount{"memcpy_sync": {calls: 5, waits: 5}})
	ph[5].Probes["event_synchronize"] = Probe{Expected: 3, Counted: 3, Verdict: Exact, Waits: u(2)}
	r = &Result{Status: "ok", Phases: ph, NVML: okNVML(true), ProcAddress: pa()}
	r.evaluate()
	want := []string{
		"phase graph_launch: graph_launch missed: 5 made, 4 counted",
		"phase memcpy_async: ctx_synchronize extra: 0 made, 1 counted",
		"phase memcpy_sync: memcpy_sync extra: 4 made, 5 counted",
		"phase synchronize: event_synchronize: 3 calls counted but 2 returns (uretprobe)",
	}
	if r.Verdict != Fail || r.ExitCode() != 1 || strings.Join(r.Failures, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(r.Failures, "\n"), strings.Join(want, "\n"))
	}

	// NVML: the energy did not rise.
	no := false
	bad := &NVML{Status: "ok", Verdict: NVMLFail, Required: true, EnergyIncreased: &no, Note: "did not rise"}
	r = &Result{Status: "ok", Phases: phases(), NVML: bad, ProcAddress: pa()}
	r.evaluate()
	if r.Verdict != Fail || len(r.Failures) != 1 || r.Failures[0] != "NVML: fail: did not rise" {
		t.Errorf("required NVML failed: %s %q", r.Verdict, r.Failures)
	}
	nb := *bad
	nb.Required = false
	r = &Result{Status: "ok", Phases: phases(), NVML: &nb, ProcAddress: pa()}
	r.evaluate()
	if r.Verdict != Pass || len(r.Notes) != 1 {
		t.Errorf("NVML not required: %s %q %q", r.Verdict, r.Failures, r.Notes)
	}

	// A workload that stopped early fails, whatever it counted.
	r = &Result{Status: "workload failed", Reason: "boom", Phases: phases()[:2], ProcAddress: pa()}
	r.evaluate()
	if r.Verdict != Fail || r.Status != "workload failed" {
		t.Errorf("early stop: %s %s", r.Verdict, r.Status)
	}
	// A run that lost phases without saying why fails too.
	r = &Result{Status: "ok", Phases: phases()[:3], ProcAddress: pa()}
	r.evaluate()
	if r.Verdict != Fail || len(r.Failures) != 1 || !strings.Contains(r.Failures[0], "only 3 of 7 phases") {
		t.Errorf("lost phases: %s %q", r.Verdict, r.Failures)
	}
}

func TestExitCodes(t *testing.T) {
	for v, want := range map[string]int{Pass: 0, Skipped: 0, Fail: 1} {
		if got := (&Result{Verdict: v}).ExitCode(); got != want {
			t.Errorf("%s: exit %d, want %d", v, got, want)
		}
	}
}
