//go:build linux && cgo

package proof

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUh;

#define CUDA_ERROR_NO_DEVICE 100

// Call kinds, in the order of the daemon's (bpf.CUDACalls).
enum { HP_LAUNCH, HP_GRAPH, HP_STREAM_SYNC, HP_CTX_SYNC, HP_MEMCPY_ASYNC, HP_EVENT_SYNC, HP_MEMCPY_SYNC, HP_CLASSES };

typedef CUresult (*hp_launch_fn)(CUh, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUh,
				 void **, void **);

static struct {
	void *lib;
	char err[2048];

	CUresult (*cuInit)(unsigned);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDeviceGetUuid)(unsigned char *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUh *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUh);
	CUresult (*cuModuleLoadDataEx)(CUh *, const void *, unsigned, int *, void **);
	CUresult (*cuModuleGetFunction)(CUh *, CUh, const char *);
	CUresult (*cuModuleUnload)(CUh);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemAllocHost)(void **, size_t);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuStreamCreate)(CUh *, unsigned);
	CUresult (*cuStreamDestroy)(CUh);
	CUresult (*cuStreamBeginCapture)(CUh, int);
	CUresult (*cuStreamEndCapture)(CUh, CUh *);
	CUresult (*cuGraphInstantiateWithFlags)(CUh *, CUh, unsigned long long);
	CUresult (*cuGraphInstantiate)(CUh *, CUh, CUh *, char *, size_t);
	CUresult (*cuGraphExecDestroy)(CUh);
	CUresult (*cuGraphDestroy)(CUh);
	CUresult (*cuGraphLaunch)(CUh, CUh);
	CUresult (*cuEventCreate)(CUh *, unsigned);
	CUresult (*cuEventRecord)(CUh, CUh);
	CUresult (*cuEventSynchronize)(CUh);
	CUresult (*cuEventDestroy)(CUh);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUh);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUh);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuStreamSynchronize)(CUh);
	hp_launch_fn cuLaunchKernel;
	CUresult (*cuGetProcAddress_v2)(const char *, void **, int, unsigned long long, int *);
	CUresult (*cuGetProcAddress)(const char *, void **, int, unsigned long long);

	int driver_version;
	CUdevice dev;
	int have_ctx;
	CUh ctx, mod, fn, stream, event, graph, exec;
	CUdeviceptr dout, dbuf;
	void *hbuf;
	size_t copy_bytes;
	unsigned busy_blocks;
	hp_launch_fn proc_launch;
} H;

static const char *hp_err(void) { return H.err; }

static int hp_fail(const char *what, CUresult r)
{
	const char *name = NULL;
	if (!H.cuGetErrorName || H.cuGetErrorName(r, &name) != 0 || !name)
		name = "CUDA error";
	snprintf(H.err, sizeof(H.err), "%s: %s (%d)", what, name, r);
	return r ? r : -1;
}

// hp_sym resolves the first of up to three names libcuda exports.
static void *hp_sym(const char *a, const char *b, const char *c, const char **found)
{
	const char *names[] = {a, b, c};
	for (int i = 0; i < 3; i++) {
		if (!names[i])
			continue;
		void *p = dlsym(H.lib, names[i]);
		if (p) {
			if (found)
				*found = names[i];
			return p;
		}
	}
	return NULL;
}

#define NEED(field, a, b)                                                                       \
	do {                                                                                    \
		*(void **)&H.field = hp_sym(a, b, NULL, NULL);                                  \
		if (!H.field) {                                                                 \
			snprintf(H.err, sizeof(H.err), "libcuda at %s lacks %s%s%s (a driver older than CUDA 11.4?)", \
				 path, a, b ? " and " : "", b ? b : "");                         \
			return 2;                                                               \
		}                                                                               \
	} while (0)

// hp_open loads libcuda and resolves the entry points: 0 ok, 1 dlopen
// failed (no driver), 2 an entry point is missing.
static int hp_open(const char *path, char *loaded, int loaded_len)
{
	dlerror();
	H.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!H.lib) {
		const char *e = dlerror();
		snprintf(H.err, sizeof(H.err), "dlopen %s: %s", path, e ? e : "failed");
		return 1;
	}
	NEED(cuInit, "cuInit", NULL);
	Dl_info info;
	if (dladdr(*(void **)&H.cuInit, &info) && info.dli_fname)
		snprintf(loaded, loaded_len, "%s", info.dli_fname);
	*(void **)&H.cuGetErrorName = hp_sym("cuGetErrorName", NULL, NULL, NULL);
	NEED(cuDriverGetVersion, "cuDriverGetVersion", NULL);
	NEED(cuDeviceGetCount, "cuDeviceGetCount", NULL);
	NEED(cuDeviceGet, "cuDeviceGet", NULL);
	NEED(cuDeviceGetName, "cuDeviceGetName", NULL);
	NEED(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL);
	*(void **)&H.cuDeviceGetUuid = hp_sym("cuDeviceGetUuid_v2", "cuDeviceGetUuid", NULL, NULL);
	NEED(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
	NEED(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	NEED(cuCtxSetCurrent, "cuCtxSetCurrent", NULL);
	NEED(cuModuleLoadDataEx, "cuModuleLoadDataEx", NULL);
	NEED(cuModuleGetFunction, "cuModuleGetFunction", NULL);
	NEED(cuModuleUnload, "cuModuleUnload", NULL);
	NEED(cuMemAlloc, "cuMemAlloc_v2", NULL);
	NEED(cuMemFree, "cuMemFree_v2", NULL);
	NEED(cuMemAllocHost, "cuMemAllocHost_v2", NULL);
	NEED(cuMemFreeHost, "cuMemFreeHost", NULL);
	NEED(cuStreamCreate, "cuStreamCreate", NULL);
	NEED(cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy");
	NEED(cuStreamBeginCapture, "cuStreamBeginCapture_v2", NULL);
	NEED(cuStreamEndCapture, "cuStreamEndCapture", NULL);
	*(void **)&H.cuGraphInstantiateWithFlags = hp_sym("cuGraphInstantiateWithFlags", NULL, NULL, NULL);
	if (!H.cuGraphInstantiateWithFlags)
		NEED(cuGraphInstantiate, "cuGraphInstantiate_v2", "cuGraphInstantiate");
	NEED(cuGraphExecDestroy, "cuGraphExecDestroy", NULL);
	NEED(cuGraphDestroy, "cuGraphDestroy", NULL);
	NEED(cuGraphLaunch, "cuGraphLaunch", NULL);
	NEED(cuEventCreate, "cuEventCreate", NULL);
	NEED(cuEventRecord, "cuEventRecord", NULL);
	NEED(cuEventSynchronize, "cuEventSynchronize", NULL);
	NEED(cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
	NEED(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL);
	NEED(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL);
	NEED(cuMemcpyHtoD, "cuMemcpyHtoD_v2", NULL);
	NEED(cuMemcpyDtoH, "cuMemcpyDtoH_v2", NULL);
	NEED(cuCtxSynchronize, "cuCtxSynchronize", NULL);
	NEED(cuStreamSynchronize, "cuStreamSynchronize", NULL);
	NEED(cuLaunchKernel, "cuLaunchKernel", NULL);
	*(void **)&H.cuGetProcAddress_v2 = hp_sym("cuGetProcAddress_v2", NULL, NULL, NULL);
	*(void **)&H.cuGetProcAddress = hp_sym("cuGetProcAddress", NULL, NULL, NULL);
	return 0;
}

// hp_init runs cuInit and counts the devices: 0 ok, CUDA_ERROR_NO_DEVICE
// when the driver finds no GPU, another CUresult on failure.
static int hp_init(int *driver_version)
{
	CUresult r = H.cuInit(0);
	if (r)
		return hp_fail("cuInit", r);
	if ((r = H.cuDriverGetVersion(&H.driver_version)))
		return hp_fail("cuDriverGetVersion", r);
	*driver_version = H.driver_version;
	int n = 0;
	if ((r = H.cuDeviceGetCount(&n)))
		return hp_fail("cuDeviceGetCount", r);
	if (n < 1) {
		snprintf(H.err, sizeof(H.err), "cuDeviceGetCount: no device");
		return CUDA_ERROR_NO_DEVICE;
	}
	return 0;
}

typedef struct {
	char name[256];
	unsigned char uuid[16];
	int has_uuid;
	int cc_major, cc_minor, sms;
} hp_device;

#define CHECK(what, call)                                                                       \
	do {                                                                                    \
		CUresult r_ = (call);                                                           \
		if (r_)                                                                         \
			return hp_fail(what, r_);                                               \
	} while (0)


// hp_setup makes device 0's primary context current on this thread, loads
// the PTX, allocates, creates a stream and an event, and captures a
// one-kernel graph: everything the counted phases need, before any of
// them, so that none of this is counted.
static int hp_setup(const char *ptx, hp_device *d)
{
	CHECK("cuDeviceGet", H.cuDeviceGet(&H.dev, 0));
	CHECK("cuDeviceGetName", H.cuDeviceGetName(d->name, sizeof(d->name), H.dev));
	CHECK("cuDeviceGetAttribute", H.cuDeviceGetAttribute(&d->cc_major, 75, H.dev)); // COMPUTE_CAPABILITY_MAJOR
	CHECK("cuDeviceGetAttribute", H.cuDeviceGetAttribute(&d->cc_minor, 76, H.dev)); // COMPUTE_CAPABILITY_MINOR
	CHECK("cuDeviceGetAttribute", H.cuDeviceGetAttribute(&d->sms, 16, H.dev));      // MULTIPROCESSOR_COUNT
	if (H.cuDeviceGetUuid && H.cuDeviceGetUuid(d->uuid, H.dev) == 0)
		d->has_uuid = 1;
	CHECK("cuDevicePrimaryCtxRetain", H.cuDevicePrimaryCtxRetain(&H.ctx, H.dev));
	H.have_ctx = 1;
	CHECK("cuCtxSetCurrent", H.cuCtxSetCurrent(H.ctx));

	static char log[4096];
	log[0] = 0;
	int opts[] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *vals[] = {log, (void *)(uintptr_t)sizeof(log)};
	CUresult r = H.cuModuleLoadDataEx(&H.mod, ptx, 2, opts, vals);
	if (r) {
		hp_fail("cuModuleLoadDataEx (JIT of the embedded PTX)", r);
		size_t n = strlen(H.err);
		snprintf(H.err + n, sizeof(H.err) - n, ": %s", log[0] ? log : "no JIT log");
		return r;
	}
	CHECK("cuModuleGetFunction hone_spin", H.cuModuleGetFunction(&H.fn, H.mod, "hone_spin"));

	H.busy_blocks = (unsigned)(d->sms > 0 ? d->sms : 1) * 8;
	CHECK("cuMemAlloc_v2", H.cuMemAlloc(&H.dout, (size_t)H.busy_blocks * 256 * sizeof(float)));
	H.copy_bytes = 1 << 20;
	CHECK("cuMemAlloc_v2", H.cuMemAlloc(&H.dbuf, H.copy_bytes));
	CHECK("cuMemAllocHost_v2", H.cuMemAllocHost(&H.hbuf, H.copy_bytes));
	memset(H.hbuf, 0x5a, H.copy_bytes);
	CHECK("cuStreamCreate", H.cuStreamCreate(&H.stream, 1)); // CU_STREAM_NON_BLOCKING
	CHECK("cuEventCreate", H.cuEventCreate(&H.event, 0));

	unsigned iters = 1;
	void *args[] = {&H.dout, &iters};
	CHECK("cuStreamBeginCapture_v2", H.cuStreamBeginCapture(H.stream, 0)); // CU_STREAM_CAPTURE_MODE_GLOBAL
	CHECK("cuLaunchKernel (captured)", H.cuLaunchKernel(H.fn, 1, 1, 1, 32, 1, 1, 0, H.stream, args, NULL));
	CHECK("cuStreamEndCapture", H.cuStreamEndCapture(H.stream, &H.graph));
	if (H.cuGraphInstantiateWithFlags)
		CHECK("cuGraphInstantiateWithFlags", H.cuGraphInstantiateWithFlags(&H.exec, H.graph, 0));
	else
		CHECK("cuGraphInstantiate", H.cuGraphInstantiate(&H.exec, H.graph, NULL, NULL, 0));

	// Warm up each path once (module and graph upload, first launch).
	CHECK("cuLaunchKernel (warm-up)", H.cuLaunchKernel(H.fn, 1, 1, 1, 32, 1, 1, 0, H.stream, args, NULL));
	CHECK("cuGraphLaunch (warm-up)", H.cuGraphLaunch(H.exec, H.stream));
	CHECK("cuCtxSynchronize (warm-up)", H.cuCtxSynchronize());
	return 0;
}

// hp_getproc asks cuGetProcAddress_v2 (or the older cuGetProcAddress) for
// an entry point, as the CUDA runtime does for every driver call: -2 when
// libcuda exports neither.
static int hp_getproc(const char *sym, uintptr_t *pfn, int *which)
{
	void *p = NULL;
	CUresult r;
	*pfn = 0;
	if (H.cuGetProcAddress_v2) {
		int status = 0;
		*which = 2;
		r = H.cuGetProcAddress_v2(sym, &p, H.driver_version, 0, &status); // CU_GET_PROC_ADDRESS_DEFAULT
	} else if (H.cuGetProcAddress) {
		*which = 1;
		r = H.cuGetProcAddress(sym, &p, H.driver_version, 0);
	} else {
		*which = 0;
		return -2;
	}
	if (r)
		return hp_fail("cuGetProcAddress", r);
	*pfn = (uintptr_t)p;
	return 0;
}

static uintptr_t hp_dlsym(const char *name) { return (uintptr_t)dlsym(H.lib, name); }

static void hp_use_proc_launch(uintptr_t p) { H.proc_launch = (hp_launch_fn)p; }
static int hp_have_proc_launch(void) { return H.proc_launch != NULL; }
static unsigned hp_busy_blocks(void) { return H.busy_blocks; }

// The phases: each counts every call it makes, by kind, before making it
// (a uprobe fires on entry whatever the call returns).

static int hp_launches(long n, int via_proc, long long *c)
{
	hp_launch_fn f = via_proc ? H.proc_launch : H.cuLaunchKernel;
	unsigned iters = 1;
	void *args[] = {&H.dout, &iters};
	if (!f)
		return 0;
	for (long i = 0; i < n; i++) {
		c[HP_LAUNCH]++;
		CHECK(via_proc ? "cuLaunchKernel (through cuGetProcAddress)" : "cuLaunchKernel",
		      f(H.fn, 1, 1, 1, 32, 1, 1, 0, H.stream, args, NULL));
	}
	return 0;
}

static int hp_graphs(long n, long long *c)
{
	for (long i = 0; i < n; i++) {
		c[HP_GRAPH]++;
		CHECK("cuGraphLaunch", H.cuGraphLaunch(H.exec, H.stream));
	}
	return 0;
}

static int hp_copies(long n, int async, long long *c)
{
	const size_t chunk = 64 << 10;
	for (long i = 0; i < n; i++) {
		size_t off = (size_t)(i % 16) * chunk;
		if (async) {
			c[HP_MEMCPY_ASYNC]++;
			CHECK("cuMemcpyHtoDAsync_v2", H.cuMemcpyHtoDAsync(H.dbuf + off, (char *)H.hbuf + off, chunk, H.stream));
			c[HP_MEMCPY_ASYNC]++;
			CHECK("cuMemcpyDtoHAsync_v2", H.cuMemcpyDtoHAsync((char *)H.hbuf + off, H.dbuf + off, chunk, H.stream));
		} else {
			c[HP_MEMCPY_SYNC]++;
			CHECK("cuMemcpyHtoD_v2", H.cuMemcpyHtoD(H.dbuf + off, (char *)H.hbuf + off, chunk));
			c[HP_MEMCPY_SYNC]++;
			CHECK("cuMemcpyDtoH_v2", H.cuMemcpyDtoH((char *)H.hbuf + off, H.dbuf + off, chunk));
		}
	}
	return 0;
}

static int hp_syncs(long n, long long *c)
{
	for (long i = 0; i < n; i++) {
		c[HP_CTX_SYNC]++;
		CHECK("cuCtxSynchronize", H.cuCtxSynchronize());
	}
	for (long i = 0; i < n; i++) {
		c[HP_STREAM_SYNC]++;
		CHECK("cuStreamSynchronize", H.cuStreamSynchronize(H.stream));
	}
	for (long i = 0; i < n; i++) {
		CHECK("cuEventRecord", H.cuEventRecord(H.event, H.stream));
		c[HP_EVENT_SYNC]++;
		CHECK("cuEventSynchronize", H.cuEventSynchronize(H.event));
	}
	return 0;
}

static double hp_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

// hp_busy launches the spin kernel over every SM and waits for each, for
// seconds (or max launches), doubling its length until one launch takes
// 20 ms or more.
static int hp_busy(double seconds, long max, long long *c, unsigned *iters_out)
{
	unsigned iters = 1 << 12;
	void *args[] = {&H.dout, &iters};
	double start = hp_now();
	for (long i = 0; i < max && hp_now() - start < seconds; i++) {
		double t0 = hp_now();
		c[HP_LAUNCH]++;
		CHECK("cuLaunchKernel (busy)", H.cuLaunchKernel(H.fn, H.busy_blocks, 1, 1, 256, 1, 1, 0, H.stream, args, NULL));
		c[HP_STREAM_SYNC]++;
		CHECK("cuStreamSynchronize (busy)", H.cuStreamSynchronize(H.stream));
		*iters_out = iters;
		if (hp_now() - t0 < 0.02 && iters < (1u << 26))
			iters *= 2;
	}
	return 0;
}

static void hp_cleanup(void)
{
	if (!H.lib || !H.have_ctx)
		return;
	if (H.cuCtxSynchronize)
		H.cuCtxSynchronize();
	if (H.exec)
		H.cuGraphExecDestroy(H.exec);
	if (H.graph)
		H.cuGraphDestroy(H.graph);
	if (H.event)
		H.cuEventDestroy(H.event);
	if (H.stream)
		H.cuStreamDestroy(H.stream);
	if (H.hbuf)
		H.cuMemFreeHost(H.hbuf);
	if (H.dbuf)
		H.cuMemFree(H.dbuf);
	if (H.dout)
		H.cuMemFree(H.dout);
	if (H.mod)
		H.cuModuleUnload(H.mod);
	H.cuDevicePrimaryCtxRelease(H.dev);
	H.have_ctx = 0;
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// cudaOpen loads libcuda from path and initializes the driver. status is
// "ok", "no_library" (it cannot be loaded), "no_device" (cuInit finds no
// GPU) or "error"; loaded is the file the dynamic loader opened.
func cudaOpen(path string) (status, reason, loaded string, driverVersion int) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [4096]C.char
	switch C.hp_open(cpath, &buf[0], C.int(len(buf))) {
	case 0:
	case 1:
		return "no_library", C.GoString(C.hp_err()), "", 0
	default:
		return "error", C.GoString(C.hp_err()), C.GoString(&buf[0]), 0
	}
	loaded = C.GoString(&buf[0])
	var v C.int
	switch r := C.hp_init(&v); r {
	case 0:
		return "ok", "", loaded, int(v)
	case C.CUDA_ERROR_NO_DEVICE:
		return "no_device", C.GoString(C.hp_err()) + ": the driver finds no GPU", loaded, 0
	default:
		return "error", C.GoString(C.hp_err()), loaded, 0
	}
}

// cudaSetup prepares device 0 (see hp_setup).
func cudaSetup(ptx string) (Device, error) {
	cptx := C.CString(ptx)
	defer C.free(unsafe.Pointer(cptx))
	var d C.hp_device
	if C.hp_setup(cptx, &d) != 0 {
		return Device{}, fmt.Errorf("%s", C.GoString(C.hp_err()))
	}
	dev := Device{Index: 0, Name: C.GoString(&d.name[0]), ComputeCapability: fmt.Sprintf("%d.%d", int(d.cc_major), int(d.cc_minor)),
		Multiprocessors: int(d.sms)}
	if d.has_uuid != 0 {
		b := C.GoBytes(unsafe.Pointer(&d.uuid[0]), 16)
		dev.UUID = fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	}
	return dev, nil
}

// cudaProcAddresses asks cuGetProcAddress for each of procQueries and
// keeps the pointer for cuLaunchKernel for the launch_proc_address phase.
func cudaProcAddresses() ProcAddress {
	pa := ProcAddress{}
	for _, q := range procQueries {
		cq := C.CString(q.query)
		var p C.uintptr_t
		var which C.int
		r := C.hp_getproc(cq, &p, &which)
		C.free(unsafe.Pointer(cq))
		switch which {
		case 2:
			pa.Function = "cuGetProcAddress_v2"
		case 1:
			pa.Function = "cuGetProcAddress"
		}
		if r == -2 {
			pa.Function = ""
			pa.Error = "libcuda exports neither cuGetProcAddress_v2 nor cuGetProcAddress (a driver before CUDA 11.3)"
			return pa
		}
		s := ProcSymbol{Name: q.query}
		if r != 0 {
			s.Error = C.GoString(C.hp_err())
		} else {
			s.ProcAddress = fmt.Sprintf("%#x", uint64(p))
		}
		for i, e := range q.exports {
			ce := C.CString(e)
			a := C.hp_dlsym(ce)
			C.free(unsafe.Pointer(ce))
			if i == 0 {
				s.Export = e
				if a != 0 {
					s.ExportAddress = fmt.Sprintf("%#x", uint64(a))
				}
			}
			if a != 0 && a == p && s.MatchesExport == "" {
				s.MatchesExport = e
			}
		}
		s.Same = s.ProcAddress != "" && s.ProcAddress == s.ExportAddress
		if q.query == "cuLaunchKernel" && r == 0 {
			C.hp_use_proc_launch(p)
		}
		pa.Symbols = append(pa.Symbols, s)
	}
	return pa
}

// cudaPhase runs one counted phase and returns the calls it made by kind.
func cudaPhase(name string, cfg workloadConfig) (calls map[string]uint64, detail string, err error) {
	var c [7]C.longlong
	var r C.int
	switch name {
	case PhaseLaunchExported:
		r = C.hp_launches(C.long(cfg.Launches), 0, &c[0])
	case PhaseLaunchProcAddress:
		if C.hp_have_proc_launch() == 0 {
			detail = "no launch made: cuGetProcAddress gave no pointer for cuLaunchKernel"
		} else {
			r = C.hp_launches(C.long(cfg.Launches), 1, &c[0])
		}
	case PhaseGraph:
		r = C.hp_graphs(C.long(cfg.Graphs), &c[0])
	case PhaseMemcpyAsync:
		r = C.hp_copies(C.long(cfg.Copies), 1, &c[0])
	case PhaseMemcpySync:
		r = C.hp_copies(C.long(cfg.Copies), 0, &c[0])
	case PhaseSynchronize:
		r = C.hp_syncs(C.long(cfg.Syncs), &c[0])
	case PhaseBusy:
		var iters C.uint
		r = C.hp_busy(C.double(cfg.BusySeconds), C.long(cfg.MaxBusyLaunches), &c[0], &iters)
		detail = fmt.Sprintf("%d launches of %d×256 threads, %d iterations each at the end", uint64(c[C.HP_LAUNCH]),
			uint(C.hp_busy_blocks()), uint(iters))
	default:
		return nil, "", fmt.Errorf("unknown phase %q", name)
	}
	calls = map[string]uint64{}
	for i, n := range c {
		if n > 0 {
			calls[Classes[i]] = uint64(n)
		}
	}
	if r != 0 {
		err = fmt.Errorf("%s", strings.TrimSpace(C.GoString(C.hp_err())))
	}
	return calls, detail, err
}

// cudaCleanup frees what hp_setup made (errors ignored).
func cudaCleanup() { C.hp_cleanup() }
