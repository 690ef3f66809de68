/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the plan reader (policy/plan.c), run by `make fuzz`. Each input is
 * read against two fixed problems (the jobs of the seeds in tests/fuzz/corpus_plan: a_*.json
 * fit the first, b_*.json the second). Any input must be accepted or refused with a reason,
 * never crash (ASan and UBSan watch); an accepted plan must fit its problem and round-trip:
 * write -> read -> write gives the same text.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "problem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A GPT job as `lynx plan --model ... --layers L --microbatches M` describes it. */
struct job {
	const char *gpt, *cluster;
	uint32_t layers, tp, pp, dp, micro_batches;
	bool sp;
};

/*
 * First: tensor-parallel windows, two layers a stage, no data parallelism (the a_*.json
 * seeds, `--tp 8 --pp 2 --layers 4` on a100-nvlink). Second: three stages, sequence
 * parallelism, data parallelism (b_*.json, `--tp 2 --pp 3 --dp 2 --sp --layers 6` on
 * a100-pcie). Small layer counts keep the seeds short.
 */
static const struct job jobs[] = {
        {"gpt-1.3b", "a100-nvlink", 4, 8, 2, 1, 8, false},
        {"gpt-1.3b", "a100-pcie", 6, 2, 3, 2, 12, true},
};
#define N_JOBS (sizeof(jobs) / sizeof(jobs[0]))

static struct lynx_problem problems[N_JOBS];

/* Builds the problems once; a harness that cannot is broken, not the reader. */
static void build_problems(void)
{
	static bool built;
	char why[256] = "";

	if (built)
		return;
	for (size_t i = 0; i < N_JOBS; i++) {
		const struct job *j = &jobs[i];
		struct lynx_model_desc m;

		lynx_preset_fill_model(lynx_preset_find_model(j->gpt), &m);
		m.layers = j->layers;
		m.tp = j->tp;
		m.pp = j->pp;
		m.dp = j->dp;
		m.micro_batch = 1;
		m.global_batch = j->micro_batches * j->dp;
		m.sp = j->sp;
		if (lynx_problem_from_model(&m, lynx_preset_find_cluster(j->cluster), NULL,
		                            &problems[i], why, sizeof(why)))
			abort();
	}
	built = true;
}

/* Reads text against p and checks what any reader's answer must satisfy. */
static void check(const char *text, const struct lynx_problem *p)
{
	struct lynx_plan plan, again;
	char why[256] = "";
	char *a, *b;
	int err = lynx_plan_from_json(text, p, &plan, why, sizeof(why));

	if (err) {
		if (err != -EINVAL && err != -ENOMEM)
			abort();
		if (err == -EINVAL && !why[0])
			abort(); /* a refusal always says why */
		return;
	}
	if (lynx_plan_validate(&plan, p, why, sizeof(why)))
		abort(); /* accepted a plan that does not fit the problem */
	a = lynx_plan_to_json(&plan, p);
	lynx_plan_free(&plan);
	if (!a)
		return;
	if (lynx_plan_from_json(a, p, &again, why, sizeof(why)))
		abort(); /* the reader refuses the writer's own output */
	b = lynx_plan_to_json(&again, p);
	lynx_plan_free(&again);
	if (b && strcmp(a, b))
		abort(); /* not a fixed point */
	free(a);
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0; /* the reader takes a C string */
	build_problems();
	for (size_t i = 0; i < N_JOBS; i++)
		check(text, &problems[i]);
	free(text);
	return 0;
}
