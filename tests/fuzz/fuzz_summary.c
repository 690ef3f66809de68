/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the recompute summary reader (tools/report_summary.c), run by `make
 * fuzz`. Any input must be accepted or refused with a reason, never crash (ASan and UBSan
 * watch); a refused one leaves the struct zeroed, an accepted one holds values in range.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "report_summary.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynx_summary s;
	char why[256] = "";
	int err = lynx_summary_parse((const char *)data, size, &s, why, sizeof(why));

	if (err && err != -EINVAL && err != -ENOMEM)
		abort(); /* an error the reader does not promise */
	if (err == -EINVAL && !why[0])
		abort(); /* refused without a reason */
	if (err) {
		static const struct lynx_summary zero;
		if (memcmp(&s, &zero, sizeof(s)))
			abort(); /* a refusal left something behind */
		return 0;
	}
	if (s.n_refused > LYNX_SUMMARY_MAX_REFUSALS || !memchr(s.planner, 0, sizeof(s.planner)) ||
	    !memchr(s.max_slowdown, 0, sizeof(s.max_slowdown)) || !(s.predicted_slowdown > 0) ||
	    (s.achieved_known && !(s.achieved_ns >= 0)))
		abort(); /* accepted out of range */
	return 0;
}
