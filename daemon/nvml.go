//go:build cgo

package daemon

import (
	"encoding/binary"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLOpener returns the NVML library to use (tests pass go-nvml's mocks).
type NVMLOpener func() nvml.Interface

// nvmlGPUs reads GPUs through NVML for an NVMLSampler.
type nvmlGPUs struct {
	lib      nvml.Interface
	handles  []nvml.Device  // one per sampler device
	lastProc map[int]uint64 // per GPU: the last process-utilization timestamp
}

// OpenNVML initializes NVML (the real library when open is nil). Where it
// cannot, the sampler reports "unavailable (<reason>)" and samples nothing.
func OpenNVML(open NVMLOpener) *NVMLSampler {
	var lib nvml.Interface
	if open == nil {
		lib = nvml.New()
	} else {
		lib = open()
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return disabledNVML(nvmlReason(ret))
	}
	r := &nvmlGPUs{lib: lib, lastProc: map[int]uint64{}}
	s := &NVMLSampler{gpus: r, status: "ok"}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		s.driver = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return disabledNVML("device count: " + nvmlReason(ret))
	}
	if n == 0 {
		lib.Shutdown()
		return disabledNVML("no GPUs")
	}
	for i := 0; i < n; i++ {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		g := GPUDevice{Index: i}
		g.UUID, _ = h.GetUUID()
		g.Name, _ = h.GetName()
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryBytes = m.Total
		}
		s.devices = append(s.devices, g)
		r.handles = append(r.handles, h)
	}
	return s
}

func nvmlReason(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 not found: no NVIDIA driver"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVIDIA driver not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to use NVML"
	}
	return ret.Error()
}

func (r *nvmlGPUs) close() { r.lib.Shutdown() }

func (r *nvmlGPUs) sample(now uint64, devs []GPUDevice) []GPUSample {
	var out []GPUSample
	for i, h := range r.handles {
		g := GPUSample{MonotonicNS: now, Index: devs[i].Index, UUID: devs[i].UUID}
		if u, ret := h.GetUtilizationRates(); ret == nvml.SUCCESS {
			g.UtilizationRatio = ptr(float64(u.Gpu) / 100)
			g.MemoryUtilRatio = ptr(float64(u.Memory) / 100)
		}
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryUsedBytes, g.MemoryTotalBytes = ptr(m.Used), ptr(m.Total)
		}
		if mw, ret := h.GetPowerUsage(); ret == nvml.SUCCESS {
			g.PowerWatts = ptr(float64(mw) / 1000)
		}
		if mj, ret := h.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			g.EnergyJoules = ptr(float64(mj) / 1000)
		}
		if mhz, ret := h.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
			g.SMClockHertz = ptr(float64(mhz) * 1e6)
		}
		if kb, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); ret == nvml.SUCCESS {
			g.PCIeTXBytesPerSecond = ptr(float64(kb) * 1024)
		}
		if kb, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); ret == nvml.SUCCESS {
			g.PCIeRXBytesPerSecond = ptr(float64(kb) * 1024)
		}
		fv := []nvml.FieldValue{
			{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: math.MaxUint32},
			{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: math.MaxUint32},
		}
		if ret := h.GetFieldValues(fv); ret == nvml.SUCCESS {
			if v, ok := fieldUint(fv[0]); ok {
				g.NVLinkTXBytes = ptr(v * 1024) // KiB
			}
			if v, ok := fieldUint(fv[1]); ok {
				g.NVLinkRXBytes = ptr(v * 1024)
			}
		}
		if ps, ret := h.GetProcessUtilization(r.lastProc[i]); ret == nvml.SUCCESS {
			for _, p := range ps {
				g.Processes = append(g.Processes, GPUProcess{PID: int(p.Pid),
					SMUtilRatio: float64(p.SmUtil) / 100, MemUtilRatio: float64(p.MemUtil) / 100})
				if p.TimeStamp > r.lastProc[i] {
					r.lastProc[i] = p.TimeStamp
				}
			}
		}
		out = append(out, g)
	}
	return out
}

func fieldUint(f nvml.FieldValue) (uint64, bool) {
	if nvml.Return(f.NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(binary.LittleEndian.Uint32(f.Value[:4])), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return binary.LittleEndian.Uint64(f.Value[:]), true
	}
	return 0, false
}
