/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA program that waits to be signalled, for the shim's signal tests:
 *   probe_signal default   uses CUDA, says "ready", waits (SIGTERM/SIGINT as by default)
 *   probe_signal handler   installs its own SIGTERM handler (exit 3) first, then the same
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_term(int sig)
{
	_exit(3);
}

int main(int argc, char **argv)
{
	void *p;

	if (argc != 2 || (strcmp(argv[1], "default") && strcmp(argv[1], "handler"))) {
		fprintf(stderr, "usage: probe_signal default|handler\n");
		return 2;
	}
	if (!strcmp(argv[1], "handler"))
		signal(SIGTERM, on_term);
	for (int i = 0; i < 5; i++) {
		if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
			return 1;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
