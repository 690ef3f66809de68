/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A rank's recompute summary (summary.<rank>.json, written at exit by the shim's executor:
 * shim/executor.h's lynx_exec_write_summary), read for `lynx report`: what was planned and
 * what was achieved, in memory and time, beside warm-up's measurements without a plan.
 */
#ifndef LYNX_TOOLS_REPORT_SUMMARY_H
#define LYNX_TOOLS_REPORT_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LYNX_SUMMARY_MAX_REFUSALS 8
#define LYNX_SUMMARY_MAX_CURVE 512

struct lynx_summary {
	int rank;
	char run_id[128]; /* the run it is of (run.id); "" when the file names none */
	char planner[32];
	uint64_t budget_bytes;
	char max_slowdown[16];             /* "" when none was asked for */
	char plan_hash[20];                /* the plan followed (plan.hash); "" when not given */
	uint64_t keep, offload, recompute; /* the plan's decisions */
	uint64_t measured_peak_bytes, predicted_peak_bytes, achieved_peak_bytes;
	uint64_t measured_ns;
	double predicted_slowdown;
	bool achieved_known; /* a followed iteration was timed */
	double achieved_ns;
	uint64_t offloaded, replayed; /* evictions */
	struct {
		char verdict[32];
		uint64_t count;
	} refused[LYNX_SUMMARY_MAX_REFUSALS];
	size_t n_refused;
	/* Device memory in use over the last followed iteration (memory.curve; n_curve 0 when
	 * the file has none): points [ns from its start, bytes], in time order. */
	double curve_ns;
	double curve_t[LYNX_SUMMARY_MAX_CURVE], curve_bytes[LYNX_SUMMARY_MAX_CURVE];
	size_t n_curve;
};

/*
 * Parses text (len bytes, not necessarily NUL-terminated) into out. Returns 0, or -EINVAL
 * with one sentence in why (not JSON, another format or version, a field missing or of the
 * wrong type or range), or -ENOMEM.
 */
int lynx_summary_parse(const char *text, size_t len, struct lynx_summary *out, char *why,
                       size_t why_len);

#endif /* LYNX_TOOLS_REPORT_SUMMARY_H */
