//go:build cgo

package preflight

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPUChecks inventories the GPUs through lib (nil: the real libnvidia-ml).
// Where NVML cannot be loaded it reports "nvml: unavailable (<reason>)" as a
// failed check; it never changes a GPU setting.
func GPUChecks(lib nvml.Interface) (gpus []GPU, cs []Check) {
	add := func(name string, st Status, detail, fix string) {
		cs = append(cs, Check{Section: "gpu", Name: name, Status: st, Detail: detail, Fix: fix})
	}
	if lib == nil {
		lib = nvml.New()
	}
	if ret := safeInit(lib); ret != nvml.SUCCESS {
		add("nvml", Fail, "nvml: unavailable ("+nvmlError(lib, ret)+")",
			"install the NVIDIA driver (libnvidia-ml.so.1) on a host with a GPU; the CPU exercise and the emulator need none")
		return nil, cs
	}
	defer lib.Shutdown()
	drv, _ := lib.SystemGetDriverVersion()
	cudaVer := ""
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		cudaVer = fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
	}
	add("nvml", Pass, fmt.Sprintf("driver %s, CUDA %s", drv, cudaVer), "")
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		add("devices", Fail, "no GPU visible to NVML", "check nvidia-smi and CUDA_VISIBLE_DEVICES")
		return nil, cs
	}
	devs := make([]nvml.Device, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			add(fmt.Sprintf("gpu%d", i), Fail, "handle: "+nvmlError(lib, ret), "")
			continue
		}
		devs[i] = d
		g := GPU{Index: i, DriverVer: drv, CUDAVer: cudaVer}
		g.Name, _ = call(func() (string, nvml.Return) { return d.GetName() })
		g.UUID, _ = call(func() (string, nvml.Return) { return d.GetUUID() })
		if m, ret := call(func() (nvml.Memory, nvml.Return) { return d.GetMemoryInfo() }); ret == nvml.SUCCESS {
			g.MemoryBytes = m.Total
		}
		g.MIG = enabled(call2(func() (int, int, nvml.Return) { return d.GetMigMode() }))
		if st, ret := call(func() (nvml.EnableState, nvml.Return) { return d.GetPersistenceMode() }); ret == nvml.SUCCESS {
			g.Persistence = map[bool]string{true: "enabled", false: "disabled"}[st == nvml.FEATURE_ENABLED]
		} else {
			g.Persistence = "unsupported"
		}
		gpus = append(gpus, g)
		st := Pass
		detail := fmt.Sprintf("%s, %.0f GiB, MIG %s, persistence %s, %s", g.Name, float64(g.MemoryBytes)/(1<<30), g.MIG, g.Persistence, g.UUID)
		fix := ""
		if g.MIG == "enabled" {
			st, fix = Warn, "MIG is on: each MIG slice is a separate device to vLLM; hone reports it and changes nothing"
		}
		add(fmt.Sprintf("gpu%d", i), st, detail, fix)
	}
	// The P/D transfer path: how each pair of GPUs is connected.
	for i := range gpus {
		for j := range gpus {
			if i >= j || devs[i] == nil || devs[j] == nil {
				continue
			}
			lvl, ret := call(func() (nvml.GpuTopologyLevel, nvml.Return) { return devs[i].GetTopologyCommonAncestor(devs[j]) })
			desc := "unknown (" + nvmlError(lib, ret) + ")"
			if ret == nvml.SUCCESS {
				desc = topologyName(lvl)
			}
			gpus[i].TopologyToGP = append(gpus[i].TopologyToGP, fmt.Sprintf("GPU%d: %s", j, desc))
			add(fmt.Sprintf("topology-%d-%d", i, j), Pass, "common ancestor: "+desc+" (the KV-transfer path between these GPUs)", "")
		}
	}
	return gpus, cs
}

// safeInit calls Init, turning a panic from a missing library into a
// return code (go-nvml panics on some dlopen failures).
func safeInit(lib nvml.Interface) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_LIBRARY_NOT_FOUND
		}
	}()
	return lib.Init()
}

func nvmlError(lib nvml.Interface, ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 not found: no NVIDIA driver on this host"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "the NVIDIA kernel driver is not loaded"
	case nvml.ERROR_NOT_SUPPORTED:
		return "not supported"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission"
	}
	return fmt.Sprintf("NVML error %d", int32(ret))
}

// call and call2 treat a missing (mock) implementation or a panicking call
// as "not supported", so one odd device never stops the inventory.
func call[T any](f func() (T, nvml.Return)) (v T, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

func call2(f func() (int, int, nvml.Return)) (cur int, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	cur, _, ret = f()
	return cur, ret
}

func enabled(v int, ret nvml.Return) string {
	if ret != nvml.SUCCESS {
		return "unsupported"
	}
	if v == nvml.DEVICE_MIG_ENABLE {
		return "enabled"
	}
	return "disabled"
}

func topologyName(l nvml.GpuTopologyLevel) string {
	switch l {
	case nvml.TOPOLOGY_INTERNAL:
		return "same board"
	case nvml.TOPOLOGY_SINGLE:
		return "single PCIe switch"
	case nvml.TOPOLOGY_MULTIPLE:
		return "multiple PCIe switches"
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return "PCIe host bridge"
	case nvml.TOPOLOGY_NODE:
		return "same NUMA node (across host bridges)"
	case nvml.TOPOLOGY_SYSTEM:
		return "across NUMA nodes (SMP interconnect)"
	}
	return fmt.Sprintf("level %d", int(l))
}
