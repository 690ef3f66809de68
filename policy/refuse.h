/* SPDX-License-Identifier: Apache-2.0 */
/* How the policy library says no: a one-sentence reason for the caller, and -EINVAL. */
#ifndef LYNX_POLICY_REFUSE_H
#define LYNX_POLICY_REFUSE_H

#include <stddef.h>

/* Writes the reason (printf-style) into why, if given, and returns -EINVAL. */
int lynx_policy_refuse(char *why, size_t len, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

#endif /* LYNX_POLICY_REFUSE_H */
