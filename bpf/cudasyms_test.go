//go:build linux && (386 || amd64 || arm64)

package bpf

import "testing"

// TestCUDACallNames classifies libcuda entry point names (as the CUDA 12
// headers map the API onto them) into the daemon's call kinds: the
// synchronous copies apart from the async ones, event synchronizes on
// their own, and no other entry point probed.
func TestCUDACallNames(t *testing.T) {
	for name, want := range map[string]int{
		"cuLaunchKernel": CUDALaunch, "cuLaunchKernel_ptsz": CUDALaunch, "cuLaunchKernelEx": CUDALaunch,
		"cuGraphLaunch": CUDAGraph, "cuGraphLaunch_ptsz": CUDAGraph,
		"cuStreamSynchronize": CUDAStreamSync, "cuStreamSynchronize_ptsz": CUDAStreamSync,
		"cuCtxSynchronize": CUDACtxSync, "cuCtxSynchronize_v2": CUDACtxSync,
		"cuEventSynchronize":   CUDAEventSync,
		"cuMemcpyHtoDAsync_v2": CUDAMemcpy, "cuMemcpyDtoHAsync_v2_ptsz": CUDAMemcpy, "cuMemcpyAsync": CUDAMemcpy,
		"cuMemcpy3DPeerAsync": CUDAMemcpy, "cuMemcpyBatchAsync": CUDAMemcpy, "cuMemcpy2DAsync_v2": CUDAMemcpy,
		"cuMemcpy": CUDAMemcpySync, "cuMemcpy_ptds": CUDAMemcpySync, "cuMemcpyHtoD_v2": CUDAMemcpySync,
		"cuMemcpyHtoD": CUDAMemcpySync, "cuMemcpyDtoH_v2": CUDAMemcpySync, "cuMemcpyDtoH_v2_ptds": CUDAMemcpySync,
		"cuMemcpyDtoD_v2": CUDAMemcpySync, "cuMemcpyPeer": CUDAMemcpySync, "cuMemcpy2D_v2": CUDAMemcpySync,
		"cuMemcpy2DUnaligned_v2_ptds": CUDAMemcpySync, "cuMemcpy3D_v2": CUDAMemcpySync, "cuMemcpy3DPeer_ptds": CUDAMemcpySync,
		"cuMemcpyAtoH_v2": CUDAMemcpySync,
	} {
		if got, ok := cudaCall(name); !ok || got != want {
			t.Errorf("%s: kind %d (probed %t), want %s", name, got, ok, CUDACalls[want])
		}
	}
	for _, name := range []string{"cuEventRecord", "cuEventQuery", "cuStreamQuery", "cuMemAlloc_v2",
		"cuMemsetD8_v2", "cuLaunchHostFunc", "cuGraphInstantiateWithFlags", "cuGetProcAddress_v2", "cuMemcpyHtoDX"} {
		if got, ok := cudaCall(name); ok {
			t.Errorf("%s: probed as %s, want not probed", name, CUDACalls[got])
		}
	}
	for i := range CUDACalls {
		if CUDAWaits(i) != (i == CUDAStreamSync || i == CUDACtxSync || i == CUDAEventSync || i == CUDAMemcpySync) {
			t.Errorf("CUDAWaits(%s) = %t", CUDACalls[i], CUDAWaits(i))
		}
	}
}
