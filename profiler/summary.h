/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The short summary of one rank's profile that profiling-only mode prints on stderr at
 * exit: the iteration, a per-layer table, activation and peak memory, the communication
 * windows and the share of the step they cover. The what-if, which needs every stage's
 * profile, is policy/whatif.h's.
 */
#ifndef LYNX_PROF_SUMMARY_H
#define LYNX_PROF_SUMMARY_H

#include <stdio.h>

#include "profile.h"

/* Prints p's summary to f, each line prefixed with "lynx[rank R]" (or "lynx" when rank is
 * negative). */
void lynx_profile_print_summary(FILE *f, const struct lynx_profile *p, int rank);

/* bytes in MiB, as every summary line prints memory. */
double lynx_prof_mib(uint64_t bytes);

#endif /* LYNX_PROF_SUMMARY_H */
