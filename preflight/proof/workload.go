package proof

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// kernelPTX is the kernel the workload JIT-loads (see kernel.ptx).
//
//go:embed kernel.ptx
var kernelPTX string

// Classes are the CUDA call kinds the daemon counts, in bpf.CUDACalls'
// order (a test checks they agree).
var Classes = []string{"launch", "graph_launch", "stream_synchronize", "ctx_synchronize", "memcpy_async",
	"event_synchronize", "memcpy_sync"}

// waitClasses are the kinds the host waits in: the daemon's uretprobe
// counts a wait per call.
var waitClasses = map[string]bool{"stream_synchronize": true, "ctx_synchronize": true, "event_synchronize": true, "memcpy_sync": true}

// The counted phases, in the order the workload runs them.
const (
	PhaseLaunchExported    = "launch_exported"
	PhaseLaunchProcAddress = "launch_proc_address"
	PhaseGraph             = "graph_launch"
	PhaseMemcpyAsync       = "memcpy_async"
	PhaseMemcpySync        = "memcpy_sync"
	PhaseSynchronize       = "synchronize"
	PhaseBusy              = "busy"
)

// Phases lists the phases in order.
var Phases = []string{PhaseLaunchExported, PhaseLaunchProcAddress, PhaseGraph, PhaseMemcpyAsync, PhaseMemcpySync,
	PhaseSynchronize, PhaseBusy}

// phaseCalls says what each phase calls, for the report.
func phaseCalls(name string, cfg workloadConfig) string {
	switch name {
	case PhaseLaunchExported:
		return fmt.Sprintf("cuLaunchKernel ×%d through the exported symbol", cfg.Launches)
	case PhaseLaunchProcAddress:
		return fmt.Sprintf("cuLaunchKernel ×%d through the pointer cuGetProcAddress returned (the CUDA runtime's path)", cfg.Launches)
	case PhaseGraph:
		return fmt.Sprintf("cuGraphLaunch ×%d of a captured one-kernel graph", cfg.Graphs)
	case PhaseMemcpyAsync:
		return fmt.Sprintf("cuMemcpyHtoDAsync_v2 ×%d + cuMemcpyDtoHAsync_v2 ×%d (64 KiB, pinned)", cfg.Copies, cfg.Copies)
	case PhaseMemcpySync:
		return fmt.Sprintf("cuMemcpyHtoD_v2 ×%d + cuMemcpyDtoH_v2 ×%d (64 KiB, pinned)", cfg.Copies, cfg.Copies)
	case PhaseSynchronize:
		return fmt.Sprintf("cuCtxSynchronize ×%d, cuStreamSynchronize ×%d, cuEventRecord + cuEventSynchronize ×%d", cfg.Syncs, cfg.Syncs, cfg.Syncs)
	case PhaseBusy:
		return fmt.Sprintf("cuLaunchKernel + cuStreamSynchronize of a spin kernel over every SM for %.1f s", cfg.BusySeconds)
	}
	return ""
}

// procQueries are the entry points compared with what cuGetProcAddress
// returns: the name asked for, then the exported names the daemon could
// probe for it (the versioned name the CUDA 12 headers map it to first).
var procQueries = []struct {
	query   string
	exports []string
}{
	{"cuLaunchKernel", []string{"cuLaunchKernel", "cuLaunchKernel_ptsz"}},
	{"cuGraphLaunch", []string{"cuGraphLaunch", "cuGraphLaunch_ptsz"}},
	{"cuStreamSynchronize", []string{"cuStreamSynchronize", "cuStreamSynchronize_ptsz"}},
	{"cuCtxSynchronize", []string{"cuCtxSynchronize", "cuCtxSynchronize_v2"}},
	{"cuEventSynchronize", []string{"cuEventSynchronize"}},
	{"cuMemcpyHtoDAsync", []string{"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"}},
	{"cuMemcpyDtoHAsync", []string{"cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"}},
	{"cuMemcpyHtoD", []string{"cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"}},
	{"cuMemcpyDtoH", []string{"cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"}},
}

// workloadConfig is the first line the prover writes to the workload's
// standard input.
type workloadConfig struct {
	LibCUDA         string  `json:"libcuda"`
	Launches        int     `json:"launches"` // per launch phase
	Graphs          int     `json:"graphs"`
	Copies          int     `json:"copies"` // per direction, per copy phase
	Syncs           int     `json:"syncs"`  // per kind of synchronize
	BusySeconds     float64 `json:"busy_seconds"`
	MaxBusyLaunches int     `json:"max_busy_launches"`
}

// workloadEvent is one line the workload writes to its standard output.
type workloadEvent struct {
	Event string `json:"event"` // ready | phase | done

	// ready
	Status        string       `json:"status,omitempty"` // ok | no_library | no_device | error | unsupported
	Reason        string       `json:"reason,omitempty"`
	Library       string       `json:"library,omitempty"` // the file the dynamic loader opened
	DriverVersion int          `json:"driver_version,omitempty"`
	Device        *Device      `json:"device,omitempty"`
	ProcAddress   *ProcAddress `json:"proc_address,omitempty"`

	// phase
	Phase    string            `json:"phase,omitempty"`
	Calls    map[string]uint64 `json:"calls,omitempty"`
	Detail   string            `json:"detail,omitempty"`
	ElapsedS float64           `json:"elapsed_s,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// RunWorkload is the proof's workload, run by `hone preflight
// proof-workload` as a child of the prover. It reads its configuration
// (one JSON line) from in, loads libcuda, sets up device 0 and writes a
// "ready" event to out; then, for each phase, it waits for a line on in,
// runs the phase and writes the calls it made, by kind; after the last
// phase it waits for a line (or end of input), frees everything and writes
// "done". Without a driver the ready event says "no_library" (libcuda
// cannot be loaded) or "no_device" (cuInit finds no GPU), and it exits.
func RunWorkload(in io.Reader, out io.Writer) error {
	// The CUDA context is current on one OS thread: every call from this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rd := bufio.NewReader(in)
	enc := json.NewEncoder(out)
	emit := func(e workloadEvent) error {
		if f, ok := out.(interface{ Flush() error }); ok {
			defer f.Flush()
		}
		return enc.Encode(e)
	}
	line, err := rd.ReadString('\n')
	if err != nil && line == "" {
		return fmt.Errorf("proof workload: no configuration on stdin: %w", err)
	}
	var cfg workloadConfig
	if err := json.Unmarshal([]byte(line), &cfg); err != nil {
		return fmt.Errorf("proof workload: configuration: %w", err)
	}
	status, reason, loaded, version := cudaOpen(cfg.LibCUDA)
	ready := workloadEvent{Event: "ready", Status: status, Reason: reason, Library: loaded, DriverVersion: version}
	if status != "ok" {
		return emit(ready)
	}
	defer cudaCleanup()
	dev, err := cudaSetup(kernelPTX)
	if err != nil {
		ready.Status, ready.Reason = "error", err.Error()
		return emit(ready)
	}
	pa := cudaProcAddresses()
	ready.Device, ready.ProcAddress = &dev, &pa
	if err := emit(ready); err != nil {
		return err
	}
	for _, ph := range Phases {
		if _, err := rd.ReadString('\n'); err != nil {
			return fmt.Errorf("proof workload: input closed before phase %s", ph)
		}
		start := time.Now()
		calls, detail, err := cudaPhase(ph, cfg)
		ev := workloadEvent{Event: "phase", Phase: ph, Calls: calls, Detail: detail, ElapsedS: seconds(time.Since(start))}
		if err != nil {
			ev.Error = err.Error()
		}
		if e := emit(ev); e != nil {
			return e
		}
		if err != nil {
			return fmt.Errorf("proof workload: phase %s: %w", ph, err)
		}
	}
	_, _ = rd.ReadString('\n')
	cudaCleanup()
	return emit(workloadEvent{Event: "done"})
}

func seconds(d time.Duration) float64 { return float64(d.Round(time.Millisecond)) / 1e9 }

// oneLine shortens a multi-line message for a table.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
