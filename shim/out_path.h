/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LYNX_OUT as a pattern, as `nsys profile -o` takes one: %p the process id, %h the host
 * name, %q{VAR} the environment variable VAR (%q{RANK}, %q{SLURM_PROCID}), %% a percent
 * sign. On a cluster without a shared file system each process or node then writes its
 * own directory. Pure C (the process's facts come in a struct), so tests need no process.
 */
#ifndef LYNX_OUT_PATH_H
#define LYNX_OUT_PATH_H

#include <stdbool.h>
#include <stddef.h>

struct lynx_out_path_facts {
	int pid;
	const char *host;                        /* the host name */
	const char *(*getenv)(const char *name); /* NULL: no variable is set */
};

/*
 * Expands pattern into out (len bytes). A variable that is not set expands to the process
 * id, so that processes never share a name by accident, and is named in problem. Returns
 * 0 (problem "" unless a variable was unset); -EINVAL for an unknown %x or an unterminated
 * %q{ (out then holds the pattern itself, problem says what); -ENAMETOOLONG when the
 * expansion does not fit.
 */
int lynx_out_path_expand(const char *pattern, const struct lynx_out_path_facts *facts, char *out,
                         size_t len, char *problem, size_t problem_len);

/* True when pattern names something that differs between processes of one host: %p. */
bool lynx_out_path_per_process(const char *pattern);

/* True when pattern may give processes of one job different directories: %p, %h or %q. */
bool lynx_out_path_private(const char *pattern);

#endif /* LYNX_OUT_PATH_H */
