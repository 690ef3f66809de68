/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the profile reader (profiler/profile.c), run by `make fuzz`. Any
 * input must be accepted or refused with a reason, never crash (ASan and UBSan watch); an
 * accepted one must round-trip: write -> read -> write gives the same bytes.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynx_profile p, q;
	char why[256] = "";
	char *a, *b;
	int err = lynx_profile_from_json((const char *)data, size, &p, why, sizeof(why));

	if (err) {
		if (err != -EINVAL && err != -ENOMEM)
			abort();
		if (err == -EINVAL && !why[0])
			abort(); /* a refusal always says why */
		return 0;
	}
	a = lynx_profile_to_json(&p);
	lynx_profile_free(&p);
	if (!a)
		return 0;
	if (lynx_profile_from_json(a, strlen(a), &q, why, sizeof(why)))
		abort(); /* the reader refuses the writer's own output */
	b = lynx_profile_to_json(&q);
	lynx_profile_free(&q);
	if (b && strcmp(a, b))
		abort(); /* not a fixed point */
	free(a);
	free(b);
	return 0;
}
