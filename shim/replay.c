/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel replay (replay.h): segments of recorded launches, relaunched with their pointer
 * words redirected, and verified bit for bit against the outputs they first produced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "recorder.h"
#include "replay.h"

/* A pointer is 8 bytes at an 8-byte-aligned offset of the parameter buffer, also inside a
 * by-value struct. */
#define WORD 8

/* One kernel of a segment, with what a replay needs precomputed. */
struct replay_kernel {
	CUfunction function;
	unsigned int grid[3], block[3], shared_mem;
	uint32_t param_count, param_bytes;
	unsigned char *params; /* the recorded bytes, never modified */
	uint32_t *offsets;     /* param_count entries */
	/* The offsets of the aligned words that lie wholly inside one parameter: the only places
	 * a pointer can be. Padding and words straddling two parameters are never rewritten. */
	uint32_t *words;
	uint32_t word_count;
};

struct lynx_replay_segment {
	struct lynx_replay_driver driver;
	struct replay_kernel *kernels;
	size_t count;
	const char *unsupported; /* why the first unreplayable kernel is so, or NULL */
	size_t unsupported_kernel;
	/* The working copy that a launch rewrites: cuLaunchKernel copies the parameters before
	 * it returns, so one buffer serves every kernel in turn. */
	unsigned char *work;
	void **args;
};

static const char *const verdict_names[LYNX_REPLAY_VERDICT_COUNT] = {
#define LYNX_REPLAY_VERDICT(name, text) #name,
        LYNX_REPLAY_VERDICTS
#undef LYNX_REPLAY_VERDICT
};

static const char *const verdict_texts[LYNX_REPLAY_VERDICT_COUNT] = {
#define LYNX_REPLAY_VERDICT(name, text) text,
        LYNX_REPLAY_VERDICTS
#undef LYNX_REPLAY_VERDICT
};

const char *lynx_replay_verdict_name(enum lynx_replay_verdict verdict)
{
	return (unsigned int)verdict < LYNX_REPLAY_VERDICT_COUNT ? verdict_names[verdict]
	                                                         : "UNKNOWN";
}

const char *lynx_replay_verdict_text(enum lynx_replay_verdict verdict)
{
	return (unsigned int)verdict < LYNX_REPLAY_VERDICT_COUNT ? verdict_texts[verdict]
	                                                         : "unknown verdict";
}

int lynx_replay_driver_resolve(struct lynx_replay_driver *driver, lynx_replay_lookup lookup,
                               void *arg)
{
	bool missing = false;

#define LYNX_REPLAY_DRIVER_CALL(field, symbol, version)                           \
	driver->field = (PFN_##symbol##_v##version)lookup(#symbol, version, arg); \
	missing |= !driver->field;
	LYNX_REPLAY_DRIVER_CALLS
#undef LYNX_REPLAY_DRIVER_CALL
	return missing ? -ENOENT : 0;
}

bool lynx_replay_kernel_from_event(const struct lynx_event *event, struct lynx_replay_kernel *out)
{
	if (event->kind != LYNX_EV_LAUNCH)
		return false;
	*out = (struct lynx_replay_kernel){
	        .function = (CUfunction)(uintptr_t)event->u.launch.function,
	        .grid = {event->u.launch.grid[0], event->u.launch.grid[1], event->u.launch.grid[2]},
	        .block = {event->u.launch.block[0], event->u.launch.block[1],
	                  event->u.launch.block[2]},
	        .shared_mem = event->u.launch.shared_mem,
	        .param_count = event->u.launch.param_count,
	        .param_bytes = event->u.launch.param_bytes,
	        .params = event->u.launch.param_bytes ? (const void *)(event + 1) : NULL,
	};
	return true;
}

/* ---- Segments -------------------------------------------------------------------------- */

/* Parameter i's layout, from cuFuncGetParamInfo, or cuKernelGetParamInfo once the handle
 * turned out to be a CUkernel (as the launch hook asks). */
static CUresult param_info(const struct lynx_replay_driver *driver, CUfunction function,
                           bool *is_kernel, uint32_t i, size_t *offset, size_t *size)
{
	CUresult res;

	if (!*is_kernel) {
		res = driver->func_get_param_info(function, i, offset, size);
		if (res != CUDA_ERROR_INVALID_HANDLE || i > 0)
			return res;
		*is_kernel = true;
	}
	return driver->kernel_get_param_info((CUkernel)function, i, offset, size);
}

/*
 * Fills the kernel's offsets and sizes from the driver and checks them against the record.
 * Returns NULL, or why the kernel cannot be replayed. The driver is asked for one parameter
 * more than recorded, so that a record that missed some is caught.
 */
static const char *query_layout(const struct lynx_replay_driver *driver,
                                const struct lynx_replay_kernel *recorded, uint32_t *offsets,
                                uint32_t *sizes)
{
	bool is_kernel = false;

	for (uint32_t i = 0; i <= recorded->param_count; i++) {
		size_t offset = 0, size = 0;
		CUresult res =
		        param_info(driver, recorded->function, &is_kernel, i, &offset, &size);

		if (i == recorded->param_count) {
			if (res == CUDA_ERROR_INVALID_VALUE)
				break;
			if (res != CUDA_SUCCESS)
				return "the driver gives no parameter layout for the function";
			return recorded->params ? "the function has more parameters than recorded"
			                        : "no recorded parameter bytes";
		}
		if (res != CUDA_SUCCESS)
			return i ? "the function has fewer parameters than recorded"
			         : "the driver gives no parameter layout for the function";
		if (offset + size > recorded->param_bytes)
			return "parameters beyond the recorded bytes";
		offsets[i] = (uint32_t)offset;
		sizes[i] = (uint32_t)size;
	}
	return NULL;
}

/* The aligned words inside each parameter (kernel->words). Returns 0 or -ENOMEM. */
static int find_words(struct replay_kernel *kernel, const uint32_t *sizes)
{
	uint32_t capacity = kernel->param_bytes / WORD;

	kernel->words = calloc(capacity ? capacity : 1, sizeof(*kernel->words));
	if (!kernel->words)
		return -ENOMEM;
	for (uint32_t i = 0; i < kernel->param_count; i++) {
		uint32_t end = kernel->offsets[i] + sizes[i];
		uint32_t word = (kernel->offsets[i] + WORD - 1) / WORD * WORD;

		/* Parameters never overlap, so no word is listed twice. */
		for (; word + WORD <= end && kernel->word_count < capacity; word += WORD)
			kernel->words[kernel->word_count++] = word;
	}
	return 0;
}

/* Copies one recorded kernel and its layout. Returns 0 or -ENOMEM; *why says if it cannot be
 * replayed (the kernel is kept, without layout). */
static int prepare_kernel(const struct lynx_replay_driver *driver,
                          const struct lynx_replay_kernel *recorded, struct replay_kernel *kernel,
                          const char **why)
{
	uint32_t *sizes;
	int err = -ENOMEM;

	*kernel = (struct replay_kernel){
	        .function = recorded->function,
	        .grid = {recorded->grid[0], recorded->grid[1], recorded->grid[2]},
	        .block = {recorded->block[0], recorded->block[1], recorded->block[2]},
	        .shared_mem = recorded->shared_mem,
	        .param_count = recorded->param_count,
	        .param_bytes = recorded->params ? recorded->param_bytes : 0,
	};
	kernel->params = malloc(kernel->param_bytes ? kernel->param_bytes : 1);
	if (!kernel->params)
		return -ENOMEM;
	if (kernel->param_bytes)
		memcpy(kernel->params, recorded->params, kernel->param_bytes);
	/* Checked before asking the driver, and before sizing arrays by the count: every
	 * parameter takes at least one byte. */
	if (recorded->param_count && !recorded->params) {
		*why = "no recorded parameter bytes";
		return 0;
	}
	if (recorded->param_count > recorded->param_bytes) {
		*why = "parameters beyond the recorded bytes";
		return 0;
	}
	sizes = calloc((size_t)recorded->param_count + 1, sizeof(*sizes));
	kernel->offsets = calloc((size_t)recorded->param_count + 1, sizeof(*kernel->offsets));
	if (!sizes || !kernel->offsets)
		goto out_free_sizes;
	*why = query_layout(driver, recorded, kernel->offsets, sizes);
	err = *why ? 0 : find_words(kernel, sizes);
out_free_sizes:
	free(sizes);
	return err;
}

void lynx_replay_segment_destroy(struct lynx_replay_segment *segment)
{
	if (!segment)
		return;
	for (size_t i = 0; segment->kernels && i < segment->count; i++) {
		free(segment->kernels[i].params);
		free(segment->kernels[i].offsets);
		free(segment->kernels[i].words);
	}
	free(segment->kernels);
	free(segment->work);
	free(segment->args);
	free(segment);
}

int lynx_replay_segment_create(const struct lynx_replay_driver *driver,
                               const struct lynx_replay_kernel *kernels, size_t count,
                               struct lynx_replay_segment **out)
{
	struct lynx_replay_segment *segment;
	uint32_t most_bytes = 0, most_params = 0;
	bool complete = driver != NULL;

#define LYNX_REPLAY_DRIVER_CALL(field, symbol, version) complete = complete && driver->field;
	LYNX_REPLAY_DRIVER_CALLS
#undef LYNX_REPLAY_DRIVER_CALL
	if (!complete || !kernels || !count || !out)
		return -EINVAL;
	segment = calloc(1, sizeof(*segment));
	if (!segment)
		return -ENOMEM;
	segment->driver = *driver;
	segment->kernels = calloc(count, sizeof(*segment->kernels));
	if (!segment->kernels)
		goto out_destroy;
	segment->count = count;
	for (size_t i = 0; i < count; i++) {
		const char *why = NULL;

		if (prepare_kernel(driver, &kernels[i], &segment->kernels[i], &why))
			goto out_destroy;
		if (why && !segment->unsupported) {
			segment->unsupported = why;
			segment->unsupported_kernel = i;
		}
		/* Only kernels that can be replayed are ever copied into the working buffers. */
		if (!why && segment->kernels[i].param_bytes > most_bytes)
			most_bytes = segment->kernels[i].param_bytes;
		if (!why && segment->kernels[i].param_count > most_params)
			most_params = segment->kernels[i].param_count;
	}
	segment->work = malloc(most_bytes ? most_bytes : 1);
	segment->args = calloc(most_params ? most_params : 1, sizeof(*segment->args));
	if (!segment->work || !segment->args)
		goto out_destroy;
	*out = segment;
	return 0;
out_destroy:
	lynx_replay_segment_destroy(segment);
	return -ENOMEM;
}

size_t lynx_replay_segment_kernels(const struct lynx_replay_segment *segment)
{
	return segment->count;
}

const char *lynx_replay_segment_unsupported(const struct lynx_replay_segment *segment,
                                            size_t *kernel)
{
	if (segment->unsupported && kernel)
		*kernel = segment->unsupported_kernel;
	return segment->unsupported;
}

/* ---- Replay ---------------------------------------------------------------------------- */

static bool redirects_valid(const struct lynx_replay_redirect *redirects, size_t count)
{
	if (count && !redirects)
		return false;
	for (size_t i = 0; i < count; i++)
		/* A range at 0 would capture every null pointer and small integer. */
		if (!redirects[i].from || !redirects[i].size ||
		    redirects[i].from + redirects[i].size < redirects[i].from)
			return false;
	return true;
}

/* Rewrites the words of the working copy that point into a from-range; returns how many.
 * O(words x redirects): tens of each per kernel. */
static uint32_t redirect_words(unsigned char *work, const struct replay_kernel *kernel,
                               const struct lynx_replay_redirect *redirects, size_t count)
{
	uint32_t rewritten = 0;

	for (uint32_t w = 0; w < kernel->word_count; w++) {
		uint64_t value;

		memcpy(&value, work + kernel->words[w], WORD);
		for (size_t r = 0; r < count; r++) {
			/* Unsigned: a value below `from` wraps to a huge distance. */
			uint64_t distance = value - redirects[r].from;

			if (distance < redirects[r].size) {
				value = redirects[r].to + distance;
				memcpy(work + kernel->words[w], &value, WORD);
				rewritten++;
				break;
			}
		}
	}
	return rewritten;
}

int lynx_replay_launch(struct lynx_replay_segment *segment, CUstream stream,
                       const struct lynx_replay_redirect *redirects, size_t redirect_count,
                       struct lynx_replay_stats *out)
{
	struct lynx_replay_stats stats = {0};
	int err = 0;

	if (!redirects_valid(redirects, redirect_count))
		err = -EINVAL;
	else if (segment->unsupported)
		err = -ENOTSUP;
	for (size_t k = 0; !err && k < segment->count; k++) {
		const struct replay_kernel *kernel = &segment->kernels[k];

		memcpy(segment->work, kernel->params, kernel->param_bytes);
		stats.rewritten += redirect_words(segment->work, kernel, redirects, redirect_count);
		for (uint32_t i = 0; i < kernel->param_count; i++)
			segment->args[i] = segment->work + kernel->offsets[i];
		stats.error = segment->driver.launch_kernel(
		        kernel->function, kernel->grid[0], kernel->grid[1], kernel->grid[2],
		        kernel->block[0], kernel->block[1], kernel->block[2], kernel->shared_mem,
		        stream, kernel->param_count ? segment->args : NULL, NULL);
		if (stats.error != CUDA_SUCCESS)
			err = -EIO;
		else
			stats.launched++;
	}
	if (out)
		*out = stats;
	return err;
}

/* ---- Verification ---------------------------------------------------------------------- */

/* What one verification holds, so that every exit path frees the same things. */
struct verification {
	struct lynx_replay_segment *segment;
	CUstream stream;
	const struct lynx_replay_range *outputs;
	size_t count;
	CUdeviceptr *scratch;
	bool owns_scratch;
	unsigned char *snapshot; /* every output, back to back */
	size_t *snapshot_at;     /* each output's offset in snapshot */
	unsigned char *readback; /* one output at a time */
	struct lynx_replay_redirect *redirects;
	struct lynx_replay_check *check;
};

static enum lynx_replay_verdict fail_driver(struct verification *v, const char *call,
                                            CUresult error)
{
	v->check->verdict = error == CUDA_ERROR_OUT_OF_MEMORY ? LYNX_REPLAY_NO_MEMORY
	                                                      : LYNX_REPLAY_DRIVER_FAILED;
	v->check->call = call;
	v->check->error = error;
	return v->check->verdict;
}

static bool ranges_overlap(CUdeviceptr a, size_t a_size, CUdeviceptr b, size_t b_size)
{
	return a < b + b_size && b < a + a_size;
}

/* NULL if the arguments make sense, or what is wrong with them. */
static const char *invalid_arguments(const struct lynx_replay_range *outputs, size_t count,
                                     const struct lynx_replay_redirect *temporaries,
                                     size_t temporary_count)
{
	if (!outputs || !count)
		return "no outputs";
	for (size_t i = 0; i < count; i++) {
		if (!outputs[i].ptr || !outputs[i].size ||
		    outputs[i].ptr + outputs[i].size < outputs[i].ptr)
			return "an output is empty, at 0, or wraps";
		/* O(n^2) in the outputs: a segment has tens. */
		for (size_t j = 0; j < i; j++)
			if (ranges_overlap(outputs[i].ptr, outputs[i].size, outputs[j].ptr,
			                   outputs[j].size))
				return "two outputs overlap";
	}
	if (!redirects_valid(temporaries, temporary_count))
		return "a temporary's redirect is empty, at 0, or wraps";
	return NULL;
}

/* Host buffers, the redirect list (outputs to scratch, then the temporaries) and, if the
 * caller gave none, scratch memory. */
static enum lynx_replay_verdict allocate(struct verification *v, const CUdeviceptr *scratch,
                                         const struct lynx_replay_redirect *temporaries,
                                         size_t temporary_count)
{
	size_t total = 0, largest = 0;

	v->snapshot_at = calloc(v->count, sizeof(*v->snapshot_at));
	v->scratch = calloc(v->count, sizeof(*v->scratch));
	v->redirects = calloc(v->count + temporary_count, sizeof(*v->redirects));
	if (!v->snapshot_at || !v->scratch || !v->redirects)
		return v->check->verdict = LYNX_REPLAY_NO_MEMORY;
	for (size_t i = 0; i < v->count; i++) {
		v->snapshot_at[i] = total;
		total += v->outputs[i].size;
		if (v->outputs[i].size > largest)
			largest = v->outputs[i].size;
	}
	v->snapshot = malloc(total);
	v->readback = malloc(largest);
	if (!v->snapshot || !v->readback)
		return v->check->verdict = LYNX_REPLAY_NO_MEMORY;
	v->owns_scratch = !scratch;
	for (size_t i = 0; i < v->count; i++) {
		if (scratch) {
			v->scratch[i] = scratch[i];
		} else {
			CUresult res =
			        v->segment->driver.mem_alloc(&v->scratch[i], v->outputs[i].size);
			if (res != CUDA_SUCCESS)
				return fail_driver(v, "cuMemAlloc", res);
		}
		v->redirects[i] = (struct lynx_replay_redirect){v->outputs[i].ptr,
		                                                v->outputs[i].size, v->scratch[i]};
	}
	if (temporary_count)
		memcpy(v->redirects + v->count, temporaries,
		       temporary_count * sizeof(*temporaries));
	return LYNX_REPLAY_REPRODUCES;
}

static void release(struct verification *v)
{
	for (size_t i = 0; v->owns_scratch && v->scratch && i < v->count; i++) {
		if (v->scratch[i] && v->segment->driver.mem_free(v->scratch[i]) != CUDA_SUCCESS)
			lynx_warn_once("replay: cuMemFree of verification scratch failed");
	}
	free(v->scratch);
	free(v->snapshot_at);
	free(v->snapshot);
	free(v->readback);
	free(v->redirects);
}

static CUresult synchronise(struct verification *v)
{
	return v->segment->driver.stream_synchronize(v->stream);
}

/* The originals, as they are now, into the snapshot. */
static CUresult take_snapshot(struct verification *v)
{
	for (size_t i = 0; i < v->count; i++) {
		CUresult res = v->segment->driver.memcpy_dtoh_async(v->snapshot + v->snapshot_at[i],
		                                                    v->outputs[i].ptr,
		                                                    v->outputs[i].size, v->stream);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return synchronise(v);
}

static void complement(unsigned char *dst, const unsigned char *src, size_t size)
{
	for (size_t i = 0; i < size; i++)
		dst[i] = (unsigned char)~src[i];
}

/* Each original and its scratch get the complement of the original. One host buffer serves
 * every output in turn, so each output's copies complete before the next fills it. */
static CUresult poison(struct verification *v)
{
	const struct lynx_replay_driver *driver = &v->segment->driver;

	for (size_t i = 0; i < v->count; i++) {
		size_t size = v->outputs[i].size;
		CUresult res;

		complement(v->readback, v->snapshot + v->snapshot_at[i], size);
		res = driver->memcpy_htod_async(v->outputs[i].ptr, v->readback, size, v->stream);
		if (res == CUDA_SUCCESS)
			res = driver->memcpy_htod_async(v->scratch[i], v->readback, size,
			                                v->stream);
		if (res == CUDA_SUCCESS)
			res = synchronise(v);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return CUDA_SUCCESS;
}

/* The snapshot back into the originals; stream-ordered after anything the replay queued. */
static CUresult restore(struct verification *v)
{
	for (size_t i = 0; i < v->count; i++) {
		CUresult res = v->segment->driver.memcpy_htod_async(v->outputs[i].ptr,
		                                                    v->snapshot + v->snapshot_at[i],
		                                                    v->outputs[i].size, v->stream);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return synchronise(v);
}

static CUresult read_back(struct verification *v, CUdeviceptr ptr, size_t size)
{
	CUresult res = v->segment->driver.memcpy_dtoh_async(v->readback, ptr, size, v->stream);

	return res == CUDA_SUCCESS ? synchronise(v) : res;
}

/* The first byte where readback differs from expected (complemented if asked), or SIZE_MAX. */
static size_t first_difference(const unsigned char *readback, const unsigned char *expected,
                               size_t size, bool complemented)
{
	unsigned char flip = complemented ? 0xff : 0;

	if (!complemented && !memcmp(readback, expected, size))
		return SIZE_MAX;
	for (size_t i = 0; i < size; i++)
		if (readback[i] != (unsigned char)(expected[i] ^ flip))
			return i;
	return SIZE_MAX;
}

/* Compares the originals with their poison: a replay that wrote one read a pointer from
 * device memory. */
static enum lynx_replay_verdict check_originals(struct verification *v)
{
	for (size_t i = 0; i < v->count; i++) {
		CUresult res = read_back(v, v->outputs[i].ptr, v->outputs[i].size);
		size_t at;

		if (res != CUDA_SUCCESS)
			return fail_driver(v, "cuMemcpyDtoHAsync", res);
		at = first_difference(v->readback, v->snapshot + v->snapshot_at[i],
		                      v->outputs[i].size, true);
		if (at != SIZE_MAX) {
			v->check->output = i;
			v->check->offset = at;
			return v->check->verdict = LYNX_REPLAY_WRITES_THROUGH_DEVICE_POINTER;
		}
	}
	return LYNX_REPLAY_REPRODUCES;
}

/* Compares each scratch with the snapshot of its original. */
static enum lynx_replay_verdict check_scratch(struct verification *v)
{
	for (size_t i = 0; i < v->count; i++) {
		CUresult res = read_back(v, v->scratch[i], v->outputs[i].size);
		size_t at;

		if (res != CUDA_SUCCESS)
			return fail_driver(v, "cuMemcpyDtoHAsync", res);
		at = first_difference(v->readback, v->snapshot + v->snapshot_at[i],
		                      v->outputs[i].size, false);
		if (at != SIZE_MAX) {
			v->check->output = i;
			v->check->offset = at;
			return v->check->verdict = LYNX_REPLAY_DIFFERS;
		}
	}
	return LYNX_REPLAY_REPRODUCES;
}

/* Replays into scratch and decides, with the originals poisoned; they are restored by the
 * caller whatever happens here. */
static enum lynx_replay_verdict replay_and_compare(struct verification *v, size_t temporary_count)
{
	struct lynx_replay_stats stats;
	CUresult res;

	if (lynx_replay_launch(v->segment, v->stream, v->redirects, v->count + temporary_count,
	                       &stats)) {
		v->check->verdict = LYNX_REPLAY_LAUNCH_FAILED;
		v->check->kernel = stats.launched;
		v->check->error = stats.error;
		return v->check->verdict;
	}
	v->check->rewritten = stats.rewritten;
	/* A kernel that faults shows up here, not at its launch. */
	res = synchronise(v);
	if (res != CUDA_SUCCESS)
		return fail_driver(v, "cuStreamSynchronize", res);
	return check_originals(v);
}

static void describe(struct lynx_replay_check *check, const struct lynx_replay_segment *segment,
                     const char *invalid)
{
	char *reason = check->reason;
	size_t room = sizeof(check->reason);

	switch (check->verdict) {
	case LYNX_REPLAY_REPRODUCES:
		snprintf(reason, room,
		         "%zu kernels reproduce their outputs bit for bit (%llu "
		         "parameter words redirected)",
		         segment->count, (unsigned long long)check->rewritten);
		break;
	case LYNX_REPLAY_DIFFERS:
		snprintf(reason, room, "output %zu differs from the original at byte %zu",
		         check->output, check->offset);
		break;
	case LYNX_REPLAY_WRITES_THROUGH_DEVICE_POINTER:
		snprintf(reason, room,
		         "the replay wrote original output %zu (first at byte %zu): a kernel reads "
		         "a pointer from device memory",
		         check->output, check->offset);
		break;
	case LYNX_REPLAY_LAUNCH_FAILED:
		snprintf(reason, room, "the launch of kernel %zu failed (CUresult %d)",
		         check->kernel, (int)check->error);
		break;
	case LYNX_REPLAY_UNSUPPORTED:
		snprintf(reason, room, "kernel %zu cannot be replayed: %s", check->kernel,
		         segment->unsupported);
		break;
	case LYNX_REPLAY_DRIVER_FAILED:
	case LYNX_REPLAY_NO_MEMORY:
		if (check->call)
			snprintf(reason, room, "%s failed (CUresult %d)%s", check->call,
			         (int)check->error,
			         check->restore_failed ? ": the original outputs are lost" : "");
		else
			snprintf(reason, room, "not enough host memory to verify");
		break;
	case LYNX_REPLAY_INVALID:
	default:
		snprintf(reason, room, "invalid arguments: %s", invalid ? invalid : "?");
		break;
	}
}

enum lynx_replay_verdict lynx_replay_verify(struct lynx_replay_segment *segment, CUstream stream,
                                            const struct lynx_replay_range *outputs,
                                            const CUdeviceptr *scratch, size_t output_count,
                                            const struct lynx_replay_redirect *temporaries,
                                            size_t temporary_count, struct lynx_replay_check *out)
{
	struct verification v = {
	        .segment = segment, .stream = stream, .outputs = outputs, .count = output_count};
	const char *invalid =
	        invalid_arguments(outputs, output_count, temporaries, temporary_count);
	CUresult res;

	*out = (struct lynx_replay_check){.verdict = LYNX_REPLAY_REPRODUCES};
	v.check = out;
	if (invalid) {
		out->verdict = LYNX_REPLAY_INVALID;
		goto out_describe;
	}
	if (segment->unsupported) {
		out->verdict = LYNX_REPLAY_UNSUPPORTED;
		out->kernel = segment->unsupported_kernel;
		goto out_describe;
	}
	if (allocate(&v, scratch, temporaries, temporary_count) != LYNX_REPLAY_REPRODUCES)
		goto out_release;
	res = take_snapshot(&v);
	if (res != CUDA_SUCCESS) {
		fail_driver(&v, "cuMemcpyDtoHAsync", res);
		goto out_release;
	}
	/* From here the originals may hold poison: every path goes through the restore. */
	res = poison(&v);
	if (res != CUDA_SUCCESS)
		fail_driver(&v, "cuMemcpyHtoDAsync", res);
	else
		replay_and_compare(&v, temporary_count);
	res = restore(&v);
	if (res != CUDA_SUCCESS) {
		out->restore_failed = true;
		fail_driver(&v, "cuMemcpyHtoDAsync (restoring the originals)", res);
		out->verdict = LYNX_REPLAY_DRIVER_FAILED;
		lynx_error("replay: verification could not restore the segment's outputs "
		           "(CUresult %d): their contents are lost",
		           (int)res);
	}
	if (out->verdict == LYNX_REPLAY_REPRODUCES)
		check_scratch(&v);
out_release:
	release(&v);
out_describe:
	describe(out, segment, invalid);
	return out->verdict;
}
