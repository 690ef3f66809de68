/* SPDX-License-Identifier: Apache-2.0 */
/* COIN-OR CBC loaded at run time, and the MILP planners' gap (cbc.h). */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cbc.h"
#include "checker.h"

static const struct {
	const char *name;
	size_t offset;
} cbc_symbols[] = {
#define CBC_SYMBOL(f) {#f, offsetof(struct lynx_cbc, f)},
        LYNX_CBC_FUNCTIONS(CBC_SYMBOL)
#undef CBC_SYMBOL
};

int lynx_cbc_open(struct lynx_cbc *c, const char *library, char *why, size_t len)
{
	if (!library)
		library = LYNX_CBC_LIBRARY;
	memset(c, 0, sizeof(*c));
	c->lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
	if (!c->lib) {
		snprintf(why, len, "CBC is not available (%s)", dlerror());
		return -ENOENT;
	}
	for (size_t i = 0; i < sizeof(cbc_symbols) / sizeof(cbc_symbols[0]); i++) {
		void *sym = dlsym(c->lib, cbc_symbols[i].name);

		if (!sym) {
			snprintf(why, len, "CBC (%s) has no %s", library, cbc_symbols[i].name);
			lynx_cbc_close(c);
			return -ENOENT;
		}
		/* Through memcpy: ISO C has no cast from an object pointer to a function's. */
		memcpy((char *)c + cbc_symbols[i].offset, &sym, sizeof(sym));
	}
	return 0;
}

void lynx_cbc_close(struct lynx_cbc *c)
{
	if (c->lib)
		dlclose(c->lib);
	memset(c, 0, sizeof(*c));
}

double lynx_cbc_stage_base_ms(const struct lynx_problem *p, const struct lynx_problem_stage *st)
{
	double t = st->layers * (p->layer.fwd_s + p->layer.bwd_s);

	if (st->embedding.present)
		t += st->embedding.fwd_s + st->embedding.bwd_s;
	if (st->head.present)
		t += st->head.fwd_s + st->head.bwd_s;
	return t * 1e3;
}

void lynx_cbc_gaps(double obj, double bound, double base_ms, double *gap, double *added_gap)
{
	*gap = fmax(0, (obj - bound) / (base_ms + obj));
	*added_gap = obj > 1e-9 ? fmax(0, (obj - bound) / obj) : 0;
}

static double seconds_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether stage s is searched (problem.h: search_one_stage), or keeps its start. */
static bool searched(const struct lynx_problem *p, uint32_t s)
{
	return !p->search_one_stage || s == p->searched_stage;
}

int lynx_cbc_plan_stages(const struct lynx_problem *p, struct lynx_plan *plan, unsigned max_rounds,
                         double time_limit_s, lynx_cbc_stage_fn solve, void *ctx,
                         struct lynx_cbc_rounds *out, char *why, size_t len)
{
	uint64_t *budget = calloc(p->n_stages + 1, sizeof(*budget));
	bool *redo = calloc(p->n_stages + 1, sizeof(*redo));
	double *gap = calloc(2 * p->n_stages + 1, sizeof(*gap));
	int err = budget && redo && gap ? 0 : -ENOMEM;

	memset(out, 0, sizeof(*out));
	for (uint32_t s = 0; !err && s < p->n_stages; s++) {
		budget[s] = lynx_problem_stage_budget(p, s);
		redo[s] = searched(p, s);
	}
	out->solved = out->optimal = true;
	for (unsigned round = 0; !err && round < max_rounds; round++) {
		bool again;

		for (uint32_t s = 0; !err && s < p->n_stages; s++) {
			struct lynx_cbc_stage_solve ss;
			double t0 = seconds_now();

			if (!redo[s] || !searched(p, s))
				continue;
			err = solve(ctx, s, budget[s], plan, &ss);
			out->solve_s += seconds_now() - t0;
			out->rounds = round + 1;
			if (!err && !ss.solved) {
				snprintf(why, len,
				         "CBC found no plan for stage %u within %.3g GiB in %.3g s",
				         s, (double)budget[s] / (1024.0 * 1024.0 * 1024.0),
				         time_limit_s);
				err = -ESRCH;
			}
			if (!err) {
				gap[s] = ss.gap;
				gap[p->n_stages + s] = ss.added_gap;
				out->optimal = out->optimal && ss.optimal;
			}
			redo[s] = false;
		}
		if (err)
			break;
		err = lynx_checker_settle(p, plan, round + 1 < max_rounds, budget, redo, &again,
		                          why, len);
		if (err || !again)
			break;
	}
	for (uint32_t s = 0; !err && s < p->n_stages; s++) {
		out->gap = fmax(out->gap, gap[s]);
		out->added_gap = fmax(out->added_gap, gap[p->n_stages + s]);
	}
	if (err) {
		out->solved = out->optimal = false;
		out->gap = out->added_gap = NAN;
	}
	free(budget);
	free(redo);
	free(gap);
	return err;
}
