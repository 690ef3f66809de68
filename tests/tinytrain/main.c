/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain's launcher, like torchrun: forks the ranks, collects their JSON lines and
 * prints them ordered by step, then rank, so that identical runs print identical bytes.
 */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels.h"
#include "simgpu.h"
#include "tinytrain.h"

struct line {
	int step, rank;
	char *text;
};

static int by_step_then_rank(const void *a, const void *b)
{
	const struct line *x = a, *y = b;

	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Reads every rank's lines (each starts {"step":S,"rank":R) and prints them in order. */
static int print_ordered(FILE **outputs, int ranks)
{
	struct line *lines = NULL;
	size_t count = 0, cap = 0;
	char *buf = NULL;
	size_t len = 0;

	for (int r = 0; r < ranks; r++) {
		rewind(outputs[r]);
		while (getline(&buf, &len, outputs[r]) > 0) {
			struct line l = {0};
			if (sscanf(buf, "{\"step\":%d,\"rank\":%d", &l.step, &l.rank) != 2)
				continue;
			if (count == cap) {
				cap = cap ? 2 * cap : 64;
				lines = realloc(lines, cap * sizeof(*lines));
				if (!lines)
					return 1;
			}
			l.text = strdup(buf);
			lines[count++] = l;
		}
	}
	qsort(lines, count, sizeof(*lines), by_step_then_rank);
	for (size_t i = 0; i < count; i++) {
		fputs(lines[i].text, stdout);
		free(lines[i].text);
	}
	free(lines);
	free(buf);
	return 0;
}

/*
 * Bytes of the virtual model's activation per real byte: an s·b·h tensor in bf16 against the
 * real one in float. With --virtual-copies, offloading copies (to page-locked memory) are
 * costed at this scale, as kernels and NCCL calls are costed at the virtual model's size. The
 * a·s²·b attention tensors scale by more (the sequence twice); the s·b·h ones are most of a layer's
 * bytes.
 */
static double activation_scale(const struct tt_config *cfg)
{
	double virt = 2.0 * cfg->virt.seq * cfg->virt.batch * cfg->virt.hidden;
	double real = 4.0 * cfg->real.seq * cfg->real.batch * cfg->real.hidden;

	return virt / real;
}

int main(int argc, char **argv)
{
	struct tt_config cfg;
	int rc = tt_parse_args(argc, argv, &cfg);
	ncclUniqueId id;
	int failed = 0;

	if (rc)
		return rc == 1 ? 0 : rc;
	if (tt_kernels_register()) {
		fprintf(stderr, "tinytrain: cannot register kernels (is this simgpu?)\n");
		return 1;
	}
	if (cfg.virtual_copies)
		simgpu_host_copy_scale(activation_scale(&cfg));
	if (ncclGetUniqueId(&id) != ncclSuccess) {
		fprintf(stderr, "tinytrain: ncclGetUniqueId failed\n");
		return 1;
	}
	FILE *outputs[cfg.nproc];
	pid_t pids[cfg.nproc];
	fflush(stdout);
	for (int r = 0; r < cfg.nproc; r++) {
		outputs[r] = tmpfile();
		if (!outputs[r]) {
			perror("tinytrain: tmpfile");
			return 1;
		}
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("tinytrain: fork");
			return 1;
		}
		/* exit, not _exit: a rank ends like a torchrun rank, running its exit
		 * handlers (those of simgpu and of any preloaded tool). */
		if (pids[r] == 0)
			exit(tt_rank_run(&cfg, r, &id, fileno(outputs[r])));
	}
	for (int r = 0; r < cfg.nproc; r++) {
		int status;
		waitpid(pids[r], &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "tinytrain: rank %d failed\n", r);
			failed = 1;
		}
	}
	if (failed)
		return 1;
	return print_ordered(outputs, cfg.nproc);
}
