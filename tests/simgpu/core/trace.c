/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Optional Chrome trace of the virtual timeline (SIMGPU_TRACE): one slice per queued
 * operation, one track per stream. Slices are kept in memory until exit; 48 bytes each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct slice {
	const char *name;
	uint32_t track;
	enum simgpu_resource res;
	uint64_t start, end;
};

static struct slice *slices;
static size_t slice_count, slice_cap;

static const char *const resource_names[SIMGPU_RES_COUNT] = {
        [SIMGPU_RES_COMPUTE] = "compute", [SIMGPU_RES_H2D] = "h2d",   [SIMGPU_RES_D2H] = "d2h",
        [SIMGPU_RES_NET] = "net",         [SIMGPU_RES_NONE] = "host",
};

void trace_slice_locked(const char *name, uint32_t track, enum simgpu_resource res, uint64_t start,
                        uint64_t end)
{
	if (!simgpu.config.trace_path || !*simgpu.config.trace_path)
		return;
	if (slice_count == slice_cap) {
		size_t cap = slice_cap ? 2 * slice_cap : 1024;
		struct slice *grown = realloc(slices, cap * sizeof(*grown));
		if (!grown)
			return; /* a trace with a gap beats a failed run */
		slices = grown;
		slice_cap = cap;
	}
	slices[slice_count++] = (struct slice){name, track, res, start, end};
}

/* Names are string literals or registered kernel names: printed as they are, except
 * for the characters JSON needs escaped. */
static void put_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s >= 0x20)
			fputc(*s, f);
	}
	fputc('"', f);
}

void trace_write_at_exit(void)
{
	char path[4096];
	int pid = (int)getpid();
	FILE *f;

	if (!simgpu.config.trace_path || !*simgpu.config.trace_path)
		return;
	snprintf(path, sizeof(path), "%s.%d.json", simgpu.config.trace_path, pid);
	f = fopen(path, "w");
	if (!f) {
		simgpu_report("cannot write trace to %s", path);
		return;
	}
	fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
	fprintf(f,
	        "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":"
	        "\"simgpu pid %d\"}}",
	        pid, pid);
	for (size_t i = 0; i < slice_count; i++) {
		const struct slice *s = &slices[i];
		fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"name\":", pid, s->track);
		put_json_string(f, s->name);
		fprintf(f, ",\"cat\":\"%s\",\"ts\":%.3f,\"dur\":%.3f}", resource_names[s->res],
		        (double)s->start / 1000.0, (double)(s->end - s->start) / 1000.0);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
}
