package daemon

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLOpener returns the NVML library to use (tests pass go-nvml's mocks).
type NVMLOpener func() nvml.Interface

// maxNVMLSamples bounds the samples kept (per daemon, all GPUs).
const maxNVMLSamples = 3600

// NVMLReport is the GPU side of a snapshot. Status is "ok", or
// "unavailable (<reason>)" where there is no GPU or driver, in which case the
// daemon carries on without GPU data.
type NVMLReport struct {
	Status  string      `json:"status"`
	Driver  string      `json:"driver_version,omitempty"`
	Devices []GPUDevice `json:"devices,omitempty"`
	Samples []GPUSample `json:"samples,omitempty"`
}

// GPUDevice identifies a GPU.
type GPUDevice struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	MemoryBytes uint64 `json:"memory_total_bytes,omitempty"`
}

// GPUSample is one reading of one GPU. A field the device does not support
// is absent.
type GPUSample struct {
	MonotonicNS          uint64       `json:"monotonic_ns"`
	Index                int          `json:"gpu"`
	UUID                 string       `json:"uuid"`
	UtilizationRatio     *float64     `json:"utilization_ratio,omitempty"` // time a kernel was running
	MemoryUtilRatio      *float64     `json:"memory_utilization_ratio,omitempty"`
	MemoryUsedBytes      *uint64      `json:"memory_used_bytes,omitempty"`
	MemoryTotalBytes     *uint64      `json:"memory_total_bytes,omitempty"`
	PowerWatts           *float64     `json:"power_watts,omitempty"`
	EnergyJoules         *float64     `json:"energy_joules,omitempty"` // since the driver loaded
	SMClockHertz         *float64     `json:"sm_clock_hertz,omitempty"`
	PCIeTXBytesPerSecond *float64     `json:"pcie_tx_bytes_per_second,omitempty"`
	PCIeRXBytesPerSecond *float64     `json:"pcie_rx_bytes_per_second,omitempty"`
	NVLinkTXBytes        *uint64      `json:"nvlink_tx_bytes,omitempty"` // cumulative
	NVLinkRXBytes        *uint64      `json:"nvlink_rx_bytes,omitempty"`
	Processes            []GPUProcess `json:"processes,omitempty"`
}

// GPUProcess is one process's share of a GPU over the last sample period.
type GPUProcess struct {
	PID          int     `json:"pid"`
	SMUtilRatio  float64 `json:"sm_utilization_ratio"`
	MemUtilRatio float64 `json:"memory_utilization_ratio"`
}

// NVMLSampler samples every GPU through NVML.
type NVMLSampler struct {
	mu       sync.Mutex
	lib      nvml.Interface
	status   string
	driver   string
	devices  []GPUDevice
	handles  []nvml.Device
	samples  []GPUSample
	lastProc map[int]uint64 // per GPU: the last process-utilization timestamp
}

func disabledNVML(reason string) *NVMLSampler {
	return &NVMLSampler{status: "unavailable (" + reason + ")"}
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
	s := &NVMLSampler{lib: lib, status: "ok", lastProc: map[int]uint64{}}
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
		s.handles = append(s.handles, h)
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

// Available reports whether there are GPUs to sample.
func (s *NVMLSampler) Available() bool { return s.lib != nil }

// Status is "ok" or "unavailable (<reason>)".
func (s *NVMLSampler) Status() string { return s.status }

// Close shuts NVML down.
func (s *NVMLSampler) Close() {
	if s.lib != nil {
		s.lib.Shutdown()
	}
}

// Sample reads every GPU once and keeps the readings.
func (s *NVMLSampler) Sample() []GPUSample {
	if s.lib == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := monotonicNow()
	var out []GPUSample
	for i, h := range s.handles {
		g := GPUSample{MonotonicNS: now, Index: s.devices[i].Index, UUID: s.devices[i].UUID}
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
		if ps, ret := h.GetProcessUtilization(s.lastProc[i]); ret == nvml.SUCCESS {
			for _, p := range ps {
				g.Processes = append(g.Processes, GPUProcess{PID: int(p.Pid),
					SMUtilRatio: float64(p.SmUtil) / 100, MemUtilRatio: float64(p.MemUtil) / 100})
				if p.TimeStamp > s.lastProc[i] {
					s.lastProc[i] = p.TimeStamp
				}
			}
		}
		out = append(out, g)
	}
	s.samples = append(s.samples, out...)
	if n := len(s.samples); n > maxNVMLSamples {
		s.samples = s.samples[n-maxNVMLSamples:]
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

// Report returns the status, the devices and the samples kept.
func (s *NVMLSampler) Report() NVMLReport {
	if s == nil {
		return NVMLReport{Status: "unavailable (not started)"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return NVMLReport{Status: s.status, Driver: s.driver, Devices: append([]GPUDevice(nil), s.devices...),
		Samples: append([]GPUSample(nil), s.samples...)}
}

func ptr[T any](v T) *T { return &v }
