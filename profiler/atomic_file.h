/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writing Lynx's output files so that a reader (lynx report, another rank planning online,
 * a person) sees the old file or the whole new one, never a part: a temporary file beside
 * the target, flushed to disk, then renamed over it. Files are created 0644 (less the
 * umask), like any output a user shares.
 */
#ifndef LYNX_PROF_ATOMIC_FILE_H
#define LYNX_PROF_ATOMIC_FILE_H

#include <stdio.h>

struct lynx_atomic_file {
	FILE *f; /* write the content here */
	char *tmp;
	const char *path;
	int slot; /* its entry among the pending temporaries, or -1 (tmp is malloc'd) */
};

/* Opens a temporary file beside path. Returns 0 or -errno (-ENOMEM). */
int lynx_atomic_file_open(struct lynx_atomic_file *a, const char *path);

/* Flushes, syncs and closes the temporary file and renames it over path; on any error
 * (including an earlier write error on f) removes it. Returns 0 or -errno. */
int lynx_atomic_file_commit(struct lynx_atomic_file *a);

/* Closes and removes the temporary file: nothing is written. */
void lynx_atomic_file_abort(struct lynx_atomic_file *a);

/* open, write text, commit. */
int lynx_atomic_file_write(const char *path, const char *text);

/*
 * Removes every temporary file still being written, in this process: for a handler of a
 * terminating signal, so that no "*.tmp.*" file survives the process. Async-signal-safe (it
 * only reads fixed slots and calls unlink). The first LYNX_ATOMIC_FILE_SLOTS files written
 * at once are covered, which is more than Lynx ever writes at once; a temporary created in
 * the instant between mkstemp and its slot's marking is not. Nothing helps against SIGKILL.
 */
void lynx_atomic_file_unlink_pending(void);

/* In a forked child: the parent's temporaries are the parent's to finish or remove, and the
 * threads writing them are not in the child, so the child forgets them. */
void lynx_atomic_file_after_fork_in_child(void);

#define LYNX_ATOMIC_FILE_SLOTS 8

#endif /* LYNX_PROF_ATOMIC_FILE_H */
