/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel replay (replay.h): segments of recorded launches, relaunched with their pointer
 * words redirected, and verified bit for bit against the outputs they first produced.
 * Examination shares verification's passes and helpers, hence one file beyond 800 lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_attrs.h"
#include "log.h"
#include "recorder.h"
#include "replay.h"

/* A pointer is 8 bytes at an 8-byte-aligned offset of the parameter buffer, also inside a
 * by-value struct. */
#define WORD 8

/* Tries of copying saved bytes back into the trainer's memory before they are lost. */
#define PUT_BACK_ATTEMPTS 3

/* One kernel of a segment, with what a replay needs precomputed. */
struct replay_kernel {
	CUfunction function;
	unsigned int grid[3], block[3], shared_mem;
	uint32_t param_count, param_bytes;
	unsigned char *params; /* the recorded bytes; replaced only by segment_refresh */
	uint32_t *offsets;     /* param_count entries */
	/* The offsets of the aligned words that lie wholly inside one parameter: the only places
	 * a pointer can be. Padding and words straddling two parameters are never rewritten. */
	uint32_t *words;
	uint32_t word_count;
	/* Launched with a launch config: replayed through cuLaunchKernelEx with the attributes
	 * launch_attrs.h keeps, normalised. */
	bool config;
	uint32_t attr_count;
	CUlaunchAttribute attrs[LYNX_LAUNCH_MAX_ATTRS];
};

struct lynx_replay_segment {
	struct lynx_replay_driver driver;
	struct replay_kernel *kernels;
	size_t count;
	const char *unsupported; /* why the first unreplayable kernel is so (reason), or NULL */
	size_t unsupported_kernel;
	char reason[160];
	/* The working copy that a launch rewrites: a launch copies the parameters before
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

static const char *const role_names[LYNX_REPLAY_ROLE_COUNT] = {
#define LYNX_REPLAY_ROLE_NAME(name, text) text,
        LYNX_REPLAY_ROLES(LYNX_REPLAY_ROLE_NAME)
#undef LYNX_REPLAY_ROLE_NAME
};

const char *lynx_replay_role_name(enum lynx_replay_role role)
{
	return (unsigned int)role < LYNX_REPLAY_ROLE_COUNT ? role_names[role] : "unknown";
}

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
	        .config = event->u.launch.config,
	        .attr_count = event->u.launch.attr_count,
	        .attrs = lynx_launch_attrs_of(event),
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

/* Copies one recorded kernel, its layout and the attributes its replay passes. Returns 0 or
 * -ENOMEM; *why says if it cannot be replayed (the kernel is kept, without layout), in
 * text[0..text_size) when the reason names a number. */
static int prepare_kernel(const struct lynx_replay_driver *driver,
                          const struct lynx_replay_kernel *recorded, struct replay_kernel *kernel,
                          const char **why, char *text, size_t text_size)
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
	        .config = recorded->config,
	};
	kernel->params = malloc(kernel->param_bytes ? kernel->param_bytes : 1);
	if (!kernel->params)
		return -ENOMEM;
	if (kernel->param_bytes)
		memcpy(kernel->params, recorded->params, kernel->param_bytes);
	if (recorded->config &&
	    (*why = lynx_launch_attrs_select(recorded->attrs, recorded->attr_count, kernel->attrs,
	                                     &kernel->attr_count, text, text_size)))
		return 0;
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
		char text[sizeof(segment->reason)];

		if (prepare_kernel(driver, &kernels[i], &segment->kernels[i], &why, text,
		                   sizeof(text)))
			goto out_destroy;
		if (why && !segment->unsupported) {
			snprintf(segment->reason, sizeof(segment->reason), "%s", why);
			segment->unsupported = segment->reason;
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

int lynx_replay_segment_refresh(struct lynx_replay_segment *segment, size_t index,
                                const struct lynx_replay_kernel *kernel)
{
	CUlaunchAttribute attrs[LYNX_LAUNCH_MAX_ATTRS];
	uint32_t attr_count = 0;
	struct replay_kernel *k;
	char why[sizeof(segment->reason)];

	if (!kernel || index >= segment->count)
		return -EINVAL;
	k = &segment->kernels[index];
	if (kernel->function != k->function || kernel->shared_mem != k->shared_mem ||
	    kernel->param_count != k->param_count || kernel->param_bytes != k->param_bytes ||
	    (kernel->param_bytes && !kernel->params) || kernel->config != k->config)
		return -EINVAL;
	for (int i = 0; i < 3; i++)
		if (kernel->grid[i] != k->grid[i] || kernel->block[i] != k->block[i])
			return -EINVAL;
	/* The attributes a replay passes, normalised: those it drops may differ (an event). */
	if (kernel->config &&
	    (lynx_launch_attrs_select(kernel->attrs, kernel->attr_count, attrs, &attr_count, why,
	                              sizeof(why)) ||
	     attr_count != k->attr_count || memcmp(attrs, k->attrs, attr_count * sizeof(*attrs))))
		return -EINVAL;
	if (k->param_bytes)
		memcpy(k->params, kernel->params, k->param_bytes);
	return 0;
}

uint64_t lynx_replay_segment_word(const struct lynx_replay_segment *segment, size_t kernel,
                                  uint32_t offset)
{
	uint64_t word = 0;

	if (kernel < segment->count && offset <= segment->kernels[kernel].param_bytes &&
	    segment->kernels[kernel].param_bytes - offset >= WORD)
		memcpy(&word, segment->kernels[kernel].params + offset, WORD);
	return word;
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

/* Launches one kernel on stream, through the entry point it was launched with; the config's
 * attributes are the kept ones, its stream the replay's. */
static CUresult launch_one(const struct lynx_replay_driver *driver, struct replay_kernel *kernel,
                           CUstream stream, void **args)
{
	CUlaunchConfig config;

	if (!kernel->config)
		return driver->launch_kernel(kernel->function, kernel->grid[0], kernel->grid[1],
		                             kernel->grid[2], kernel->block[0], kernel->block[1],
		                             kernel->block[2], kernel->shared_mem, stream, args,
		                             NULL);
	config = (CUlaunchConfig){
	        .gridDimX = kernel->grid[0],
	        .gridDimY = kernel->grid[1],
	        .gridDimZ = kernel->grid[2],
	        .blockDimX = kernel->block[0],
	        .blockDimY = kernel->block[1],
	        .blockDimZ = kernel->block[2],
	        .sharedMemBytes = kernel->shared_mem,
	        .hStream = stream,
	        .attrs = kernel->attr_count ? kernel->attrs : NULL,
	        .numAttrs = kernel->attr_count,
	};
	return driver->launch_kernel_ex(&config, kernel->function, args, NULL);
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
		struct replay_kernel *kernel = &segment->kernels[k];

		memcpy(segment->work, kernel->params, kernel->param_bytes);
		stats.rewritten += redirect_words(segment->work, kernel, redirects, redirect_count);
		for (uint32_t i = 0; i < kernel->param_count; i++)
			segment->args[i] = segment->work + kernel->offsets[i];
		stats.error = launch_one(&segment->driver, kernel, stream,
		                         kernel->param_count ? segment->args : NULL);
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

/* Replays the segment through redirects and waits for it. rewritten, if not NULL, gets the
 * words redirected. */
static enum lynx_replay_verdict replay(struct verification *v,
                                       const struct lynx_replay_redirect *redirects, size_t count,
                                       uint64_t *rewritten)
{
	struct lynx_replay_stats stats;
	CUresult res;

	if (lynx_replay_launch(v->segment, v->stream, redirects, count, &stats)) {
		v->check->verdict = LYNX_REPLAY_LAUNCH_FAILED;
		v->check->kernel = stats.launched;
		v->check->error = stats.error;
		return v->check->verdict;
	}
	if (rewritten)
		*rewritten = stats.rewritten;
	/* A kernel that faults shows up here, not at its launch. */
	res = synchronise(v);
	if (res != CUDA_SUCCESS)
		return fail_driver(v, "cuStreamSynchronize", res);
	return LYNX_REPLAY_REPRODUCES;
}

/* Replays into scratch and decides, with the originals poisoned; they are restored by the
 * caller whatever happens here. */
static enum lynx_replay_verdict replay_and_compare(struct verification *v, size_t temporary_count)
{
	if (replay(v, v->redirects, v->count + temporary_count, &v->check->rewritten) !=
	    LYNX_REPLAY_REPRODUCES)
		return v->check->verdict;
	return check_originals(v);
}

/* Said once per process: putting saved bytes back failed with res and is tried again. */
static void put_back_retried(CUresult res)
{
	lynx_warn_once("replay: copying saved bytes back into the trainer's memory failed "
	               "(cuMemcpyHtoDAsync: CUresult %d); trying again",
	               (int)res);
}

/* The originals' snapshot back, tried again on failure (the copies are idempotent); a
 * failure of every try loses them. */
static void put_back_outputs(struct verification *v)
{
	CUresult res = restore(v);

	for (int attempt = 1; attempt < PUT_BACK_ATTEMPTS && res != CUDA_SUCCESS; attempt++) {
		put_back_retried(res);
		res = restore(v);
	}

	if (res != CUDA_SUCCESS) {
		v->check->restore_failed = true;
		fail_driver(v, "cuMemcpyHtoDAsync (restoring the originals)", res);
		v->check->verdict = LYNX_REPLAY_DRIVER_FAILED;
		lynx_error("replay: verification could not restore the segment's outputs "
		           "(CUresult %d): their contents are lost",
		           (int)res);
	}
}

/*
 * lynx_replay_verify's check, once allocated: snapshot, poison, replay into scratch, put the
 * originals back, compare. The verdict is in v->check.
 */
static void verify_outputs(struct verification *v, size_t temporary_count)
{
	CUresult res = take_snapshot(v);

	if (res != CUDA_SUCCESS) {
		fail_driver(v, "cuMemcpyDtoHAsync", res);
		return;
	}
	/* From here the originals may hold poison: every path goes through the restore. */
	res = poison(v);
	if (res != CUDA_SUCCESS)
		fail_driver(v, "cuMemcpyHtoDAsync", res);
	else
		replay_and_compare(v, temporary_count);
	put_back_outputs(v);
	if (v->check->verdict == LYNX_REPLAY_REPRODUCES)
		check_scratch(v);
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
	if (allocate(&v, scratch, temporaries, temporary_count) == LYNX_REPLAY_REPRODUCES)
		verify_outputs(&v, temporary_count);
	release(&v);
out_describe:
	describe(out, segment, invalid);
	return out->verdict;
}

/* ---- Examination ----------------------------------------------------------------------- */

/* A word of snapshotted memory is asked about (range_of) only if its value lies in
 * [LOWEST_ADDRESS, ADDRESS_LIMIT): the first 64 KiB are never mapped (and hold every small
 * integer), and user addresses on x86-64 and AArch64 Linux lie below 2^48, which most
 * floating-point data does not. */
#define LOWEST_ADDRESS (64ull << 10)
#define ADDRESS_LIMIT (1ull << 48)

/* One allocation the examination snapshots, poisons and puts back: named by parameter words
 * (an operand allocation), or found through a pointer stored in one (indirect). */
struct region {
	CUdeviceptr base;
	size_t size;
	unsigned char *saved; /* its contents before the first replay */
	/* The offsets of its words that hold pointers (range_of knows their value): poison
	 * keeps them, so that a kernel following one does not fault. */
	size_t *kept;
	size_t kept_count, kept_capacity;
	CUdeviceptr copy; /* operand allocations, in passes 2 and 3: where it is moved */
	/* The first parameter word naming it or, for an indirect one, the region it was found
	 * through. */
	uint32_t kernel, word;
	size_t via; /* indirect: the region holding the pointer to it; SIZE_MAX otherwise */
	bool written;
};

/* What one examination holds besides its verification, so that every exit frees the same
 * things. */
struct examination {
	struct verification *v;
	struct lynx_replay_examination *how;
	const struct lynx_replay_redirect *temporaries;
	size_t temporary_count;
	struct region *regions; /* operand allocations first, then the indirect ones */
	size_t count, capacity, operand_regions;
	size_t total;            /* the regions' bytes */
	bool snapshotted;        /* every region's snapshot is complete */
	unsigned char *pattern;  /* the largest region: poison being written or compared */
	unsigned char *readback; /* the largest region */
	struct lynx_replay_redirect *redirects; /* outputs, temporaries, operand allocations */
	size_t redirect_count;
	size_t region;      /* the region the verdict concerns, or SIZE_MAX */
	size_t written;     /* operand allocations the relocated replay wrote */
	size_t wanted;      /* TOO_LARGE: the bytes it would have had to snapshot */
	bool over_indirect; /* TOO_LARGE came from memory found through a stored pointer */
	const char *invalid;
};

static bool in_range(uint64_t value, CUdeviceptr base, size_t size)
{
	/* Unsigned: a value below base wraps to a huge distance. */
	return value - base < size;
}

/* Whether value points into an output or a temporary: memory that is redirected anyway. */
static bool redirected(const struct examination *e, uint64_t value)
{
	for (size_t i = 0; i < e->v->count; i++)
		if (in_range(value, e->v->outputs[i].ptr, e->v->outputs[i].size))
			return true;
	for (size_t i = 0; i < e->temporary_count; i++)
		if (in_range(value, e->temporaries[i].from, e->temporaries[i].size))
			return true;
	return false;
}

/* The region holding value, or SIZE_MAX. O(regions): a segment names tens. */
static size_t region_of(const struct examination *e, uint64_t value)
{
	for (size_t i = 0; i < e->count; i++)
		if (in_range(value, e->regions[i].base, e->regions[i].size))
			return i;
	return SIZE_MAX;
}

static enum lynx_replay_verdict refuse(struct examination *e, const char *invalid)
{
	e->invalid = invalid;
	return e->v->check->verdict = LYNX_REPLAY_INVALID;
}

/* Asks range_of about value. Returns REPRODUCES with *found false (not a pointer) or true
 * and the allocation, or INVALID if the answer makes no sense. */
static enum lynx_replay_verdict ask(struct examination *e, uint64_t value, CUdeviceptr *base,
                                    size_t *size, bool *found)
{
	*found = e->how->range_of(value, base, size, e->how->range_arg);
	if (*found && (!*size || *base + *size < *base || !in_range(value, *base, *size)))
		return refuse(e, "range_of gave an allocation that does not hold the address");
	return LYNX_REPLAY_REPRODUCES;
}

static enum lynx_replay_verdict add_region(struct examination *e, CUdeviceptr base, size_t size,
                                           uint32_t kernel, uint32_t word, size_t via)
{
	for (size_t i = 0; i < e->count; i++)
		if (ranges_overlap(base, size, e->regions[i].base, e->regions[i].size))
			return refuse(e, "range_of gave two allocations that overlap");
	if (e->count == e->capacity) {
		size_t capacity = e->capacity ? 2 * e->capacity : 8;
		struct region *grown = realloc(e->regions, capacity * sizeof(*grown));

		if (!grown)
			return e->v->check->verdict = LYNX_REPLAY_NO_MEMORY;
		e->regions = grown;
		e->capacity = capacity;
	}
	e->regions[e->count++] = (struct region){
	        .base = base, .size = size, .kernel = kernel, .word = word, .via = via};
	e->total = size > SIZE_MAX - e->total ? SIZE_MAX : e->total + size;
	return LYNX_REPLAY_REPRODUCES;
}

/* The operand words of every kernel, into how->operands, and their allocations, as the
 * first regions. O(words x regions). */
static enum lynx_replay_verdict find_operands(struct examination *e)
{
	const struct lynx_replay_segment *segment = e->v->segment;
	struct lynx_replay_examination *how = e->how;
	struct lynx_replay_check *check = e->v->check;
	bool over = false;

	for (size_t k = 0; k < segment->count; k++) {
		const struct replay_kernel *kernel = &segment->kernels[k];

		for (uint32_t w = 0; w < kernel->word_count; w++) {
			uint64_t value;
			CUdeviceptr base;
			size_t size, i;
			bool found;

			memcpy(&value, kernel->params + kernel->words[w], WORD);
			if (redirected(e, value))
				continue;
			i = region_of(e, value);
			if (i == SIZE_MAX) {
				if (ask(e, value, &base, &size, &found) != LYNX_REPLAY_REPRODUCES)
					return check->verdict;
				if (!found)
					continue;
				if (add_region(e, base, size, (uint32_t)k, kernel->words[w],
				               SIZE_MAX) != LYNX_REPLAY_REPRODUCES)
					return check->verdict;
				i = e->count - 1;
			}
			if (how->operand_count < how->operand_capacity)
				how->operands[how->operand_count] = (struct lynx_replay_operand){
				        .kernel = (uint32_t)k,
				        .offset = kernel->words[w],
				        .displacement = value - e->regions[i].base,
				        .size = e->regions[i].size,
				        .role = LYNX_REPLAY_INPUT,
				};
			how->operand_count++;
			if (!over && (how->operand_count > how->operand_capacity ||
			              e->total > how->max_operand_bytes)) {
				over = true;
				check->kernel = k;
				check->word = kernel->words[w];
			}
		}
	}
	e->operand_regions = e->count;
	e->wanted = e->total;
	return over ? check->verdict = LYNX_REPLAY_TOO_LARGE : LYNX_REPLAY_REPRODUCES;
}

static enum lynx_replay_verdict snapshot_region(struct examination *e, struct region *r)
{
	const struct lynx_replay_driver *driver = &e->v->segment->driver;
	CUresult res;

	r->saved = malloc(r->size);
	if (!r->saved)
		return e->v->check->verdict = LYNX_REPLAY_NO_MEMORY;
	res = driver->memcpy_dtoh_async(r->saved, r->base, r->size, e->v->stream);
	if (res == CUDA_SUCCESS)
		res = synchronise(e->v);
	return res == CUDA_SUCCESS ? LYNX_REPLAY_REPRODUCES
	                           : fail_driver(e->v, "cuMemcpyDtoHAsync", res);
}

static bool inside_output(const struct verification *v, CUdeviceptr at)
{
	for (size_t i = 0; i < v->count; i++)
		if (ranges_overlap(at, WORD, v->outputs[i].ptr, v->outputs[i].size))
			return true;
	return false;
}

static enum lynx_replay_verdict keep(struct examination *e, struct region *r, size_t at)
{
	if (r->kept_count == r->kept_capacity) {
		size_t capacity = r->kept_capacity ? 2 * r->kept_capacity : 4;
		size_t *grown = realloc(r->kept, capacity * sizeof(*grown));

		if (!grown)
			return e->v->check->verdict = LYNX_REPLAY_NO_MEMORY;
		r->kept = grown;
		r->kept_capacity = capacity;
	}
	r->kept[r->kept_count++] = at;
	return LYNX_REPLAY_REPRODUCES;
}

/*
 * The pointers stored in region i's snapshot: kept by its poison, and the allocations they
 * lead to, if new, added as indirect regions and snapshotted (then scanned in turn). Words
 * inside an output are left to the output's poison. One range_of call per word that could
 * be an address and is not the previous word again.
 */
static enum lynx_replay_verdict scan_region(struct examination *e, size_t i)
{
	struct lynx_replay_check *check = e->v->check;
	uint64_t last = 0;
	bool last_pointer = false;

	for (size_t at = 0; at + WORD <= e->regions[i].size; at += WORD) {
		struct region *r = &e->regions[i]; /* add_region may move the array */
		uint64_t value;
		CUdeviceptr base;
		size_t size;
		bool pointer;

		memcpy(&value, r->saved + at, WORD);
		if (value < LOWEST_ADDRESS || value >= ADDRESS_LIMIT ||
		    inside_output(e->v, r->base + at))
			continue;
		if (value == last)
			pointer = last_pointer;
		else if (region_of(e, value) != SIZE_MAX || redirected(e, value))
			pointer = true;
		else if (ask(e, value, &base, &size, &pointer) != LYNX_REPLAY_REPRODUCES)
			return check->verdict;
		else if (pointer && size > e->how->max_operand_bytes - e->total) {
			check->kernel = r->kernel;
			check->word = r->word;
			e->over_indirect = true;
			e->wanted = e->total + size; /* no overflow: size <= max - total */
			return check->verdict = LYNX_REPLAY_TOO_LARGE;
		} else if (pointer) {
			if (add_region(e, base, size, r->kernel, r->word, i) !=
			            LYNX_REPLAY_REPRODUCES ||
			    snapshot_region(e, &e->regions[e->count - 1]) != LYNX_REPLAY_REPRODUCES)
				return check->verdict;
			r = &e->regions[i];
		}
		last = value;
		last_pointer = pointer;
		if (pointer && keep(e, r, at) != LYNX_REPLAY_REPRODUCES)
			return check->verdict;
	}
	return LYNX_REPLAY_REPRODUCES;
}

/* Snapshots the operand allocations, follows the pointers stored in them, and allocates the
 * host buffers the later passes compare in. */
static enum lynx_replay_verdict snapshot_regions(struct examination *e)
{
	size_t largest = 0;

	for (size_t i = 0; i < e->operand_regions; i++)
		if (snapshot_region(e, &e->regions[i]) != LYNX_REPLAY_REPRODUCES)
			return e->v->check->verdict;
	/* Breadth first: scanning appends the regions it finds, which are scanned in turn. */
	for (size_t i = 0; i < e->count; i++)
		if (scan_region(e, i) != LYNX_REPLAY_REPRODUCES)
			return e->v->check->verdict;
	e->snapshotted = true;
	for (size_t i = 0; i < e->count; i++)
		if (e->regions[i].size > largest)
			largest = e->regions[i].size;
	e->pattern = malloc(largest ? largest : 1);
	e->readback = malloc(largest ? largest : 1);
	if (!e->pattern || !e->readback)
		return e->v->check->verdict = LYNX_REPLAY_NO_MEMORY;
	return LYNX_REPLAY_REPRODUCES;
}

/* r's poison into e->pattern: the complement of its snapshot, pointers kept. */
static void make_poison(struct examination *e, const struct region *r)
{
	complement(e->pattern, r->saved, r->size);
	for (size_t k = 0; k < r->kept_count; k++)
		memcpy(e->pattern + r->kept[k], r->saved + r->kept[k], WORD);
}

/* Host bytes to the device, waited for (the host buffer is reused at once). */
static CUresult upload_bytes(struct examination *e, CUdeviceptr dst, const void *src, size_t size)
{
	CUresult res = e->v->segment->driver.memcpy_htod_async(dst, src, size, e->v->stream);

	return res == CUDA_SUCCESS ? synchronise(e->v) : res;
}

static CUresult download_bytes(struct examination *e, CUdeviceptr src, size_t size)
{
	CUresult res =
	        e->v->segment->driver.memcpy_dtoh_async(e->readback, src, size, e->v->stream);

	return res == CUDA_SUCCESS ? synchronise(e->v) : res;
}

/* Every region's snapshot back into its original, then (if asked) the outputs'. A failure
 * loses them: DRIVER_FAILED, restore_failed. Nothing is written before every snapshot is
 * complete. */
static void put_back(struct examination *e, bool outputs)
{
	const struct lynx_replay_driver *driver = &e->v->segment->driver;
	CUresult res = CUDA_ERROR_UNKNOWN;

	/* The copies are idempotent: a transient failure is tried again before it loses. */
	for (int attempt = 0; attempt < PUT_BACK_ATTEMPTS && res != CUDA_SUCCESS; attempt++) {
		if (attempt)
			put_back_retried(res);
		res = CUDA_SUCCESS;
		for (size_t i = 0; e->snapshotted && i < e->count && res == CUDA_SUCCESS; i++)
			res = driver->memcpy_htod_async(e->regions[i].base, e->regions[i].saved,
			                                e->regions[i].size, e->v->stream);
		if (res == CUDA_SUCCESS)
			res = synchronise(e->v);
	}
	if (res != CUDA_SUCCESS) {
		e->v->check->restore_failed = true;
		fail_driver(e->v, "cuMemcpyHtoDAsync (restoring the originals)", res);
		e->v->check->verdict = LYNX_REPLAY_DRIVER_FAILED;
		lynx_error("replay: examination could not restore the memory a segment's "
		           "parameters name (CUresult %d): its contents are lost",
		           (int)res);
	}
	if (outputs)
		put_back_outputs(e->v);
}

/* Compares every region's original with its poison. */
static enum lynx_replay_verdict check_region_originals(struct examination *e)
{
	struct lynx_replay_check *check = e->v->check;

	for (size_t i = 0; i < e->count; i++) {
		const struct region *r = &e->regions[i];
		CUresult res = download_bytes(e, r->base, r->size);
		size_t at;

		if (res != CUDA_SUCCESS)
			return fail_driver(e->v, "cuMemcpyDtoHAsync", res);
		make_poison(e, r);
		at = first_difference(e->readback, e->pattern, r->size, false);
		if (at != SIZE_MAX) {
			e->region = i;
			check->operand_memory = true;
			check->offset = at;
			check->kernel = r->kernel;
			check->word = r->word;
			return check->verdict = LYNX_REPLAY_WRITES_THROUGH_DEVICE_POINTER;
		}
	}
	return LYNX_REPLAY_REPRODUCES;
}

/* Replays through e->redirects with every original poisoned, and checks that the originals
 * held their poison and the outputs their bytes; `differs` names what a differing output
 * means in this pass. */
static enum lynx_replay_verdict replay_relocated(struct examination *e,
                                                 enum lynx_replay_verdict differs)
{
	CUresult res = poison(e->v);

	if (res != CUDA_SUCCESS)
		return fail_driver(e->v, "cuMemcpyHtoDAsync", res);
	if (replay(e->v, e->redirects, e->redirect_count, NULL) != LYNX_REPLAY_REPRODUCES ||
	    check_originals(e->v) != LYNX_REPLAY_REPRODUCES ||
	    check_region_originals(e) != LYNX_REPLAY_REPRODUCES)
		return e->v->check->verdict;
	if (check_scratch(e->v) == LYNX_REPLAY_DIFFERS)
		e->v->check->verdict = differs;
	return e->v->check->verdict;
}

/* Pass 2: the operand allocations moved to copies of their snapshot, every original
 * poisoned. Marks the allocations whose copy the replay changed. */
static enum lynx_replay_verdict relocate(struct examination *e)
{
	const struct lynx_replay_driver *driver = &e->v->segment->driver;
	size_t n = e->v->count + e->temporary_count;
	CUresult res;

	e->redirects = calloc(n + e->operand_regions, sizeof(*e->redirects));
	if (!e->redirects)
		return e->v->check->verdict = LYNX_REPLAY_NO_MEMORY;
	/* Outputs and temporaries first: the first range that holds a word wins, and they may
	 * lie inside an operand allocation. */
	memcpy(e->redirects, e->v->redirects, n * sizeof(*e->redirects));
	for (size_t i = 0; i < e->operand_regions; i++) {
		struct region *r = &e->regions[i];

		res = driver->mem_alloc(&r->copy, r->size);
		if (res != CUDA_SUCCESS)
			return fail_driver(e->v, "cuMemAlloc", res);
		res = upload_bytes(e, r->copy, r->saved, r->size);
		if (res != CUDA_SUCCESS)
			return fail_driver(e->v, "cuMemcpyHtoDAsync", res);
		e->redirects[n++] = (struct lynx_replay_redirect){r->base, r->size, r->copy};
	}
	e->redirect_count = n;
	for (size_t i = 0; i < e->count; i++) {
		make_poison(e, &e->regions[i]);
		res = upload_bytes(e, e->regions[i].base, e->pattern, e->regions[i].size);
		if (res != CUDA_SUCCESS)
			return fail_driver(e->v, "cuMemcpyHtoDAsync", res);
	}
	if (replay_relocated(e, LYNX_REPLAY_READS_HIDDEN_MEMORY) != LYNX_REPLAY_REPRODUCES) {
		/* Name the first memory found to hold a pointer, the likeliest culprit. */
		for (size_t i = 0;
		     i < e->count && e->v->check->verdict == LYNX_REPLAY_READS_HIDDEN_MEMORY; i++) {
			if (e->regions[i].kept_count) {
				e->region = i;
				e->v->check->kernel = e->regions[i].kernel;
				e->v->check->word = e->regions[i].word;
				break;
			}
		}
		return e->v->check->verdict;
	}
	for (size_t i = 0; i < e->operand_regions; i++) {
		struct region *r = &e->regions[i];

		res = download_bytes(e, r->copy, r->size);
		if (res != CUDA_SUCCESS)
			return fail_driver(e->v, "cuMemcpyDtoHAsync", res);
		r->written = memcmp(e->readback, r->saved, r->size) != 0;
		if (r->written && !e->written++)
			e->region = i;
	}
	return LYNX_REPLAY_REPRODUCES;
}

/* Pass 3: the written allocations' copies hold their poison, the others their snapshot; the
 * outputs must not change. */
static enum lynx_replay_verdict probe_written(struct examination *e)
{
	size_t first = e->region;

	for (size_t i = 0; i < e->operand_regions; i++) {
		struct region *r = &e->regions[i];
		CUresult res;

		if (r->written)
			make_poison(e, r);
		res = upload_bytes(e, r->copy, r->written ? e->pattern : r->saved, r->size);
		if (res != CUDA_SUCCESS)
			return fail_driver(e->v, "cuMemcpyHtoDAsync", res);
	}
	if (replay_relocated(e, LYNX_REPLAY_UPDATES_OPERAND) == LYNX_REPLAY_UPDATES_OPERAND) {
		e->region = first;
		e->v->check->kernel = e->regions[first].kernel;
		e->v->check->word = e->regions[first].word;
	}
	return e->v->check->verdict;
}

/* The operands' roles, once the verdict is REPRODUCES. */
static void assign_roles(struct examination *e)
{
	struct lynx_replay_examination *how = e->how;

	for (size_t i = 0; i < how->operand_count && i < how->operand_capacity; i++) {
		struct lynx_replay_operand *op = &how->operands[i];
		uint64_t value = lynx_replay_segment_word(e->v->segment, op->kernel, op->offset);
		size_t r = region_of(e, value);

		op->role = r < e->operand_regions && e->regions[r].written ? LYNX_REPLAY_SCRATCH
		                                                           : LYNX_REPLAY_INPUT;
	}
}

static void release_examination(struct examination *e)
{
	const struct lynx_replay_driver *driver = &e->v->segment->driver;

	for (size_t i = 0; i < e->count; i++) {
		if (e->regions[i].copy && driver->mem_free(e->regions[i].copy) != CUDA_SUCCESS)
			lynx_warn_once("replay: cuMemFree of an examination copy failed");
		free(e->regions[i].saved);
		free(e->regions[i].kept);
	}
	free(e->regions);
	free(e->pattern);
	free(e->readback);
	free(e->redirects);
}

/* The device memory the passes take: scratch for every output (pass 1) and a copy of each
 * operand allocation (pass 2). The temporaries' scratch is the caller's, taken already. */
static size_t device_bytes(const struct examination *e)
{
	size_t bytes = 0;

	for (size_t i = 0; i < e->v->count; i++)
		bytes += e->v->outputs[i].size;
	for (size_t i = 0; i < e->operand_regions; i++)
		bytes += e->regions[i].size;
	return bytes;
}

/* The reason line for what describe() does not know, or with an examination's details. */
static void describe_examination(struct lynx_replay_check *check,
                                 const struct lynx_replay_segment *segment,
                                 const struct examination *e)
{
	const struct lynx_replay_examination *how = e->how;
	const struct region *r = e->region < e->count ? &e->regions[e->region] : NULL;
	char *reason = check->reason;
	size_t room = sizeof(check->reason), scratch = 0;

	switch (check->verdict) {
	case LYNX_REPLAY_REPRODUCES:
		for (size_t i = 0; i < how->operand_count; i++)
			scratch += how->operands[i].role == LYNX_REPLAY_SCRATCH;
		snprintf(reason, room,
		         "%zu kernels reproduce their outputs bit for bit (%llu parameter words "
		         "redirected); %zu parameter words name other memory: %zu read in place, "
		         "%zu scratch",
		         segment->count, (unsigned long long)check->rewritten, how->operand_count,
		         how->operand_count - scratch, scratch);
		break;
	case LYNX_REPLAY_WRITES_THROUGH_DEVICE_POINTER:
		if (!check->operand_memory || !r)
			describe(check, segment, e->invalid);
		else if (r->via == SIZE_MAX)
			snprintf(
			        reason, room,
			        "the replay wrote the original of what kernel %zu's parameter word "
			        "at byte %u names (first at byte %zu of it): a kernel reads a "
			        "pointer "
			        "from device memory",
			        check->kernel, check->word, check->offset);
		else
			snprintf(
			        reason, room,
			        "the replay wrote memory its parameters do not name (first at byte "
			        "%zu), found through a pointer in what kernel %zu's parameter word "
			        "at "
			        "byte %u %s: a kernel reads a pointer from device memory",
			        check->offset, check->kernel, check->word,
			        e->regions[r->via].via == SIZE_MAX ? "names" : "leads to");
		break;
	case LYNX_REPLAY_READS_HIDDEN_MEMORY:
		if (r)
			snprintf(reason, room,
			         "with the memory its parameters name moved and the originals "
			         "poisoned, output %zu changed (first at byte %zu): a kernel "
			         "reads a pointer from device memory, e.g. one stored in what "
			         "kernel %zu's parameter word at byte %u %s",
			         check->output, check->offset, check->kernel, check->word,
			         r->via == SIZE_MAX ? "names" : "leads to");
		else
			snprintf(reason, room,
			         "with the memory its parameters name moved and the originals "
			         "poisoned, output %zu changed (first at byte %zu): a kernel "
			         "reads a pointer from device memory",
			         check->output, check->offset);
		break;
	case LYNX_REPLAY_UPDATES_OPERAND:
		snprintf(
		        reason, room,
		        "with the %zu allocation(s) it writes filled with their complement, output "
		        "%zu changed (first at byte %zu): it updates memory its parameters name "
		        "(first what kernel %zu's parameter word at byte %u names) and its outputs "
		        "depend on what it held",
		        e->written, check->output, check->offset, check->kernel, check->word);
		break;
	case LYNX_REPLAY_NO_ROOM:
		snprintf(reason, room,
		         "checking it takes %zu bytes of device memory, %zu allowed now",
		         device_bytes(e), how->max_device_bytes);
		break;
	case LYNX_REPLAY_TOO_LARGE:
		snprintf(reason, room,
		         "the memory its parameters name is too large or too scattered to check: "
		         "kernel %zu's parameter word at byte %u takes it to %zu words (room for "
		         "%zu) and %zu bytes%s (at most %zu)",
		         check->kernel, check->word, how->operand_count, how->operand_capacity,
		         e->wanted,
		         e->over_indirect ? " with what pointers stored in it lead to" : "",
		         how->max_operand_bytes);
		break;
	default:
		describe(check, segment, e->invalid);
		break;
	}
}

enum lynx_replay_verdict
lynx_replay_examine(struct lynx_replay_segment *segment, CUstream stream,
                    const struct lynx_replay_range *outputs, size_t output_count,
                    const struct lynx_replay_redirect *temporaries, size_t temporary_count,
                    struct lynx_replay_examination *how, struct lynx_replay_check *out)
{
	struct verification v = {
	        .segment = segment, .stream = stream, .outputs = outputs, .count = output_count};
	struct examination e = {.v = &v,
	                        .how = how,
	                        .temporaries = temporaries,
	                        .temporary_count = temporary_count,
	                        .region = SIZE_MAX};

	*out = (struct lynx_replay_check){.verdict = LYNX_REPLAY_REPRODUCES};
	v.check = out;
	e.invalid = invalid_arguments(outputs, output_count, temporaries, temporary_count);
	if (!e.invalid && (!how || !how->range_of || (how->operand_capacity && !how->operands)))
		e.invalid = "no range_of, or no room for the operands";
	if (how)
		how->operand_count = 0;
	if (e.invalid) {
		out->verdict = LYNX_REPLAY_INVALID;
		describe(out, segment, e.invalid);
		return out->verdict;
	}
	if (segment->unsupported) {
		out->verdict = LYNX_REPLAY_UNSUPPORTED;
		out->kernel = segment->unsupported_kernel;
		goto out_release; /* nothing allocated yet: releases nothing */
	}
	/* Everything it names is snapshotted before the first replay, which reads (and may
	 * write) it in place, and put back after each pass that may change it. */
	if (find_operands(&e) != LYNX_REPLAY_REPRODUCES ||
	    snapshot_regions(&e) != LYNX_REPLAY_REPRODUCES)
		goto out_release;
	if (how->max_device_bytes && device_bytes(&e) > how->max_device_bytes) {
		out->verdict = LYNX_REPLAY_NO_ROOM;
		goto out_release;
	}
	if (allocate(&v, NULL, temporaries, temporary_count) != LYNX_REPLAY_REPRODUCES)
		goto out_release;
	verify_outputs(&v, temporary_count); /* pass 1: the outputs put back already */
	put_back(&e, false);
	if (out->verdict != LYNX_REPLAY_REPRODUCES || !e.count)
		goto out_release;
	if (relocate(&e) == LYNX_REPLAY_REPRODUCES && e.written)
		probe_written(&e);
	put_back(&e, true);
	if (out->verdict == LYNX_REPLAY_REPRODUCES)
		assign_roles(&e);
out_release:
	describe_examination(out, segment, &e); /* reads the regions */
	release_examination(&e);
	release(&v);
	return out->verdict;
}
