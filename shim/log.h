/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lynx's log: levelled (LYNX_LOG), the level cached in an atomic and checked before any
 * formatting, one write(2) per line prefixed "[lynx pid:tid LEVEL file:line]", to stderr
 * or LYNX_LOG_FILE. Safe from any thread; never allocates.
 */
#ifndef LYNX_LOG_H
#define LYNX_LOG_H

#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"

extern atomic_int lynx_log_level;

/* Sets the level and the destination (NULL or "" for stderr). Returns 0, or -errno if the
 * file cannot be opened (the log then stays on stderr). */
int lynx_log_open(enum lynx_log_level level, const char *path);

void lynx_log_line(enum lynx_log_level level, const char *file, int line, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/*
 * A CUDA driver error for a log line: the driver's name for it and its number
 * ("CUDA_ERROR_OUT_OF_MEMORY (2)"), or "CUDA error 2" when no driver is loaded or it does
 * not know the code. Written into buf (at least 64 bytes), which it returns. The driver's
 * cuGetErrorName is a table lookup: safe wherever Lynx logs.
 */
const char *lynx_cuda_error_text(int code, char *buf, size_t len);

#define lynx_log(level, ...)                                                                \
	do {                                                                                \
		if ((level) <= atomic_load_explicit(&lynx_log_level, memory_order_relaxed)) \
			lynx_log_line(level, __FILE__, __LINE__, __VA_ARGS__);              \
	} while (0)
#define lynx_error(...) lynx_log(LYNX_LOG_ERROR, __VA_ARGS__)
#define lynx_warn(...) lynx_log(LYNX_LOG_WARN, __VA_ARGS__)
#define lynx_info(...) lynx_log(LYNX_LOG_INFO, __VA_ARGS__)
#define lynx_debug(...) lynx_log(LYNX_LOG_DEBUG, __VA_ARGS__)

/* A warning printed once per call site, however often the site is reached. */
#define lynx_warn_once(...)                                                          \
	do {                                                                         \
		static atomic_bool warned_;                                          \
		if (!atomic_exchange_explicit(&warned_, true, memory_order_relaxed)) \
			lynx_warn(__VA_ARGS__);                                      \
	} while (0)

#endif /* LYNX_LOG_H */
