/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx env`: every LYNX_* setting with its value in this environment, default and meaning. */
#ifndef LYNX_ENV_H
#define LYNX_ENV_H

#include <stdio.h>

/*
 * argv[0] is "env". Prints one line per option of options.def; a refused value gets a
 * warning line under its option. Returns LYNX_EXIT_OK (bad values are reported, not fatal:
 * Lynx runs with the defaults), LYNX_EXIT_USAGE for unexpected arguments.
 */
int lynx_env_main(int argc, char **argv);

/* The details of `lynx help env`. */
void lynx_env_help(FILE *out);

#endif /* LYNX_ENV_H */
