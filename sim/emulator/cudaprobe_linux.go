//go:build linux && cgo

package emulator

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*hone_launch_kernel_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				     void *, void **, void **);
typedef int (*hone_graph_launch_fn)(void *, void *);
typedef int (*hone_stream_sync_fn)(void *);

// The trampolines call the library's entry points with harmless arguments:
// NULL function, graph and stream handles (the default stream), a 1x1x1
// grid of 1x1x1 blocks, no parameters.
static int hone_call_launch_kernel(void *f) {
	return ((hone_launch_kernel_fn)f)(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}
static int hone_call_graph_launch(void *f) { return ((hone_graph_launch_fn)f)(NULL, NULL); }
static int hone_call_stream_sync(void *f) { return ((hone_stream_sync_fn)f)(NULL); }

static void *hone_dlopen(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char *hone_dlerror(void) {
	const char *e = dlerror();
	return e ? e : "unknown error";
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// dlCUDAProbe calls a dlopen'ed libcuda-shaped library. The library stays
// loaded for the life of the process: a step may be inside it when the
// server stops, and dlopen of the same path only counts references.
type dlCUDAProbe struct {
	launchKernel, graphLaunch, streamSync unsafe.Pointer
}

// openCUDAProbe loads path and resolves cudaSymbols.
func openCUDAProbe(path string) (cudaProbe, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	C.dlerror() // clear a stale error
	h := C.hone_dlopen(cpath)
	if h == nil {
		return nil, fmt.Errorf("--cuda-lib %s: cannot load: %s", path, C.GoString(C.hone_dlerror()))
	}
	syms := make([]unsafe.Pointer, len(cudaSymbols))
	for i, name := range cudaSymbols {
		cname := C.CString(name)
		C.dlerror()
		syms[i] = C.dlsym(h, cname)
		C.free(unsafe.Pointer(cname))
		if syms[i] == nil {
			msg := C.GoString(C.hone_dlerror())
			C.dlclose(h)
			return nil, fmt.Errorf("--cuda-lib %s: symbol %s not found (a libcuda-shaped library exports %v): %s",
				path, name, cudaSymbols, msg)
		}
	}
	return &dlCUDAProbe{launchKernel: syms[0], graphLaunch: syms[1], streamSync: syms[2]}, nil
}

func (p *dlCUDAProbe) launch(graph bool) {
	if graph {
		C.hone_call_graph_launch(p.graphLaunch)
	} else {
		C.hone_call_launch_kernel(p.launchKernel)
	}
}

func (p *dlCUDAProbe) sync() (int64, int64) { C.hone_call_stream_sync(p.streamSync); return 0, 0 }
