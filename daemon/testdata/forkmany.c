/* forkmany N K P: blocks in read(0) until the test writes a line; then
 * forks N children, at most P alive at a time, each making K getppid
 * calls and exiting; reaps them all (N clone + N wait4 syscalls), writes
 * "done\n" with one write(2), and blocks in read(0) again until the test
 * lets it exit. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* One read takes the test's whole line ("go\n", written at once). */
static void wait_go(void)
{
	char buf[64];
	if (syscall(SYS_read, 0, buf, sizeof(buf)) <= 0)
		syscall(SYS_exit_group, 3);
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	long n = atol(argv[1]), k = atol(argv[2]), p = atol(argv[3]);
	wait_go();
	for (long done = 0; done < n;) {
		long batch = n - done < p ? n - done : p;
		for (long i = 0; i < batch; i++) {
			long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
			if (pid < 0)
				syscall(SYS_exit_group, 2);
			if (pid == 0) {
				for (long j = 0; j < k; j++)
					syscall(SYS_getppid);
				syscall(SYS_exit_group, 0);
			}
		}
		for (long i = 0; i < batch; i++)
			if (syscall(SYS_wait4, -1, 0, 0, 0) < 0)
				syscall(SYS_exit_group, 4);
		done += batch;
	}
	syscall(SYS_write, 1, "done\n", 5);
	wait_go();
	return 0;
}
