/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of the log (shim/log.c): lines carry the level and the call site, and go to
 * LYNX_LOG_FILE when one is given; levels above the set one are dropped; a CUDA error reads
 * as the driver's name for it, found in the driver the process loaded (simgpu's, loaded
 * RTLD_LOCAL as the CUDA runtime loads the real one), and as its number when the driver
 * does not know it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../harness.h"
#include "log.h"
#include "simgpu_driver.h"

static void test_log_writes_levels_to_the_file_and_drops_the_rest(void **state)
{
	char path[1200];

	snprintf(path, sizeof(path), "%s/lynx.log", scratch);
	assert_int_equal(lynx_log_open(LYNX_LOG_WARN, path), 0);
	lynx_warn("a warning %d", 7);
	lynx_info("an info line");
	lynx_error("an error");
	assert_int_equal(lynx_log_open(LYNX_LOG_WARN, NULL), 0);
	char *text = slurp(path);
	assert_non_null(text);
	assert_non_null(strstr(text, " WARN test_log.c:"));
	assert_non_null(strstr(text, "] a warning 7\n"));
	assert_non_null(strstr(text, " ERROR test_log.c:"));
	assert_null(strstr(text, "an info line"));
	free(text);
}

static void test_log_names_cuda_errors_by_the_drivers_name(void **state)
{
	char buf[96];

	assert_non_null(simgpu_driver_load());
	assert_string_equal(lynx_cuda_error_text(2, buf, sizeof(buf)),
	                    "CUDA_ERROR_OUT_OF_MEMORY (2)");
	assert_string_equal(lynx_cuda_error_text(719, buf, sizeof(buf)),
	                    "CUDA_ERROR_LAUNCH_FAILED (719)");
	assert_string_equal(lynx_cuda_error_text(123456, buf, sizeof(buf)), "CUDA error 123456");
	/* A short buffer is cut, never overrun. */
	char small[8];
	assert_string_equal(lynx_cuda_error_text(2, small, sizeof(small)), "CUDA_ER");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_log_writes_levels_to_the_file_and_drops_the_rest),
	        cmocka_unit_test(test_log_names_cuda_errors_by_the_drivers_name),
	};

	(void)argc;
	if (harness_init(argv[0], "test_log"))
		return 1;
	return harness_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
