/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx plan`: builds the planning problem of a GPT job from presets (optionally choosing its
 * pipeline split, policy/partition.h) or from recorded profiles (one per pipeline stage,
 * policy/problem.h's lynx_problem_from_profile), runs one planner, replays the plan in the
 * independent checker, writes the plan's JSON and prints a summary: per stage its layers, what
 * each group does, its peak memory and when it ends.
 */
#include <errno.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic_file.h"
#include "checker.h"
#include "jobargs.h"
#include "lynx.h"
#include "partition.h"
#include "plan.h"
#include "planner.h"
#include "presets.h"
#include "problem.h"
/* The profile format and its runs; plain "profile.h" and "run.h" would be tools/'s. */
#include "../profiler/profile.h"
#include "../profiler/run.h"

struct plan_args {
	struct lynx_job_args job;
	const char *planner, *out;
	const char *run; /* profiles only: the run to read; NULL: the newest */
	bool partition;
	uint32_t budget_percent; /* profiles: each stage's share of its own peak; 0: --budget */
	uint64_t granule;        /* profiles: saved buffers below it are kept; 0: none */
};

/* The command line, declared once: the parser and `lynx help plan` read this table. */
static const struct lynx_option options[] = {
        LYNX_OPTION(struct plan_args, "--model", "NAME", NAME, job.model,
                    "model preset (or --hf-config)"),
        LYNX_JOB_OPTIONS(struct plan_args, job),
        LYNX_OPTION(struct plan_args, "--planner", "NAME", NAME, planner,
                    "the planner (default heu)"),
        LYNX_OPTION(struct plan_args, "--out", "FILE", NAME, out,
                    "where the plan's JSON goes (default plan.json)"),
        LYNX_OPTION(struct plan_args, "--partition", NULL, FLAG, partition,
                    "choose the layers of each pipeline stage first (DP over splits)"),
        LYNX_OPTION(struct plan_args, "--budget-percent", "N", UINT, budget_percent,
                    "profiles only: each stage's budget is N% (1 to 100) of its own measured "
                    "peak, as LYNX_BUDGET=N% (stages peak differently)"),
        LYNX_OPTION(struct plan_args, "--granule", "BYTES", SIZE, granule,
                    "profiles only: activations below this VMM granule are packed, a layer's "
                    "into one group (kept where a pack is not worth it), as recompute mode "
                    "plans them on the device (2M on a GPU; default 0: none)"),
        LYNX_OPTION(struct plan_args, "--run", "ID", NAME, run,
                    "profiles only: plan the run ID among profiles of several (default: the "
                    "newest)"),
};

#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

void lynx_plan_help(FILE *out)
{
	lynx_jobargs_help(out, options, N_OPTIONS);
	fprintf(out, "\nplanners:\n");
	for (int i = 0; i < LYNX_PLANNER_COUNT; i++)
		fprintf(out, "  %-10s %s\n", lynx_planners[i].name, lynx_planners[i].summary);
	fprintf(out,
	        "\nThe plan file is policy/plan.h's JSON (\"format\": \"lynx-plan\"). The "
	        "summary prints,\nper stage, its layers, how many of them keep, offload or "
	        "recompute each group (on\ndemand or in a window), its peak memory and when it "
	        "ends, as the independent checker\nreplays the plan. --partition runs a DP over "
	        "contiguous layer splits that minimises\nthe predicted 1F1B iteration time, each "
	        "candidate stage priced by the planner's own\nplan for it (policy/partition.h); it "
	        "prints the split against the uniform one and the\nMegatron-LM arguments that "
	        "reproduce it: --decoder-first-pipeline-num-layers and\n"
	        "--decoder-last-pipeline-num-layers when the middle stages are even, else\n"
	        "--pipeline-model-parallel-layout.\n"
	        "\nlynx plan PROFILE [PROFILE...] plans from recorded profiles (lynx profile's "
	        "files, or\nthe profile.<rank>.json in a directory given: LYNX_OUT, one per node "
	        "or process\nmerged) instead, one per pipeline stage (more ranks of a stage: the "
	        "slowest\ncounts). Only\n--budget (default: the largest measured peak), "
	        "--budget-percent, "
	        "--granule, --planner,\n--out, --time-limit and --run apply. The layer's ops are "
	        "its kernels, "
	        "its groups the saved\nbuffers, its windows the measured collectives "
	        "(policy/problem.h says how). The\noffload planner needs every profile's host "
	        "link, which recompute mode measures in\nwarm-up (profiling-only mode does not): "
	        "without it, it is refused."
	        "\n\nProfiles of several runs (a reused LYNX_OUT: `lynx plan DIR/profile.*.json` "
	        "after\nlaunches of different sizes) are never planned together: the newest run's "
	        "are,\nand a line on stderr says which; --run ID takes another (the ids as that "
	        "line\nprints them)."
	        "\n\nExit status: 0 for a plan that fits; 1 when it does not (it is written all "
	        "the\nsame, to look at) or on failure; 2 for bad input.\n");
}

/* The options that apply to profiles; the others describe a model. */
static bool profile_option(const char *name)
{
	static const char *const apply[] = {
	        "--budget", "--budget-percent", "--granule", "--planner",
	        "--out",    "--time-limit",     "--run"};

	for (size_t i = 0; i < sizeof(apply) / sizeof(apply[0]); i++)
		if (!strcmp(apply[i], name))
			return true;
	return false;
}

/* Bytes in the largest binary unit below them ("7.52 GiB", "3.00 MiB"): a profile of a
 * small job is mebibytes. */
struct size_text {
	char buf[32];
};

static const char *size_text(uint64_t bytes, struct size_text *t)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u + 1 < (int)(sizeof(units) / sizeof(units[0]))) {
		v /= 1024;
		u++;
	}
	snprintf(t->buf, sizeof(t->buf), u ? "%.2f %s" : "%.0f %s", v, units[u]);
	return t->buf;
}

static void print_split(const char *what, const struct lynx_partition_split *x, uint32_t p)
{
	printf("  %-9s", what);
	for (uint32_t s = 0; s < p; s++)
		printf("%s%u", s ? "/" : " ", x->layers[s]);
	if (isfinite(x->predicted_s))
		printf("  predicted %.4f s", x->predicted_s);
	else
		printf("  does not fit");
	if (x->checked)
		printf(", checked %.4f s%s", x->checked_s, x->checked_fits ? "" : " (OOM)");
	printf("\n");
}

static void print_partition(const struct lynx_partition *pt)
{
	char flags[512];
	uint32_t p = pt->n_stages;

	printf("partition (%s, %u candidate stages planned in %.2f s):\n", pt->planner,
	       pt->evaluations, pt->search_time_s);
	print_split("uniform", &pt->uniform, p);
	print_split("dp", &pt->dp, p);
	print_split("megatron", &pt->megatron, p);
	if (pt->kept_uniform)
		printf("  the checker finds the DP's split slower than uniform: keeping uniform\n");
	if (pt->best.checked && pt->uniform.checked)
		printf("  chosen split: %.2f%% faster than uniform (checked)\n",
		       100 * (pt->uniform.checked_s / pt->best.checked_s - 1));
	if (!pt->fits)
		printf("  no split fits the budget: the fastest regardless of memory is shown\n");
	lynx_partition_megatron_flags(pt->best.layers, p, flags, sizeof(flags));
	printf("  megatron: --num-layers %u %s\n", pt->n_layers, flags);
	if (!lynx_partition_megatron_flags(pt->best.layers, p, flags, sizeof(flags))) {
		lynx_partition_megatron_flags(pt->megatron.layers, p, flags, sizeof(flags));
		printf("  without the layout flag (best even-middle split): --num-layers %u %s\n",
		       pt->n_layers, flags);
	}
	printf("\n");
}

/* The job planned: the model on its cluster, or the profiles. */
static void print_model_header(const struct lynx_problem *p, const char *model,
                               const struct lynx_plan *plan)
{
	const struct lynx_model_desc *m = &p->model;
	struct size_text t;

	char more[48] = "";

	if (lynx_model_cp(m) > 1 || lynx_model_vp(m) > 1)
		snprintf(more, sizeof(more), " c=%u v=%u", lynx_model_cp(m), lynx_model_vp(m));
	printf("%s on %s: t=%u p=%u d=%u%s%s, %u micro-batches of %u; budget %s; planner %s\n",
	       model, p->cluster ? p->cluster->name : "?", m->tp, m->pp, m->dp, more,
	       m->sp ? " +SP" : "", p->micro_batches, m->micro_batch,
	       size_text(p->budget_bytes, &t), plan->planner);
}

static void print_profile_header(const struct lynx_problem *p, size_t n_profiles,
                                 const struct lynx_profile_run *run, const struct lynx_plan *plan)
{
	struct size_text t;

	printf("%zu profile%s", n_profiles, n_profiles == 1 ? "" : "s");
	if (run && run->known && run->id[0])
		printf(" of run %s", run->id);
	printf(": %u stage%s, %u layers, %u micro-batches; budget %s%s; planner %s\n", p->n_stages,
	       p->n_stages == 1 ? "" : "s", p->model.layers, p->micro_batches,
	       p->n_stages && p->stages[0].budget_bytes ? "per stage, at most " : "",
	       size_text(p->budget_bytes, &t), plan->planner);
	printf("layer: %u ops, %u groups, forward %.3f ms, backward %.3f ms (the optimizer step "
	       "is not in the prediction)\n",
	       p->layer.n_ops, p->layer.n_groups, p->layer.fwd_s * 1e3, p->layer.bwd_s * 1e3);
}

/* Per stage: layers, actions per group, peak and end time. */
static void print_summary(const struct lynx_problem *p, const struct lynx_plan *plan,
                          const struct lynx_checker_result *r)
{
	printf("step %.4f s (checker %.4f s), %s, search %.1f ms%s%s\n", plan->step_time_s,
	       r ? r->step_time_s : NAN,
	       (r ? r->fits : plan->fits) ? "fits" : "DOES NOT FIT the budget",
	       plan->search_time_s * 1e3, plan->note[0] ? "; " : "", plan->note);
	for (uint32_t s = 0; s < p->n_stages; s++) {
		const struct lynx_problem_stage *st = &p->stages[s];
		struct size_text peak, fixed;

		const uint32_t v = lynx_problem_chunks(p);
		char layers[160] = "";
		size_t at = 0;

		/* Interleaved, chunk k of stage s is the model's chunk k·p + s (chunks are even).
		 */
		for (uint32_t k = 0, first, end; k < v && at < sizeof(layers); k++) {
			lynx_problem_chunk_layers(p, s, k, &first, &end);
			uint32_t n = end - first;
			uint32_t global = v > 1 ? (k * p->n_stages + s) * n : st->first_layer;
			at += (size_t)snprintf(layers + at, sizeof(layers) - at, "%s%u-%u",
			                       k ? ", " : "", global, global + n - 1);
		}
		printf("\nstage %u: layers %s (%u)%s%s, peak %s (static %s)", s, layers, st->layers,
		       st->embedding.present ? " +embedding" : "", st->head.present ? " +head" : "",
		       size_text(r ? r->peak_bytes[s] : plan->stages[s].peak_bytes, &peak),
		       size_text(st->static_bytes, &fixed));
		if (r)
			printf(", ends at %.4f s", r->end_s[s]);
		printf("\n  %-22s %6s %8s %9s %8s\n", "group", "keep", "offload", "on-demand",
		       "window");
		for (uint32_t g = 0; g < p->layer.n_groups; g++) {
			uint32_t n[LYNX_ACTION_COUNT] = {0};

			for (uint32_t l = 0; l < st->layers; l++)
				n[lynx_plan_get(plan, s, l, g)->action]++;
			printf("  %-22s %6u %8u %9u %8u\n", p->layer.groups[g].name,
			       n[LYNX_ACTION_KEEP], n[LYNX_ACTION_OFFLOAD],
			       n[LYNX_ACTION_RECOMPUTE_ON_DEMAND],
			       n[LYNX_ACTION_RECOMPUTE_IN_WINDOW]);
		}
	}
}

/* Writes plan's JSON to path and reads it back. Returns an exit status. */
static int write_plan(const struct lynx_problem *p, const struct lynx_plan *plan, const char *path)
{
	char *text = lynx_plan_to_json(plan, p), why[256];
	struct lynx_plan back;
	struct lynx_atomic_file file;
	int err;

	if (!text) {
		fprintf(stderr, "lynx plan: out of memory\n");
		return LYNX_EXIT_FAIL;
	}
	err = lynx_atomic_file_open(&file, path);
	if (!err) {
		fputs(text, file.f);
		fputc('\n', file.f); /* a write error shows in commit's ferror */
		err = lynx_atomic_file_commit(&file);
	}
	if (err) {
		fprintf(stderr, "lynx plan: cannot write %s: %s\n", path, strerror(-err));
		free(text);
		return LYNX_EXIT_FAIL;
	}
	err = lynx_plan_from_json(text, p, &back, why, sizeof(why));
	free(text);
	if (err) {
		fprintf(stderr, "lynx plan: the written plan does not read back: %s\n", why);
		return LYNX_EXIT_FAIL;
	}
	lynx_plan_free(&back);
	printf("\nplan written to %s\n", path);
	return LYNX_EXIT_OK;
}

/* Runs the planner and the checker on p, prints the summary and writes the plan file. The
 * job is the model called model, or n_profiles profiles of run (NULL: unknown). */
static int plan_problem(const struct lynx_problem *p, const struct lynx_planner *pl,
                        const struct plan_args *a, const char *model, size_t n_profiles,
                        const struct lynx_profile_run *run)
{
	struct lynx_checker_result r = {0};
	struct lynx_plan plan;
	bool checked;
	char why[256];
	int err, rc;

	err = lynx_planner_run(pl, p, &plan, why, sizeof(why));
	if (err) {
		fprintf(stderr, "lynx plan: planner %s failed: %s\n", pl->name,
		        err == -ENOMEM ? "out of memory" : why);
		return LYNX_EXIT_FAIL;
	}
	checked = !lynx_checker_replay(p, &plan, &r, why, sizeof(why));
	if (!checked)
		fprintf(stderr, "lynx plan: warning: the checker refused the plan: %s\n", why);
	if (model)
		print_model_header(p, model, &plan);
	else
		print_profile_header(p, n_profiles, run, &plan);
	print_summary(p, &plan, checked ? &r : NULL);
	if (run && run->known)
		snprintf(plan.run, sizeof(plan.run), "%s", run->id);
	rc = write_plan(p, &plan, a->out ? a->out : "plan.json");
	/* A plan that does not fit is written, to look at, but is no success. */
	if (rc == LYNX_EXIT_OK && !(checked ? r.fits : plan.fits)) {
		fprintf(stderr,
		        "lynx plan: the %s plan does not fit the budget (the summary says where); "
		        "written for inspection, exit status 1\n",
		        pl->name);
		rc = LYNX_EXIT_FAIL;
	}
	if (checked)
		lynx_checker_free(&r);
	lynx_plan_free(&plan);
	return rc;
}

/* Plans the job: partition (if asked), planner, checker, file, summary. */
static int plan_job(const struct plan_args *a, const struct lynx_model_desc *m,
                    const struct lynx_cluster *c, const struct lynx_planner *pl)
{
	struct lynx_problem_options opt = {.search_seconds = a->job.time_limit,
	                                   .budget_bytes = a->job.budget,
	                                   .distributed_optimizer = a->job.distributed_optimizer};
	struct lynx_partition pt = {0};
	struct lynx_problem p;
	char why[256];
	int err, rc;

	if (lynx_jobargs_interference(&a->job, c->interference, &opt.interference, why,
	                              sizeof(why)) ||
	    lynx_jobargs_offload_share(&a->job, &opt, why, sizeof(why)))
		return lynx_usage_error("plan", "%s", why);
	if (a->partition) {
		err = lynx_partition_find(m, c, &opt, pl, &pt, why, sizeof(why));
		if (err) {
			fprintf(stderr, "lynx plan: %s\n", err == -ENOMEM ? "out of memory" : why);
			return err == -ENOMEM ? LYNX_EXIT_FAIL : LYNX_EXIT_USAGE;
		}
		print_partition(&pt);
		opt.stage_layers = pt.best.layers;
	}
	err = lynx_problem_from_model(m, c, &opt, &p, why, sizeof(why));
	lynx_partition_free(&pt);
	if (err) {
		fprintf(stderr, "lynx plan: %s%s\n", err == -ENOMEM ? "out of memory" : why,
		        err == -EINVAL && m->pp && m->layers % m->pp ? " (try --partition)" : "");
		return err == -ENOMEM ? LYNX_EXIT_FAIL : LYNX_EXIT_USAGE;
	}
	rc = plan_problem(&p, pl, a, a->job.model, 0, NULL);
	lynx_problem_free(&p);
	return rc;
}

/*
 * The run to plan among the profiles prof[0..n) read from paths: --run's, or the newest, said
 * on stderr when there are several. Fills ranks and names with its profiles, in the order
 * given, and returns their count; 0 after a message (*rc the exit status).
 */
static size_t take_one_run(const struct plan_args *a, const char *const *paths,
                           const struct lynx_profile *prof, size_t n,
                           const struct lynx_profile **ranks, const char **names,
                           struct lynx_profile_run *run, int *rc)
{
	int64_t *mtimes = calloc(n, sizeof(*mtimes));
	const struct lynx_run_group *chosen;
	struct lynx_runs runs;
	char about[64], known[1024];
	size_t kept = 0;

	for (size_t i = 0; i < n; i++)
		ranks[i] = &prof[i];
	for (size_t i = 0; mtimes && i < n; i++) {
		struct stat st;
		mtimes[i] = stat(paths[i], &st) ? 0 : (int64_t)st.st_mtime;
	}
	if (!mtimes || lynx_runs_group(ranks, mtimes, n, &runs)) {
		free(mtimes);
		fprintf(stderr, "lynx plan: out of memory\n");
		*rc = LYNX_EXIT_FAIL;
		return 0;
	}
	free(mtimes);
	chosen = a->run ? lynx_runs_find(&runs, a->run) : &runs.groups[0];
	if (!chosen) {
		lynx_runs_names(&runs, known, sizeof(known));
		*rc = lynx_usage_error("plan",
		                       "--run %s: no such run among the profiles (they "
		                       "hold: %s)",
		                       a->run, known);
		lynx_runs_free(&runs);
		return 0;
	}
	snprintf(about, sizeof(about), "lynx plan: the %zu profiles come from", n);
	lynx_runs_print_choice(stderr, about, &runs, chosen, a->run != NULL);
	*run = chosen->run;
	for (size_t m = 0; m < chosen->count; m++) {
		ranks[kept] = &prof[chosen->members[m]];
		names[kept++] = paths[chosen->members[m]];
	}
	lynx_runs_free(&runs);
	return kept;
}

/* Appends path (copied) to *files; false when out of memory. */
static bool add_file(char ***files, size_t *used, size_t *cap, const char *path)
{
	if (*used == *cap) {
		size_t grown_cap = *cap ? 2 * *cap : 8;
		char **grown = realloc(*files, grown_cap * sizeof(*grown));
		if (!grown)
			return false;
		*files = grown;
		*cap = grown_cap;
	}
	if (!((*files)[*used] = strdup(path)))
		return false;
	++*used;
	return true;
}

static int by_path(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The profile files named by args[0..n): a file as it is, a directory (LYNX_OUT, one per node
 * or process) as the profile.<rank>.json files in it (lynx_profile_file_rank(), as `lynx
 * report` reads them). Returns the malloc'ed list (each path malloc'ed) and its length in
 * *count, or NULL with an exit status in *rc (said on stderr).
 */
static char **profile_files(const char *const *args, size_t n, size_t *count, int *rc)
{
	char **files = NULL, path[PATH_MAX + 300];
	size_t used = 0, cap = 0;
	bool ok = true;

	*rc = LYNX_EXIT_USAGE;
	for (size_t i = 0; i < n && ok; i++) {
		struct stat st;
		DIR *d = !stat(args[i], &st) && S_ISDIR(st.st_mode) ? opendir(args[i]) : NULL;
		if (!d) {
			ok = add_file(&files, &used, &cap, args[i]);
			continue;
		}
		size_t first = used;
		for (struct dirent *e; ok && (e = readdir(d));) {
			if (lynx_profile_file_rank(e->d_name) < 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", args[i], e->d_name);
			ok = add_file(&files, &used, &cap, path);
		}
		closedir(d);
		if (ok && used == first && n == 1) {
			fprintf(stderr, "lynx plan: %s: no profile.<rank>.json in this directory\n",
			        args[i]);
			goto fail;
		}
		if (ok && used == first) /* a launcher's own directory under out/proc-%p, say */
			fprintf(stderr, "lynx plan: %s: no profile.<rank>.json here; left out\n",
			        args[i]);
		qsort(files + first, used - first, sizeof(*files), by_path);
	}
	if (ok && !used) {
		fprintf(stderr,
		        "lynx plan: none of the %zu directories holds a "
		        "profile.<rank>.json\n",
		        n);
		goto fail;
	}
	if (ok) {
		*count = used;
		*rc = LYNX_EXIT_OK;
		return files;
	}
	fprintf(stderr, "lynx plan: out of memory\n");
	*rc = LYNX_EXIT_FAIL;
fail:
	while (used-- > 0)
		free(files[used]);
	free(files);
	return NULL;
}

/* Plans from the profiles at paths[0..n): one run's. */
static int plan_profiles(const struct plan_args *a, const char *const *paths, size_t n,
                         const struct lynx_planner *pl)
{
	struct lynx_profile *prof = calloc(n, sizeof(*prof));
	const struct lynx_profile **ranks = calloc(n, sizeof(*ranks));
	const char **names = calloc(n, sizeof(*names));
	struct lynx_problem_options opt = {.search_seconds = a->job.time_limit,
	                                   .budget_bytes = a->job.budget,
	                                   .profile_names = names,
	                                   .budget_percent = a->budget_percent,
	                                   .granule_bytes = a->granule};
	struct lynx_profile_run run;
	struct lynx_problem p;
	size_t read = 0, kept;
	char why[512];
	int err, rc = LYNX_EXIT_FAIL;

	if (!prof || !ranks || !names) {
		fprintf(stderr, "lynx plan: out of memory\n");
		goto out;
	}
	if (lynx_jobargs_interference(&a->job, LYNX_INTERFERENCE_DEFAULT, &opt.interference, why,
	                              sizeof(why))) {
		rc = lynx_usage_error("plan", "%s", why);
		goto out;
	}
	for (; read < n; read++) {
		err = lynx_profile_read(paths[read], &prof[read], why, sizeof(why));
		if (err) {
			fprintf(stderr, "lynx plan: %s: %s\n", paths[read],
			        why[0] ? why : strerror(-err));
			rc = err == -ENOMEM ? LYNX_EXIT_FAIL : LYNX_EXIT_USAGE;
			goto out;
		}
	}
	kept = take_one_run(a, paths, prof, n, ranks, names, &run, &rc);
	if (!kept)
		goto out;
	err = lynx_problem_from_profile(ranks, kept, &opt, &p, why, sizeof(why));
	if (err) {
		fprintf(stderr, "lynx plan: %s\n", err == -ENOMEM ? "out of memory" : why);
		rc = err == -ENOMEM ? LYNX_EXIT_FAIL : LYNX_EXIT_USAGE;
		goto out;
	}
	if (!(p.d2h.busbw > 0 && p.h2d.busbw > 0) && !strcmp(pl->name, "offload")) {
		fprintf(stderr,
		        "lynx plan: the offload planner needs the host link's bandwidth, and not "
		        "every profile carries one (\"host_link\", measured in warm-up); choose "
		        "another planner\n");
		rc = LYNX_EXIT_USAGE;
	} else {
		rc = plan_problem(&p, pl, a, NULL, kept, &run);
	}
	lynx_problem_free(&p);
out:
	while (read-- > 0)
		lynx_profile_free(&prof[read]);
	free(prof);
	free(ranks);
	free(names);
	return rc;
}

/*
 * Splits argv into the options with their values (into opts, after argv[0]), for
 * lynx_jobargs_parse(), and the profile paths; *model_only is the first option given that
 * does not apply to profiles, or NULL.
 */
static void split_args(int argc, char **argv, char **opts, int *n_opts, const char **profiles,
                       size_t *n_profiles, const char **model_only)
{
	*n_opts = 0;
	*n_profiles = 0;
	*model_only = NULL;
	opts[(*n_opts)++] = argv[0];
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
		const struct lynx_option *o = NULL;

		if (arg[0] != '-' || !arg[1]) {
			profiles[(*n_profiles)++] = arg;
			continue;
		}
		opts[(*n_opts)++] = argv[i];
		for (size_t k = 0; k < N_OPTIONS && !o; k++)
			if (strlen(options[k].name) == len && !strncmp(options[k].name, arg, len))
				o = &options[k];
		if (o && !profile_option(o->name) && !*model_only)
			*model_only = o->name;
		if (o && o->arg && !eq && i + 1 < argc)
			opts[(*n_opts)++] = argv[++i];
	}
}

/* The planner --planner names (default heu), or a usage error. */
static int find_planner(const struct plan_args *a, const struct lynx_planner **pl)
{
	char names[512];
	size_t used = 0;

	*pl = lynx_planner_find(a->planner ? a->planner : "heu");
	if (*pl)
		return 0;
	for (int i = 0; i < LYNX_PLANNER_COUNT && used < sizeof(names); i++)
		used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
		                         lynx_planners[i].name);
	return lynx_usage_error("plan", "unknown planner '%s' (known: %s)", a->planner, names);
}

/* Plans the job of --model (or --hf-config) on --cluster. */
static int plan_model(struct plan_args *a, const struct lynx_planner *pl)
{
	const struct lynx_cluster *c;
	const struct lynx_model_preset *preset = NULL;
	struct lynx_model_desc m;
	char names[512], why[512], name[64];

	if (!a->job.model == !a->job.hf_config)
		return lynx_usage_error("plan", a->job.model
		                                        ? "--model and --hf-config exclude each "
		                                          "other"
		                                        : "--model is required (or --hf-config)");
	if (!a->job.cluster)
		return lynx_usage_error("plan", "--cluster is required");
	c = lynx_preset_find_cluster(a->job.cluster);
	if (!c) {
		lynx_jobargs_list_names(names, sizeof(names), false);
		return lynx_usage_error("plan", "unknown cluster '%s' (known: %s)", a->job.cluster,
		                        names);
	}
	if (a->job.model && !(preset = lynx_preset_find_model(a->job.model))) {
		lynx_jobargs_list_names(names, sizeof(names), true);
		return lynx_usage_error("plan", "unknown model '%s' (known: %s)", a->job.model,
		                        names);
	}
	if (lynx_jobargs_model(&a->job, preset, &m, name, sizeof(name), why, sizeof(why))) {
		fprintf(stderr, "lynx plan: %s\n", why);
		return LYNX_EXIT_USAGE;
	}
	return plan_job(a, &m, c, pl);
}

int lynx_plan_main(int argc, char **argv)
{
	struct plan_args a = {.job = LYNX_JOB_ARGS_INIT};
	const struct lynx_planner *pl = NULL;
	char **opts = calloc((size_t)argc + 1, sizeof(*opts));
	const char **profiles = calloc((size_t)argc + 1, sizeof(*profiles));
	const char *model_only;
	size_t n_profiles;
	int n_opts, rc;

	if (!opts || !profiles) {
		fprintf(stderr, "lynx plan: out of memory\n");
		rc = LYNX_EXIT_FAIL;
		goto out;
	}
	split_args(argc, argv, opts, &n_opts, profiles, &n_profiles, &model_only);
	rc = lynx_jobargs_parse("plan", options, N_OPTIONS, n_opts, opts, &a, NULL);
	if (rc == 1)
		rc = lynx_command_help("plan");
	if (!rc)
		rc = find_planner(&a, &pl);
	if (rc)
		goto out;
	if (a.budget_percent > 100)
		rc = lynx_usage_error("plan", "--budget-percent %u is not between 1 and 100",
		                      a.budget_percent);
	else if (!n_profiles && a.run)
		rc = lynx_usage_error("plan", "--run picks among profiles: give them (a model has "
		                              "no runs)");
	else if (!n_profiles && a.budget_percent)
		rc = lynx_usage_error("plan", "--budget-percent needs profiles (a model has no "
		                              "measured peak): give --budget");
	else if (!n_profiles && a.granule)
		rc = lynx_usage_error("plan", "--granule needs profiles (a model has groups, not "
		                              "the buffers a granule keeps)");
	else if (!n_profiles)
		rc = plan_model(&a, pl);
	else if (model_only)
		rc = lynx_usage_error("plan",
		                      "%s describes a model; with profiles only --budget, "
		                      "--budget-percent, --granule, --planner, --out, --time-limit "
		                      "and --run apply",
		                      model_only);
	else {
		size_t n_files = 0;
		char **files = profile_files(profiles, n_profiles, &n_files, &rc);
		if (files)
			rc = plan_profiles(&a, (const char *const *)files, n_files, pl);
		for (size_t i = 0; files && i < n_files; i++)
			free(files[i]);
		free(files);
	}
out:
	free(opts);
	free(profiles);
	return rc;
}
