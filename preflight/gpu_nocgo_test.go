//go:build !cgo

package preflight

import (
	"context"
	"testing"
)

// Without cgo there is no NVML, whatever the host has: the gpu target
// fails its nvml check with that reason, and Hardware says so.
func TestGPUTargetWithoutCgo(t *testing.T) {
	const want = "nvml: unavailable (hone was built without cgo: CGO_ENABLED=0 or a cross build)"
	r := Run(context.Background(), Options{Target: TargetGPU, Python: "python3"})
	if c := find(t, r.Checks, "nvml"); c.Status != Fail || c.Detail != want || c.Fix == "" {
		t.Errorf("nvml check: %+v", c)
	}
	if r.Passed || len(r.GPUs) != 0 {
		t.Errorf("gpu target without cgo: passed %v, GPUs %+v", r.Passed, r.GPUs)
	}
	if hw := Hardware("v", "c"); hw["nvml"] != want || hw["gpu_model"] != "none" || hw["gpu_count"] != 0 {
		t.Errorf("hardware %v", hw)
	}
}
