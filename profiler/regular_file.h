/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading a whole input file that Lynx did not create (LYNX_PLAN, other ranks' profiles)
 * without ever waiting on it: the shim reads on the trainer's thread, so a named pipe, a
 * device or a directory in that place is refused at once instead of blocking the job, and a
 * file larger than its reader's bound is refused instead of filling the host's memory.
 */
#ifndef LYNX_PROF_REGULAR_FILE_H
#define LYNX_PROF_REGULAR_FILE_H

#include <stddef.h>

/*
 * Reads path into *text (malloc'd, NUL-terminated; *len bytes before the NUL) when it is a
 * regular file of at most max_bytes. Returns 0; -errno from open or read; -EINVAL when it is
 * not a regular file; -EFBIG when it is larger; -ENOMEM. On failure *text is NULL and why
 * (when why_len > 0) says what was refused, about "it": the caller names the file.
 */
int lynx_regular_file_read(const char *path, size_t max_bytes, char **text, size_t *len, char *why,
                           size_t why_len);

#endif /* LYNX_PROF_REGULAR_FILE_H */
