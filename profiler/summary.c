/* SPDX-License-Identifier: Apache-2.0 */
/* The stderr summary of a profile: see summary.h. */
#include <inttypes.h>
#include <stdio.h>

#include "summary.h"

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

double lynx_prof_mib(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

static const char *source(const struct lynx_profile_time *t)
{
	return lynx_profile_source_name(t->source);
}

/*
 * The saved activations the trainer holds past their last reader in the backward (a group's
 * freed_before beyond last_consumer + 1), by bytes on micro-batch 0, with how many backward
 * kernels later it frees them on average: what a trainer that frees each at its last use, as
 * PyTorch's autograd does, would not hold. Nothing when no free is known.
 */
static void print_held(FILE *f, const char *tag, const struct lynx_profile *p)
{
	uint64_t known = 0, held = 0;
	double kernels = 0;

	for (size_t g = 0; g < p->group_count; g++) {
		const struct lynx_profile_group *gr = &p->groups[g];
		uint32_t used = gr->last_consumer < 0 ? 0 : (uint32_t)gr->last_consumer + 1;

		if (!gr->freed_known)
			continue;
		known += gr->bytes;
		if (gr->freed_before <= used)
			continue;
		held += gr->bytes;
		kernels += (double)gr->bytes * (double)(gr->freed_before - used);
	}
	if (!known)
		return;
	fprintf(f,
	        "%s: saved activations held past their last reader: %.2f of %.2f MiB per "
	        "micro-batch, freed %.1f backward kernels later on average\n",
	        tag, lynx_prof_mib(held), lynx_prof_mib(known),
	        held ? kernels / (double)held : 0.0);
}

/* The cost clause of lynx_profile_rerun_note() at buf + used, where the times are known. */
static void rerun_cost(const struct lynx_profile *p, char *buf, size_t used, size_t len)
{
	uint64_t rerun = lynx_profile_rerun_ns(p), iteration = p->iteration.time.ns;

	if (used >= len || !rerun || p->iteration.time.source == LYNX_PROFILE_SOURCE_UNKNOWN ||
	    !iteration)
		return;
	snprintf(buf + used, len - used, " (%.3f ms, %.1f%% of the iteration)", (double)rerun / 1e6,
	         100.0 * (double)rerun / (double)iteration);
}

const char *lynx_profile_rerun_note(const struct lynx_profile *p, char *buf, size_t len)
{
	size_t used = 0, k = 0;

	if (len)
		buf[0] = 0;
	if (!lynx_profile_rerun_layers(p))
		return buf;
	if (lynx_profile_all_rerun(p)) {
		used = (size_t)snprintf(buf, len, ", each backward reruns its forward");
		rerun_cost(p, buf, used, len);
		return buf;
	}
	used = (size_t)snprintf(buf, len, ", the backward reruns the forward of layer%s",
	                        lynx_profile_rerun_layers(p) == 1 ? "" : "s");
	for (const char *sep = " "; k < p->layer_count && used < len;) {
		size_t first = k;
		if (!p->layers[k++].reruns_forward)
			continue;
		while (k < p->layer_count && p->layers[k].reruns_forward)
			k++;
		used += (size_t)snprintf(buf + used, len - used, "%s%zu", sep, first);
		sep = ", ";
		if (used < len && k - 1 > first)
			used += (size_t)snprintf(buf + used, len - used, "-%zu", k - 1);
	}
	if (used < len)
		used += (size_t)snprintf(buf + used, len - used, " of %zu", p->layer_count);
	rerun_cost(p, buf, used, len);
	return buf;
}

void lynx_profile_print_summary(FILE *f, const struct lynx_profile *p, int rank)
{
	char tag[32], rerun[LYNX_PROFILE_RERUN_NOTE_MAX];
	uint64_t saved = 0, window_ns[LYNX_PROFILE_WINDOW_KIND_COUNT] = {0},
	         idle_ns[LYNX_PROFILE_WINDOW_KIND_COUNT] = {0}, idle_total = 0;
	uint32_t windows[LYNX_PROFILE_WINDOW_KIND_COUNT] = {0};

	if (rank >= 0)
		snprintf(tag, sizeof(tag), "lynx[rank %d]", rank);
	else
		snprintf(tag, sizeof(tag), "lynx");
	fprintf(f,
	        "%s: %" PRIu32 " identical iterations of %.3f ms (%s time), %" PRIu32
	        " micro-batches, %zu layers%s\n",
	        tag, p->iteration.count, ms(p->iteration.time.ns), source(&p->iteration.time),
	        p->microbatches, p->layer_count, lynx_profile_rerun_note(p, rerun, sizeof(rerun)));
	if (p->layer_count)
		fprintf(f, "%s:   layer    fwd ms    bwd ms  saved MiB  (%s time)\n", tag,
		        source(&p->layers[0].forward));
	for (size_t i = 0; i < p->layer_count; i++) {
		const struct lynx_profile_layer *l = &p->layers[i];
		fprintf(f, "%s:   %5zu %9.3f %9.3f %10.2f\n", tag, i, ms(l->forward.ns),
		        ms(l->backward.ns), lynx_prof_mib(l->saved_bytes));
		saved += l->saved_bytes;
	}
	fprintf(f,
	        "%s: saved activations %.2f MiB per micro-batch; peak %.2f MiB (weights %.2f, "
	        "saved %.2f, workspace %.2f, temporary %.2f, other %.2f)\n",
	        tag, lynx_prof_mib(saved), lynx_prof_mib(p->memory.peak_bytes),
	        lynx_prof_mib(p->memory.at_peak[LYNX_PROFILE_MEMORY_WEIGHT]),
	        lynx_prof_mib(p->memory.at_peak[LYNX_PROFILE_MEMORY_SAVED]),
	        lynx_prof_mib(p->memory.at_peak[LYNX_PROFILE_MEMORY_WORKSPACE]),
	        lynx_prof_mib(p->memory.at_peak[LYNX_PROFILE_MEMORY_TEMPORARY]),
	        lynx_prof_mib(p->memory.at_peak[LYNX_PROFILE_MEMORY_OTHER]));
	print_held(f, tag, p);
	for (size_t i = 0; i < p->window_count; i++) {
		const struct lynx_profile_window *w = &p->windows[i];
		windows[w->kind]++;
		window_ns[w->kind] += w->duration.ns;
		idle_ns[w->kind] += w->idle.ns;
		/* Pipeline sends are left out of the total: 1F1B issues most of them in one NCCL
		 * group with a receive, whose window is the same stretch of time. */
		if (w->kind != LYNX_PROFILE_WINDOW_PP_SEND_FWD &&
		    w->kind != LYNX_PROFILE_WINDOW_PP_SEND_BWD)
			idle_total += w->idle.ns;
	}
	for (int k = 0; k < LYNX_PROFILE_WINDOW_KIND_COUNT; k++) {
		if (!windows[k])
			continue;
		fprintf(f,
		        "%s: windows %-12s %4" PRIu32 " calls, %9.3f ms, compute idle %9.3f ms\n",
		        tag, lynx_profile_window_kind_name((enum lynx_profile_window_kind)k),
		        windows[k], ms(window_ns[k]), ms(idle_ns[k]));
	}
	if (p->iteration.time.ns && idle_total)
		fprintf(f,
		        "%s: the compute stream idles in windows for %.1f%% of the step (pipeline "
		        "sends left out: most overlap a receive)\n",
		        tag, 100.0 * (double)idle_total / (double)p->iteration.time.ns);
}
