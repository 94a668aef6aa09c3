package proof

import (
	"log/slog"
	"os"
	"time"

	"github.com/hone-llm/hone/daemon"
)

// LibCUDAEnv names the environment variable that overrides the driver
// library the workload loads (tests point it at a fake libcuda).
const LibCUDAEnv = "HONE_LIBCUDA"

// DefaultLibCUDA is the driver library's soname.
const DefaultLibCUDA = "libcuda.so.1"

// Options configure a proof. The zero value is the proof `hone preflight
// --target gpu --prove` runs.
type Options struct {
	// LibCUDA is what the workload dlopens: "" means $HONE_LIBCUDA, or
	// libcuda.so.1 when that is unset.
	LibCUDA string
	// Workload is the workload's command line; default: this executable
	// with "preflight proof-workload" (hone re-executing itself).
	Workload []string
	// WorkloadEnv is added to the workload's environment.
	WorkloadEnv []string

	Launches        int           // per launch phase (default 100)
	Graphs          int           // graph launches (default 50)
	Copies          int           // per direction and copy phase (default 10)
	Syncs           int           // per kind of synchronize (default 10)
	Busy            time.Duration // busy phase (default 3s)
	MaxBusyLaunches int           // busy phase launch cap (default 100000)
	Timeout         time.Duration // the whole proof (default 170s)

	NVML daemon.NVMLOpener // nil: the real libnvidia-ml
	Log  *slog.Logger      // the daemon's log; nil: none
}

func (o Options) withDefaults() (Options, bool) {
	override := false
	if o.LibCUDA == "" {
		if v := os.Getenv(LibCUDAEnv); v != "" {
			o.LibCUDA, override = v, true
		} else {
			o.LibCUDA = DefaultLibCUDA
		}
	} else {
		override = o.LibCUDA != DefaultLibCUDA
	}
	if len(o.Workload) == 0 {
		o.Workload = []string{"/proc/self/exe", "preflight", "proof-workload"}
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Launches, 100)
	def(&o.Graphs, 50)
	def(&o.Copies, 10)
	def(&o.Syncs, 10)
	def(&o.MaxBusyLaunches, 100000)
	if o.Busy <= 0 {
		o.Busy = 3 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 170 * time.Second
	}
	return o, override
}

func (o Options) config() workloadConfig {
	return workloadConfig{LibCUDA: o.LibCUDA, Launches: o.Launches, Graphs: o.Graphs, Copies: o.Copies, Syncs: o.Syncs,
		BusySeconds: o.Busy.Seconds(), MaxBusyLaunches: o.MaxBusyLaunches}
}
