/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx sim`: every planner on a GPT job built from presets, compared in one table. */
#ifndef LYNX_SIM_H
#define LYNX_SIM_H

#include <stdio.h>

/*
 * argv[0] is "sim". Prints one row per planner (a table, or --json / --csv). Returns
 * LYNX_EXIT_OK; LYNX_EXIT_USAGE for a bad command line, an unknown preset, an invalid job
 * (h not divisible by a, p > L, ...) or a budget below static memory, with one message on
 * stderr; LYNX_EXIT_FAIL when a planner or the checker fails.
 */
int lynx_sim_main(int argc, char **argv);

/* The details of `lynx help sim`. */
void lynx_sim_help(FILE *out);

#endif /* LYNX_SIM_H */
