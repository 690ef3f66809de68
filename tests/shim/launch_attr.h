/* SPDX-License-Identifier: Apache-2.0 */
/* A CUDA launch attribute as tests build one (header-only: each test binary is one file). */
#ifndef LYNX_TESTS_SHIM_LAUNCH_ATTR_H
#define LYNX_TESTS_SHIM_LAUNCH_ATTR_H

#include <cuda.h>
#include <stddef.h>
#include <string.h>

/* An attribute as a trainer's stack frame holds it: value's bytes, `fill` everywhere else. */
static inline CUlaunchAttribute attr(CUlaunchAttributeID id, const void *value, size_t bytes,
                                     unsigned char fill)
{
	CUlaunchAttribute a;

	memset(&a, fill, sizeof(a));
	a.id = id;
	memcpy(&a.value, value, bytes);
	return a;
}

#endif /* LYNX_TESTS_SHIM_LAUNCH_ATTR_H */
