/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx sim`: builds the planning problem of a model's job from presets or a Hugging Face
 * config.json (policy/problem.c), runs
 * every planner of policy/planners.def on it, replays each plan in the independent checker,
 * and prints step time, speedup over full recomputation, MFU, peak memory per stage and
 * search time: a table, JSON or CSV. --sweep does it for every preset of the Lynx paper's
 * range.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "checker.h"
#include "jobargs.h"
#include "lynx.h"
#include "planner.h"
#include "presets.h"
#include "problem.h"
#include "sim.h"

struct sim_args {
	struct lynx_job_args job;
	bool sweep, json, csv;
	const char *planners; /* comma-separated names; NULL: every planner */
};

/* The planners this run compares (--planners); full is always among them, as the
 * reference of every speedup. */
static bool chosen[LYNX_PLANNER_COUNT];

/* The command line, declared once: the parser and `lynx help sim` read this table. */
static const struct lynx_option options[] = {
        LYNX_OPTION(struct sim_args, "--model", "NAME", NAME, job.model,
                    "model preset (or --hf-config, or --sweep)"),
        LYNX_JOB_OPTIONS(struct sim_args, job),
        LYNX_OPTION(struct sim_args, "--sweep", NULL, FLAG, sweep,
                    "every GPT preset of the Lynx paper's range instead of --model; without "
                    "--tp and --pp, each at the fewest GPUs where full recomputation fits"),
        LYNX_OPTION(struct sim_args, "--json", NULL, FLAG, json, "print JSON"),
        LYNX_OPTION(struct sim_args, "--csv", NULL, FLAG, csv, "print CSV, one row per planner"),
        LYNX_OPTION(struct sim_args, "--planners", "LIST", NAME, planners,
                    "comma-separated planners to compare (default: all; full is always in)"),
};

#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

void lynx_sim_help(FILE *out)
{
	lynx_jobargs_help(out, options, N_OPTIONS);
	fprintf(out, "\nmodel presets (* in --sweep):");
	for (int i = 0; i < LYNX_MODEL_PRESET_COUNT; i++)
		fprintf(out, " %s%s", lynx_preset_models[i].name,
		        lynx_preset_models[i].in_sweep ? "*" : "");
	fprintf(out, "\ncluster presets:");
	for (int i = 0; i < LYNX_CLUSTER_COUNT; i++)
		fprintf(out, " %s", lynx_preset_clusters[i].name);
	fprintf(out, "\nplanners:\n");
	for (int i = 0; i < LYNX_PLANNER_COUNT; i++)
		fprintf(out, "  %-10s %s\n", lynx_planners[i].name, lynx_planners[i].summary);
	fprintf(out,
	        "\nColumns: step time of one iteration (1F1B, interleaved under --vp, over all "
	        "stages,\ngradient reduction and optimizer step included); speedup over `full`; "
	        "MFU, model\nFLOPs over the step time and every GPU's peak; whether every stage's "
	        "peak fits the\nbudget; the planner's search time; the peak memory of each "
	        "pipeline stage.\nEvery plan is replayed by the independent checker, whose "
	        "numbers are printed; a\ndisagreement with the planner's own prediction is "
	        "reported on stderr. The model\nbehind the numbers: policy/problem.h.\n"
	        "\nMFU counts model FLOPs: 2 per multiply-add of every GEMM, the forward once "
	        "and the\nbackward twice, and causal attention at half its QK^T and PV FLOPs, "
	        "whatever kernel\nruns it (flash skips the masked half; unfused attention "
	        "computes it and gets no\ncredit for it). Recomputation is not counted.\n"
	        "Exit status: 0 when some planner's plan fits the budget, 1 when none does, 2 for "
	        "a\njob that cannot run. A search (opt, checkmate) that runs longer than a second "
	        "says so on\nstderr every 10 s.\n");
}

/* Parses argv into a. Returns 0, 1 after printing help, or LYNX_EXIT_USAGE after a message. */
static int parse_args(int argc, char **argv, struct sim_args *a)
{
	const struct lynx_job_args *j = &a->job;
	int rc = lynx_jobargs_parse("sim", options, N_OPTIONS, argc, argv, a, NULL);

	if (rc)
		return rc;
	if (a->json && a->csv)
		return lynx_usage_error("sim", "--json and --csv exclude each other");
	if (!j->cluster)
		return lynx_usage_error("sim", "--cluster is required");
	if (a->sweep && j->model)
		return lynx_usage_error("sim", "--sweep runs every preset: drop --model");
	if (j->model && j->hf_config)
		return lynx_usage_error("sim", "--model and --hf-config exclude each other");
	if (a->sweep && j->hf_config)
		return lynx_usage_error("sim", "--sweep runs every preset: drop --hf-config");
	if (!a->sweep && !j->model && !j->hf_config)
		return lynx_usage_error("sim", "--model is required (or --hf-config, or --sweep)");
	if (a->sweep &&
	    (j->layers || j->hidden || j->heads || j->seq || j->vocab || j->kv_heads || j->ffn))
		return lynx_usage_error("sim",
		                        "--sweep takes the presets' shapes: drop the overrides");
	if (j->sp && j->tp <= 1)
		return lynx_usage_error("sim", "--sp shards what tensor parallelism replicates: it "
		                               "needs --tp 2 or more");
	for (int k = 0; k < LYNX_PLANNER_COUNT; k++)
		chosen[k] = !a->planners || k == LYNX_PLANNER_FULL;
	for (const char *name = a->planners; name && *name;) {
		size_t len = strcspn(name, ",");
		bool known = false;
		for (int k = 0; k < LYNX_PLANNER_COUNT; k++) {
			if (strlen(lynx_planners[k].name) == len &&
			    !strncmp(lynx_planners[k].name, name, len))
				chosen[k] = known = true;
		}
		if (!known)
			return lynx_usage_error("sim", "--planners: unknown planner '%.*s'",
			                        (int)len, name);
		name += len + (name[len] == ',');
	}
	return 0;
}

/* One planner on one job: its plan, the checker's replay of it, and the derived numbers. */
struct result {
	struct lynx_plan plan;
	struct lynx_checker_result check;
	bool checked; /* the checker replayed it and agrees with the prediction */
	double step_s, speedup, mfu;
	const uint64_t *peaks;
	bool fits;
};

/*
 * Progress of a searching planner (opt, checkmate: seconds to minutes) on stderr: a line
 * once it has run a second, then every PROGRESS_EVERY_S, so that a long search is not
 * mistaken for a hang. A thread that waits on a condition the search's end signals.
 */
#define PROGRESS_EVERY_S 10
struct progress {
	pthread_mutex_t lock;
	pthread_cond_t done_cond;
	bool done;
	const char *model, *planner;
	double limit_s; /* the search's time limit; 0: the planner's default */
	struct timespec start;
};

static void *progress_main(void *arg)
{
	struct progress *pr = arg;
	long waited = 0;

	pthread_mutex_lock(&pr->lock);
	for (long next = 1; !pr->done; next = waited + PROGRESS_EVERY_S) {
		struct timespec at = pr->start;

		at.tv_sec += next;
		while (!pr->done &&
		       pthread_cond_timedwait(&pr->done_cond, &pr->lock, &at) != ETIMEDOUT)
			;
		if (pr->done)
			break;
		waited = next;
		if (pr->limit_s > 0)
			fprintf(stderr, "lynx sim: %s: %s searching, %ld s of at most %.0f s\n",
			        pr->model, pr->planner, waited, pr->limit_s);
		else
			fprintf(stderr, "lynx sim: %s: %s searching, %ld s\n", pr->model,
			        pr->planner, waited);
	}
	pthread_mutex_unlock(&pr->lock);
	return NULL;
}

/* Runs planner pl on p, reporting progress on stderr when it searches. */
static int run_one(const struct lynx_planner *pl, const struct lynx_problem *p, const char *model,
                   struct lynx_plan *plan, char *why, size_t len)
{
	struct progress pr = {.model = model, .planner = pl->name, .limit_s = p->search_seconds};
	pthread_condattr_t attr;
	pthread_t thread;
	bool ticking;
	int err;

	if (!pl->searches)
		return lynx_planner_run(pl, p, plan, why, len);
	pthread_mutex_init(&pr.lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&pr.done_cond, &attr);
	pthread_condattr_destroy(&attr);
	clock_gettime(CLOCK_MONOTONIC, &pr.start);
	/* Without the thread the search runs all the same, silently. */
	ticking = !pthread_create(&thread, NULL, progress_main, &pr);
	err = lynx_planner_run(pl, p, plan, why, len);
	pthread_mutex_lock(&pr.lock);
	pr.done = true;
	pthread_cond_signal(&pr.done_cond);
	pthread_mutex_unlock(&pr.lock);
	if (ticking)
		pthread_join(thread, NULL);
	pthread_cond_destroy(&pr.done_cond);
	pthread_mutex_destroy(&pr.lock);
	return err;
}

/* Every planner on problem p. Returns LYNX_EXIT_OK or LYNX_EXIT_FAIL (after a message). */
static int run_planners(const struct lynx_problem *p, const char *model, struct result *r)
{
	char why[256];

	for (int k = 0; k < LYNX_PLANNER_COUNT; k++) {
		struct result *x = &r[k];
		if (!chosen[k])
			continue;
		int err = run_one(&lynx_planners[k], p, model, &x->plan, why, sizeof(why));

		if (err) {
			fprintf(stderr, "lynx sim: %s: planner %s failed: %s\n", model,
			        lynx_planners[k].name, err == -ENOMEM ? "out of memory" : why);
			for (int i = 0; i < k; i++) {
				lynx_plan_free(&r[i].plan);
				lynx_checker_free(&r[i].check);
			}
			return LYNX_EXIT_FAIL;
		}
		x->step_s = x->plan.step_time_s;
		x->fits = x->plan.fits;
		err = lynx_checker_replay(p, &x->plan, &x->check, why, sizeof(why));
		if (err) {
			fprintf(stderr,
			        "lynx sim: %s: warning: the checker refused the %s plan: %s\n",
			        model, x->plan.planner, why);
			continue;
		}
		x->checked = fabs(x->check.step_time_s - x->step_s) <= 1e-6 * x->step_s;
		for (uint32_t s = 0; s < p->n_stages; s++)
			x->checked = x->checked &&
			             x->check.peak_bytes[s] == x->plan.stages[s].peak_bytes;
		if (!x->checked)
			fprintf(stderr,
			        "lynx sim: %s: warning: planner %s predicts %.6g s, the checker "
			        "finds "
			        "%.6g s (or different peaks); printing the checker's\n",
			        model, x->plan.planner, x->step_s, x->check.step_time_s);
		x->step_s = x->check.step_time_s;
		x->fits = x->check.fits;
	}
	for (int k = 0; k < LYNX_PLANNER_COUNT; k++) {
		if (!chosen[k])
			continue;
		struct result *x = &r[k];

		x->speedup = r[LYNX_PLANNER_FULL].step_s / x->step_s;
		x->mfu = p->model_flops / (x->step_s * p->gpus * p->peak_flops);
		x->peaks = x->check.peak_bytes;
		if (!x->peaks) {
			/* The checker refused it: its prediction is all there is. */
			x->check.peak_bytes = calloc(p->n_stages, sizeof(uint64_t));
			for (uint32_t s = 0; x->check.peak_bytes && s < p->n_stages; s++)
				x->check.peak_bytes[s] = x->plan.stages[s].peak_bytes;
			x->peaks = x->check.peak_bytes;
			if (!x->peaks)
				return LYNX_EXIT_FAIL;
		}
	}
	return LYNX_EXIT_OK;
}

static double gib(uint64_t bytes)
{
	return bytes / 1073741824.0;
}

static void print_search(double s)
{
	if (s < 1e-3)
		printf("%6.0f us", s * 1e6);
	else if (s < 1)
		printf("%6.1f ms", s * 1e3);
	else
		printf("%6.2f s ", s);
}

static void print_table(const struct lynx_problem *p, const char *model, const struct result *r)
{
	const struct lynx_model_desc *m = &p->model;
	uint64_t lo = UINT64_MAX, hi = 0;

	for (uint32_t s = 0; s < p->n_stages; s++) {
		lo = p->stages[s].static_bytes < lo ? p->stages[s].static_bytes : lo;
		hi = p->stages[s].static_bytes > hi ? p->stages[s].static_bytes : hi;
	}
	printf("%s on %s: t=%u p=%u d=%u", model, p->cluster->name, m->tp, m->pp, m->dp);
	if (lynx_model_cp(m) > 1)
		printf(" c=%u", lynx_model_cp(m));
	if (lynx_model_vp(m) > 1)
		printf(" v=%u", lynx_model_vp(m));
	printf("%s, micro-batch %u, %u micro-batch%s (global batch %u); budget %.2f GiB, static "
	       "%.2f",
	       m->sp ? " +SP" : "", m->micro_batch, p->micro_batches,
	       p->micro_batches == 1 ? "" : "es", m->global_batch, gib(p->budget_bytes), gib(lo));
	if (hi != lo)
		printf("-%.2f", gib(hi));
	printf(" GiB per GPU; rebuilds under communication %.0f%% slower, it %.0f%%\n",
	       100 * (p->interference.compute - 1), 100 * (p->interference.comm - 1));
	printf("%-10s %9s %8s %6s %4s %9s  %s\n", "planner", "step (s)", "vs full", "MFU", "fits",
	       "search", "peak per stage (GiB)");
	for (int k = 0; k < LYNX_PLANNER_COUNT; k++) {
		if (!chosen[k])
			continue;
		const struct result *x = &r[k];

		printf("%-10s %9.4f %7.2fx %5.1f%% %4s ", x->plan.planner, x->step_s, x->speedup,
		       100 * x->mfu, x->fits ? "yes" : "OOM");
		print_search(x->plan.search_time_s);
		printf(" ");
		for (uint32_t s = 0; s < p->n_stages; s++)
			printf(" %.2f", gib(x->peaks[s]));
		if (!isnan(x->plan.gap))
			printf("  gap %.2f%%", 100 * x->plan.gap);
		if (x->plan.note[0])
			printf("  (%s)", x->plan.note);
		printf("%s\n", x->checked ? "" : "  (unchecked)");
	}
}

static void print_csv(const struct lynx_problem *p, const char *model, const struct result *r)
{
	const struct lynx_model_desc *m = &p->model;

	for (int k = 0; k < LYNX_PLANNER_COUNT; k++) {
		if (!chosen[k])
			continue;
		const struct result *x = &r[k];
		uint64_t max = 0;

		for (uint32_t s = 0; s < p->n_stages; s++)
			max = x->peaks[s] > max ? x->peaks[s] : max;
		printf("%s,%s,%u,%u,%u,%d,%u,%u,%llu,%s,%.9g,%.6g,%.6g,%s,%.6g,%s,%llu,", model,
		       p->cluster->name, m->tp, m->pp, m->dp, m->sp, m->micro_batch,
		       p->micro_batches, (unsigned long long)p->budget_bytes, x->plan.planner,
		       x->step_s, x->speedup, x->mfu, x->fits ? "true" : "false",
		       x->plan.search_time_s, x->checked ? "true" : "false",
		       (unsigned long long)max);
		for (uint32_t s = 0; s < p->n_stages; s++)
			printf("%s%llu", s ? ";" : "", (unsigned long long)x->peaks[s]);
		printf("\n");
	}
}

static const char csv_header[] = "model,cluster,tp,pp,dp,sp,micro_batch,microbatches,budget_bytes,"
                                 "planner,step_time_s,speedup_vs_full,mfu,fits,search_time_s,"
                                 "checked,max_peak_bytes,peak_bytes";

/* The job and its planners as a JSON object, or NULL when out of memory. */
static cJSON *job_json(const struct lynx_problem *p, const char *model, const struct result *r)
{
	const struct lynx_model_desc *m = &p->model;
	cJSON *o = cJSON_CreateObject(), *planners, *stat;
	bool ok = o != NULL;

	ok = ok && cJSON_AddStringToObject(o, "model", model);
	ok = ok && cJSON_AddStringToObject(o, "cluster", p->cluster->name);
	ok = ok && cJSON_AddNumberToObject(o, "tp", m->tp);
	ok = ok && cJSON_AddNumberToObject(o, "pp", m->pp);
	ok = ok && cJSON_AddNumberToObject(o, "dp", m->dp);
	ok = ok && cJSON_AddNumberToObject(o, "cp", lynx_model_cp(m));
	ok = ok && cJSON_AddNumberToObject(o, "vp", lynx_model_vp(m));
	ok = ok && cJSON_AddBoolToObject(o, "sp", m->sp);
	ok = ok && cJSON_AddNumberToObject(o, "micro_batch", m->micro_batch);
	ok = ok && cJSON_AddNumberToObject(o, "microbatches", p->micro_batches);
	ok = ok && cJSON_AddNumberToObject(o, "global_batch", m->global_batch);
	ok = ok && cJSON_AddNumberToObject(o, "budget_bytes", (double)p->budget_bytes);
	ok = ok && cJSON_AddNumberToObject(o, "contention", p->interference.compute - 1);
	ok = ok && cJSON_AddNumberToObject(o, "contention_comm", p->interference.comm - 1);
	stat = ok ? cJSON_AddArrayToObject(o, "static_bytes") : NULL;
	for (uint32_t s = 0; stat && s < p->n_stages; s++)
		cJSON_AddItemToArray(stat, cJSON_CreateNumber((double)p->stages[s].static_bytes));
	planners = stat ? cJSON_AddArrayToObject(o, "planners") : NULL;
	ok = planners != NULL;
	for (int k = 0; ok && k < LYNX_PLANNER_COUNT; k++) {
		if (!chosen[k])
			continue;
		const struct result *x = &r[k];
		cJSON *e = cJSON_CreateObject(), *peaks;

		ok = e != NULL;
		if (ok)
			cJSON_AddItemToArray(planners, e);
		ok = ok && cJSON_AddStringToObject(e, "planner", x->plan.planner);
		ok = ok && cJSON_AddNumberToObject(e, "step_time_s", x->step_s);
		ok = ok && cJSON_AddNumberToObject(e, "speedup_vs_full", x->speedup);
		peaks = ok ? cJSON_AddArrayToObject(e, "peak_bytes") : NULL;
		for (uint32_t s = 0; peaks && s < p->n_stages; s++)
			cJSON_AddItemToArray(peaks, cJSON_CreateNumber((double)x->peaks[s]));
		ok = peaks != NULL;
		ok = ok && cJSON_AddBoolToObject(e, "fits", x->fits);
		ok = ok && cJSON_AddNumberToObject(e, "mfu", x->mfu);
		ok = ok && cJSON_AddNumberToObject(e, "search_time_s", x->plan.search_time_s);
		if (ok && !isnan(x->plan.gap))
			ok = cJSON_AddNumberToObject(e, "gap", x->plan.gap) != NULL;
		if (ok && x->plan.note[0])
			ok = cJSON_AddStringToObject(e, "note", x->plan.note) != NULL;
		ok = ok && cJSON_AddBoolToObject(e, "checked", x->checked);
	}
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* Whether some planner's plan fits every stage's budget. */
static bool any_fits(const struct result *r)
{
	for (int k = 0; k < LYNX_PLANNER_COUNT; k++)
		if (chosen[k] && r[k].fits)
			return true;
	return false;
}

/* A layout `lynx sim --sweep` may choose: t on one node, p stages. */
struct layout {
	uint32_t tp, pp;
};

static int by_gpus_then_stages(const void *x, const void *y)
{
	const struct layout *a = x, *b = y;
	uint64_t ga = (uint64_t)a->tp * a->pp, gb = (uint64_t)b->tp * b->pp;

	if (ga != gb)
		return ga < gb ? -1 : 1;
	return (a->pp > b->pp) - (a->pp < b->pp);
}

/*
 * --sweep without --tp and --pp: the layout with the fewest GPUs in which Megatron's full
 * recomputation, the leanest of the baselines, fits the budget: t a power of two up to a
 * node's GPUs, p a divisor of L; of as many GPUs, fewer stages. Sets job->tp and job->pp and
 * returns 0, or -ENOSPC with why saying what the largest layout lacks; -ENOMEM.
 */
static int pick_layout(const struct lynx_model_preset *preset, const struct lynx_cluster *c,
                       const struct lynx_problem_options *opt, struct lynx_job_args *job, char *why,
                       size_t len)
{
	struct layout *all = calloc(32 * (size_t)preset->layers, sizeof(*all));
	size_t n = 0;
	int err = -ENOSPC;

	if (!all)
		return -ENOMEM;
	for (uint32_t t = 1; t <= c->gpus_per_node; t *= 2)
		for (uint32_t p = 1; p <= preset->layers; p++)
			if (preset->layers % p == 0)
				all[n++] = (struct layout){t, p};
	qsort(all, n, sizeof(*all), by_gpus_then_stages);
	snprintf(why, len, "no layout of up to %u-way TP fits", c->gpus_per_node);
	for (size_t i = 0; i < n && err == -ENOSPC; i++) {
		struct lynx_model_desc m;
		struct lynx_problem p;
		struct lynx_plan plan;
		char name[64], reason[256];

		job->tp = all[i].tp;
		job->pp = all[i].pp;
		if (lynx_jobargs_model(job, preset, &m, name, sizeof(name), reason,
		                       sizeof(reason)) ||
		    lynx_model_validate(&m, reason, sizeof(reason)))
			continue;
		if (lynx_problem_from_model(&m, c, opt, &p, reason, sizeof(reason))) {
			snprintf(why, len, "t=%u p=%u: %s", all[i].tp, all[i].pp, reason);
			continue;
		}
		if (!lynx_planner_run(&lynx_planners[LYNX_PLANNER_FULL], &p, &plan, reason,
		                      sizeof(reason))) {
			if (plan.fits)
				err = 0;
			else
				snprintf(why, len,
				         "t=%u p=%u: even full recomputation needs more than the "
				         "budget",
				         all[i].tp, all[i].pp);
			lynx_plan_free(&plan);
		}
		lynx_problem_free(&p);
	}
	free(all);
	return err;
}

/*
 * Simulates the job of preset (or of a's --hf-config) on cluster c with a's settings; prints
 * its table or CSV rows, or adds its JSON object to jobs. Returns an exit status,
 * LYNX_EXIT_USAGE after a message for a job that cannot run; *fits says whether some
 * planner's plan fits the budget (after a message when none does).
 */
static int sim_job(const struct sim_args *a, const struct lynx_model_preset *preset,
                   const struct lynx_cluster *c, cJSON *jobs, bool *fits)
{
	struct lynx_problem_options opt = {.search_seconds = a->job.time_limit,
	                                   .budget_bytes = a->job.budget,
	                                   .distributed_optimizer = a->job.distributed_optimizer};
	struct lynx_job_args job = a->job;
	struct result r[LYNX_PLANNER_COUNT];
	struct lynx_model_desc m;
	struct lynx_problem p;
	char why[512], name[64] = "";
	int err, rc;

	memset(r, 0, sizeof(r));
	if (lynx_jobargs_interference(&a->job, c->interference, &opt.interference, why,
	                              sizeof(why)) ||
	    lynx_jobargs_offload_share(&a->job, &opt, why, sizeof(why)))
		return lynx_usage_error("sim", "%s", why);
	if (a->sweep && !a->job.tp && !a->job.pp) {
		err = pick_layout(preset, c, &opt, &job, why, sizeof(why));
		if (err) {
			fprintf(stderr, "lynx sim: %s: %s\n", preset->name,
			        err == -ENOMEM ? "out of memory" : why);
			return err == -ENOMEM ? LYNX_EXIT_FAIL : LYNX_EXIT_USAGE;
		}
		fprintf(stderr,
		        "lynx sim: %s: --sweep chose t=%u p=%u, the fewest GPUs where full "
		        "recomputation fits\n",
		        preset->name, job.tp, job.pp);
	}
	if (lynx_jobargs_model(&job, preset, &m, name, sizeof(name), why, sizeof(why))) {
		fprintf(stderr, "lynx sim: %s%s%s\n", name, name[0] ? ": " : "", why);
		return LYNX_EXIT_USAGE;
	}
	err = lynx_problem_from_model(&m, c, &opt, &p, why, sizeof(why));
	if (err) {
		fprintf(stderr, "lynx sim: %s: %s\n", name, err == -ENOMEM ? "out of memory" : why);
		return err == -ENOMEM ? LYNX_EXIT_FAIL : LYNX_EXIT_USAGE;
	}
	if (m.tp > c->gpus_per_node)
		fprintf(stderr,
		        "lynx sim: %s: warning: --tp %u spans %u nodes of %u GPUs: every layer's "
		        "tensor-parallel collectives cross the inter-node links\n",
		        name, m.tp, (m.tp + c->gpus_per_node - 1) / c->gpus_per_node,
		        c->gpus_per_node);
	rc = run_planners(&p, name, r);
	if (rc == LYNX_EXIT_OK) {
		if (a->json) {
			cJSON *entry = job_json(&p, name, r);

			if (entry)
				cJSON_AddItemToArray(jobs, entry);
			else
				rc = LYNX_EXIT_FAIL;
		} else if (a->csv) {
			print_csv(&p, name, r);
		} else {
			print_table(&p, name, r);
		}
		*fits = any_fits(r);
		if (rc == LYNX_EXIT_OK && !*fits)
			fprintf(stderr,
			        "lynx sim: %s: no planner fits the budget of %.2f GiB per GPU: "
			        "raise "
			        "--budget, or spread the model over more GPUs (--tp, --pp)\n",
			        name, gib(p.budget_bytes));
		for (int k = 0; k < LYNX_PLANNER_COUNT; k++) {
			lynx_plan_free(&r[k].plan);
			lynx_checker_free(&r[k].check);
		}
	}
	lynx_problem_free(&p);
	return rc;
}

int lynx_sim_main(int argc, char **argv)
{
	struct sim_args a = {.job = LYNX_JOB_ARGS_INIT};
	const struct lynx_cluster *c;
	const struct lynx_model_preset *gpt = NULL;
	cJSON *root = NULL, *jobs = NULL;
	int rc = parse_args(argc, argv, &a), ran = 0, fitted = 0, worst = LYNX_EXIT_OK;
	char names[512];

	if (rc == 1)
		return lynx_command_help("sim");
	if (rc)
		return rc;
	c = lynx_preset_find_cluster(a.job.cluster);
	if (!c) {
		lynx_jobargs_list_names(names, sizeof(names), false);
		return lynx_usage_error("sim", "unknown cluster '%s' (known: %s)", a.job.cluster,
		                        names);
	}
	if (a.job.model && !(gpt = lynx_preset_find_model(a.job.model))) {
		lynx_jobargs_list_names(names, sizeof(names), true);
		return lynx_usage_error("sim", "unknown model '%s' (known: %s)", a.job.model,
		                        names);
	}
	if (a.json) {
		root = cJSON_CreateObject();
		jobs = root ? cJSON_CreateArray() : NULL;
		if (!jobs) {
			cJSON_Delete(root);
			return LYNX_EXIT_FAIL;
		}
	}
	if (a.csv)
		printf("%s\n", csv_header);
	for (int i = 0; i < LYNX_MODEL_PRESET_COUNT; i++) {
		const struct lynx_model_preset *g = gpt ? gpt : &lynx_preset_models[i];
		bool one = gpt || a.job.hf_config, fits = false;

		if (!one && !g->in_sweep)
			continue;
		if (!a.json && !a.csv && ran)
			printf("\n");
		rc = sim_job(&a, g, c, jobs, &fits);
		ran += rc == LYNX_EXIT_OK;
		fitted += rc == LYNX_EXIT_OK && fits;
		worst = rc > worst ? rc : worst;
		if (one)
			break;
	}
	/* A sweep reports the presets it cannot run and goes on; it fails if none ran. */
	if (a.sweep && ran)
		worst = worst == LYNX_EXIT_USAGE ? LYNX_EXIT_OK : worst;
	if (a.json && worst == LYNX_EXIT_OK) {
		char *text;

		if (a.sweep) {
			cJSON_AddStringToObject(root, "cluster", c->name);
			cJSON_AddItemToObject(root, "models", jobs);
		} else {
			cJSON *only = cJSON_DetachItemFromArray(jobs, 0);

			cJSON_Delete(root);
			cJSON_Delete(jobs);
			root = only;
		}
		text = root ? cJSON_Print(root) : NULL;
		if (text)
			printf("%s\n", text);
		else
			worst = LYNX_EXIT_FAIL;
		free(text);
		jobs = NULL;
	}
	cJSON_Delete(jobs);
	cJSON_Delete(root);
	/* Every job ran, and none has a plan that fits: that is a failure too. */
	return worst == LYNX_EXIT_OK && !fitted ? LYNX_EXIT_FAIL : worst;
}
