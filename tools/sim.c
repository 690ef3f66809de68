/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx sim`: builds the planning problem of a GPT job from presets (policy/problem.c), runs
 * every planner of policy/planners.def on it, replays each plan in the independent checker,
 * and prints step time, speedup over full recomputation, MFU, peak memory per stage and
 * search time: a table, JSON or CSV. --sweep does it for every preset of the Lynx paper's
 * range.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                    "GPT preset (required unless --sweep)"),
        LYNX_JOB_OPTIONS(struct sim_args, job),
        LYNX_OPTION(struct sim_args, "--sweep", NULL, FLAG, sweep,
                    "every GPT preset of the Lynx paper's range instead of --model"),
        LYNX_OPTION(struct sim_args, "--json", NULL, FLAG, json, "print JSON"),
        LYNX_OPTION(struct sim_args, "--csv", NULL, FLAG, csv, "print CSV, one row per planner"),
        LYNX_OPTION(struct sim_args, "--planners", "LIST", NAME, planners,
                    "comma-separated planners to compare (default: all; full is always in)"),
};

#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

void lynx_sim_help(FILE *out)
{
	lynx_jobargs_help(out, options, N_OPTIONS);
	fprintf(out, "\nGPT presets (* in --sweep):");
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
	        "\nColumns: step time of one iteration (1F1B over all stages, gradient reduction "
	        "and\noptimizer step included); speedup over `full`; MFU, model FLOPs over the "
	        "step time and\nevery GPU's peak; whether every stage's peak fits the budget; the "
	        "planner's search\ntime; the peak memory of each pipeline stage. Every plan is "
	        "replayed by the\nindependent checker, whose numbers are printed; a disagreement "
	        "with the planner's own\nprediction is reported on stderr. The model behind the "
	        "numbers: policy/problem.h.\n");
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
	if (!a->sweep && !j->model)
		return lynx_usage_error("sim", "--model is required (or --sweep)");
	if (a->sweep && (j->layers || j->hidden || j->heads || j->seq || j->vocab))
		return lynx_usage_error("sim",
		                        "--sweep takes the presets' shapes: drop the overrides");
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

/* Every planner on problem p. Returns LYNX_EXIT_OK or LYNX_EXIT_FAIL (after a message). */
static int run_planners(const struct lynx_problem *p, const char *model, struct result *r)
{
	char why[256];

	for (int k = 0; k < LYNX_PLANNER_COUNT; k++) {
		struct result *x = &r[k];
		if (!chosen[k])
			continue;
		int err = lynx_planner_run(&lynx_planners[k], p, &x->plan, why, sizeof(why));

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
	printf("%s on %s: t=%u p=%u d=%u%s, micro-batch %u, %u micro-batch%s (global batch %u); "
	       "budget %.2f GiB, static %.2f",
	       model, p->cluster->name, m->tp, m->pp, m->dp, m->sp ? " +SP" : "", m->micro_batch,
	       p->micro_batches, p->micro_batches == 1 ? "" : "es", m->global_batch,
	       gib(p->budget_bytes), gib(lo));
	if (hi != lo)
		printf("-%.2f", gib(hi));
	printf(" GiB per GPU\n");
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
	ok = ok && cJSON_AddBoolToObject(o, "sp", m->sp);
	ok = ok && cJSON_AddNumberToObject(o, "micro_batch", m->micro_batch);
	ok = ok && cJSON_AddNumberToObject(o, "microbatches", p->micro_batches);
	ok = ok && cJSON_AddNumberToObject(o, "global_batch", m->global_batch);
	ok = ok && cJSON_AddNumberToObject(o, "budget_bytes", (double)p->budget_bytes);
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

/*
 * Simulates gpt on cluster c with a's settings; prints its table or CSV rows, or adds its JSON
 * object to jobs. Returns an exit status; LYNX_EXIT_USAGE after a message for a job that
 * cannot run.
 */
static int sim_job(const struct sim_args *a, const struct lynx_model_preset *gpt,
                   const struct lynx_cluster *c, cJSON *jobs)
{
	struct lynx_problem_options opt = {.search_seconds = a->job.time_limit,
	                                   .budget_bytes = a->job.budget,
	                                   .distributed_optimizer = a->job.distributed_optimizer};
	struct result r[LYNX_PLANNER_COUNT];
	struct lynx_model_desc m;
	struct lynx_problem p;
	char why[256];
	int err, rc;

	memset(r, 0, sizeof(r));
	if (lynx_jobargs_model(&a->job, gpt, &m, why, sizeof(why))) {
		fprintf(stderr, "lynx sim: %s: %s\n", gpt->name, why);
		return LYNX_EXIT_USAGE;
	}
	err = lynx_problem_from_model(&m, c, &opt, &p, why, sizeof(why));
	if (err) {
		fprintf(stderr, "lynx sim: %s: %s\n", gpt->name,
		        err == -ENOMEM ? "out of memory" : why);
		return err == -ENOMEM ? LYNX_EXIT_FAIL : LYNX_EXIT_USAGE;
	}
	rc = run_planners(&p, gpt->name, r);
	if (rc == LYNX_EXIT_OK) {
		if (a->json) {
			cJSON *job = job_json(&p, gpt->name, r);

			if (job)
				cJSON_AddItemToArray(jobs, job);
			else
				rc = LYNX_EXIT_FAIL;
		} else if (a->csv) {
			print_csv(&p, gpt->name, r);
		} else {
			print_table(&p, gpt->name, r);
		}
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
	int rc = parse_args(argc, argv, &a), ran = 0, worst = LYNX_EXIT_OK;
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
	if (!a.job.micro_batches)
		a.job.micro_batches = 4 * a.job.pp;
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

		if (!gpt && !g->in_sweep)
			continue;
		if (!a.json && !a.csv && ran)
			printf("\n");
		rc = sim_job(&a, g, c, jobs);
		ran += rc == LYNX_EXIT_OK;
		worst = rc > worst ? rc : worst;
		if (gpt)
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
	return worst;
}
