/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx profile`: one rank's profile built offline from a LYNX_EVENTS dump, or a profile read
 * back and summarised. */
#ifndef LYNX_TOOLS_PROFILE_H
#define LYNX_TOOLS_PROFILE_H

#include <stdio.h>

/*
 * argv[0] is "profile". `lynx profile EVENTS.jsonl [-o FILE] [--rank R] [--world W]` builds
 * the profile (profiler/build.h), writes it atomically to FILE (default profile.json) and
 * prints a summary; `lynx profile --read PROFILE` reads a profile with the format's one
 * reader and prints the same summary. Returns LYNX_EXIT_OK; LYNX_EXIT_USAGE for a bad
 * command line or an input that cannot be read or is malformed (the reason, with the line,
 * field or byte offset, on stderr); LYNX_EXIT_FAIL when no profile can be built from a valid
 * dump (no repeating iteration, no layers) or the output cannot be written.
 */
int lynx_profile_main(int argc, char **argv);

/* The details of `lynx help profile`. */
void lynx_profile_help(FILE *out);

#endif /* LYNX_TOOLS_PROFILE_H */
