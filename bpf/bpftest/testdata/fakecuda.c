/* A stand-in for libcuda.so.1: stubs of the driver entry points hone's tests
 * probe and of those the GPU proof's workload (preflight/proof) calls. Every
 * stub returns CUDA_SUCCESS at once, except:
 *
 *   - the calls the host waits in (cuStreamSynchronize, cuCtxSynchronize,
 *     cuEventSynchronize, cuMemcpyHtoD_v2, cuMemcpyDtoH_v2) sleep for
 *     FAKECUDA_SYNC_US microseconds (default 0), so a test knows the wait
 *     the uretprobe must measure;
 *   - cuInit returns CUDA_ERROR_NO_DEVICE (100) when FAKECUDA_NO_DEVICE=1,
 *     as on a host whose driver finds no GPU;
 *   - cuGetProcAddress(_v2) returns this library's own exported entry
 *     points (as a driver whose exports are its entry points would), or,
 *     for "cuLaunchKernel" with FAKECUDA_PROC_INTERNAL=1, an internal
 *     function that no uprobe on the exports sees (as a driver whose
 *     exports are wrappers would).
 *
 * Handles are distinct non-null pointers; device pointers are fake numbers
 * that are never dereferenced; host allocations are real. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_NOT_FOUND 500

static volatile int calls;
static char handles[64];
static CUdeviceptr next_dptr = 0x100000;

static void *handle(int i) { return &handles[i]; }

static void host_wait(void)
{
	static long us = -1;
	if (us < 0) {
		const char *s = getenv("FAKECUDA_SYNC_US");
		us = s ? atol(s) : 0;
	}
	if (us > 0)
		usleep(us);
}

static int env_on(const char *name)
{
	const char *s = getenv(name);
	return s && !strcmp(s, "1");
}

/* The calls hone's daemon probes. */

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
		   unsigned by, unsigned bz, unsigned shmem, void *stream,
		   void **params, void **extra)
{
	calls++;
	return CUDA_SUCCESS;
}

int cuGraphLaunch(void *exec, void *stream)
{
	calls++;
	return CUDA_SUCCESS;
}

int cuStreamSynchronize(void *stream)
{
	host_wait();
	calls++;
	return CUDA_SUCCESS;
}

int cuCtxSynchronize(void)
{
	host_wait();
	calls++;
	return CUDA_SUCCESS;
}

int cuEventSynchronize(void *event)
{
	host_wait();
	calls++;
	return CUDA_SUCCESS;
}

int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream)
{
	calls++;
	return CUDA_SUCCESS;
}

int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream)
{
	calls++;
	return CUDA_SUCCESS;
}

int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	host_wait();
	calls++;
	return CUDA_SUCCESS;
}

int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	host_wait();
	calls++;
	return CUDA_SUCCESS;
}

/* What the proof's workload needs around them. */

CUresult cuInit(unsigned flags)
{
	return env_on("FAKECUDA_NO_DEVICE") ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v)
{
	*v = 12040;
	return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult r, const char **s)
{
	switch (r) {
	case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; return CUDA_SUCCESS;
	case CUDA_ERROR_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
	case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
	}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(int *dev, int ordinal)
{
	*dev = ordinal;
	return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetName(char *name, int len, int dev)
{
	strncpy(name, "hone fake libcuda", len);
	if (len > 0)
		name[len - 1] = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
	switch (attr) {
	case 75: *v = 5; break;  /* compute capability major */
	case 76: *v = 2; break;  /* minor */
	case 16: *v = 1; break;  /* multiprocessors */
	default: *v = 0;
	}
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(unsigned char uuid[16], int dev)
{
	for (int i = 0; i < 16; i++)
		uuid[i] = (unsigned char)(0xf0 + i);
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(unsigned char uuid[16], int dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	*ctx = handle(0);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease(int dev) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(void *ctx) { return CUDA_SUCCESS; }

CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned n, int *opts, void **vals)
{
	if (!image || !strstr((const char *)image, ".entry"))
		return CUDA_ERROR_INVALID_VALUE;
	*mod = handle(1);
	return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(void **mod, const void *image) { return cuModuleLoadDataEx(mod, image, 0, 0, 0); }

CUresult cuModuleGetFunction(void **f, void *mod, const char *name)
{
	*f = handle(2);
	return CUDA_SUCCESS;
}

CUresult cuModuleUnload(void *mod) { return CUDA_SUCCESS; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	*p = next_dptr;
	next_dptr += (n + 0xfff) & ~(size_t)0xfff;
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) { return CUDA_SUCCESS; }

CUresult cuMemAllocHost_v2(void **p, size_t n)
{
	*p = calloc(1, n ? n : 1);
	return *p ? CUDA_SUCCESS : 2;
}

CUresult cuMemFreeHost(void *p)
{
	free(p);
	return CUDA_SUCCESS;
}

CUresult cuStreamCreate(void **s, unsigned flags)
{
	*s = handle(3);
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(void *s) { return CUDA_SUCCESS; }
CUresult cuStreamBeginCapture_v2(void *s, int mode) { return CUDA_SUCCESS; }

CUresult cuStreamEndCapture(void *s, void **g)
{
	*g = handle(4);
	return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *g, unsigned long long flags)
{
	*exec = handle(5);
	return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(void *exec) { return CUDA_SUCCESS; }
CUresult cuGraphDestroy(void *g) { return CUDA_SUCCESS; }

CUresult cuEventCreate(void **e, unsigned flags)
{
	*e = handle(6);
	return CUDA_SUCCESS;
}

CUresult cuEventRecord(void *e, void *s) { return CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(void *e) { return CUDA_SUCCESS; }

/* Not exported: what cuGetProcAddress hands out for cuLaunchKernel with
 * FAKECUDA_PROC_INTERNAL=1. */
static __attribute__((noinline)) int internal_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
						     unsigned by, unsigned bz, unsigned shmem, void *stream,
						     void **params, void **extra)
{
	calls++;
	return CUDA_SUCCESS;
}

static const struct {
	const char *name;
	void *fn;
} entries[] = {
	{"cuLaunchKernel", (void *)cuLaunchKernel},
	{"cuGraphLaunch", (void *)cuGraphLaunch},
	{"cuStreamSynchronize", (void *)cuStreamSynchronize},
	{"cuCtxSynchronize", (void *)cuCtxSynchronize},
	{"cuEventSynchronize", (void *)cuEventSynchronize},
	{"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2},
	{"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2},
	{"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2},
	{"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2},
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status)
{
	*pfn = NULL;
	if (!strcmp(symbol, "cuLaunchKernel") && env_on("FAKECUDA_PROC_INTERNAL")) {
		*pfn = (void *)internal_launch;
	} else {
		for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
			if (!strcmp(symbol, entries[i].name))
				*pfn = entries[i].fn;
	}
	if (status)
		*status = *pfn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS, _SYMBOL_NOT_FOUND */
	return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags)
{
	return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
