/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx report DIR [DIR...]`: every rank's profile (and timeline, when there) in the DIRs, merged
 * into tables on stdout and a plot, report.svg in the first DIR. */
#ifndef LYNX_TOOLS_REPORT_H
#define LYNX_TOOLS_REPORT_H

#include <stdio.h>

/*
 * argv[0] is "report". Reads every DIR/profile.<rank>.json of every DIR given (profiler/profile.h's
 * reader), as if they were one directory, and keeps one run's (profiler/run.h: --run ID's, or the
 * newest, named on stderr when the DIRs hold several); for each rank kept, trace.<rank>.json
 * beside its profile when present (checked with profiler/chrome_check.h); groups the ranks into
 * pipeline stages; prints per stage the per-layer table, the activation memory and the peak by
 * class, and the communication windows by kind; writes report.svg in the first DIR (one panel per
 * rank: device memory over one iteration and each stream's busy share from the timeline, the peak
 * by class from the profile). Returns LYNX_EXIT_OK; LYNX_EXIT_USAGE for a bad command line (an
 * unknown --run among them, one directory named twice), a DIR that cannot be read or holds no
 * profiles, a rank of the run read with a profile in two DIRs (both paths on stderr), or a profile
 * or timeline that cannot be read or is malformed (the file and the field or byte offset on
 * stderr); LYNX_EXIT_FAIL when report.svg cannot be written.
 */
int lynx_report_main(int argc, char **argv);

/* The details of `lynx help report`. */
void lynx_report_help(FILE *out);

#endif /* LYNX_TOOLS_REPORT_H */
