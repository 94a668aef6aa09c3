/* A stand-in for libcuda.so.1: the three entry points hone's tests probe.
 * cuStreamSynchronize sleeps for FAKECUDA_SYNC_US microseconds (default 0),
 * so the test knows the wait the uretprobe must measure. */
#include <stdlib.h>
#include <unistd.h>

static volatile int calls;

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
		   unsigned by, unsigned bz, unsigned shmem, void *stream,
		   void **params, void **extra)
{
	calls++;
	return 0;
}

int cuGraphLaunch(void *exec, void *stream)
{
	calls++;
	return 0;
}

int cuStreamSynchronize(void *stream)
{
	static long us = -1;
	if (us < 0) {
		const char *s = getenv("FAKECUDA_SYNC_US");
		us = s ? atol(s) : 0;
	}
	if (us > 0)
		usleep(us);
	calls++;
	return 0;
}
