/* SPDX-License-Identifier: Apache-2.0 */
/*
 * FNV-1a, 64 bits: the one byte hash of the profiler (token signatures' names, kernels'
 * names, run ids from an ncclUniqueId). Header-only: the signature hashes a hook's name per
 * live call.
 */
#ifndef LYNX_PROF_FNV_H
#define LYNX_PROF_FNV_H

#include <stddef.h>
#include <stdint.h>

#define LYNX_FNV1A_BASIS 0xcbf29ce484222325ull /* the offset basis */

/* h with one more byte hashed in; start from LYNX_FNV1A_BASIS. */
static inline uint64_t lynx_fnv1a_byte(uint64_t h, unsigned char byte)
{
	return (h ^ byte) * 0x100000001b3ull; /* the FNV prime */
}

/* A NUL-terminated string's hash. */
static inline uint64_t lynx_fnv1a_string(const char *s)
{
	uint64_t h = LYNX_FNV1A_BASIS;

	for (; *s; s++)
		h = lynx_fnv1a_byte(h, (unsigned char)*s);
	return h;
}

#endif /* LYNX_PROF_FNV_H */
