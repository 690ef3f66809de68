/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx run`: runs a command with liblynx.so preloaded and Lynx's settings in its environment. */
#ifndef LYNX_RUN_H
#define LYNX_RUN_H

#include <stdio.h>

/*
 * argv[0] is "run". Sets LD_PRELOAD, LYNX_MODE, LYNX_OUT and PYTORCH_CUDA_ALLOC_CONF, then
 * execs the command after "--". Returns only on failure: LYNX_EXIT_USAGE for a bad command
 * line or a missing liblynx.so, 127 when the command is not found, 126 when it cannot be
 * executed (the shell's conventions).
 */
int lynx_run_main(int argc, char **argv);

/* The options of `lynx run`, for `lynx help run`. */
void lynx_run_help(FILE *out);

#endif /* LYNX_RUN_H */
