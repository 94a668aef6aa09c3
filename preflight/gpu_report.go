package preflight

// GPU is one device as NVML reports it.
type GPU struct {
	Index        int      `json:"index"`
	Name         string   `json:"name"`
	UUID         string   `json:"uuid"`
	MemoryBytes  uint64   `json:"memory_bytes"`
	MIG          string   `json:"mig_mode"`         // enabled | disabled | unsupported
	Persistence  string   `json:"persistence_mode"` // enabled | disabled | unsupported
	DriverVer    string   `json:"driver_version,omitempty"`
	CUDAVer      string   `json:"cuda_driver_version,omitempty"`
	TopologyToGP []string `json:"topology,omitempty"` // "GPU1: NVLink"/"PCIe host bridge"… per peer
}
