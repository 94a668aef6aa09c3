/* Test workloads with exactly known kernel-visible behaviour. Every mode
 * first blocks in read(0) until the test writes a line, so that the test can
 * make it a target while it waits (the pending read is not counted).
 *
 *   workload syscalls N      N futex, N poll, N ioctl, 2N socket (N sendto +
 *                            N recvfrom), 2N file (N write + N read) and N
 *                            other (getppid) syscalls, then _exit.
 *   workload fork N          raw fork(); the child makes N getppid calls and
 *                            exits; the parent waits, prints the child's pid.
 *   workload forkexec PATH   raw fork(); the child execs PATH; the parent
 *                            waits, prints the child's pid.
 *   workload cuda L G S GAP_US   L cuLaunchKernel, G cuGraphLaunch and S
 *                            cuStreamSynchronize calls, GAP_US apart.
 *   workload steps N GAP_US  N engine steps: step i launches a graph (i
 *                            even) or i%3+1 kernels (i odd), waits GAP_US,
 *                            then cuStreamSynchronize; every fourth step is
 *                            followed by a cuCtxSynchronize with no launch
 *                            (not a step). Prints per step CLOCK_MONOTONIC
 *                            ns before its first launch, before and after
 *                            its synchronize.
 *   workload cudawait E C H D A GAP_US   E cuEventSynchronize, C
 *                            cuCtxSynchronize, H cuMemcpyHtoD_v2, D
 *                            cuMemcpyDtoH_v2 and A cuMemcpyHtoDAsync_v2
 *                            calls, GAP_US apart.
 *   workload tcp-server B    listens on 127.0.0.1 (port 0), prints the port,
 *                            receives until EOF, prints the byte count.
 *   workload tcp-client PORT B PAUSE_MS   connects, sends B/2 bytes, sleeps,
 *                            sends the rest, prints CLOCK_MONOTONIC ns
 *                            before and after each half, closes.
 *   workload http N K GAP_US   an HTTP-shaped server and its client in one
 *                            process on one keep-alive loopback connection;
 *                            prints the server's port before waiting. Then N
 *                            exchanges: the client sends a 200-byte request,
 *                            the server receives it all, sends a 100-byte
 *                            head and K 50-byte chunks, each after GAP_US;
 *                            the client receives it all. Per exchange prints
 *                            CLOCK_MONOTONIC ns before the request's send,
 *                            after its receipt, before and after the head's
 *                            send, before the first chunk's send, after the
 *                            last chunk's send; then waits for another line
 *                            and closes both ends.
 *   workload spin N          N getppid calls in a loop, then prints the
 *                            loop's CLOCK_MONOTONIC ns (benchmarks).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
		   unsigned by, unsigned bz, unsigned shmem, void *stream,
		   void **params, void **extra);
int cuGraphLaunch(void *exec, void *stream);
int cuStreamSynchronize(void *stream);
int cuEventSynchronize(void *event);
int cuCtxSynchronize(void);
int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n);
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n);
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *stream);

static void wait_go(void)
{
	char c;
	if (syscall(SYS_read, 0, &c, 1) != 1)
		_exit(3);
}

/* read_line reads standard input up to a newline (wait_go reads one byte
 * of the test's line, so that the syscall counts stay exact). */
static void read_line(void)
{
	char c;
	do {
		if (syscall(SYS_read, 0, &c, 1) != 1)
			_exit(3);
	} while (c != '\n');
}

static unsigned long long mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no syscall */
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	_exit(2);
}

static void send_all(int fd, const char *buf, long n)
{
	while (n > 0) {
		long w = send(fd, buf, n > 65536 ? 65536 : n, 0);
		if (w <= 0)
			die("send");
		n -= w;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *mode = argv[1];
	if (!strcmp(mode, "syscalls") && argc == 3) {
		long n = atol(argv[2]);
		int word = 0, sv[2], null = open("/dev/null", O_WRONLY), zero = open("/dev/zero", O_RDONLY);
		char c = 'x';
		if (null < 0 || zero < 0 || socketpair(AF_UNIX, SOCK_DGRAM, 0, sv))
			die("setup");
		wait_go();
		for (long i = 0; i < n; i++)
			syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		for (long i = 0; i < n; i++)
			syscall(SYS_poll, NULL, 0, 0);
		for (long i = 0; i < n; i++) {
			int avail;
			syscall(SYS_ioctl, zero, FIONREAD, &avail);
		}
		for (long i = 0; i < n; i++) {
			syscall(SYS_sendto, sv[0], &c, 1, 0, NULL, 0);
			syscall(SYS_recvfrom, sv[1], &c, 1, 0, NULL, NULL);
		}
		for (long i = 0; i < n; i++) {
			syscall(SYS_write, null, &c, 1);
			syscall(SYS_read, zero, &c, 1);
		}
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		syscall(SYS_exit_group, 0);
	}
	if (!strcmp(mode, "fork") && argc == 3) {
		long n = atol(argv[2]);
		wait_go();
		long pid = syscall(SYS_fork);
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			for (long i = 0; i < n; i++)
				syscall(SYS_getppid);
			syscall(SYS_exit_group, 0);
		}
		int st;
		waitpid(pid, &st, 0);
		printf("%ld\n", pid);
		return 0;
	}
	if (!strcmp(mode, "forkexec") && argc == 3) {
		wait_go();
		long pid = syscall(SYS_fork);
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			execl(argv[2], argv[2], (char *)NULL);
			_exit(127);
		}
		int st;
		waitpid(pid, &st, 0);
		printf("%ld\n", pid);
		return 0;
	}
	if (!strcmp(mode, "cuda") && argc == 6) {
		long l = atol(argv[2]), g = atol(argv[3]), s = atol(argv[4]), gap = atol(argv[5]);
		wait_go();
		for (long i = 0; i < l; i++) {
			if (i)
				usleep(gap);
			cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
		}
		for (long i = 0; i < g; i++) {
			if (i)
				usleep(gap);
			cuGraphLaunch(0, 0);
		}
		for (long i = 0; i < s; i++) {
			if (i)
				usleep(gap);
			cuStreamSynchronize(0);
		}
		return 0;
	}
	if (!strcmp(mode, "steps") && argc == 4) {
		long n = atol(argv[2]), gap = atol(argv[3]);
		unsigned long long *ts = calloc(3 * n, sizeof(*ts));
		if (!ts)
			die("calloc");
		wait_go();
		for (long i = 0; i < n; i++) {
			ts[3 * i] = mono();
			if (i % 2 == 0) {
				cuGraphLaunch(0, 0);
			} else {
				for (long k = 0; k <= i % 3; k++)
					cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
			}
			usleep(gap);
			ts[3 * i + 1] = mono();
			cuStreamSynchronize(0);
			ts[3 * i + 2] = mono();
			if (i % 4 == 3)
				cuCtxSynchronize();
		}
		for (long i = 0; i < n; i++)
			printf("%llu %llu %llu\n", ts[3 * i], ts[3 * i + 1], ts[3 * i + 2]);
		return 0;
	}
	if (!strcmp(mode, "cudawait") && argc == 8) {
		long n[5], gap = atol(argv[7]);
		char buf[64];
		for (int k = 0; k < 5; k++)
			n[k] = atol(argv[2 + k]);
		wait_go();
		for (int k = 0; k < 5; k++) {
			for (long i = 0; i < n[k]; i++) {
				if (i)
					usleep(gap);
				switch (k) {
				case 0: cuEventSynchronize(0); break;
				case 1: cuCtxSynchronize(); break;
				case 2: cuMemcpyHtoD_v2(0x1000, buf, sizeof(buf)); break;
				case 3: cuMemcpyDtoH_v2(buf, 0x1000, sizeof(buf)); break;
				case 4: cuMemcpyHtoDAsync_v2(0x1000, buf, sizeof(buf), 0); break;
				}
			}
		}
		return 0;
	}
	if (!strcmp(mode, "tcp-server") && argc == 2) {
		int ls = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);
		if (ls < 0 || bind(ls, (void *)&a, sizeof(a)) || listen(ls, 1) || getsockname(ls, (void *)&a, &al))
			die("listen");
		printf("%d\n", ntohs(a.sin_port));
		fflush(stdout);
		int fd = accept(ls, NULL, NULL);
		if (fd < 0)
			die("accept");
		static char buf[65536];
		long total = 0, r;
		while ((r = recv(fd, buf, sizeof(buf), 0)) > 0)
			total += r;
		printf("%ld\n", total);
		return 0;
	}
	if (!strcmp(mode, "tcp-client") && argc == 5) {
		int port = atoi(argv[2]);
		long b = atol(argv[3]), pause_ms = atol(argv[4]);
		char *buf = calloc(1, b);
		wait_go();
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		if (fd < 0 || connect(fd, (void *)&a, sizeof(a)))
			die("connect");
		unsigned long long t0 = mono();
		send_all(fd, buf, b / 2);
		unsigned long long t1 = mono();
		usleep(pause_ms * 1000);
		unsigned long long t2 = mono();
		send_all(fd, buf + b / 2, b - b / 2);
		unsigned long long t3 = mono();
		printf("%llu %llu %llu %llu\n", t0, t1, t2, t3);
		fflush(stdout);
		close(fd);
		return 0;
	}
	if (!strcmp(mode, "http") && argc == 5) {
		long n = atol(argv[2]), k = atol(argv[3]), gap = atol(argv[4]);
		int ls = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);
		if (ls < 0 || bind(ls, (void *)&a, sizeof(a)) || listen(ls, 1) || getsockname(ls, (void *)&a, &al))
			die("listen");
		int cl = socket(AF_INET, SOCK_STREAM, 0);
		if (cl < 0 || connect(cl, (void *)&a, sizeof(a)))
			die("connect");
		int sv = accept(ls, NULL, NULL);
		if (sv < 0)
			die("accept");
		printf("%d\n", ntohs(a.sin_port));
		fflush(stdout);
		unsigned long long *ts = calloc(6 * n, sizeof(*ts));
		static char buf[65536];
		if (!ts)
			die("calloc");
		wait_go();
		for (long i = 0; i < n; i++) {
			unsigned long long *t = ts + 6 * i;
			t[0] = mono();
			send_all(cl, buf, 200);
			for (long got = 0; got < 200;) {
				long r = recv(sv, buf, 200 - got, 0);
				if (r <= 0)
					die("recv request");
				got += r;
			}
			t[1] = mono();
			t[2] = mono();
			send_all(sv, buf, 100);
			t[3] = mono();
			for (long j = 0; j < k; j++) {
				usleep(gap);
				if (j == 0)
					t[4] = mono();
				send_all(sv, buf, 50);
			}
			t[5] = mono();
			for (long got = 0, want = 100 + 50 * k; got < want;) {
				long r = recv(cl, buf, sizeof(buf), 0);
				if (r <= 0)
					die("recv response");
				got += r;
			}
		}
		for (long i = 0; i < n; i++) {
			unsigned long long *t = ts + 6 * i;
			printf("%llu %llu %llu %llu %llu %llu\n", t[0], t[1], t[2], t[3], t[4], t[5]);
		}
		fflush(stdout);
		read_line(); /* the rest of the first go-ahead's line */
		read_line(); /* the second */
		close(cl);
		close(sv);
		return 0;
	}
	if (!strcmp(mode, "pingpong") && argc == 3) {
		/* n round trips of one byte between this process and a child
		 * over a stream socketpair: each a send, a receive, a wakeup
		 * and a context switch on either side. */
		long n = atol(argv[2]);
		int sv[2];
		char c = 'x';
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			die("socketpair");
		wait_go();
		long pid = syscall(SYS_fork);
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			for (long i = 0; i < n; i++) {
				if (recv(sv[1], &c, 1, 0) != 1 || send(sv[1], &c, 1, 0) != 1)
					_exit(1);
			}
			_exit(0);
		}
		for (long i = 0; i < n; i++) {
			if (send(sv[0], &c, 1, 0) != 1 || recv(sv[0], &c, 1, 0) != 1)
				die("pingpong");
		}
		int st;
		waitpid(pid, &st, 0);
		return 0;
	}
	if (!strcmp(mode, "spin") && (argc == 3 || argc == 4)) {
		/* spin N [B]: N getppid calls in B batches of N/B (default 1);
		 * prints the whole loop's nanoseconds and the fastest batch's. */
		long n = atol(argv[2]), b = argc == 4 ? atol(argv[3]) : 1;
		if (b < 1 || n % b)
			return 2;
		wait_go();
		unsigned long long t0 = mono(), fastest = ~0ULL;
		for (long k = 0; k < b; k++) {
			unsigned long long s = mono();
			for (long i = 0; i < n / b; i++)
				syscall(SYS_getppid);
			unsigned long long d = mono() - s;
			if (d < fastest)
				fastest = d;
		}
		printf("%llu %llu\n", mono() - t0, fastest);
		return 0;
	}
	return 2;
}
