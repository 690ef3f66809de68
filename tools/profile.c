/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx profile`: reads one rank's LYNX_EVENTS dump, builds its profile (iterations, layers,
 * lifetimes, windows: profiler/build.c), writes it, and prints a short summary; or reads a
 * profile back (--read) and prints the same summary. With --trace it also writes the rank's
 * timeline (profiler/chrome_trace.c) for Perfetto and `lynx report`.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* build.h brings profiler/profile.h (the format); "profile.h" here is tools/profile.h, found
 * first because it sits beside this file. */
#include "build.h"
#include "chrome_trace.h"
#include "event.h"
#include "lynx.h"
#include "profile.h"
#include "summary.h"

void lynx_profile_help(FILE *out)
{
	fprintf(out,
	        "options:\n"
	        "  -o FILE       where to write the profile (default profile.json), atomically\n"
	        "  --rank R      the rank the dump comes from (the dump does not say)\n"
	        "  --world W     the job's number of ranks\n"
	        "  --trace FILE  also write the timeline as Chrome trace-event JSON (Perfetto,\n"
	        "                chrome://tracing), atomically; written even when no profile\n"
	        "                can be built. `lynx report DIR` reads it as trace.<rank>.json\n"
	        "  --read FILE   read a profile instead, check it and print its summary\n"
	        "\nTimes marked \"host\" are spans between host-side call returns; device timing\n"
	        "is not recorded yet, so window durations and idle times are \"unknown\".\n");
}

/* "1.234 ms host", or "unknown". */
static const char *fmt_time(const struct lynx_profile_time *t, char *buf, size_t len)
{
	if (t->source == LYNX_PROFILE_SOURCE_UNKNOWN)
		snprintf(buf, len, "unknown");
	else
		snprintf(buf, len, "%.3f ms %s", (double)t->ns / 1e6,
		         lynx_profile_source_name(t->source));
	return buf;
}

static const char *fmt_bytes(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(buf, len, "%.2f GiB", (double)b / (1ull << 30));
	else if (b >= (1ull << 20))
		snprintf(buf, len, "%.2f MiB", (double)b / (1ull << 20));
	else if (b >= 1024)
		snprintf(buf, len, "%.2f KiB", (double)b / 1024);
	else
		snprintf(buf, len, "%llu B", (unsigned long long)b);
	return buf;
}

static void summary(const struct lynx_profile *p, const char *path)
{
	char a[40], b[40], c[40], rerun[LYNX_PROFILE_RERUN_NOTE_MAX];

	char rank[32] = "unknown", world[32] = "unknown";

	if (p->rank >= 0)
		snprintf(rank, sizeof(rank), "%d", p->rank);
	if (p->world >= 0)
		snprintf(world, sizeof(world), "%d", p->world);
	printf("%s: rank %s of %s, pid %d", path, rank, world, p->env.pid);
	if (p->run.known && p->run.id[0])
		printf(", run %s (%s)", p->run.id, lynx_profile_run_source_name(p->run.source));
	else if (p->run.known)
		printf(", a run without an id");
	printf("\n");
	printf("iteration: %u found, %llu work signatures each, %s\n", p->iteration.count,
	       (unsigned long long)p->iteration.period_tokens,
	       fmt_time(&p->iteration.time, a, sizeof(a)));
	printf("layers: %zu on this stage, %u micro-batches%s\n", p->layer_count, p->microbatches,
	       lynx_profile_rerun_note(p, rerun, sizeof(rerun)));
	printf("  %-5s  %-18s  %-18s  %-15s  %s\n", "layer", "forward", "backward",
	       "kernels fwd/bwd", "saved");
	for (size_t i = 0; i < p->layer_count; i++) {
		const struct lynx_profile_layer *l = &p->layers[i];
		char k[32];
		snprintf(k, sizeof(k), "%zu/%zu", l->fwd_kernels.count, l->bwd_kernels.count);
		printf("  %-5zu  %-18s  %-18s  %-15s  %s\n", i, fmt_time(&l->forward, a, sizeof(a)),
		       fmt_time(&l->backward, b, sizeof(b)), k,
		       fmt_bytes(l->saved_bytes, c, sizeof(c)));
	}
	printf("windows in one iteration: %zu NCCL calls (duration and idle time: %s)\n",
	       p->window_count,
	       p->window_count ? lynx_profile_source_name(p->windows[0].idle.source) : "-");
	for (int k = 0; k < LYNX_PROFILE_WINDOW_KIND_COUNT; k++) {
		size_t n = 0;
		uint64_t bytes = 0;
		for (size_t i = 0; i < p->window_count; i++)
			if (p->windows[i].kind == (enum lynx_profile_window_kind)k) {
				n++;
				bytes += p->windows[i].bytes;
			}
		if (n)
			printf("  %-12s %5zu calls  %s\n", lynx_profile_window_kind_name(k), n,
			       fmt_bytes(bytes, a, sizeof(a)));
	}
	printf("groups: %zu saved activations on micro-batch 0\n", p->group_count);
	printf("memory (%s, from allocation calls): peak %s",
	       lynx_profile_source_name(p->memory.source),
	       fmt_bytes(p->memory.peak_bytes, a, sizeof(a)));
	for (int m = 0; m < LYNX_PROFILE_MEMORY_CLASS_COUNT; m++)
		printf("%s %s %s", m ? "," : ":", lynx_profile_memory_class_name(m),
		       fmt_bytes(p->memory.at_peak[m], a, sizeof(a)));
	printf("\n");
}

static int parse_int(const char *opt, const char *s, int32_t *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > INT32_MAX)
		return lynx_usage_error("profile", "%s: expected a non-negative integer, got '%s'",
		                        opt, s);
	*out = (int32_t)v;
	return 0;
}

static int read_profile(const char *path)
{
	struct lynx_profile p;
	char why[512];
	int err = lynx_profile_read(path, &p, why, sizeof(why));

	if (err) {
		fprintf(stderr, "lynx profile: %s: %s\n", path, why[0] ? why : strerror(-err));
		return LYNX_EXIT_USAGE;
	}
	summary(&p, path);
	lynx_profile_free(&p);
	return LYNX_EXIT_OK;
}

int lynx_profile_main(int argc, char **argv)
{
	struct lynx_prof_build_options opt = {.rank = -1, .world = -1};
	const char *events = NULL, *out = "profile.json", *profile = NULL, *timeline = NULL;
	struct lynx_prof_trace trace;
	struct lynx_profile p;
	char why[512];
	int err, status = LYNX_EXIT_OK;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has_value = i + 1 < argc;
		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			return lynx_command_help("profile");
		if (!strcmp(a, "-o") || !strcmp(a, "--rank") || !strcmp(a, "--world") ||
		    !strcmp(a, "--read") || !strcmp(a, "--trace")) {
			if (!has_value)
				return lynx_usage_error("profile", "%s needs a value", a);
			const char *v = argv[++i];
			if (!strcmp(a, "-o"))
				out = v;
			else if (!strcmp(a, "--trace"))
				timeline = v;
			else if (!strcmp(a, "--read"))
				profile = v;
			else if ((err = parse_int(a, v,
			                          !strcmp(a, "--rank") ? &opt.rank : &opt.world)))
				return err;
		} else if (a[0] == '-' && a[1]) {
			return lynx_usage_error("profile", "unknown option '%s'", a);
		} else if (events) {
			return lynx_usage_error("profile", "expected one events file, got '%s' too",
			                        a);
		} else {
			events = a;
		}
	}
	if (profile && events)
		return lynx_usage_error("profile", "--read takes no events file");
	if (profile && timeline)
		return lynx_usage_error("profile", "--trace needs an events file, not --read");
	if (profile)
		return read_profile(profile);
	if (!events)
		return lynx_usage_error("profile", "expected an events file (LYNX_EVENTS dump)");
	err = lynx_prof_trace_read(events, &trace, why, sizeof(why));
	if (err) {
		fprintf(stderr, "lynx profile: %s: %s\n", events, why[0] ? why : strerror(-err));
		return LYNX_EXIT_USAGE;
	}
	err = lynx_prof_build_profile(&trace, &opt, &p, why, sizeof(why));
	if (err) {
		fprintf(stderr, "lynx profile: %s: no profile: %s\n", events,
		        why[0] ? why : strerror(-err));
		status = LYNX_EXIT_FAIL;
	} else if ((err = lynx_profile_write(&p, out))) {
		fprintf(stderr, "lynx profile: cannot write %s: %s\n", out, strerror(-err));
		lynx_profile_free(&p);
		status = LYNX_EXIT_FAIL;
	}
	/* The timeline is worth having without a profile: it shows why none was found. */
	if (timeline) {
		struct lynx_prof_chrome_options copt = {opt.rank, opt.world};
		int terr = lynx_prof_write_chrome_trace(&trace, err ? NULL : &p, &copt, timeline,
		                                        why, sizeof(why));
		if (terr) {
			fprintf(stderr, "lynx profile: %s\n", why);
			status = LYNX_EXIT_FAIL;
		} else {
			printf("%s: timeline (Chrome trace-event JSON)\n", timeline);
		}
	}
	lynx_prof_trace_free(&trace);
	if (!err) {
		summary(&p, out);
		lynx_profile_free(&p);
	}
	return status;
}
