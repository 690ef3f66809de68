/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The planning problem from recorded profiles: problem.h's lynx_problem_from_profile(), whose
 * comment is the mapping. Here: checking the profiles, ordering the stages, cutting the layer
 * into ops and its saved buffers into groups, and the windows. About 900 lines, most of them
 * the refusals' messages: one concern, kept in one file so that the mapping reads in order.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"
#include "problem.h"
#include "refuse.h"
#include "summary.h"

#define MAX_OPS LYNX_PROBLEM_MAX_OPS
#define MAX_GROUPS LYNX_PROBLEM_MAX_GROUPS

struct ctx {
	const struct lynx_profile *const *ranks;
	size_t n;
	const struct lynx_problem_options *opt;
	char *why;
	size_t len;
};

/* A profile's name in messages. */
struct pname {
	char buf[48];
};

static const char *name_of(const struct ctx *c, size_t i, struct pname *nb)
{
	if (c->opt->profile_names && c->opt->profile_names[i])
		return c->opt->profile_names[i];
	if (c->ranks[i]->rank >= 0)
		snprintf(nb->buf, sizeof(nb->buf), "profile %zu (rank %d)", i, c->ranks[i]->rank);
	else
		snprintf(nb->buf, sizeof(nb->buf), "profile %zu", i);
	return nb->buf;
}

static double seconds(uint64_t ns)
{
	return (double)ns * 1e-9;
}

/*
 * Grid points per doubling to which a rank that plans alone rounds the problem's times. A
 * stage's TP and DP peers measure the same kernels and windows with different noise, and
 * each plans from its own figures; rounded, the figures, and so the plans, agree more
 * often (measured: docs/measurements.md, "Ranks that plan alone"). Shared profiles need
 * none: every rank reads the same files.
 */
#define SOLO_STEPS_PER_OCTAVE 4

/* A measured figure (a time, a rate) as the problem holds it: solo, rounded to the nearest
 * 2^(i / SOLO_STEPS_PER_OCTAVE); shared, as measured. */
static double solo_rounded(const struct ctx *c, double x)
{
	if (!c->opt->solo || !(x > 0) || !isfinite(x))
		return x;
	return exp2(round(log2(x) * SOLO_STEPS_PER_OCTAVE) / SOLO_STEPS_PER_OCTAVE);
}

static bool known(const struct lynx_profile_time *t)
{
	return t->source != LYNX_PROFILE_SOURCE_UNKNOWN;
}

static bool is_tp(enum lynx_profile_window_kind k)
{
	return k == LYNX_PROFILE_WINDOW_TP_FWD || k == LYNX_PROFILE_WINDOW_TP_BWD;
}

static bool has_window(const struct lynx_profile *pr, enum lynx_profile_window_kind kind)
{
	for (size_t w = 0; w < pr->window_count; w++)
		if (pr->windows[w].kind == kind)
			return true;
	return false;
}

/* Everything one profile must satisfy on its own. */
static int check_profile(const struct ctx *c, size_t i)
{
	const struct lynx_profile *pr = c->ranks[i];
	struct pname nb;
	const char *name = name_of(c, i, &nb);

	if (!pr->layer_count)
		return lynx_policy_refuse(c->why, c->len, "%s has no layers: nothing to plan",
		                          name);
	if (!pr->microbatches)
		return lynx_policy_refuse(c->why, c->len, "%s has no micro-batches", name);
	if (pr->warmup_forwards > pr->microbatches)
		return lynx_policy_refuse(c->why, c->len,
		                          "%s runs %u warm-up forwards but only %u micro-batches",
		                          name, pr->warmup_forwards, pr->microbatches);
	/* Under block recompute the layers that keep everything are still planned. What the
	 * reruns cost is said: the time a profile without recomputation could win back. */
	if (lynx_profile_all_rerun(pr)) {
		char note[LYNX_PROFILE_RERUN_NOTE_MAX];
		return lynx_policy_refuse(c->why, c->len,
		                          "%s was recorded under full recomputation%s: Megatron's "
		                          "full or uniform method; profile the job without "
		                          "recomputation to plan it",
		                          name, lynx_profile_rerun_note(pr, note, sizeof(note)));
	}
	for (size_t l = 0; l < pr->layer_count; l++)
		if (!pr->layers[l].fwd_kernels.count || !pr->layers[l].bwd_kernels.count)
			return lynx_policy_refuse(
			        c->why, c->len, "%s: layer %zu has no %s kernels", name, l,
			        pr->layers[l].fwd_kernels.count ? "backward" : "forward");
	for (size_t g = 0; g < pr->group_count; g++) {
		const struct lynx_profile_group *gr = &pr->groups[g];
		const struct lynx_profile_layer *l;

		if (gr->layer >= pr->layer_count)
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s: group %zu is of layer %u, beyond its %zu layers", name, g,
			        gr->layer, pr->layer_count);
		l = &pr->layers[gr->layer];
		if (gr->producer < -1 || gr->producer > (int64_t)l->fwd_kernels.count)
			return lynx_policy_refuse(c->why, c->len,
			                          "%s: group %zu's producer %d is beyond layer "
			                          "%u's %zu forward kernels",
			                          name, g, gr->producer, gr->layer,
			                          l->fwd_kernels.count);
		if (gr->producer_end > (int64_t)l->fwd_kernels.count)
			return lynx_policy_refuse(c->why, c->len,
			                          "%s: group %zu's producer run ends at %d, beyond "
			                          "layer %u's %zu forward kernels",
			                          name, g, gr->producer_end, gr->layer,
			                          l->fwd_kernels.count);
		if (gr->first_consumer < -1 || gr->first_consumer > (int64_t)l->bwd_kernels.count ||
		    gr->last_consumer < -1 || gr->last_consumer > (int64_t)l->bwd_kernels.count)
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s: group %zu's consumers (%d, %d) are beyond layer "
			        "%u's %zu backward kernels",
			        name, g, gr->first_consumer, gr->last_consumer, gr->layer,
			        l->bwd_kernels.count);
	}
	for (size_t w = 0; w < pr->window_count; w++) {
		const struct lynx_profile_window *win = &pr->windows[w];
		bool fwd = win->kind == LYNX_PROFILE_WINDOW_TP_FWD;
		size_t kernels;

		if (!is_tp(win->kind))
			continue;
		if (win->layer < 0 || (size_t)win->layer >= pr->layer_count)
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s: window %zu (%s) is in layer %d, not one of its "
			        "%zu layers",
			        name, w, lynx_profile_window_kind_name(win->kind), win->layer,
			        pr->layer_count);
		kernels = fwd ? pr->layers[win->layer].fwd_kernels.count
		              : pr->layers[win->layer].bwd_kernels.count;
		if (win->kernel < 0 || win->kernel > (int64_t)kernels)
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s: window %zu (%s) is at kernel %d, beyond layer "
			        "%d's %zu %s kernels",
			        name, w, lynx_profile_window_kind_name(win->kind), win->kernel,
			        win->layer, kernels, fwd ? "forward" : "backward");
	}
	return 0;
}

/* ---- Stages ---------------------------------------------------------------------------- */

/* percent of a profile's peak of tensors, in bytes. */
static uint64_t stage_share(const struct lynx_profile *pr, uint32_t percent)
{
	return pr->memory.peak_bytes / 100 * percent + pr->memory.peak_bytes % 100 * percent / 100;
}

/* The stages: which profile stands for each, and where its transformer layers are. */
struct stage_src {
	size_t profile;
	size_t first, count; /* body layers: [first, first + count) of the profile's */
	bool embedding, head;
	/* Layers the trainer recomputes itself (Megatron's block recompute reruns the forward
	 * of a stage's first layers in their backward), right before first: never planned,
	 * they join the embedding's part (problem.h), which comes before the body too. */
	size_t reruns;
};

/* A layer's forward plus backward time: measured, or the kernels' device times. */
static double layer_s(const struct lynx_profile_layer *l)
{
	double t = 0;

	if (known(&l->forward))
		t += seconds(l->forward.ns);
	else if (l->fwd_kernels.ns)
		for (size_t k = 0; k < l->fwd_kernels.count; k++)
			t += seconds(l->fwd_kernels.ns[k]);
	if (known(&l->backward))
		t += seconds(l->backward.ns);
	else if (l->bwd_kernels.ns)
		for (size_t k = 0; k < l->bwd_kernels.count; k++)
			t += seconds(l->bwd_kernels.ns[k]);
	return t;
}

static double profile_s(const struct lynx_profile *pr)
{
	double t = 0;

	for (size_t l = 0; l < pr->layer_count; l++)
		t += layer_s(&pr->layers[l]);
	return t;
}

/*
 * Stages as the profiles name them (each rank's place in its pipeline communicator): the
 * schedule does not matter then, so GPipe and one micro-batch are ordered too. Returns 1
 * when some profile does not name its stage (the caller falls back on warm-up forwards).
 */
static int order_named_stages(const struct ctx *c, uint32_t *n_stages, struct stage_src **out)
{
	uint32_t p = c->ranks[0]->pipeline_stages;
	struct stage_src *st;
	struct pname nb, nb2;

	for (size_t i = 0; i < c->n; i++)
		if (!lynx_profile_pipeline_known(c->ranks[i]))
			return 1;
	for (size_t i = 0; i < c->n; i++)
		if (c->ranks[i]->pipeline_stages != p)
			return lynx_policy_refuse(c->why, c->len,
			                          "%s names %u pipeline stages, %s %u: profiles of "
			                          "one job name the same number",
			                          name_of(c, i, &nb), c->ranks[i]->pipeline_stages,
			                          name_of(c, 0, &nb2), p);
	st = calloc(p, sizeof(*st));
	if (!st)
		return -ENOMEM;
	for (uint32_t s = 0; s < p; s++) {
		double slowest = -1;

		st[s].profile = SIZE_MAX;
		for (size_t i = 0; i < c->n; i++) {
			double t = profile_s(c->ranks[i]);

			if ((uint32_t)c->ranks[i]->pipeline_stage == s && t > slowest) {
				slowest = t;
				st[s].profile = i;
			}
		}
		if (st[s].profile == SIZE_MAX) {
			free(st);
			return lynx_policy_refuse(c->why, c->len,
			                          "no profile of pipeline stage %u of %u: give one "
			                          "profile per stage",
			                          s, p);
		}
	}
	*n_stages = p;
	*out = st;
	return 0;
}

/* Orders the stages (by name, else by warm-up forwards) and picks the slowest profile of
 * each. */
static int order_stages(const struct ctx *c, uint32_t *n_stages, struct stage_src **out)
{
	uint32_t m = c->ranks[0]->microbatches, wmax = 0, p;
	struct stage_src *st;
	struct pname nb, nb2;
	int named;

	for (size_t i = 0; i < c->n; i++) {
		if (c->ranks[i]->microbatches != m)
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s runs %u micro-batches, %s %u: profiles of one job "
			        "run the same number",
			        name_of(c, i, &nb), c->ranks[i]->microbatches, name_of(c, 0, &nb2),
			        m);
		if (c->ranks[i]->warmup_forwards > wmax)
			wmax = c->ranks[i]->warmup_forwards;
	}
	if (c->opt->solo && c->n == 1) {
		*out = calloc(1, sizeof(**out));
		if (!*out)
			return -ENOMEM;
		*n_stages = 1;
		return 0;
	}
	if ((named = order_named_stages(c, n_stages, out)) <= 0)
		return named;
	/* With m < p the first p - m stages all run m warm-up forwards: only stage 0 (the one
	 * that receives no activations) can be told among them. */
	for (size_t i = 0; wmax == m && i < c->n; i++)
		if (c->ranks[i]->warmup_forwards == m &&
		    has_window(c->ranks[i], LYNX_PROFILE_WINDOW_PP_RECV_FWD))
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s runs all %u micro-batches' forwards before its first backward "
			        "but is not the first stage: with fewer micro-batches than stages "
			        "the stages cannot be ordered; profile the job with at least as "
			        "many micro-batches as stages",
			        name_of(c, i, &nb), m);
	p = wmax + 1;
	st = calloc(p, sizeof(*st));
	if (!st)
		return -ENOMEM;
	for (uint32_t s = 0; s < p; s++) {
		uint32_t w = p - 1 - s;
		double slowest = -1;

		st[s].profile = SIZE_MAX;
		for (size_t i = 0; i < c->n; i++) {
			double t = profile_s(c->ranks[i]);

			if (c->ranks[i]->warmup_forwards == w && t > slowest) {
				slowest = t;
				st[s].profile = i;
			}
		}
		if (st[s].profile == SIZE_MAX) {
			free(st);
			return lynx_policy_refuse(
			        c->why, c->len,
			        "no profile of pipeline stage %u of %u (the one that "
			        "runs %u warm-up forwards): give one profile per "
			        "stage",
			        s, p, w);
		}
	}
	/* A pipeline's profiles without warmup_forwards all read 0: one "last" stage that
	 * still receives gradients from a next one. */
	for (size_t i = 0; i < c->n; i++) {
		uint32_t s = p - 1 - c->ranks[i]->warmup_forwards;
		bool first = s == 0 && has_window(c->ranks[i], LYNX_PROFILE_WINDOW_PP_RECV_FWD);
		bool last = s == p - 1 && has_window(c->ranks[i], LYNX_PROFILE_WINDOW_PP_RECV_BWD);

		if (first || last) {
			free(st);
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s receives %s from a %s stage (%s), yet its %u warm-up forwards "
			        "make it the %s stage: a stage's profile is missing, or the "
			        "profiles were written without warmup_forwards",
			        name_of(c, i, &nb), first ? "activations" : "gradients",
			        first ? "previous" : "next", first ? "pp_recv_fwd" : "pp_recv_bwd",
			        c->ranks[i]->warmup_forwards, first ? "first" : "last");
		}
	}
	*n_stages = p;
	*out = st;
	return 0;
}

/* Kernel counts of a transformer layer. */
struct signature {
	size_t fwd, bwd;
};

static bool same(const struct lynx_profile_layer *l, struct signature sig)
{
	return l->fwd_kernels.count == sig.fwd && l->bwd_kernels.count == sig.bwd;
}

/* The transformer layers of each stage; the embedding and head where the ends differ. */
static int find_layers(const struct ctx *c, uint32_t p, struct stage_src *st)
{
	const struct lynx_profile *big = c->ranks[st[0].profile];
	struct signature sig;
	struct pname nb;

	for (uint32_t s = 1; s < p; s++)
		if (c->ranks[st[s].profile]->layer_count > big->layer_count)
			big = c->ranks[st[s].profile];
	/* The middle one of the layers the trainer does not recompute itself (check_profile()
	 * refused a profile of none). */
	size_t kept = big->layer_count - lynx_profile_rerun_layers(big), middle = 0;
	for (size_t l = 0, n = 0; l < big->layer_count; l++)
		if (!big->layers[l].reruns_forward && n++ == kept / 2)
			middle = l;
	sig = (struct signature){big->layers[middle].fwd_kernels.count,
	                         big->layers[middle].bwd_kernels.count};
	for (uint32_t s = 0; s < p; s++) {
		const struct lynx_profile *pr = c->ranks[st[s].profile];
		size_t end = pr->layer_count;

		st[s].first = 0;
		if (s == 0 && end > 1 && !pr->layers[0].reruns_forward &&
		    !same(&pr->layers[0], sig)) {
			st[s].embedding = true;
			st[s].first = 1;
		}
		while (st[s].first < end && pr->layers[st[s].first].reruns_forward) {
			st[s].reruns++;
			st[s].first++;
		}
		if (s == p - 1 && end > st[s].first + 1 && !same(&pr->layers[end - 1], sig)) {
			st[s].head = true;
			end--;
		}
		for (size_t l = st[s].first; l < end; l++)
			if (pr->layers[l].reruns_forward)
				return lynx_policy_refuse(
				        c->why, c->len,
				        "%s: layer %zu reruns its forward in its backward, yet "
				        "layer "
				        "%zu before it does not: Lynx plans around the layers a "
				        "trainer recomputes itself only when they are a stage's "
				        "first (Megatron's block recompute)",
				        name_of(c, st[s].profile, &nb), l, l - 1);
			else if (!same(&pr->layers[l], sig))
				return lynx_policy_refuse(
				        c->why, c->len,
				        "%s: layer %zu has %zu forward and %zu backward kernels "
				        "where the others have %zu and %zu: the layers are not "
				        "identical",
				        name_of(c, st[s].profile, &nb), l,
				        pr->layers[l].fwd_kernels.count,
				        pr->layers[l].bwd_kernels.count, sig.fwd, sig.bwd);
		if (end == st[s].first)
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s: every layer reruns its forward in its backward (the trainer "
			        "recomputes them all itself): nothing is left to plan; profile the "
			        "job with fewer layers recomputed",
			        name_of(c, st[s].profile, &nb));
		st[s].count = end - st[s].first;
	}
	return 0;
}

/* ---- The layer ------------------------------------------------------------------------- */

/* The layer the problem describes, and how its kernels map onto ops. */
struct layer_src {
	const struct lynx_profile *pr;
	size_t index; /* in pr->layers */
	const struct lynx_profile_layer *l;
	uint32_t K, Kb;              /* forward and backward kernels */
	uint32_t start[MAX_OPS + 1]; /* op i runs kernels [start[i], start[i + 1]) */
	uint32_t n_ops;
	bool tp_fwd[MAX_OPS], tp_bwd[MAX_OPS]; /* a collective was seen there */
	uint64_t granule;     /* buffers below it are no groups (options' granule_bytes)... */
	bool pack;            /* ...unless they are worth a pack: then they are one group */
	uint64_t small_bytes; /* the layer's saved bytes in such buffers, per micro-batch */
	bool host_link;       /* every profile measured one: reads_freed groups can be offloaded */
};

/* The slowest stage's transformer layer with the most group bytes. */
static void pick_layer(const struct ctx *c, uint32_t p, const struct stage_src *st,
                       struct layer_src *ls)
{
	const struct stage_src *slow = &st[0];
	double slowest = -1;
	uint64_t most = 0;

	for (uint32_t s = 0; s < p; s++) {
		const struct lynx_profile *pr = c->ranks[st[s].profile];
		double t = 0;

		for (size_t l = st[s].first; l < st[s].first + st[s].count; l++)
			t += layer_s(&pr->layers[l]);
		t /= (double)st[s].count;
		if (t > slowest) {
			slowest = t;
			slow = &st[s];
		}
	}
	ls->pr = c->ranks[slow->profile];
	ls->index = slow->first;
	for (size_t l = slow->first; l < slow->first + slow->count; l++) {
		uint64_t bytes = 0;

		for (size_t g = 0; g < ls->pr->group_count; g++)
			if (ls->pr->groups[g].layer == l)
				bytes += ls->pr->groups[g].bytes;
		if (bytes > most) {
			most = bytes;
			ls->index = l;
		}
	}
	ls->l = &ls->pr->layers[ls->index];
	ls->K = (uint32_t)ls->l->fwd_kernels.count;
	ls->Kb = (uint32_t)ls->l->bwd_kernels.count;
}

/* The op of forward kernel k (k < K). */
static uint32_t op_of(const struct layer_src *ls, uint32_t k)
{
	uint32_t op = 0;

	while (op + 1 < ls->n_ops && ls->start[op + 1] <= k)
		op++;
	return op;
}

/* The op whose backward backward kernel i (i < Kb) belongs to: reverse order, in proportion. */
static uint32_t bwd_op_of(const struct layer_src *ls, uint32_t i)
{
	uint32_t k = 0;

	if (ls->Kb > 1)
		k = ls->K - 1 -
		    (uint32_t)llround((double)i * (double)(ls->K - 1) / (double)(ls->Kb - 1));
	return op_of(ls, k);
}

/* The op a group's producer position (-1 .. K) is produced by; -1: the layer's input. */
static int32_t producer_op(const struct layer_src *ls, int32_t producer)
{
	if (producer < 0)
		return -1;
	return (int32_t)op_of(ls, (uint32_t)producer < ls->K ? (uint32_t)producer : ls->K - 1);
}

/* The op after whose backward a group read last by backward position c (-1 .. Kb) is freed. */
static int32_t consumer_op(const struct layer_src *ls, int32_t c)
{
	if (c < 0)
		return 0;
	return (int32_t)bwd_op_of(ls, (uint32_t)c < ls->Kb ? (uint32_t)c : ls->Kb - 1);
}

/*
 * Cuts the K > MAX_OPS kernels into MAX_OPS runs: cut[k] is the priority of starting an op at
 * kernel k (2: a collective before it, 1: a group produced just before it, 0: none). The
 * lowest-priority cut whose two runs together are shortest goes first; then the longest runs
 * are halved. O(K^2).
 */
static int cut_runs(struct layer_src *ls, uint8_t *cut)
{
	uint32_t K = ls->K, n = 1;
	uint32_t *starts = malloc(((size_t)K + 1) * sizeof(*starts));

	if (!starts)
		return -ENOMEM;
	starts[0] = 0;
	for (uint32_t k = 1; k < K; k++)
		if (cut[k])
			starts[n++] = k;
	while (n > MAX_OPS) {
		uint32_t best = 1;

		for (uint32_t i = 2; i < n; i++) {
			uint32_t end_i = i + 1 < n ? starts[i + 1] : K;
			uint32_t end_b = best + 1 < n ? starts[best + 1] : K;

			if (cut[starts[i]] < cut[starts[best]] ||
			    (cut[starts[i]] == cut[starts[best]] &&
			     end_i - starts[i - 1] < end_b - starts[best - 1]))
				best = i;
		}
		memmove(&starts[best], &starts[best + 1], (n - best - 1) * sizeof(*starts));
		n--;
	}
	while (n < MAX_OPS) {
		uint32_t longest = 0, len = 0;

		for (uint32_t i = 0; i < n; i++) {
			uint32_t run = (i + 1 < n ? starts[i + 1] : K) - starts[i];

			if (run > len) {
				len = run;
				longest = i;
			}
		}
		if (len < 2)
			break;
		memmove(&starts[longest + 2], &starts[longest + 1],
		        (n - longest - 1) * sizeof(*starts));
		starts[longest + 1] = starts[longest] + len / 2;
		n++;
	}
	memcpy(ls->start, starts, n * sizeof(*starts));
	ls->start[n] = K;
	ls->n_ops = n;
	free(starts);
	return 0;
}

static int32_t produced_by(const struct lynx_profile_group *g);

/*
 * A buffer of the chosen layer below the granule that a pack may hold: one its layer
 * produces (the layer's input is the layer below's, rebuilt by none of these runs), and
 * not beside a larger one of the same launch (a normalisation's statistics beside its
 * output): such a one stays, as without packs, since in a pack it would have a decision
 * of its own, and its examination a sibling to hold room for, for a few bytes. O(buffers)
 * per call.
 */
static bool packable(const struct layer_src *ls, const struct lynx_profile_group *g)
{
	if (g->layer != ls->index || !g->bytes || g->bytes >= ls->granule || produced_by(g) < 0)
		return false;
	for (size_t q = 0; q < ls->pr->group_count; q++) {
		const struct lynx_profile_group *o = &ls->pr->groups[q];
		if (o->layer == g->layer && o->producer == g->producer && o->bytes >= ls->granule)
			return false;
	}
	return true;
}

/* The groups of the chosen layer, before they become the problem's. */
static bool group_of_layer(const struct layer_src *ls, const struct lynx_profile_group *g)
{
	return g->layer == ls->index && g->bytes > 0 &&
	       (g->bytes >= ls->granule || (ls->pack && packable(ls, g)));
}

/* Whether the chosen layer's buffers below the granule are worth a pack (problem.h's
 * lynx_problem_pack_worth(), as the executor decides it for each layer and micro-batch). */
static bool layer_packs(const struct layer_src *ls)
{
	uint64_t small = 0;

	for (size_t g = 0; g < ls->pr->group_count; g++)
		if (packable(ls, &ls->pr->groups[g]))
			small += lynx_problem_pack_aligned(ls->pr->groups[g].bytes);
	return lynx_problem_pack_worth(small, ls->granule);
}

/* The last kernel of g's producer run (profile.h's producer_end), at least its producer
 * (a profile made in memory may leave producer_end 0); -1: the layer's input. */
static int32_t produced_by(const struct lynx_profile_group *g)
{
	return g->producer < 0 ? -1 : g->producer_end > g->producer ? g->producer_end : g->producer;
}

/* Ops: one per kernel, or runs of kernels cut at collectives and producers. */
static int cut_ops(struct layer_src *ls)
{
	const struct lynx_profile *pr = ls->pr;
	uint8_t *cut;
	int err;

	if (ls->K <= MAX_OPS) {
		for (uint32_t k = 0; k <= ls->K; k++)
			ls->start[k] = k;
		ls->n_ops = ls->K;
		return 0;
	}
	cut = calloc(ls->K, 1);
	if (!cut)
		return -ENOMEM;
	for (size_t g = 0; g < pr->group_count; g++)
		if (group_of_layer(ls, &pr->groups[g]) && produced_by(&pr->groups[g]) >= 0 &&
		    (uint32_t)produced_by(&pr->groups[g]) + 1 < ls->K)
			cut[produced_by(&pr->groups[g]) + 1] = 1;
	for (size_t w = 0; w < pr->window_count; w++)
		if (pr->windows[w].kind == LYNX_PROFILE_WINDOW_TP_FWD &&
		    pr->windows[w].layer == (int32_t)ls->index && pr->windows[w].kernel > 0 &&
		    (uint32_t)pr->windows[w].kernel < ls->K)
			cut[pr->windows[w].kernel] = 2;
	err = cut_runs(ls, cut);
	free(cut);
	return err;
}

/*
 * The least measured idle of the profile's calls of kind and ordinal (-1 for all but TP
 * windows); 0 unmeasured. The least is the steady state, and the capacity that holds when
 * this rank is the last to arrive: its peers wait for it then, and it waits only for the
 * transfer itself. So it is also what every peer of a collective measures alike, where
 * their means differ by which of them tends to arrive first.
 */
static double least_idle(const struct lynx_profile *pr, enum lynx_profile_window_kind kind,
                         int32_t ordinal)
{
	double least = INFINITY;

	for (size_t w = 0; w < pr->window_count; w++)
		if (pr->windows[w].kind == kind && pr->windows[w].ordinal == ordinal &&
		    known(&pr->windows[w].idle))
			least = fmin(least, seconds(pr->windows[w].idle.ns));
	return isfinite(least) ? least : 0;
}

/* Records that the layer's collective win (its ordinal in its segment) is op's window. */
static void map_collective(struct lynx_problem_layer *L, const struct lynx_profile_window *win,
                           uint32_t op)
{
	bool fwd = win->kind == LYNX_PROFILE_WINDOW_TP_FWD;
	uint32_t *n = fwd ? &L->n_tp_fwd : &L->n_tp_bwd;

	if (win->ordinal < 0 || win->ordinal >= LYNX_PROBLEM_MAX_COLLECTIVES)
		return;
	(fwd ? L->tp_fwd_op : L->tp_bwd_op)[win->ordinal] = (int8_t)op;
	if ((uint32_t)win->ordinal >= *n)
		*n = (uint32_t)win->ordinal + 1;
}

/*
 * The TP waits of the layer's ops: the collectives of the chosen layer on its first
 * micro-batch that has any, each with its kind's and ordinal's least idle; and the map from
 * those collectives to their ops.
 */
static void place_collectives(struct layer_src *ls, struct lynx_problem_layer *L)
{
	const struct lynx_profile *pr = ls->pr;
	int32_t mb = INT32_MAX;

	for (uint32_t k = 0; k < LYNX_PROBLEM_MAX_COLLECTIVES; k++)
		L->tp_fwd_op[k] = L->tp_bwd_op[k] = -1;
	L->n_tp_fwd = L->n_tp_bwd = 0;
	for (size_t w = 0; w < pr->window_count; w++)
		if (is_tp(pr->windows[w].kind) && pr->windows[w].layer == (int32_t)ls->index &&
		    pr->windows[w].microbatch < mb)
			mb = pr->windows[w].microbatch;
	for (size_t w = 0; w < pr->window_count; w++) {
		const struct lynx_profile_window *win = &pr->windows[w];
		double idle;
		uint32_t op, k = (uint32_t)win->kernel;

		if (!is_tp(win->kind) || win->layer != (int32_t)ls->index || win->microbatch != mb)
			continue;
		idle = least_idle(pr, win->kind, win->ordinal);
		if (win->kind == LYNX_PROFILE_WINDOW_TP_FWD) {
			op = op_of(ls, k < ls->K ? k : ls->K - 1);
			ls->tp_fwd[op] = true;
			L->ops[op].wait_fwd_s += idle;
		} else {
			/* After the backward kernel before it; before the first: that one's op. */
			op = bwd_op_of(ls, k ? k - 1 : 0);
			ls->tp_bwd[op] = true;
			L->ops[op].wait_bwd_s += idle;
		}
		map_collective(L, win, op);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static bool same_kernels(const struct lynx_profile_kernels *a, const struct lynx_profile_kernels *b)
{
	if (a->count != b->count || !b->ns)
		return false;
	for (size_t i = 0; i < a->count; i++)
		if ((a->name[i] || b->name[i]) &&
		    (!a->name[i] || !b->name[i] || strcmp(a->name[i], b->name[i])))
			return false;
	return true;
}

/*
 * Device times of one direction's kernels, each the median over the profile's layers that
 * run the same kernels as the chosen one, into out[0..count). One sampled iteration times
 * each kernel once, so one layer's figure is one sample with its noise; a layer's kernels
 * repeat in every layer, and their median is steadier. Ranks that plan alone, from their
 * own samples, then decide alike more often. Returns -ENOMEM.
 */
static int median_kernel_ns(const struct layer_src *ls, bool fwd, uint64_t *out)
{
	const struct lynx_profile *pr = ls->pr;
	const struct lynx_profile_kernels *k = fwd ? &ls->l->fwd_kernels : &ls->l->bwd_kernels;
	uint64_t *samples = malloc(pr->layer_count * sizeof(*samples));
	size_t *like = malloc(pr->layer_count * sizeof(*like));
	size_t n = 0;

	if (!samples || !like) {
		free(samples);
		free(like);
		return -ENOMEM;
	}
	for (size_t l = 0; l < pr->layer_count; l++)
		if (same_kernels(k, fwd ? &pr->layers[l].fwd_kernels : &pr->layers[l].bwd_kernels))
			like[n++] = l;
	for (size_t i = 0; i < k->count; i++) {
		for (size_t j = 0; j < n; j++) {
			const struct lynx_profile_layer *l = &pr->layers[like[j]];

			samples[j] = (fwd ? l->fwd_kernels.ns : l->bwd_kernels.ns)[i];
		}
		qsort(samples, n, sizeof(*samples), cmp_u64);
		/* The lower median of an even count: a sample, not a mean of two. */
		out[i] = samples[(n - 1) / 2];
	}
	free(samples);
	free(like);
	return 0;
}

/*
 * Per-kernel times of one direction into the ops: the device times (median_kernel_ns), else
 * the layer's time less its measured waits, spread evenly. Returns -EINVAL when there is
 * neither, or -ENOMEM.
 */
static int kernel_times(const struct ctx *c, const struct layer_src *ls, bool fwd,
                        struct lynx_problem_layer *L)
{
	const struct lynx_profile_kernels *k = fwd ? &ls->l->fwd_kernels : &ls->l->bwd_kernels;
	const struct lynx_profile_time *t = fwd ? &ls->l->forward : &ls->l->backward;
	double spread = 0, waits = 0;
	struct pname nb;

	if (!k->ns) {
		size_t i;

		for (i = 0; i < c->n && c->ranks[i] != ls->pr; i++)
			;
		if (!known(t))
			return lynx_policy_refuse(
			        c->why, c->len,
			        "%s: layer %zu has no %s time (neither the layer's nor its "
			        "kernels')",
			        name_of(c, i, &nb), ls->index, fwd ? "forward" : "backward");
		for (uint32_t op = 0; op < L->n_ops; op++)
			waits += fwd ? L->ops[op].wait_fwd_s : L->ops[op].wait_bwd_s;
		spread = fmax(0, seconds(t->ns) - waits) / (double)k->count;
	}
	uint64_t *median = NULL;
	if (k->ns &&
	    (!(median = malloc(k->count * sizeof(*median))) || median_kernel_ns(ls, fwd, median))) {
		free(median);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < k->count; i++) {
		double s = k->ns ? seconds(median[i]) : spread;

		if (fwd)
			L->ops[op_of(ls, i)].fwd_s += s;
		else
			L->ops[bwd_op_of(ls, i)].bwd_s += s;
	}
	free(median);
	return 0;
}

static void name_ops(const struct layer_src *ls, struct lynx_problem_layer *L)
{
	for (uint32_t op = 0; op < L->n_ops; op++) {
		uint32_t a = ls->start[op], b = ls->start[op + 1] - 1;
		const char *kernel = ls->l->fwd_kernels.name[a] ? ls->l->fwd_kernels.name[a] : "";

		if (a == b)
			snprintf(L->ops[op].name, sizeof(L->ops[op].name), "%u.%s", a, kernel);
		else
			snprintf(L->ops[op].name, sizeof(L->ops[op].name), "%u-%u.%s", a, b,
			         kernel);
	}
}

/* ---- Groups ---------------------------------------------------------------------------- */

/*
 * A group on its way to the problem: one per buffer of bytes > 0 at first, then merged and
 * sorted. Which buffers an item holds is tracked through the merges by id, the item's index
 * as first listed, which sorting does not change: into[id] is the id of the item it was
 * folded into, or id itself while it stands alone (a union-find without ranks).
 */
struct item {
	int32_t producer, consumer; /* ops */
	int32_t first;              /* op of the first launch of its producer run */
	uint64_t bytes;
	size_t order;     /* in the profile */
	int32_t kernel;   /* the first buffer's producer kernel, for its name */
	uint32_t merged;  /* buffers besides the first */
	uint32_t id;      /* index into into[] */
	bool reads_freed; /* one of its buffers' producer runs reads a temporary (profile.h) */
	bool chained;     /* one's run is replayed after a temporary's writer (profile.h) */
	uint32_t writers; /* the ops of those writers (bits), rerun before the runs */
	uint64_t scratch; /* the most scratch one of its buffers' producer runs takes */
	/* A pack of buffers below the granule: rebuilt by replaying each member's producer
	 * run, the ops `runs` (each member's first op to its producer's). */
	bool pack;
	uint32_t runs;
};

static int by_producer(const void *a, const void *b)
{
	const struct item *x = a, *y = b;

	if (x->producer != y->producer)
		return x->producer < y->producer ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static int by_producer_consumer(const void *a, const void *b)
{
	const struct item *x = a, *y = b;

	if (x->producer != y->producer)
		return x->producer < y->producer ? -1 : 1;
	if (x->consumer != y->consumer)
		return x->consumer < y->consumer ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Folds it[b] into it[a] and removes it[b]: it exists after the later producer and is freed
 * after the later consumer in the backward (the lower op: the backward runs them reversed).
 * into[] records that it[a] now holds it[b]'s buffers. */
static void fold(struct item *it, size_t *n, uint32_t *into, size_t a, size_t b)
{
	into[it[b].id] = it[a].id;
	it[a].bytes += it[b].bytes;
	it[a].merged += 1 + it[b].merged;
	it[a].producer = it[a].producer > it[b].producer ? it[a].producer : it[b].producer;
	it[a].first = it[a].first < it[b].first ? it[a].first : it[b].first;
	it[a].consumer = it[a].consumer < it[b].consumer ? it[a].consumer : it[b].consumer;
	it[a].reads_freed = it[a].reads_freed || it[b].reads_freed;
	it[a].chained = it[a].chained || it[b].chained;
	it[a].writers |= it[b].writers;
	it[a].scratch = it[a].scratch > it[b].scratch ? it[a].scratch : it[b].scratch;
	it[a].runs |= it[b].runs;
	memmove(&it[b], &it[b + 1], (*n - b - 1) * sizeof(*it));
	(*n)--;
}

/* Merges neighbours (sorted by producer) for which same() holds. */
static void merge_runs(struct item *it, size_t *n, uint32_t *into, bool consumer_too)
{
	for (size_t i = 0; i + 1 < *n;) {
		if (it[i].producer == it[i + 1].producer &&
		    (!consumer_too || it[i].consumer == it[i + 1].consumer))
			fold(it, n, into, i, i + 1);
		else
			i++;
	}
}

/* Down to MAX_GROUPS, in the order of problem.h's comment. */
static void merge_groups(struct item *it, size_t *n, uint32_t *into)
{
	if (*n > MAX_GROUPS) {
		qsort(it, *n, sizeof(*it), by_producer_consumer);
		merge_runs(it, n, into, true);
	}
	if (*n > MAX_GROUPS)
		merge_runs(it, n, into, false);
	/* Now one item per producer op and at most one for the input: MAX_OPS + 1. */
	while (*n > MAX_GROUPS) {
		size_t best = SIZE_MAX;

		for (size_t i = 0; i + 1 < *n; i++)
			if (it[i].producer >= 0 &&
			    (best == SIZE_MAX ||
			     it[i].bytes + it[i + 1].bytes < it[best].bytes + it[best + 1].bytes))
				best = i;
		fold(it, n, into, best, best + 1);
	}
	qsort(it, *n, sizeof(*it), by_producer);
}

/* The group that holds the item first listed as id: the one at the end of its into[] chain.
 * O(merges) per call; with one call per buffer, fine for the few hundred a layer has. */
static int16_t group_of_item(const struct item *it, size_t n, const uint32_t *into, uint32_t id)
{
	while (into[id] != id)
		id = into[id];
	for (size_t g = 0; g < n; g++)
		if (it[g].id == id)
			return (int16_t)g;
	return -1; /* not reached: every chain ends at an item still listed */
}

/*
 * Whether every buffer of the chosen layer says what its producer run reads (profile.h):
 * then a group's deps are exactly the groups its buffers' runs read; otherwise every group
 * produced before it, on the safe side.
 */
static bool reads_known(const struct layer_src *ls)
{
	bool any = false;

	for (size_t g = 0; g < ls->pr->group_count; g++) {
		if (ls->pr->groups[g].layer != ls->index)
			continue;
		if (!ls->pr->groups[g].reads_known)
			return false;
		any = true;
	}
	return any;
}

/* The groups (bits) that the buffers of group g read, through item_of (profile group ->
 * item id, or -1 for a buffer that is no group). */
static uint32_t read_groups(const struct layer_src *ls, const struct item *it, size_t n,
                            const uint32_t *into, const int32_t *item_of, uint32_t g)
{
	const struct lynx_profile *pr = ls->pr;
	uint32_t deps = 0;

	for (size_t q = 0; q < pr->group_count; q++) {
		if (item_of[q] < 0 ||
		    group_of_item(it, n, into, (uint32_t)item_of[q]) != (int16_t)g)
			continue;
		for (uint32_t k = 0; k < pr->groups[q].read_count; k++) {
			int32_t r = item_of[pr->groups[q].reads[k]];
			int16_t h = r < 0 ? -1 : group_of_item(it, n, into, (uint32_t)r);
			if (h >= 0 && (uint32_t)h != g)
				deps |= 1u << h;
		}
	}
	return deps;
}

/* The chosen layer's groups: ops, deps, producers and consumers (problem.h's rules). */
static int fill_groups(struct layer_src *ls, struct lynx_problem_layer *L)
{
	const struct lynx_profile *pr = ls->pr;
	struct item *it = calloc(pr->group_count + 1, sizeof(*it));
	uint32_t *into = calloc(pr->group_count + 1, sizeof(*into));
	int32_t *item_of = calloc(pr->group_count + 1, sizeof(*item_of));
	bool exact_deps = reads_known(ls);
	size_t n = 0;

	if (!it || !into || !item_of) {
		free(it);
		free(into);
		free(item_of);
		return -ENOMEM;
	}
	for (uint32_t k = 0; k < LYNX_PROBLEM_MAX_BUFFERS; k++)
		L->buffer_group[k] = -1;
	for (size_t g = 0; g < pr->group_count; g++) {
		const struct lynx_profile_group *gr = &pr->groups[g];

		item_of[g] = -1;
		if (gr->layer != ls->index)
			continue;
		/* The layer's next buffer: for now the id of its item (no more than the buffer's
		 * own index, so it fits in int16_t), its group once the items are merged. */
		if (L->n_buffers < LYNX_PROBLEM_MAX_BUFFERS)
			L->buffer_group[L->n_buffers++] = group_of_layer(ls, gr) ? (int16_t)n : -1;
		if (!group_of_layer(ls, gr)) {
			ls->small_bytes += gr->bytes;
			continue;
		}
		into[n] = (uint32_t)n;
		item_of[g] = (int32_t)n;
		/* Ready once its producer's whole run has: a rebuild relaunches all of it. */
		it[n] = (struct item){.producer = producer_op(ls, produced_by(gr)),
		                      .first = producer_op(ls, gr->producer),
		                      .consumer = consumer_op(ls, gr->last_consumer),
		                      .bytes = gr->bytes,
		                      .order = g,
		                      .kernel = gr->producer,
		                      .id = (uint32_t)n,
		                      .reads_freed = gr->reads_freed,
		                      .chained = gr->chained,
		                      .scratch = gr->scratch_known
		                                         ? gr->scratch_bytes
		                                         : ls->pr->memory.largest_workspace_bytes,
		                      .pack = gr->bytes < ls->granule};
		for (int32_t op = it[n].first; it[n].pack && op >= 0 && op <= it[n].producer; op++)
			it[n].runs |= 1u << op;
		for (uint32_t w = 0; gr->chained && w < gr->writer_count; w++)
			it[n].writers |= 1u << producer_op(ls, gr->writers[w]);
		n++;
	}
	/* The buffers below the granule are packed (the executor evicts a pack's together):
	 * those whose runs can be replayed in one group, those that read a temporary in
	 * another, so that one of the latter does not make the others unreplayable. */
	for (int freed = 0; freed < 2; freed++)
		for (size_t a = 0; a < n; a++) {
			if (!it[a].pack || it[a].reads_freed != freed)
				continue;
			for (size_t b = n; b-- > a + 1;)
				if (it[b].pack && it[b].reads_freed == freed)
					fold(it, &n, into, a, b);
			break;
		}
	qsort(it, n, sizeof(*it), by_producer);
	merge_groups(it, &n, into);
	for (uint32_t k = 0; k < L->n_buffers; k++)
		if (L->buffer_group[k] >= 0)
			L->buffer_group[k] =
			        group_of_item(it, n, into, (uint32_t)L->buffer_group[k]);
	L->n_groups = (uint32_t)n;
	for (uint32_t g = 0; g < n; g++) {
		struct lynx_problem_group *pg = &L->groups[g];
		int32_t prev = -1;
		bool before = false;
		const char *what = "input";

		pg->bytes = it[g].bytes;
		pg->producer = it[g].producer;
		pg->consumer = it[g].consumer;
		pg->reads_freed = it[g].reads_freed;
		pg->chained = it[g].chained && !it[g].reads_freed;
		pg->scratch_bytes = it[g].scratch;
		/* With what each run reads known, a rebuild needs only that resident, as the
		 * executor brings back exactly the memory a replay names; else every group
		 * produced before it, on the safe side. */
		for (uint32_t h = 0; h < n; h++)
			if (it[h].producer < it[g].producer) {
				pg->deps |= exact_deps ? 0 : 1u << h;
				before = true;
				prev = it[h].producer > prev ? it[h].producer : prev;
			}
		if (exact_deps)
			pg->deps = read_groups(ls, it, n, into, item_of, g);
		/* Rebuilt as the executor does it: its producer run replayed, reading what is
		 * resident. A run that reads a temporary cannot be replayed (the executor's
		 * examination refuses it and offloads the group): with a host link it keeps its
		 * ops and a plan that rebuilds it is lowered to OFFLOAD (problem.h), without one it
		 * cannot be rebuilt. Nothing saved before it: what it reads was not kept. */
		if (it[g].producer >= 0 && before && (!pg->reads_freed || ls->host_link))
			for (int32_t op = 0; op <= it[g].producer; op++) {
				bool runs = it[g].pack ? (it[g].runs >> op) & 1
				                       : op >= (it[g].first > prev ? it[g].first
				                                                   : prev + 1);
				/* A chain's writers are rerun too (chained: not reads_freed). */
				if (!runs && !(pg->chained && ((it[g].writers >> op) & 1)))
					continue;
				pg->ops |= 1u << op;
				pg->recompute_s += L->ops[op].rerun_s;
			}
		if (it[g].kernel >= 0)
			what = ls->l->fwd_kernels
			               .name[(uint32_t)it[g].kernel < ls->K ? (uint32_t)it[g].kernel
			                                                    : ls->K - 1];
		if (it[g].merged)
			snprintf(pg->name, sizeof(pg->name), "g%u.%s+%u", g, what ? what : "",
			         it[g].merged);
		else
			snprintf(pg->name, sizeof(pg->name), "g%u.%s", g, what ? what : "");
	}
	/* A group that cannot be rebuilt stays until every rebuild that needs it has run,
	 * through the rebuilds of what that rebuild needs too (a rebuild brings back what it
	 * reads, and what that reads, as the executor does). */
	uint32_t needs[LYNX_PROBLEM_MAX_GROUPS];
	bool grew = true;
	for (uint32_t g = 0; g < n; g++)
		needs[g] = L->groups[g].deps;
	while (grew) {
		grew = false;
		for (uint32_t g = 0; g < n; g++)
			for (uint32_t h = 0; h < n; h++)
				if ((needs[g] & (1u << h)) && (needs[h] & ~needs[g])) {
					needs[g] |= needs[h];
					grew = true;
				}
	}
	for (uint32_t d = 0; d < n; d++)
		for (uint32_t g = 0; !L->groups[d].ops && g < n; g++)
			if ((needs[g] & (1u << d)) && L->groups[g].consumer < L->groups[d].consumer)
				L->groups[d].consumer = L->groups[g].consumer;
	free(item_of);
	free(into);
	free(it);
	return 0;
}

/* ---- Stages and windows ------------------------------------------------------------------ */

static void add_window(struct lynx_window *w, uint32_t *n, enum lynx_window_kind kind,
                       int32_t layer, int32_t op, double capacity_s)
{
	if (w)
		w[*n] = (struct lynx_window){
		        .kind = kind, .layer = layer, .op = op, .capacity_s = capacity_s};
	(*n)++;
}

/* The stage's windows, as problem.c lists them: TP by layer and op, then PP, then DP. NULL
 * w: count only. */
static uint32_t list_windows(const struct layer_src *ls, const struct lynx_problem_layer *L,
                             const struct lynx_problem_stage *st, bool recv_fwd, bool recv_bwd,
                             bool dp, struct lynx_window *w)
{
	uint32_t n = 0;

	for (uint32_t lay = 0; lay < st->layers; lay++)
		for (uint32_t op = 0; op < L->n_ops; op++) {
			if (ls->tp_fwd[op])
				add_window(w, &n, LYNX_WINDOW_TP_FWD, (int32_t)lay, (int32_t)op,
				           L->ops[op].wait_fwd_s);
			if (ls->tp_bwd[op])
				add_window(w, &n, LYNX_WINDOW_TP_BWD, (int32_t)lay, (int32_t)op,
				           L->ops[op].wait_bwd_s);
		}
	if (recv_fwd)
		add_window(w, &n, LYNX_WINDOW_PP_RECV_FWD, -1, -1, st->recv_fwd_s);
	if (recv_bwd)
		add_window(w, &n, LYNX_WINDOW_PP_RECV_BWD, -1, -1, st->recv_bwd_s);
	if (dp)
		add_window(w, &n, LYNX_WINDOW_DP_GRAD, -1, -1, st->grad_reduce_s);
	return n;
}

/* Profile layer l into part: its times and saved bytes added to what part has. */
static void add_to_part(const struct ctx *c, const struct lynx_profile_layer *l,
                        struct lynx_problem_part *part)
{
	part->present = true;
	part->fwd_s += known(&l->forward) ? solo_rounded(c, seconds(l->forward.ns)) : 0;
	part->bwd_s += known(&l->backward) ? solo_rounded(c, seconds(l->backward.ns)) : 0;
	part->act_bytes += l->saved_bytes;
}

static void raise_to(uint64_t *most, uint64_t bytes)
{
	if (bytes > *most)
		*most = bytes;
}

/* The most of k's per-kernel non-saved bytes (profile.h; none: 0), with `small` beside. */
static uint64_t most_non_saved(const struct lynx_profile_kernels *k, uint64_t small)
{
	uint64_t most = 0;

	for (size_t i = 0; k->non_saved_bytes && i < k->count; i++)
		raise_to(&most, k->non_saved_bytes[i]);
	return most + small;
}

/*
 * Where the stage's non-saved bytes were live (problem.h's non_saved_known), from its
 * profile: each forward kernel of its layers counts for the op the chosen layer's kernel
 * of the same place is in (op_of; an op no kernel maps to takes the forward's most); the
 * backward's most counts at every backward op (when a trainer frees a saved buffer after
 * its last use, tinytrain at its layer's end, PyTorch once autograd lets go of the node,
 * is not known well enough to pair a backward kernel's bytes with the saved ones); the
 * embedding and head take their parts' most. `small`: activations below the granule.
 */
static void place_non_saved(const struct layer_src *ls, const struct lynx_profile *pr,
                            const struct stage_src *src, uint64_t small,
                            struct lynx_problem_stage *st)
{
	uint64_t most_fwd = 0, most_bwd = 0;

	st->non_saved_known = pr->memory.non_saved_known && ls->K;
	if (!st->non_saved_known)
		return;
	st->non_saved_outside = pr->memory.non_saved_outside_bytes + small;
	for (size_t j = src->first; j < src->first + src->count; j++) {
		const struct lynx_profile_kernels *f = &pr->layers[j].fwd_kernels;

		for (size_t i = 0; f->non_saved_bytes && i < f->count; i++)
			raise_to(&st->non_saved_fwd[op_of(ls, i < ls->K ? (uint32_t)i : ls->K - 1)],
			         f->non_saved_bytes[i] + small);
		raise_to(&most_bwd, most_non_saved(&pr->layers[j].bwd_kernels, small));
	}
	for (uint32_t op = 0; op < ls->n_ops; op++)
		raise_to(&most_fwd, st->non_saved_fwd[op]);
	for (uint32_t op = 0; op < ls->n_ops; op++) {
		st->non_saved_fwd[op] = st->non_saved_fwd[op] ? st->non_saved_fwd[op] : most_fwd;
		st->non_saved_bwd[op] = most_bwd;
	}
	for (size_t l = 0; l < src->first; l++) { /* the embedding, then the reruns */
		raise_to(&st->embedding.non_saved_fwd,
		         most_non_saved(&pr->layers[l].fwd_kernels, small));
		raise_to(&st->embedding.non_saved_bwd,
		         most_non_saved(&pr->layers[l].bwd_kernels, small));
	}
	if (src->head) {
		const struct lynx_profile_layer *h = &pr->layers[pr->layer_count - 1];
		st->head.non_saved_fwd = most_non_saved(&h->fwd_kernels, small);
		st->head.non_saved_bwd = most_non_saved(&h->bwd_kernels, small);
	}
}

static int fill_stage(const struct ctx *c, const struct layer_src *ls, const struct stage_src *src,
                      struct lynx_problem *p, uint32_t s)
{
	const struct lynx_profile *pr = c->ranks[src->profile];
	struct lynx_problem_stage *st = &p->stages[s];
	bool recv_fwd = s > 0 && has_window(pr, LYNX_PROFILE_WINDOW_PP_RECV_FWD);
	bool recv_bwd = s + 1 < p->n_stages && has_window(pr, LYNX_PROFILE_WINDOW_PP_RECV_BWD);
	bool dp = has_window(pr, LYNX_PROFILE_WINDOW_DP_GRAD);
	struct pname nb;
	char a[64], b[64];

	st->index = s;
	st->first_layer = s ? p->stages[s - 1].first_layer + p->stages[s - 1].layers : 0;
	st->layers = (uint32_t)src->count;
	st->profile_first_layer = (uint32_t)src->first;
	st->warmup = pr->warmup_forwards;
	st->inflight = pr->warmup_forwards + 1 < p->micro_batches ? pr->warmup_forwards + 1
	                                                          : p->micro_batches;
	for (size_t l = 0; l < src->first; l++) /* the embedding, then the reruns */
		add_to_part(c, &pr->layers[l], &st->embedding);
	if (src->head)
		add_to_part(c, &pr->layers[pr->layer_count - 1], &st->head);
	/* What no plan evicts: the most the profile ever had live besides saved activations.
	 * Taken at the no-plan peak alone, it would miss a backward's gradients, which are
	 * the peak's company once activations are evicted. */
	for (int cls = 0; cls < LYNX_PROFILE_MEMORY_CLASS_COUNT; cls++)
		if (cls != LYNX_PROFILE_MEMORY_SAVED)
			st->static_bytes += pr->memory.at_peak[cls];
	if (pr->memory.non_saved_peak_bytes > st->static_bytes)
		st->static_bytes = pr->memory.non_saved_peak_bytes;
	/* Buffers below the executor's granule stay, in every layer and held micro-batch. */
	uint64_t small = ls->small_bytes * st->layers * st->inflight;
	char small_clause[192] = "", g[64], sm[64];
	st->static_bytes += small;
	place_non_saved(ls, pr, src, small, st);
	if (small)
		snprintf(small_clause, sizeof(small_clause),
		         ", and %s of activations smaller than the device's %s VMM granule, which "
		         "Lynx cannot evict",
		         lynx_policy_bytes(small, sm, sizeof(sm)),
		         lynx_policy_bytes(ls->granule, g, sizeof(g)));
	if (st->static_bytes > lynx_problem_stage_budget(p, s))
		return lynx_policy_refuse(
		        c->why, c->len,
		        "the memory budget %s is below stage %u's static memory "
		        "%s (the most %s had live at once besides saved "
		        "activations%s)",
		        lynx_policy_bytes(lynx_problem_stage_budget(p, s), a, sizeof(a)), s,
		        lynx_policy_bytes(st->static_bytes, b, sizeof(b)),
		        name_of(c, src->profile, &nb), small_clause);
	if (recv_fwd)
		st->recv_fwd_s = least_idle(pr, LYNX_PROFILE_WINDOW_PP_RECV_FWD, -1);
	if (recv_bwd)
		st->recv_bwd_s = least_idle(pr, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1);
	for (size_t w = 0; w < pr->window_count; w++)
		if (pr->windows[w].kind == LYNX_PROFILE_WINDOW_DP_GRAD &&
		    known(&pr->windows[w].idle))
			st->grad_reduce_s += seconds(pr->windows[w].idle.ns);
	st->recv_fwd_s = solo_rounded(c, st->recv_fwd_s);
	st->recv_bwd_s = solo_rounded(c, st->recv_bwd_s);
	st->grad_reduce_s = solo_rounded(c, st->grad_reduce_s);
	st->n_windows = list_windows(ls, &p->layer, st, recv_fwd, recv_bwd, dp, NULL);
	st->windows = calloc(st->n_windows ? st->n_windows : 1, sizeof(*st->windows));
	if (!st->windows)
		return -ENOMEM;
	list_windows(ls, &p->layer, st, recv_fwd, recv_bwd, dp, st->windows);
	return 0;
}

/*
 * The host link, when every profile measured one: the slowest rate each way and the longest
 * latency, since an offloading stage runs at its own rank's link and a plan must hold on the
 * worst. One profile without a measurement leaves both links 0 (no OFFLOAD): its rank's link
 * is unknown, and assuming another's would promise copies it may not make in time.
 */
static void fill_host_link(const struct ctx *c, struct lynx_problem *p)
{
	struct lynx_link d2h = {INFINITY, 0}, h2d = {INFINITY, 0};

	for (size_t i = 0; i < c->n; i++) {
		const struct lynx_profile_host_link *h = &c->ranks[i]->host_link;

		if (!lynx_profile_host_link_measured(h))
			return;
		d2h.busbw = fmin(d2h.busbw, h->d2h_bytes_per_s);
		h2d.busbw = fmin(h2d.busbw, h->h2d_bytes_per_s);
		d2h.latency_s = h2d.latency_s = fmax(d2h.latency_s, h->latency_s);
	}
	d2h.busbw = solo_rounded(c, d2h.busbw);
	h2d.busbw = solo_rounded(c, h2d.busbw);
	d2h.latency_s = h2d.latency_s = solo_rounded(c, d2h.latency_s);
	p->d2h = d2h;
	p->h2d = h2d;
}

/* The layer description from the chosen profile layer. */
static int fill_layer(const struct ctx *c, struct layer_src *ls, struct lynx_problem_layer *L)
{
	int err = cut_ops(ls);

	if (err)
		return err;
	L->n_ops = ls->n_ops;
	name_ops(ls, L);
	place_collectives(ls, L);
	if ((err = kernel_times(c, ls, true, L)) || (err = kernel_times(c, ls, false, L)))
		return err;
	for (uint32_t op = 0; op < L->n_ops; op++) {
		struct lynx_problem_op *o = &L->ops[op];

		o->fwd_s = solo_rounded(c, o->fwd_s);
		o->bwd_s = solo_rounded(c, o->bwd_s);
		o->wait_fwd_s = solo_rounded(c, o->wait_fwd_s);
		o->wait_bwd_s = solo_rounded(c, o->wait_bwd_s);

		/* A replay reruns kernels, never a collective: what the collective gave is in a
		 * buffer the replay reads, or the executor's examination refuses the replay. */
		o->rerun_s = o->fwd_s;
		L->fwd_s += o->fwd_s + o->wait_fwd_s;
		L->bwd_s += o->bwd_s + o->wait_bwd_s;
	}
	return fill_groups(ls, L);
}

int lynx_problem_from_profile(const struct lynx_profile *const *ranks, size_t n_ranks,
                              const struct lynx_problem_options *opt, struct lynx_problem *p,
                              char *why, size_t len)
{
	static const struct lynx_problem_options defaults;
	struct ctx c = {ranks, n_ranks, opt ? opt : &defaults, why, len};
	struct stage_src *src = NULL;
	struct layer_src ls = {0};
	uint32_t n_stages = 0;
	int err;

	*p = (struct lynx_problem){0};
	if (!n_ranks)
		return lynx_policy_refuse(why, len, "no profiles: nothing to plan");
	if (c.opt->stage_layers)
		return lynx_policy_refuse(why, len,
		                          "a stage split cannot be imposed on profiles: each stage "
		                          "holds the layers it was profiled with");
	for (size_t i = 0; i < n_ranks; i++)
		if ((err = check_profile(&c, i)))
			return err;
	if ((err = order_stages(&c, &n_stages, &src)))
		return err;
	if ((err = find_layers(&c, n_stages, src)))
		goto out_free_src;
	pick_layer(&c, n_stages, src, &ls);
	ls.granule = c.opt->granule_bytes;
	ls.pack = ls.granule && !c.opt->unpacked && layer_packs(&ls);
	fill_host_link(&c, p);
	ls.host_link = p->d2h.busbw > 0 && p->h2d.busbw > 0;
	if ((err = fill_layer(&c, &ls, &p->layer)))
		goto out_free_src;

	p->micro_batches = ranks[0]->microbatches;
	p->search_seconds = c.opt->search_seconds;
	p->search_one_stage = c.opt->search_one_stage;
	p->offload_share_set = c.opt->offload_share_set;
	p->offload_share_bp = c.opt->offload_share_bp;
	p->searched_stage = c.opt->searched_stage;
	p->granule_bytes = c.opt->granule_bytes;
	p->gpus = ranks[0]->world > 0 ? (uint32_t)ranks[0]->world : 0;
	p->model.pp = n_stages;
	for (uint32_t s = 0; s < n_stages; s++) {
		uint64_t peak = ranks[src[s].profile]->memory.peak_bytes;

		p->model.layers += (uint32_t)src[s].count;
		p->budget_bytes = peak > p->budget_bytes ? peak : p->budget_bytes;
	}
	if (c.opt->budget_bytes)
		p->budget_bytes = c.opt->budget_bytes;
	if (c.opt->budget_percent > 0 && c.opt->budget_percent <= 100) {
		p->budget_bytes = 0;
		for (uint32_t s = 0; s < n_stages; s++) {
			uint64_t b = stage_share(ranks[src[s].profile], c.opt->budget_percent);
			p->budget_bytes = b > p->budget_bytes ? b : p->budget_bytes;
		}
	}
	p->restore_by_layer = true; /* as Lynx's executor restores (problem.h) */
	/* A profile changes nothing, so it cannot see how a rebuild and a collective slow each
	 * other: the options say, or the presets' figure. */
	p->interference =
	        c.opt->interference.compute > 0 ? c.opt->interference : LYNX_INTERFERENCE_DEFAULT;
	p->n_stages = n_stages;
	p->stages = calloc(n_stages, sizeof(*p->stages));
	if (!p->stages) {
		err = -ENOMEM;
		goto out_free_src;
	}
	for (uint32_t s = 0; s < n_stages; s++) {
		if (c.opt->budget_percent > 0 && c.opt->budget_percent <= 100)
			p->stages[s].budget_bytes =
			        stage_share(ranks[src[s].profile], c.opt->budget_percent);
		if ((err = fill_stage(&c, &ls, &src[s], p, s)))
			goto out_free_problem;
	}
	free(src);
	return 0;

out_free_problem:
	lynx_problem_free(p);
out_free_src:
	free(src);
	return err;
}
