/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx plan`: builds the planning problem of a GPT job from presets, optionally chooses its
 * pipeline split (policy/partition.h), runs one planner, replays the plan in the independent
 * checker, writes the plan's JSON and prints a summary: per stage its layers, what each group
 * does, its peak memory and when it ends.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "jobargs.h"
#include "lynx.h"
#include "partition.h"
#include "plan.h"
#include "planner.h"
#include "presets.h"
#include "problem.h"

struct plan_args {
	struct lynx_job_args job;
	const char *planner, *out;
	bool partition;
};

/* The command line, declared once: the parser and `lynx help plan` read this table. */
static const struct lynx_option options[] = {
        LYNX_OPTION(struct plan_args, "--model", "NAME", NAME, job.model, "GPT preset (required)"),
        LYNX_JOB_OPTIONS(struct plan_args, job),
        LYNX_OPTION(struct plan_args, "--planner", "NAME", NAME, planner,
                    "the planner (default heu)"),
        LYNX_OPTION(struct plan_args, "--out", "FILE", NAME, out,
                    "where the plan's JSON goes (default plan.json)"),
        LYNX_OPTION(struct plan_args, "--partition", NULL, FLAG, partition,
                    "choose the layers of each pipeline stage first (DP over splits)"),
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
	        "--pipeline-model-parallel-layout. Planning from a profile (lynx plan PROFILE) is "
	        "not\navailable yet.\n");
}

static double gib(uint64_t bytes)
{
	return bytes / 1073741824.0;
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

/* Per stage: layers, actions per group, peak and end time. */
static void print_summary(const struct lynx_problem *p, const char *model,
                          const struct lynx_plan *plan, const struct lynx_checker_result *r)
{
	const struct lynx_model_desc *m = &p->model;

	printf("%s on %s: t=%u p=%u d=%u%s, %u micro-batches of %u; budget %.2f GiB; planner %s\n",
	       model, p->cluster ? p->cluster->name : "?", m->tp, m->pp, m->dp, m->sp ? " +SP" : "",
	       p->micro_batches, m->micro_batch, gib(p->budget_bytes), plan->planner);
	printf("step %.4f s (checker %.4f s), %s, search %.1f ms%s%s\n", plan->step_time_s,
	       r ? r->step_time_s : NAN,
	       (r ? r->fits : plan->fits) ? "fits" : "DOES NOT FIT the budget",
	       plan->search_time_s * 1e3, plan->note[0] ? "; " : "", plan->note);
	for (uint32_t s = 0; s < p->n_stages; s++) {
		const struct lynx_problem_stage *st = &p->stages[s];

		printf("\nstage %u: layers %u-%u (%u)%s%s, peak %.2f GiB (static %.2f)", s,
		       st->first_layer, st->first_layer + st->layers - 1, st->layers,
		       st->embedding.present ? " +embedding" : "", st->head.present ? " +head" : "",
		       gib(r ? r->peak_bytes[s] : plan->stages[s].peak_bytes),
		       gib(st->static_bytes));
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
	FILE *f;
	int err;

	if (!text) {
		fprintf(stderr, "lynx plan: out of memory\n");
		return LYNX_EXIT_FAIL;
	}
	f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0 || fclose(f)) {
		fprintf(stderr, "lynx plan: cannot write %s: %s\n", path, strerror(errno));
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

/* Plans the job: partition (if asked), planner, checker, file, summary. */
static int plan_job(const struct plan_args *a, const struct lynx_model_desc *m,
                    const struct lynx_cluster *c, const struct lynx_planner *pl)
{
	struct lynx_problem_options opt = {.search_seconds = a->job.time_limit,
	                                   .budget_bytes = a->job.budget,
	                                   .distributed_optimizer = a->job.distributed_optimizer};
	struct lynx_partition pt = {0};
	struct lynx_checker_result r = {0};
	struct lynx_problem p;
	struct lynx_plan plan;
	bool checked;
	char why[256];
	int err, rc;

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
	err = lynx_planner_run(pl, &p, &plan, why, sizeof(why));
	if (err) {
		fprintf(stderr, "lynx plan: planner %s failed: %s\n", pl->name,
		        err == -ENOMEM ? "out of memory" : why);
		lynx_problem_free(&p);
		return LYNX_EXIT_FAIL;
	}
	checked = !lynx_checker_replay(&p, &plan, &r, why, sizeof(why));
	if (!checked)
		fprintf(stderr, "lynx plan: warning: the checker refused the plan: %s\n", why);
	print_summary(&p, a->job.model, &plan, checked ? &r : NULL);
	rc = write_plan(&p, &plan, a->out ? a->out : "plan.json");
	if (checked)
		lynx_checker_free(&r);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
	return rc;
}

int lynx_plan_main(int argc, char **argv)
{
	struct plan_args a = {.job = LYNX_JOB_ARGS_INIT};
	const char *profile = NULL;
	const struct lynx_cluster *c;
	const struct lynx_planner *pl;
	const struct lynx_gpt *gpt;
	struct lynx_model_desc m;
	char names[512], why[256];
	int rc = lynx_jobargs_parse("plan", options, N_OPTIONS, argc, argv, &a, &profile);

	if (rc == 1)
		return lynx_command_help("plan");
	if (rc)
		return rc;
	if (profile) {
		fprintf(stderr,
		        "lynx plan: planning from a profile (%s) is not available yet; describe "
		        "the "
		        "job with --model and --cluster\n",
		        profile);
		return LYNX_EXIT_USAGE;
	}
	if (!a.job.model)
		return lynx_usage_error("plan", "--model is required");
	if (!a.job.cluster)
		return lynx_usage_error("plan", "--cluster is required");
	c = lynx_preset_find_cluster(a.job.cluster);
	if (!c) {
		lynx_jobargs_list_names(names, sizeof(names), false);
		return lynx_usage_error("plan", "unknown cluster '%s' (known: %s)", a.job.cluster,
		                        names);
	}
	gpt = lynx_preset_find_gpt(a.job.model);
	if (!gpt) {
		lynx_jobargs_list_names(names, sizeof(names), true);
		return lynx_usage_error("plan", "unknown model '%s' (known: %s)", a.job.model,
		                        names);
	}
	pl = lynx_planner_find(a.planner ? a.planner : "heu");
	if (!pl) {
		size_t used = 0;

		for (int i = 0; i < LYNX_PLANNER_COUNT && used < sizeof(names); i++)
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
			                         i ? ", " : "", lynx_planners[i].name);
		return lynx_usage_error("plan", "unknown planner '%s' (known: %s)", a.planner,
		                        names);
	}
	if (!a.job.micro_batches)
		a.job.micro_batches = 4 * a.job.pp;
	if (lynx_jobargs_model(&a.job, gpt, &m, why, sizeof(why))) {
		fprintf(stderr, "lynx plan: %s\n", why);
		return LYNX_EXIT_USAGE;
	}
	return plan_job(&a, &m, c, pl);
}
