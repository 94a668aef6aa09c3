package daemon

import "sync"

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

// NVMLSampler samples every GPU through NVML (OpenNVML makes one; in a
// build without cgo it is always unavailable).
type NVMLSampler struct {
	mu      sync.Mutex
	gpus    gpuReader // nil: unavailable
	status  string
	driver  string
	devices []GPUDevice
	samples []GPUSample
}

// gpuReader reads the GPUs behind a sampler (NVML in a cgo build).
type gpuReader interface {
	sample(now uint64, devs []GPUDevice) []GPUSample // one reading of each of devs
	close()
}

func disabledNVML(reason string) *NVMLSampler {
	return &NVMLSampler{status: "unavailable (" + reason + ")"}
}

// Available reports whether there are GPUs to sample.
func (s *NVMLSampler) Available() bool { return s.gpus != nil }

// Status is "ok" or "unavailable (<reason>)".
func (s *NVMLSampler) Status() string { return s.status }

// Close shuts NVML down.
func (s *NVMLSampler) Close() {
	if s.gpus != nil {
		s.gpus.close()
	}
}

// Sample reads every GPU once and keeps the readings.
func (s *NVMLSampler) Sample() []GPUSample {
	if s.gpus == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.gpus.sample(monotonicNow(), s.devices)
	s.samples = append(s.samples, out...)
	if n := len(s.samples); n > maxNVMLSamples {
		s.samples = s.samples[n-maxNVMLSamples:]
	}
	return out
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
