/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lynx command's shared pieces: its version, exit statuses, and the help and usage
 * messages of the command table in lynx.c, which every subcommand uses for its own.
 */
#ifndef LYNX_LYNX_H
#define LYNX_LYNX_H

#define LYNX_VERSION "0.1.0"

/* Exit statuses of every subcommand (`lynx run` ends in the command's own instead). */
enum lynx_exit {
	LYNX_EXIT_OK = 0,
	LYNX_EXIT_FAIL = 1,  /* the check or action failed (doctor found a problem) */
	LYNX_EXIT_USAGE = 2, /* bad command line, or nothing to run (no liblynx.so) */
};

/* The ranks a profile file's name may carry. */
#define LYNX_MAX_RANKS 4096

/* "profile.<rank>.json" -> rank; -1 for any other name. How `lynx report` and `lynx plan`
 * find the profiles in a directory (LYNX_OUT). */
int lynx_profile_file_rank(const char *name);

/* Prints the help of command `name` (synopsis, summary, details) on stdout; returns 0. */
int lynx_command_help(const char *name);

/*
 * Prints "lynx NAME: <message>", the command's synopsis and a pointer to `lynx help NAME`
 * on stderr. Returns LYNX_EXIT_USAGE, for `return lynx_usage_error(...)`.
 */
int lynx_usage_error(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* LYNX_LYNX_H */
