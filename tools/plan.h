/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx plan`: one planner on a GPT job built from presets or from recorded profiles; writes
 * the plan and prints it. */
#ifndef LYNX_PLAN_CMD_H
#define LYNX_PLAN_CMD_H

#include <stdio.h>

/*
 * argv[0] is "plan". Plans the job of --model on --cluster, optionally after choosing the
 * pipeline split (--partition), or of the profiles named by the other arguments (one per
 * pipeline stage, of one run: --run's, or the newest, which stderr names when they hold
 * several; only --budget, --planner, --out, --time-limit and --run apply), with --planner
 * (default heu); writes the plan's JSON (policy/plan.h) to --out and prints a summary.
 * Returns LYNX_EXIT_OK (also for a plan that does not fit, which it says); LYNX_EXIT_USAGE
 * for a bad command line, an unknown preset, planner or --run, an invalid job, a budget below
 * static memory, a profile that cannot be read or is not valid (the reader's message names
 * the field or the byte offset), profiles that do not make a problem, or the offload planner
 * without a host link, with one message on stderr; LYNX_EXIT_FAIL when planning or writing
 * fails.
 */
int lynx_plan_main(int argc, char **argv);

/* The details of `lynx help plan`. */
void lynx_plan_help(FILE *out);

#endif /* LYNX_PLAN_CMD_H */
