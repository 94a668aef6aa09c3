//go:build !cgo

package daemon

// NVMLOpener stands in for the cgo build's func() nvml.Interface: go-nvml
// loads libnvidia-ml through cgo, so a build without cgo has no NVML and
// OpenNVML never calls an opener.
type NVMLOpener func() any

// OpenNVML reports NVML as unavailable: hone was built without cgo.
func OpenNVML(NVMLOpener) *NVMLSampler {
	return disabledNVML("hone was built without cgo: CGO_ENABLED=0 or a cross build")
}
