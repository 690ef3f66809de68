/* SPDX-License-Identifier: Apache-2.0 */
/* Lynx's levelled log: one write(2) per line, formatted in a stack buffer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

atomic_int lynx_log_level = LYNX_LOG_WARN;
static atomic_int log_fd = STDERR_FILENO;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

int lynx_log_open(enum lynx_log_level level, const char *path)
{
	atomic_store(&lynx_log_level, level);
	if (!path || !*path)
		return 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	atomic_store(&log_fd, fd);
	return 0;
}

void lynx_log_line(enum lynx_log_level level, const char *file, int line, const char *fmt, ...)
{
	char buf[2048]; /* one line, however long the reason */
	const char *base = strrchr(file, '/');
	int n = snprintf(buf, sizeof(buf), "[lynx %d:%ld %s %s:%d] ", (int)getpid(),
	                 (long)syscall(SYS_gettid), level_names[level], base ? base + 1 : file,
	                 line);
	va_list ap;

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(buf))
		n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf) - 1)
		n = sizeof(buf) - 2; /* truncated: still one line */
	buf[n++] = '\n';
	if (write(atomic_load(&log_fd), buf, (size_t)n) < 0)
		return; /* nowhere left to say it */
}

/* cuGetErrorName's signature, without cuda.h: CUresult is an int-sized enum. */
typedef int (*error_name_fn)(int code, const char **name);

const char *lynx_cuda_error_text(int code, char *buf, size_t len)
{
	static _Atomic(error_name_fn) error_name;
	static atomic_bool looked;
	error_name_fn fn = atomic_load(&error_name);
	const char *name = NULL;

	/* Looked up once, in the driver the process loaded (perhaps RTLD_LOCAL, as the CUDA
	 * runtime does): an error comes from a driver that is there. Never loaded here. */
	if (!fn && !atomic_exchange(&looked, true)) {
		void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
		fn = driver ? (error_name_fn)dlsym(driver, "cuGetErrorName") : NULL;
		atomic_store(&error_name, fn);
	}
	if (fn && fn(code, &name) == 0 && name)
		snprintf(buf, len, "%s (%d)", name, code);
	else
		snprintf(buf, len, "CUDA error %d", code);
	return buf;
}
