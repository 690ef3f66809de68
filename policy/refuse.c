/* SPDX-License-Identifier: Apache-2.0 */
/* The policy library's one way of refusing input with a reason, and of writing a size in one. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "refuse.h"

const char *lynx_policy_bytes(uint64_t bytes, char *buf, size_t len)
{
	if (bytes >= 1ull << 30)
		snprintf(buf, len, "%.2f GiB", (double)bytes / (1ull << 30));
	else if (bytes >= 1ull << 20)
		snprintf(buf, len, "%.2f MiB", (double)bytes / (1ull << 20));
	else if (bytes >= 1ull << 10)
		snprintf(buf, len, "%.2f KiB", (double)bytes / (1ull << 10));
	else
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	return buf;
}

int lynx_policy_refuse(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why && len) {
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}
