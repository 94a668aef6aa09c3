package emulator

// cudaProbe is what a live engine step calls when Config.CUDALib is set:
// the driver entry points hone's daemon puts uprobes on (bpf/cuda.bpf.c),
// called at the instants a GPU host's engine would call them. A step
// starts with launch (cuGraphLaunch when graph, for a decode-only step
// replaying its CUDA graph; cuLaunchKernel otherwise) and ends with sync
// (cuStreamSynchronize) at its modelled end. The engine holds nil when
// there is no library: no call and no cost. Tests use a Go fake. sync
// returns the CLOCK_MONOTONIC ns read right before the step's launch and
// before the synchronize where another process made them (workerProbe),
// else zeros (the engine's own readings hold).
type cudaProbe interface {
	launch(graph bool)
	sync() (launchNs, syncNs int64)
}

// cudaSymbols are the entry points a --cuda-lib library must export.
var cudaSymbols = []string{"cuLaunchKernel", "cuGraphLaunch", "cuStreamSynchronize"}

// graphStep says whether a step replays a CUDA graph on a GPU host: it
// decodes only (no entry carries prefill tokens) and graphs are on.
func graphStep(entries []StepEntry, eager bool) bool {
	if eager {
		return false
	}
	for _, en := range entries {
		if !en.Decode {
			return false
		}
	}
	return true
}
