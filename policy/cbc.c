/* SPDX-License-Identifier: Apache-2.0 */
/* COIN-OR CBC loaded at run time, and the MILP planners' gap (cbc.h). */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cbc.h"

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
