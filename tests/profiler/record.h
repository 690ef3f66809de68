/* SPDX-License-Identifier: Apache-2.0 */
/*
 * For the profiler's tests: records real traces by running build/bin/tinytrain under
 * build/liblynx.so with LYNX_EVENTS into a fresh directory, and reads each rank's dump.
 * Header-only (static functions) so that each test binary stays one file.
 */
#ifndef LYNX_TEST_PROFILER_RECORD_H
#define LYNX_TEST_PROFILER_RECORD_H

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "event.h"

#define RECORD_MAX_RANKS 8

static char record_build_dir[1024]; /* build/, from argv[0] = build/tests/test_x */

static int record_init(const char *argv0)
{
	const char *slash = strrchr(argv0, '/');
	char resolved[PATH_MAX];

	snprintf(resolved, sizeof(resolved), "%.*s/..", slash ? (int)(slash - argv0) : 1,
	         slash ? argv0 : ".");
	return realpath(resolved, record_build_dir) ? 0 : -1;
}

struct recording {
	char dir[1100];
	struct lynx_prof_trace rank[RECORD_MAX_RANKS]; /* the ranks' dumps, by pid */
	int ranks;
};

/* Runs tinytrain with args under the shim; reads every process's dump with more than 100
 * events (the launcher only makes an NCCL id). Returns 0, or -1 with a message on stderr. */
static int record_tinytrain(const char *args, struct recording *rec)
{
	char cmd[8192], why[256];
	struct dirent *d;

	memset(rec, 0, sizeof(*rec));
	snprintf(rec->dir, sizeof(rec->dir), "%s/test-profiler.XXXXXX", record_build_dir);
	if (!mkdtemp(rec->dir))
		return -1;
	snprintf(cmd, sizeof(cmd),
	         "env LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_OUT=%s LYNX_EVENTS=%s/ev "
	         "%s/bin/tinytrain %s >%s/stdout 2>%s/stderr",
	         record_build_dir, rec->dir, rec->dir, record_build_dir, args, rec->dir, rec->dir);
	int status = system(cmd);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "tinytrain %s failed (status %d)\n", args, status);
		return -1;
	}
	DIR *dir = opendir(rec->dir);
	if (!dir)
		return -1;
	while ((d = readdir(dir)) && rec->ranks < RECORD_MAX_RANKS) {
		char path[1400];
		size_t len = strlen(d->d_name);
		if (strncmp(d->d_name, "ev.", 3) || len < 6 ||
		    strcmp(d->d_name + len - 6, ".jsonl"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", rec->dir, d->d_name);
		struct lynx_prof_trace *t = &rec->rank[rec->ranks];
		if (lynx_prof_trace_read(path, t, why, sizeof(why))) {
			fprintf(stderr, "%s: %s\n", path, why);
			closedir(dir);
			return -1;
		}
		if (t->count > 100)
			rec->ranks++;
		else
			lynx_prof_trace_free(t);
	}
	closedir(dir);
	return 0;
}

static void record_release(struct recording *rec)
{
	char cmd[1200];

	for (int i = 0; i < rec->ranks; i++)
		lynx_prof_trace_free(&rec->rank[i]);
	if (rec->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rec->dir);
		if (system(cmd))
			fprintf(stderr, "cannot remove %s\n", rec->dir);
	}
	memset(rec, 0, sizeof(*rec));
}

#endif /* LYNX_TEST_PROFILER_RECORD_H */
