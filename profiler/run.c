/* SPDX-License-Identifier: Apache-2.0 */
/* A profile's run: the shim's identification of its launch, and the readers' grouping. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fnv.h"
#include "run.h"

/* ---- Identity -------------------------------------------------------------------------- */

static bool given(const char *v)
{
	return v && *v;
}

/* TORCHELASTIC_RESTART_COUNT as a number; 0 when unset or not a count. */
static long restart_count(const char *text)
{
	char *end;
	long n;

	if (!given(text))
		return 0;
	errno = 0;
	n = strtol(text, &end, 10);
	return errno || *end || n < 0 ? 0 : n;
}

void lynx_run_identify(const struct lynx_run_facts *f, struct lynx_profile_run *out)
{
	long restart = restart_count(f->torchelastic_restart_count);

	memset(out, 0, sizeof(*out));
	out->known = true;
	out->started = f->started;
	if (given(f->torchelastic_run_id) && strcmp(f->torchelastic_run_id, "none")) {
		out->source = LYNX_PROFILE_RUN_SOURCE_TORCHELASTIC;
		if (restart > 0)
			snprintf(out->id, sizeof(out->id), "%s.restart%ld", f->torchelastic_run_id,
			         restart);
		else
			snprintf(out->id, sizeof(out->id), "%s", f->torchelastic_run_id);
	} else if (given(f->slurm_job_id)) {
		out->source = LYNX_PROFILE_RUN_SOURCE_SLURM;
		if (given(f->slurm_step_id))
			snprintf(out->id, sizeof(out->id), "%s.%s", f->slurm_job_id,
			         f->slurm_step_id);
		else
			snprintf(out->id, sizeof(out->id), "%s", f->slurm_job_id);
	} else if (f->comm_hashed) {
		out->source = LYNX_PROFILE_RUN_SOURCE_NCCL;
		snprintf(out->id, sizeof(out->id), "%016" PRIx64, f->comm_hash);
	} else {
		out->source = LYNX_PROFILE_RUN_SOURCE_NONE;
	}
	/* Readers print the id and the profile reader refuses control characters. */
	for (char *c = out->id; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '_';
}

uint64_t lynx_run_hash(const void *bytes, size_t len)
{
	const unsigned char *b = bytes;
	uint64_t h = LYNX_FNV1A_BASIS;

	for (size_t i = 0; i < len; i++)
		h = lynx_fnv1a_byte(h, b[i]);
	return h;
}

int lynx_run_parse_started(const char *self_stat, const char *proc_stat, long ticks_per_s,
                           uint64_t *out)
{
	/* The command name (field 2) may hold spaces and parentheses: fields count from the
	 * last ')'. */
	const char *p = strrchr(self_stat, ')'), *line;
	unsigned long long start_ticks, boot;

	if (!p || ticks_per_s <= 0)
		return -EINVAL;
	p++;
	for (int field = 3; field < 22; field++) {
		p += strspn(p, " ");
		p += strcspn(p, " ");
	}
	if (sscanf(p, " %llu", &start_ticks) != 1)
		return -EINVAL;
	for (line = proc_stat; line && strncmp(line, "btime ", 6);)
		if ((line = strchr(line, '\n')))
			line++;
	if (!line || sscanf(line + 6, "%llu", &boot) != 1)
		return -EINVAL;
	*out = boot + start_ticks / (unsigned long long)ticks_per_s;
	return 0;
}

/* The first line of path that starts with prefix, into *line (malloc'ed). */
static int find_line(const char *path, const char *prefix, char **line)
{
	FILE *f = fopen(path, "re");
	size_t cap = 0;
	int err = -EINVAL;

	*line = NULL;
	if (!f)
		return -errno;
	/* getline: /proc/stat's "intr" line runs to many KiB on a large machine. */
	while (getline(line, &cap, f) >= 0)
		if (!strncmp(*line, prefix, strlen(prefix))) {
			err = 0;
			break;
		}
	fclose(f);
	return err;
}

int lynx_run_process_started(uint64_t *out)
{
	char *self = NULL, *boot = NULL;
	int err = find_line("/proc/self/stat", "", &self);

	if (!err)
		err = find_line("/proc/stat", "btime ", &boot);
	if (!err)
		err = lynx_run_parse_started(self, boot, sysconf(_SC_CLK_TCK), out);
	free(self);
	free(boot);
	return err;
}

/* ---- Grouping ------------------------------------------------------------------------- */

/* How a profile's run is told apart, in the order runs of each are sorted. */
enum run_class { CLASS_ID, CLASS_NO_ID, CLASS_UNRECORDED };

static enum run_class class_of(const struct lynx_profile *p)
{
	if (!p->run.known)
		return CLASS_UNRECORDED;
	return p->run.source == LYNX_PROFILE_RUN_SOURCE_NONE ? CLASS_NO_ID : CLASS_ID;
}

static uint64_t distance(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

bool lynx_run_same(const struct lynx_profile *a, const struct lynx_profile *b)
{
	if (class_of(a) != class_of(b) || a->world != b->world)
		return false;
	switch (class_of(a)) {
	case CLASS_ID:
		return a->run.source == b->run.source && !strcmp(a->run.id, b->run.id);
	case CLASS_NO_ID:
		return distance(a->run.started, b->run.started) <= LYNX_RUN_START_WINDOW_S;
	case CLASS_UNRECORDED:
		break;
	}
	return true;
}

struct entry {
	const struct lynx_profile *p;
	size_t index;
};

static int cmp_u64(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

/* By class, world, source and id, then start: a run's profiles end up side by side. */
static int by_run_then_start(const void *x, const void *y)
{
	const struct entry *a = x, *b = y;
	enum run_class ca = class_of(a->p), cb = class_of(b->p);
	int c;

	if (ca != cb)
		return ca < cb ? -1 : 1;
	if (a->p->world != b->p->world)
		return a->p->world < b->p->world ? -1 : 1;
	if (ca == CLASS_ID) {
		if (a->p->run.source != b->p->run.source)
			return a->p->run.source < b->p->run.source ? -1 : 1;
		if ((c = strcmp(a->p->run.id, b->p->run.id)))
			return c;
	}
	if ((c = cmp_u64(a->p->run.started, b->p->run.started)))
		return c;
	return cmp_u64(a->index, b->index);
}

/* Whether next (sorted after prev) is of prev's run: single linkage over starts for runs
 * without an id, so a launch whose ranks started over a few minutes stays whole. */
static bool continues(const struct entry *prev, const struct entry *next)
{
	if (class_of(prev->p) == CLASS_NO_ID)
		return class_of(next->p) == CLASS_NO_ID && prev->p->world == next->p->world &&
		       next->p->run.started - prev->p->run.started <= LYNX_RUN_START_WINDOW_S;
	return lynx_run_same(prev->p, next->p);
}

static int by_index(const void *x, const void *y)
{
	return cmp_u64(*(const size_t *)x, *(const size_t *)y);
}

/* A run's time for "newest": its start, or without "run" its files' newest change. */
static int64_t newest_time(const struct lynx_run_group *g)
{
	return g->run.known ? (int64_t)g->run.started : g->newest_mtime;
}

/* Newest first; then more ranks; then by name, for an order that does not depend on the
 * order of the files. */
static int by_newest(const void *x, const void *y)
{
	const struct lynx_run_group *a = x, *b = y;
	int c;

	if (newest_time(a) != newest_time(b))
		return newest_time(a) > newest_time(b) ? -1 : 1;
	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	if ((c = strcmp(a->name, b->name)))
		return c;
	return a->world < b->world ? -1 : a->world > b->world;
}

static void base_name(struct lynx_run_group *g)
{
	if (!g->run.known && g->world >= 0)
		snprintf(g->name, sizeof(g->name), "unknown@world%d", (int)g->world);
	else if (!g->run.known)
		snprintf(g->name, sizeof(g->name), "unknown");
	else if (g->run.source == LYNX_PROFILE_RUN_SOURCE_NONE)
		snprintf(g->name, sizeof(g->name), "none@%" PRIu64, g->run.started);
	else
		snprintf(g->name, sizeof(g->name), "%s", g->run.id);
}

/* Fills group g from the sorted entries [first, end). */
static int fill_group(struct lynx_run_group *g, const struct entry *e, size_t first, size_t end,
                      const int64_t *mtimes)
{
	g->count = end - first;
	g->members = malloc(g->count * sizeof(*g->members));
	if (!g->members)
		return -ENOMEM;
	g->run = e[first].p->run;
	g->world = e[first].p->world;
	for (size_t k = first; k < end; k++) {
		g->members[k - first] = e[k].index;
		if (e[k].p->run.started < g->run.started)
			g->run.started = e[k].p->run.started;
		if (mtimes && mtimes[e[k].index] > g->newest_mtime)
			g->newest_mtime = mtimes[e[k].index];
	}
	qsort(g->members, g->count, sizeof(*g->members), by_index);
	base_name(g);
	return 0;
}

int lynx_runs_group(const struct lynx_profile *const *profiles, const int64_t *mtimes, size_t n,
                    struct lynx_runs *out)
{
	struct entry *e = calloc(n ? n : 1, sizeof(*e));
	int err = 0;

	memset(out, 0, sizeof(*out));
	out->groups = calloc(n ? n : 1, sizeof(*out->groups));
	if (!e || !out->groups) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		e[i] = (struct entry){profiles[i], i};
	qsort(e, n, sizeof(*e), by_run_then_start);
	for (size_t first = 0, end; first < n && !err; first = end) {
		for (end = first + 1; end < n && continues(&e[end - 1], &e[end]); end++)
			;
		err = fill_group(&out->groups[out->count++], e, first, end, mtimes);
	}
	if (err)
		goto out;
	qsort(out->groups, out->count, sizeof(*out->groups), by_newest);
	/* One id under two world sizes: the older one's name gets "#2", and so on (from the
	 * oldest, so that the names compared are not suffixed yet). */
	for (size_t g = out->count; g-- > 1;) {
		unsigned same = 1;
		for (size_t h = 0; h < g; h++)
			same += !strcmp(out->groups[h].name, out->groups[g].name);
		if (same > 1) {
			size_t len = strlen(out->groups[g].name);
			snprintf(out->groups[g].name + len, sizeof(out->groups[g].name) - len,
			         "#%u", same);
		}
	}
out:
	free(e);
	if (err)
		lynx_runs_free(out);
	return err;
}

const struct lynx_run_group *lynx_runs_find(const struct lynx_runs *runs, const char *name)
{
	for (size_t g = 0; g < runs->count; g++)
		if (!strcmp(runs->groups[g].name, name))
			return &runs->groups[g];
	return NULL;
}

/* Appends to a bounded buffer; what does not fit is cut. */
struct text {
	char *buf;
	size_t len, used;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!t->len || t->used >= t->len - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(t->buf + t->used, t->len - t->used, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->used = t->used + (size_t)n < t->len ? t->used + (size_t)n : t->len - 1;
}

void lynx_runs_names(const struct lynx_runs *runs, char *buf, size_t len)
{
	struct text t = {buf, len, 0};

	if (len)
		buf[0] = '\0';
	for (size_t g = 0; g < runs->count; g++)
		put(&t, "%s%s", g ? ", " : "", runs->groups[g].name);
}

const char *lynx_run_local_time(int64_t when, char *buf, size_t len)
{
	time_t t = (time_t)when;
	struct tm tm;

	if (!localtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%" PRId64, when);
	return buf;
}

void lynx_runs_describe(const struct lynx_run_group *g, bool with_start, char *buf, size_t len)
{
	struct text t = {buf, len, 0};
	char when[40];

	if (len)
		buf[0] = '\0';
	put(&t, "%zu rank%s", g->count, g->count == 1 ? "" : "s");
	if (g->world >= 0)
		put(&t, " of %d", (int)g->world);
	if (!with_start)
		return;
	if (g->run.known && g->run.started)
		put(&t, ", started %s",
		    lynx_run_local_time((int64_t)g->run.started, when, sizeof(when)));
	else if (!g->run.known && g->newest_mtime > 0)
		put(&t, ", written %s", lynx_run_local_time(g->newest_mtime, when, sizeof(when)));
}

/* Other runs named in the line at most: a directory of many stale runs stays one line. */
#define OTHERS_NAMED 8

void lynx_runs_print_choice(FILE *out, const char *about, const struct lynx_runs *runs,
                            const struct lynx_run_group *chosen, bool asked)
{
	char line[4096], what[256];
	struct text t = {line, sizeof(line), 0};
	size_t named = 0;
	bool unrecorded = false;

	if (runs->count < 2)
		return;
	lynx_runs_describe(chosen, true, what, sizeof(what));
	put(&t, "%s %zu runs: reading run %s (%s), %s; the other%s:", about, runs->count,
	    chosen->name, what, asked ? "as --run asks" : "the newest", runs->count > 2 ? "s" : "");
	for (size_t g = 0; g < runs->count; g++) {
		const struct lynx_run_group *other = &runs->groups[g];
		unrecorded |= !other->run.known;
		if (other == chosen || named++ >= OTHERS_NAMED)
			continue;
		lynx_runs_describe(other, false, what, sizeof(what));
		put(&t, "%s run %s (%s)", named > 1 ? "," : "", other->name, what);
	}
	if (named > OTHERS_NAMED)
		put(&t, " and %zu more", named - OTHERS_NAMED);
	put(&t, "; --run ID picks one%s\n",
	    unrecorded ? " (profiles without a run id are told apart by world size only)" : "");
	if (t.used && line[t.used - 1] != '\n')
		line[t.used - 1] = '\n'; /* cut: still one line */
	fputs(line, out);
}

void lynx_runs_free(struct lynx_runs *runs)
{
	for (size_t g = 0; runs->groups && g < runs->count; g++)
		free(runs->groups[g].members);
	free(runs->groups);
	memset(runs, 0, sizeof(*runs));
}
