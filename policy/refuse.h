/* SPDX-License-Identifier: Apache-2.0 */
/* How the policy library says no: a one-sentence reason for the caller, and -EINVAL. */
#ifndef LYNX_POLICY_REFUSE_H
#define LYNX_POLICY_REFUSE_H

#include <stddef.h>
#include <stdint.h>

/* Writes the reason (printf-style) into why, if given, and returns -EINVAL. */
int lynx_policy_refuse(char *why, size_t len, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* A size for a reason, in the largest binary unit it fills ("1.09 MiB", "70.00 GiB",
 * "512 B"), as `lynx report` writes sizes. Returns buf. */
const char *lynx_policy_bytes(uint64_t bytes, char *buf, size_t len);

#endif /* LYNX_POLICY_REFUSE_H */
