/* SPDX-License-Identifier: Apache-2.0 */
/*
 * profiler/regular_file: a regular file is read whole; a named pipe, a directory, a device,
 * a missing file and a file over the bound are refused at once with a reason, and nothing
 * is left allocated. A refusal that waited would hang the trainer, so every test runs under
 * an alarm that fails it instead.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "regular_file.h"

static char dir[64];

static int make_dir(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/lynx-regular-file.%d", (int)getpid());
	alarm(20); /* SIGALRM's default ends the binary: a wait fails the run, never hangs it */
	return mkdir(dir, 0700);
}

static int remove_dir(void **state)
{
	char cmd[128];

	alarm(0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) ? -1 : 0;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* Reads path expecting err; on a refusal, checks that why contains reason. */
static void expect_refusal(const char *path, size_t max, int err, const char *reason)
{
	char why[256] = "?", *text = (char *)1;
	size_t len = 99;

	assert_int_equal(lynx_regular_file_read(path, max, &text, &len, why, sizeof(why)), err);
	assert_null(text);
	assert_int_equal(len, 0);
	if (!strstr(why, reason))
		fail_msg("%s: want '%s' in '%s'", path, reason, why);
}

static void test_a_regular_file_is_read_whole(void **state)
{
	char path[128], why[256], *text;
	size_t len;

	snprintf(path, sizeof(path), "%s/plan.json", dir);
	write_file(path, "{\"stages\": []}\n");
	assert_int_equal(lynx_regular_file_read(path, 1024, &text, &len, why, sizeof(why)), 0);
	assert_int_equal(len, strlen("{\"stages\": []}\n"));
	assert_string_equal(text, "{\"stages\": []}\n");
	free(text);

	/* Empty is a file too: the parser says what is wrong with it. */
	write_file(path, "");
	assert_int_equal(lynx_regular_file_read(path, 1024, &text, &len, why, sizeof(why)), 0);
	assert_int_equal(len, 0);
	assert_string_equal(text, "");
	free(text);

	/* Exactly at the bound is read; one byte over is refused. */
	write_file(path, "0123456789");
	assert_int_equal(lynx_regular_file_read(path, 10, &text, &len, why, sizeof(why)), 0);
	assert_int_equal(len, 10);
	free(text);
	expect_refusal(path, 9, -EFBIG, "it is 10 bytes, over the 9 read at most");
}

static void test_a_named_pipe_is_refused_without_waiting(void **state)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/plan.fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	expect_refusal(path, 1024, -EINVAL, "it is a named pipe, not a regular file");
}

static void test_other_kinds_and_missing_files_are_refused(void **state)
{
	char path[128];

	expect_refusal(dir, 1024, -EINVAL, "it is a directory");
	expect_refusal("/dev/null", 1024, -EINVAL, "it is a device");
	snprintf(path, sizeof(path), "%s/missing.json", dir);
	expect_refusal(path, 1024, -ENOENT, "cannot open it: No such file or directory");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_a_regular_file_is_read_whole),
	        cmocka_unit_test(test_a_named_pipe_is_refused_without_waiting),
	        cmocka_unit_test(test_other_kinds_and_missing_files_are_refused),
	};

	return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
