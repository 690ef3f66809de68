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

/*
 * What p's backward reruns, as a clause to append to a line about its layers, in buf: "" when
 * no layer reruns its forward, ", each backward reruns its forward" when every layer does
 * (full recompute), else ", the backward reruns the forward of layers 0-1 of 4" (block
 * recompute); then, where the times are known, what the reruns cost: " (90.812 ms, 17.6% of
 * the iteration)". LYNX_PROFILE_RERUN_NOTE_MAX holds it but for a long list of layers,
 * which is cut. Returns buf.
 */
#define LYNX_PROFILE_RERUN_NOTE_MAX 192
const char *lynx_profile_rerun_note(const struct lynx_profile *p, char *buf, size_t len);

/* bytes in MiB, as every summary line prints memory. */
double lynx_prof_mib(uint64_t bytes);

#endif /* LYNX_PROF_SUMMARY_H */
