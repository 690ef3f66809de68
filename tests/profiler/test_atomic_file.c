/* SPDX-License-Identifier: Apache-2.0 */
/*
 * profiler/atomic_file: a reader sees the old file or the whole new one. A commit renames a
 * complete file into place, readable by others; a failed write (here: over the file-size
 * limit, as a full disk would fail it) or an abort leaves the old file and no temporary; a
 * terminating signal's handler removes every temporary still being written.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "atomic_file.h"

static char dir[64], target[128];

static int make_dir(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/lynx-atomic-file.%d", (int)getpid());
	snprintf(target, sizeof(target), "%s/profile.0.json", dir);
	return mkdir(dir, 0700);
}

static int remove_dir(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) ? -1 : 0;
}

/* The directory's entries other than the target. */
static int strays(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.' && strcmp(e->d_name, "profile.0.json") != 0;
	closedir(d);
	return n;
}

static char *slurp(const char *path)
{
	static char text[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return NULL;
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	return text;
}

static void test_a_commit_puts_the_whole_file_in_place_for_others_to_read(void **state)
{
	struct stat st;

	assert_int_equal(lynx_atomic_file_write(target, "first\n"), 0);
	assert_string_equal(slurp(target), "first\n");
	assert_int_equal(stat(target, &st), 0);
	assert_true(st.st_mode & S_IRGRP); /* not mkstemp's 0600 */
	assert_int_equal(lynx_atomic_file_write(target, "second\n"), 0);
	assert_string_equal(slurp(target), "second\n");
	assert_int_equal(strays(), 0);
}

static void test_an_abort_leaves_the_old_file_and_no_temporary(void **state)
{
	struct lynx_atomic_file a;

	assert_int_equal(lynx_atomic_file_write(target, "old\n"), 0);
	assert_int_equal(lynx_atomic_file_open(&a, target), 0);
	fputs("half of a new", a.f);
	fflush(a.f);
	assert_int_equal(strays(), 1);
	lynx_atomic_file_abort(&a);
	assert_string_equal(slurp(target), "old\n");
	assert_int_equal(strays(), 0);
}

/* A write that fails part-way, as on a full disk: the file-size limit makes it fail. */
static void test_a_failed_write_leaves_the_old_file_and_no_temporary(void **state)
{
	struct rlimit old, small = {.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
	struct lynx_atomic_file a;
	static char big[65536];

	assert_int_equal(lynx_atomic_file_write(target, "old\n"), 0);
	memset(big, 'x', sizeof(big));
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small.rlim_max = old.rlim_max;
	signal(SIGXFSZ, SIG_IGN); /* EFBIG from write instead of the signal */
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	assert_int_equal(lynx_atomic_file_open(&a, target), 0);
	fwrite(big, 1, sizeof(big), a.f);
	assert_int_equal(lynx_atomic_file_commit(&a), -EFBIG);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	assert_string_equal(slurp(target), "old\n");
	assert_int_equal(strays(), 0);
}

static void on_term(int sig)
{
	lynx_atomic_file_unlink_pending();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* A process killed by SIGTERM while writing two files, with a handler as the shim's. */
static void test_a_terminating_signal_leaves_no_temporary(void **state)
{
	char second[160];
	int status;
	pid_t pid;

	assert_int_equal(unlink(target) == 0 || errno == ENOENT, 1);
	snprintf(second, sizeof(second), "%s/plan.json", dir);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct lynx_atomic_file a, b;
		signal(SIGTERM, on_term);
		if (lynx_atomic_file_open(&a, target) || lynx_atomic_file_open(&b, second))
			_exit(3);
		fputs("{\"partial", a.f);
		fflush(a.f);
		raise(SIGTERM);
		_exit(4); /* not reached */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	assert_int_equal(strays(), 0);
	assert_null(slurp(target));
}

/* More files at once than there are slots: the others are written as well, uncovered. */
static void test_more_files_at_once_than_slots_are_still_written(void **state)
{
	struct lynx_atomic_file a[LYNX_ATOMIC_FILE_SLOTS + 2];
	char paths[LYNX_ATOMIC_FILE_SLOTS + 2][160];

	for (int i = 0; i < LYNX_ATOMIC_FILE_SLOTS + 2; i++) {
		snprintf(paths[i], sizeof(paths[i]), "%s/f%d", dir, i);
		assert_int_equal(lynx_atomic_file_open(&a[i], paths[i]), 0);
		fprintf(a[i].f, "%d\n", i);
	}
	for (int i = 0; i < LYNX_ATOMIC_FILE_SLOTS + 2; i++)
		assert_int_equal(lynx_atomic_file_commit(&a[i]), 0);
	for (int i = 0; i < LYNX_ATOMIC_FILE_SLOTS + 2; i++) {
		char want[16];
		snprintf(want, sizeof(want), "%d\n", i);
		assert_string_equal(slurp(paths[i]), want);
		unlink(paths[i]);
	}
	assert_int_equal(strays(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_a_commit_puts_the_whole_file_in_place_for_others_to_read),
	        cmocka_unit_test(test_an_abort_leaves_the_old_file_and_no_temporary),
	        cmocka_unit_test(test_a_failed_write_leaves_the_old_file_and_no_temporary),
	        cmocka_unit_test(test_a_terminating_signal_leaves_no_temporary),
	        cmocka_unit_test(test_more_files_at_once_than_slots_are_still_written),
	};

	return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
