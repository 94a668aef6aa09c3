//go:build !cgo

package preflight

// GPUChecks stands in for the cgo build's GPUChecks(lib nvml.Interface):
// go-nvml loads libnvidia-ml through cgo, so a build without cgo has no
// NVML. It reports "nvml: unavailable (<reason>)" as a failed check, as a
// host without the NVIDIA driver does, and ignores lib.
func GPUChecks(lib any) (gpus []GPU, cs []Check) {
	return nil, []Check{{Section: "gpu", Name: "nvml", Status: Fail,
		Detail: "nvml: unavailable (hone was built without cgo: CGO_ENABLED=0 or a cross build)",
		Fix:    "build hone with cgo (CGO_ENABLED=1 and a C compiler) for the GPU host's own OS and architecture; the CPU exercise and the emulator need none"}}
}
