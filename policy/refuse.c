/* SPDX-License-Identifier: Apache-2.0 */
/* The policy library's one way of refusing input with a reason. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "refuse.h"

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
