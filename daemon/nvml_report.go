package daemon

import "sync"

// maxNVMLSamples bounds the samples kept (per daemon, all GPUs).
const maxNVMLSamples = 3600

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
