// SPDX-License-Identifier: GPL-2.0
/*
 * An LD_PRELOAD shim that counts a process's ioctl() calls, for
 * tests/vm/50-rthinctl-many.sh (the test kernel has no syscall tracing and
 * the VM no strace). Every call of the libc ioctl() symbol from the program
 * or from its shared libraries (libdevmapper for dmsetup and lvm, the
 * binary itself for rthinctl) lands here; device-mapper ioctls (type 0xfd,
 * whatever the fd) are counted by command number, the rest as "other".
 * At exit one line is appended to the file named by IOCTL_COUNT_FILE:
 *   dm=TOTAL other=N NR:COUNT...
 * (NR the DM_*_CMD number: 2 LIST_DEVICES, 11 TABLE_DEPS, 12 TABLE_STATUS,
 * 7 DEV_STATUS, 0 VERSION, ...). A process that dies by a signal writes
 * nothing, so the caller checks that a line was written.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static unsigned long dm_counts[32];
static unsigned long dm_total, other_total;

int ioctl(int fd, unsigned long request, ...)
{
	static int (*real)(int, unsigned long, ...);
	va_list ap;
	void *arg;

	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real)
		real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
	if (((request >> 8) & 0xff) == 0xfd) {
		dm_total++;
		dm_counts[request & 0x1f]++;
	} else {
		other_total++;
	}
	return real(fd, request, arg);
}

__attribute__((destructor)) static void ioctl_count_report(void)
{
	const char *path = getenv("IOCTL_COUNT_FILE");
	char line[1024];
	int n, fd, i;

	if (!path)
		return;
	n = snprintf(line, sizeof(line), "dm=%lu other=%lu", dm_total, other_total);
	for (i = 0; i < 32 && n < (int)sizeof(line) - 32; i++)
		if (dm_counts[i])
			n += snprintf(line + n, sizeof(line) - n, " %d:%lu", i, dm_counts[i]);
	line[n++] = '\n';
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, n) != n)
		(void)0;
	close(fd);
}
