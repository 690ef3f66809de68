/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx doctor`: loads the CUDA driver, runtime and NCCL that this machine's loader finds,
 * reports their paths and versions, and checks that every hook of shim/hooks.def resolves.
 */
#ifndef LYNX_DOCTOR_H
#define LYNX_DOCTOR_H

#include <stdio.h>

/*
 * argv[0] is "doctor". Prints a table (component, status, detail) and a summary line.
 * Returns LYNX_EXIT_OK when a trainer can run under Lynx here, LYNX_EXIT_FAIL when not
 * (see lynx_doctor_help for what counts), LYNX_EXIT_USAGE for a bad command line.
 */
int lynx_doctor_main(int argc, char **argv);

/* The options and the rules of `lynx help doctor`. */
void lynx_doctor_help(FILE *out);

#endif /* LYNX_DOCTOR_H */
