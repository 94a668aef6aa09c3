package proof

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/hone-llm/hone/internal/atomicfile"
)

// SchemaVersion is the version of the verdict's JSON layout.
const SchemaVersion = 1

// Verdicts of a proof.
const (
	Pass    = "pass"
	Fail    = "fail"
	Skipped = "skipped" // no NVIDIA driver: nothing is claimed
)

// Probe verdicts: counted == expected, fewer, more.
const (
	Exact  = "exact"
	Missed = "missed"
	Extra  = "extra"
)

// StatusNoDriver is the status of a proof skipped because the host has no
// NVIDIA driver (libcuda.so.1 cannot be loaded, or cuInit finds no GPU).
const StatusNoDriver = "no NVIDIA driver"

// Result is the proof's verdict, written as JSON by --out.
type Result struct {
	SchemaVersion int    `json:"schema_version"`
	Verdict       string `json:"verdict"` // pass | fail | skipped
	// Status is "ok" (the proof ran to the end; the verdict says how it
	// went), StatusNoDriver, or what stopped it.
	Status   string   `json:"status"`
	Reason   string   `json:"reason,omitempty"`
	Failures []string `json:"failures,omitempty"` // why the verdict is fail, one line each
	Notes    []string `json:"notes,omitempty"`
	ElapsedS float64  `json:"elapsed_s"`

	LibCUDA LibCUDA  `json:"libcuda"`
	Device  *Device  `json:"device,omitempty"`
	Daemon  *Daemon  `json:"daemon,omitempty"`
	Config  *Counted `json:"config,omitempty"`
	// Probes are the totals per call kind the daemon counts, over every
	// phase; Phases the same per phase (a kind neither expected nor counted
	// in a phase is left out of it).
	Probes        map[string]Probe  `json:"probes,omitempty"`
	Phases        []Phase           `json:"phases,omitempty"`
	OutsidePhases map[string]uint64 `json:"outside_phases,omitempty"` // counted before the first phase
	ProcAddress   *ProcAddress      `json:"proc_address,omitempty"`
	NVML          *NVML             `json:"nvml,omitempty"`
}

// LibCUDA is the driver library the workload loaded.
type LibCUDA struct {
	Requested string `json:"requested"`          // what dlopen was given
	Override  bool   `json:"override,omitempty"` // from HONE_LIBCUDA
	Loaded    string `json:"loaded,omitempty"`   // the file the dynamic loader opened
	// DriverVersion is cuDriverGetVersion's (12040 for CUDA 12.4).
	DriverVersion int `json:"driver_version,omitempty"`
}

// Device is the GPU the workload ran on (CUDA device 0).
type Device struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	UUID              string `json:"uuid,omitempty"`
	ComputeCapability string `json:"compute_capability"`
	Multiprocessors   int    `json:"multiprocessors"`
}

// Daemon is what the in-process daemon probed.
type Daemon struct {
	PID       int          `json:"workload_pid"`
	Libraries []DaemonLibs `json:"libraries"`
}

// DaemonLibs is one libcuda file the daemon probed.
type DaemonLibs struct {
	Path          string   `json:"path"`
	Symbols       []string `json:"symbols"`
	LaunchSymbols []string `json:"launch_symbols,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// Counted is how many calls each phase makes.
type Counted struct {
	Launches    int     `json:"launches"`
	Graphs      int     `json:"graph_launches"`
	Copies      int     `json:"copies_per_direction"`
	Syncs       int     `json:"synchronizes_per_kind"`
	BusySeconds float64 `json:"busy_seconds"`
}

// Probe compares the calls of one kind the workload made with what the
// daemon counted. Waits is, for the kinds the host waits in, the returns
// the daemon's uretprobe counted (one per call when exact).
type Probe struct {
	Expected uint64  `json:"expected"`
	Counted  uint64  `json:"counted"`
	Verdict  string  `json:"verdict"` // exact | missed | extra
	Waits    *uint64 `json:"waits,omitempty"`
}

// Phase is one counted phase of the workload.
type Phase struct {
	Name     string           `json:"name"`
	Calls    string           `json:"calls"`
	Detail   string           `json:"detail,omitempty"`
	ElapsedS float64          `json:"elapsed_s"`
	Error    string           `json:"error,omitempty"`
	Probes   map[string]Probe `json:"probes"`
}

// ProcAddress is what cuGetProcAddress returns for the probed entry points,
// compared with libcuda's exports: the CUDA runtime (libcudart) reaches
// every driver function through cuGetProcAddress, so a pointer that is not
// the exported entry point escapes the daemon's uprobes.
type ProcAddress struct {
	Function string       `json:"function"` // cuGetProcAddress_v2 | cuGetProcAddress | "" (neither exported)
	Error    string       `json:"error,omitempty"`
	Symbols  []ProcSymbol `json:"symbols,omitempty"`
	// LaunchViaPointer is the launch_proc_address phase's launch probe.
	LaunchViaPointer *Probe `json:"launch_via_pointer,omitempty"`
	Finding          string `json:"finding,omitempty"`
}

// ProcSymbol is one entry point asked of cuGetProcAddress.
type ProcSymbol struct {
	Name          string `json:"name"`
	ProcAddress   string `json:"proc_address,omitempty"`
	Export        string `json:"export"`
	ExportAddress string `json:"export_address,omitempty"`
	Same          bool   `json:"same"`                     // the pointer is Export's address
	MatchesExport string `json:"matches_export,omitempty"` // the exported name at the pointer, if any
	Error         string `json:"error,omitempty"`
}

// NVML is what NVML read of the GPU around the busy phase.
type NVML struct {
	Status  string `json:"status"` // ok | unavailable (<reason>)
	Verdict string `json:"verdict"`
	// Required says whether this part counts toward the proof's verdict:
	// not when HONE_LIBCUDA overrides the driver (the workload need not
	// have run on a GPU NVML sees).
	Required        bool     `json:"required"`
	GPU             string   `json:"gpu,omitempty"` // UUID
	GPUName         string   `json:"gpu_name,omitempty"`
	Samples         int      `json:"samples,omitempty"`
	EnergyBeforeMJ  *uint64  `json:"energy_before_mj"`
	EnergyAfterMJ   *uint64  `json:"energy_after_mj"`
	EnergyIncreased *bool    `json:"energy_increased"`
	MaxPowerW       *float64 `json:"max_power_w"`
	MaxUtil         *float64 `json:"max_util"` // ratio 0-1 of time a kernel ran
	MaxMemoryUsed   *uint64  `json:"max_memory_used_bytes,omitempty"`
	MaxSMClockMHz   *float64 `json:"max_sm_clock_mhz,omitempty"`
	Note            string   `json:"note,omitempty"`
}

// NVML verdicts.
const (
	NVMLPass        = "pass"
	NVMLFail        = "fail"
	NVMLUnavailable = "unavailable"
)

// compare is the probe verdict of expected against counted.
func compare(expected, counted uint64) Probe {
	p := Probe{Expected: expected, Counted: counted, Verdict: Exact}
	switch {
	case counted < expected:
		p.Verdict = Missed
	case counted > expected:
		p.Verdict = Extra
	}
	return p
}

// classCount is what the daemon counted of one kind.
type classCount struct{ calls, waits uint64 }

// phaseProbes compares one phase's calls (by kind) with the daemon's
// counts over the phase.
func phaseProbes(calls map[string]uint64, counted map[string]classCount) map[string]Probe {
	out := map[string]Probe{}
	for _, c := range Classes {
		e, n := calls[c], counted[c]
		if e == 0 && n.calls == 0 && n.waits == 0 {
			continue
		}
		p := compare(e, n.calls)
		if waitClasses[c] {
			w := n.waits
			p.Waits = &w
		}
		out[c] = p
	}
	return out
}

// evaluate fills the totals, the cuGetProcAddress finding, and the verdict
// of a proof that ran its phases.
func (r *Result) evaluate() {
	r.Probes = map[string]Probe{}
	for _, c := range Classes {
		var e, n, w uint64
		for _, ph := range r.Phases {
			if p, ok := ph.Probes[c]; ok {
				e += p.Expected
				n += p.Counted
				if p.Waits != nil {
					w += *p.Waits
				}
			}
		}
		p := compare(e, n)
		if waitClasses[c] {
			p.Waits = &w
		}
		r.Probes[c] = p
	}
	for _, ph := range r.Phases {
		if ph.Error != "" {
			r.Failures = append(r.Failures, fmt.Sprintf("phase %s: the workload failed: %s", ph.Name, oneLine(ph.Error)))
		}
		for _, c := range Classes {
			p, ok := ph.Probes[c]
			if !ok {
				continue
			}
			if p.Verdict != Exact {
				r.Failures = append(r.Failures, fmt.Sprintf("phase %s: %s %s: %d made, %d counted", ph.Name, c, p.Verdict, p.Expected, p.Counted))
			}
			if p.Waits != nil && *p.Waits != p.Counted {
				r.Failures = append(r.Failures, fmt.Sprintf("phase %s: %s: %d calls counted but %d returns (uretprobe)", ph.Name, c, p.Counted, *p.Waits))
			}
		}
	}
	if len(r.Phases) < len(Phases) && r.Status == "ok" {
		r.Failures = append(r.Failures, fmt.Sprintf("only %d of %d phases ran", len(r.Phases), len(Phases)))
	}
	r.procAddressFinding()
	if r.NVML != nil && r.NVML.Verdict != NVMLPass {
		msg := "NVML: " + r.NVML.Verdict
		if r.NVML.Verdict == NVMLUnavailable {
			msg = "NVML: " + r.NVML.Status
		}
		if r.NVML.Note != "" {
			msg += ": " + r.NVML.Note
		}
		if r.NVML.Required {
			r.Failures = append(r.Failures, msg)
		} else {
			r.Notes = append(r.Notes, msg+" (not required: libcuda is overridden by HONE_LIBCUDA)")
		}
	}
	switch {
	case r.Status == "ok" && len(r.Failures) == 0:
		r.Verdict = Pass
	default:
		r.Verdict = Fail
		if r.Status == "ok" {
			r.Status = "counts or checks differ"
		}
	}
}

// procAddressFinding says whether launches through cuGetProcAddress's
// pointer reach the daemon's probe.
func (r *Result) procAddressFinding() {
	pa := r.ProcAddress
	if pa == nil {
		return
	}
	for _, ph := range r.Phases {
		if ph.Name == PhaseLaunchProcAddress {
			p := ph.Probes["launch"]
			pa.LaunchViaPointer = &p
		}
	}
	if pa.Function == "" {
		pa.Finding = "libcuda has no cuGetProcAddress (a driver before CUDA 11.3): runtimes of that age call the exports, which the daemon probes"
		return
	}
	var launch *ProcSymbol
	var others []string
	for i, s := range pa.Symbols {
		if s.Name == "cuLaunchKernel" {
			launch = &pa.Symbols[i]
		} else if !s.Same && s.Error == "" {
			others = append(others, fmt.Sprintf("%s (%s)", s.Name, whereTo(s)))
		}
	}
	if launch == nil || launch.Error != "" || pa.LaunchViaPointer == nil {
		why := "no pointer"
		if launch != nil && launch.Error != "" {
			why = launch.Error
		}
		pa.Finding = fmt.Sprintf("%s(\"cuLaunchKernel\") gave %s: the runtime's path was not tried", pa.Function, why)
		return
	}
	p := pa.LaunchViaPointer
	var b strings.Builder
	fmt.Fprintf(&b, "%s(\"cuLaunchKernel\") returns %s, %s: ", pa.Function, launch.ProcAddress, whereTo(*launch))
	switch {
	case p.Verdict == Exact && launch.MatchesExport != "":
		fmt.Fprintf(&b, "launches through it, as the CUDA runtime makes them, hit the daemon's uprobe (%d of %d counted)", p.Counted, p.Expected)
	case p.Verdict == Exact:
		fmt.Fprintf(&b, "yet the daemon counted launches through it exactly (%d of %d)", p.Counted, p.Expected)
	case p.Counted == 0 && launch.MatchesExport == "":
		fmt.Fprintf(&b, "launches through it, the CUDA runtime's path, are invisible to the daemon's uprobes on the exports "+
			"(0 of %d counted): probe the runtime (libcudart) or the entry points cuGetProcAddress returns", p.Expected)
	default:
		fmt.Fprintf(&b, "the daemon counted %d of %d launches through it (%s)", p.Counted, p.Expected, p.Verdict)
	}
	if len(others) > 0 {
		fmt.Fprintf(&b, "; other entry points not the exports the daemon probes: %s", strings.Join(others, ", "))
	}
	pa.Finding = b.String()
}

func whereTo(s ProcSymbol) string {
	switch {
	case s.Same:
		return "the exported " + s.Export
	case s.MatchesExport != "":
		return "the exported " + s.MatchesExport + " (not " + s.Export + ")"
	case s.ExportAddress == "":
		return s.Export + " is not exported"
	}
	return "not the exported " + s.Export + " (" + s.ExportAddress + ") nor any exported name the daemon probes"
}

// ExitCode is `hone preflight --prove`'s exit status for the result: 0
// pass or skipped (no NVIDIA driver), 1 fail.
func (r *Result) ExitCode() int {
	if r.Verdict == Fail {
		return 1
	}
	return 0
}

// WriteJSON writes the result atomically to path.
func (r *Result) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'))
}

// WriteText prints the verdict for people.
func (r *Result) WriteText(w io.Writer) error {
	head := strings.ToUpper(r.Verdict)
	if r.Verdict == Skipped {
		fmt.Fprintf(w, "hone preflight --target gpu --prove: SKIPPED: %s (%s)\n", r.Status, r.Reason)
		fmt.Fprintln(w, "nothing is claimed about GPU tracing on this host; run it on a host with an NVIDIA GPU and driver")
		return nil
	}
	fmt.Fprintf(w, "hone preflight --target gpu --prove: %s in %.1f s (%s)\n", head, r.ElapsedS, r.Status)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", r.Reason)
	}
	lib := r.LibCUDA.Requested
	if r.LibCUDA.Loaded != "" {
		lib = r.LibCUDA.Loaded
	}
	if r.LibCUDA.Override {
		lib += " (HONE_LIBCUDA)"
	}
	if r.LibCUDA.DriverVersion > 0 {
		lib += fmt.Sprintf(", CUDA driver API %d.%d", r.LibCUDA.DriverVersion/1000, r.LibCUDA.DriverVersion%1000/10)
	}
	fmt.Fprintf(w, "libcuda: %s\n", lib)
	if d := r.Device; d != nil {
		fmt.Fprintf(w, "device 0: %s, compute capability %s, %d SMs %s\n", d.Name, d.ComputeCapability, d.Multiprocessors, d.UUID)
	}
	if r.Daemon != nil {
		for _, l := range r.Daemon.Libraries {
			fmt.Fprintf(w, "daemon probed %s: %s; launches: %s%s\n", l.Path, strings.Join(l.Symbols, " "), strings.Join(l.LaunchSymbols, " "),
				map[bool]string{true: "", false: " (error: " + l.Error + ")"}[l.Error == ""])
		}
	}
	if len(r.Phases) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PHASE\tCALL KIND\tEXPECTED\tCOUNTED\tWAITS\tVERDICT")
		row := func(phase, c string, p Probe) {
			waits := "-"
			if p.Waits != nil {
				waits = fmt.Sprint(*p.Waits)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", phase, c, p.Expected, p.Counted, waits, p.Verdict)
		}
		for _, ph := range r.Phases {
			for _, c := range sortedKinds(ph.Probes) {
				row(ph.Name, c, ph.Probes[c])
			}
			if ph.Error != "" {
				fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\n", ph.Name, oneLine(ph.Error))
			}
		}
		for _, c := range Classes {
			if p, ok := r.Probes[c]; ok {
				row("total", c, p)
			}
		}
		tw.Flush()
	}
	if len(r.OutsidePhases) > 0 {
		fmt.Fprintf(w, "counted before the first phase (not compared): %v\n", r.OutsidePhases)
	}
	if pa := r.ProcAddress; pa != nil && pa.Finding != "" {
		fmt.Fprintf(w, "cuGetProcAddress: %s\n", pa.Finding)
	}
	if n := r.NVML; n != nil {
		if n.Verdict == NVMLUnavailable {
			fmt.Fprintf(w, "NVML: %s", n.Status)
		} else {
			fmt.Fprintf(w, "NVML: %s (status %s)", n.Verdict, n.Status)
		}
		if n.EnergyBeforeMJ != nil && n.EnergyAfterMJ != nil {
			fmt.Fprintf(w, "; %s energy %d -> %d mJ (+%d mJ) over the busy phase", n.GPU, *n.EnergyBeforeMJ, *n.EnergyAfterMJ,
				int64(*n.EnergyAfterMJ)-int64(*n.EnergyBeforeMJ))
		}
		if n.MaxPowerW != nil {
			fmt.Fprintf(w, ", max power %.1f W", *n.MaxPowerW)
		}
		if n.MaxUtil != nil {
			fmt.Fprintf(w, ", max utilization %.0f%%", *n.MaxUtil*100)
		}
		if n.MaxSMClockMHz != nil {
			fmt.Fprintf(w, ", max SM clock %.0f MHz", *n.MaxSMClockMHz)
		}
		if n.Note != "" {
			fmt.Fprintf(w, "; %s", n.Note)
		}
		fmt.Fprintln(w)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAIL: %s\n", f)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// sortedKinds lists a phase's kinds in Classes order.
func sortedKinds(m map[string]Probe) []string {
	var out []string
	for _, c := range Classes {
		if _, ok := m[c]; ok {
			out = append(out, c)
		}
	}
	return out
}
