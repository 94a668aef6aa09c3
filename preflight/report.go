package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/hone-llm/hone/engine"
	"github.com/hone-llm/hone/internal/atomicfile"
)

// SchemaVersion is the version of the report's JSON layout.
const SchemaVersion = 1

// Status is a check's outcome.
type Status string

const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Check is one verified fact about the host.
type Check struct {
	Section string `json:"section"` // host, ebpf, gpu, serving, exercise
	Name    string `json:"name"`
	Status  Status `json:"status"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix,omitempty"`
}

// Target selects which checks must pass.
type Target string

const (
	TargetCPU    Target = "cpu"    // the CPU exercise and the emulator: nothing privileged
	TargetDaemon Target = "daemon" // + every eBPF feature the daemon uses
	TargetGPU    Target = "gpu"    // + NVML, GPUs and the serving stack
)

// ParseTarget accepts cpu, daemon or gpu.
func ParseTarget(s string) (Target, error) {
	switch Target(s) {
	case TargetCPU, TargetDaemon, TargetGPU:
		return Target(s), nil
	}
	return "", fmt.Errorf("target %q: want cpu, daemon or gpu", s)
}

// Options configure a preflight run.
type Options struct {
	Target      Target
	HoneVersion string
	HoneCommit  string
	ModelDir    string // hash the model's files
	Freeze      string // write `pip freeze` here
	Ports       []int  // ports the deployment needs free on 127.0.0.1
	Python      string // interpreter; default python3
	// VLLM is the vllm executable whose `--version` the gpu target reads;
	// default: the vllm beside Python when Python names a path and one is
	// there, else vllm on PATH.
	VLLM string
}

// Report is the preflight's result.
type Report struct {
	SchemaVersion int      `json:"schema_version"`
	Target        Target   `json:"target"`
	Host          Host     `json:"host"`
	GPUs          []GPU    `json:"gpus,omitempty"`
	Serving       *Serving `json:"serving,omitempty"`
	Checks        []Check  `json:"checks"`
	Passed        bool     `json:"passed"`
}

// Run performs the checks the target needs. It never returns an error for
// a missing feature: that is a failed check.
func Run(ctx context.Context, o Options) *Report {
	r := &Report{SchemaVersion: SchemaVersion, Target: o.Target}
	r.Host = HostInfo(o.HoneVersion, o.HoneCommit)
	r.add(hostChecks(r.Host)...)
	r.add(exerciseChecks(ctx, o.python())...)
	if o.Target == TargetDaemon || o.Target == TargetGPU {
		r.add(EBPFChecks()...)
	}
	if o.Target == TargetGPU {
		gpus, checks := GPUChecks(nil)
		r.GPUs = gpus
		r.add(checks...)
		sv, checks := servingChecks(ctx, o)
		r.Serving = sv
		r.add(checks...)
	} else if len(o.Ports) > 0 || o.ModelDir != "" || o.Freeze != "" {
		sv, checks := servingChecks(ctx, o)
		r.Serving = sv
		r.add(checks...)
	}
	r.Passed = true
	for _, c := range r.Checks {
		if c.Status == Fail {
			r.Passed = false
		}
	}
	return r
}

func (o Options) python() string {
	if o.Python != "" {
		return o.Python
	}
	return "python3"
}

func (o Options) vllm() string {
	if o.VLLM != "" {
		return o.VLLM
	}
	bin := engine.FactsOf(engine.VLLM).Binary
	if py := o.python(); strings.ContainsRune(py, filepath.Separator) {
		if p := filepath.Join(filepath.Dir(py), bin); isExecutable(p) {
			return p
		}
	}
	return bin
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func (r *Report) add(c ...Check) { r.Checks = append(r.Checks, c...) }

// Failed lists the failed checks' names.
func (r *Report) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c.Section+"/"+c.Name)
		}
	}
	return out
}

// WriteTable prints the short human table.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "hone preflight --target %s: %s\n", r.Target, map[bool]string{true: "PASS", false: "FAIL"}[r.Passed])
	fmt.Fprintf(w, "host: %s, kernel %s, %d × %s, %.1f GiB, %s\n", r.Host.OS, r.Host.Kernel, r.Host.CPUs, r.Host.CPUModel,
		float64(r.Host.MemoryBytes)/(1<<30), r.Host.GoVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tDETAIL\tFIX")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\n", strings.ToUpper(string(c.Status)), c.Section, c.Name, c.Detail, c.Fix)
	}
	return tw.Flush()
}

// WriteJSON writes the report atomically to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'))
}

// Hardware is what a run record's "hardware" holds: the host section and
// the GPUs NVML reports (gpu_model and gpu_count feed gate fingerprints;
// "none" where NVML is unavailable, with the reason).
func Hardware(honeVersion, honeCommit string) map[string]any {
	h := HostInfo(honeVersion, honeCommit)
	gpus, checks := GPUChecks(nil)
	hw := map[string]any{"host": h, "gpu_count": len(gpus), "gpu_model": "none"}
	if len(gpus) > 0 {
		hw["gpus"] = gpus
		hw["gpu_model"] = gpus[0].Name
	}
	for _, c := range checks {
		if c.Name == "nvml" {
			hw["nvml"] = c.Detail
		}
	}
	return hw
}
