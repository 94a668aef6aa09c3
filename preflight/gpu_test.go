//go:build cgo

package preflight

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func TestGPUInventoryFromH200Mock(t *testing.T) {
	srv := dgxh200.New()
	for _, d := range srv.Devices {
		dev := &d.(*server.Device).Device
		dev.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		dev.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) { return nvml.TOPOLOGY_NODE, nvml.SUCCESS }
	}
	gpus, cs := GPUChecks(srv)
	if len(gpus) != 8 {
		t.Fatalf("%d GPUs, want 8: %+v", len(gpus), cs)
	}
	g := gpus[0]
	if g.Name != "NVIDIA H200 141GB HBM3e" || g.MemoryBytes != 144384*1024*1024 || g.Persistence != "enabled" || g.MIG != "disabled" {
		t.Errorf("gpu0 %+v", g)
	}
	if len(g.TopologyToGP) != 7 || !strings.Contains(g.TopologyToGP[0], "same NUMA node") {
		t.Errorf("topology %v", g.TopologyToGP)
	}
	for _, c := range cs {
		if c.Status == Fail {
			t.Errorf("failed check on the mock: %+v", c)
		}
	}
	// A device whose persistence query is unimplemented reports unsupported.
	srv2 := dgxh200.New()
	gpus, _ = GPUChecks(srv2)
	if gpus[0].Persistence != "unsupported" {
		t.Errorf("persistence without support: %q", gpus[0].Persistence)
	}
}
