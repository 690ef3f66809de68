/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What `lynx report` reads and derives, shared by its tables (report.c) and its plot
 * (report_svg.c): each rank's profile and timeline, and the ranks grouped into stages.
 */
#ifndef LYNX_TOOLS_REPORT_MODEL_H
#define LYNX_TOOLS_REPORT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../profiler/profile.h" /* not tools/profile.h, which a plain include finds first */
#include "report_summary.h"

struct stream_use {
	char name[96];
	size_t items;   /* slices and instants in the window */
	bool timed;     /* at least one device-timed slice */
	double busy_us; /* union of device-timed slices in the window */
};

struct mem_point {
	double ts, bytes;
};

/* What a timeline gives the plot: one iteration's memory and stream use. */
struct timeline {
	char label[64];
	double start_us, end_us;
	struct mem_point *mem;
	size_t mem_count;
	struct stream_use *streams;
	size_t stream_count;
};

struct rank {
	int rank;
	size_t dir; /* report.dirs[dir] holds its profile, and its trace and summary beside it */
	struct lynx_profile p;
	bool have_trace;
	struct timeline tl;
	size_t stage;
	struct lynx_summary *summary; /* after a recompute run, its summary.<rank>.json; or NULL */
};

struct stage {
	size_t first; /* index of its first rank */
	int key;      /* its place in the pipeline (stage_key), for sorting */
	int number;   /* pipeline position; -1: unknown */
	bool pipelined;
};

struct report {
	const char **dirs; /* the DIRs with profiles, in the order given (others left out) */
	size_t dir_count;
	char *where;                 /* "DIR" or "DIR1 + DIR2 + ...", for messages and the header */
	const char *run_asked;       /* --run ID, or NULL: the newest run */
	struct lynx_profile_run run; /* the run read (its ranks'; started the earliest) */
	struct rank *ranks;
	size_t count;
	struct stage *stages;
	size_t stage_count;
};

/* Formatting shared by the tables and the plot (report.c). */
const char *fmt_bytes(uint64_t b, char *buf, size_t len);
const char *fmt_time(const struct lynx_profile_time *t, char *buf, size_t len);
/* "stage 2", or what is known of an unpipelined stage. */
void stage_name(const struct report *rep, size_t s, char *buf, size_t len);

/* text on f with the characters that XML and HTML give a meaning (< > & ") escaped. */
void lynx_report_escaped(FILE *f, const char *text);
/* The plot: per rank, memory over the last iteration, streams' busy share and the peak by
 * class, as one <svg> element on f (report_svg.c). */
void lynx_report_svg(FILE *f, const struct report *rep);
/* Writes the plot to report.svg. Returns 0 or -errno. */
int lynx_report_write_svg(const struct report *rep, const char *path);
/* Writes report.html: one self-contained page (no file or network fetched) with the tables
 * as the terminal shows them (text) and the plot inline (report_html.c). Returns 0 or
 * -errno. */
int lynx_report_write_html(const struct report *rep, const char *text, const char *path);

#endif /* LYNX_TOOLS_REPORT_MODEL_H */
