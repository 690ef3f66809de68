/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Module and library images: simgpu has no device code, so an image is a text listing
 * registered kernel names, one per line (see core.h). Loaded images are few (a handful per
 * program), so a list searched linearly; a lookup is O(images + names in the image).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MODULE_MAGIC 0x6D6F6475u
#define LIBRARY_MAGIC 0x6C696272u

struct simgpu_image {
	uint32_t magic; /* MODULE_MAGIC or LIBRARY_MAGIC: the kind */
	size_t count;
	char **names;                     /* point into text */
	struct simgpu_kernel **instances; /* per name: its instance, once looked up */
	char *text;                       /* the image's copy, each name NUL-terminated in place */
	struct simgpu_image *next;
};

/* Loaded images; guarded by the core lock. */
static struct simgpu_image *images;

static uint32_t magic_of(enum simgpu_image_kind kind)
{
	return kind == SIMGPU_IMAGE_MODULE ? MODULE_MAGIC : LIBRARY_MAGIC;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* Text only: printable characters, tab, CR and LF (a cubin's ELF header is not). */
static bool image_is_text(const char *text)
{
	for (const unsigned char *p = (const unsigned char *)text; *p; p++)
		if ((*p < 0x20 && *p != '\t' && *p != '\r' && *p != '\n') || *p == 0x7f)
			return false;
	return true;
}

/* Splits img->text into names in place: one per line, blanks around it dropped, empty
 * lines skipped. Returns 0, -ENOMEM, or -EINVAL for a line with blanks inside (a name
 * has none: so PTX, which is text too, is refused). */
static int image_split(struct simgpu_image *img)
{
	size_t lines = 1;

	for (const char *p = img->text; *p; p++)
		lines += *p == '\n';
	img->names = calloc(lines, sizeof(*img->names));
	img->instances = calloc(lines, sizeof(*img->instances));
	if (!img->names || !img->instances)
		return -ENOMEM;
	for (char *line = img->text; line;) {
		char *end = strchr(line, '\n'), *next = end ? end + 1 : NULL;

		if (!end)
			end = line + strlen(line);
		while (line < end && is_blank(*line))
			line++;
		while (end > line && is_blank(end[-1]))
			end--;
		*end = '\0';
		if (strpbrk(line, " \t\r"))
			return -EINVAL;
		if (end > line)
			img->names[img->count++] = line;
		line = next;
	}
	return 0;
}

static void image_free(struct simgpu_image *img)
{
	if (!img)
		return;
	free(img->names);
	free(img->instances);
	free(img->text);
	free(img);
}

SIMGPU_EXPORT CUresult simgpu_image_load(void **out, const void *image, enum simgpu_image_kind kind)
{
	struct simgpu_image *img;

	if (!out || !image)
		return CUDA_ERROR_INVALID_VALUE;
	if (!image_is_text(image))
		return CUDA_ERROR_INVALID_IMAGE;
	img = calloc(1, sizeof(*img));
	if (!img)
		return CUDA_ERROR_OUT_OF_MEMORY;
	img->magic = magic_of(kind);
	img->text = strdup(image);
	int split = img->text ? image_split(img) : -ENOMEM;
	if (split || !img->count) {
		image_free(img);
		return split == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_IMAGE;
	}
	simgpu_core_lock();
	img->next = images;
	images = img;
	simgpu_core_unlock();
	*out = img;
	return CUDA_SUCCESS;
}

/* The loaded image of that kind behind handle, or NULL; *link points at its list link. */
static struct simgpu_image *image_find_locked(const void *handle, enum simgpu_image_kind kind,
                                              struct simgpu_image ***link)
{
	for (struct simgpu_image **p = &images; *p; p = &(*p)->next) {
		if (*p != handle)
			continue;
		if ((*p)->magic != magic_of(kind))
			return NULL;
		if (link)
			*link = p;
		return *p;
	}
	return NULL;
}

SIMGPU_EXPORT CUresult simgpu_image_kernel(const void *handle, enum simgpu_image_kind kind,
                                           const char *name, struct simgpu_kernel **out)
{
	struct simgpu_kernel *kernel = NULL, *instance;
	size_t at = SIZE_MAX;

	if (!name || !out)
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_core_lock();
	struct simgpu_image *img = image_find_locked(handle, kind, NULL);
	for (size_t i = 0; img && i < img->count && at == SIZE_MAX; i++)
		if (!strcmp(img->names[i], name))
			at = i;
	instance = img && at != SIZE_MAX ? img->instances[at] : NULL;
	simgpu_core_unlock();
	if (!img)
		return CUDA_ERROR_INVALID_HANDLE;
	if (instance) {
		*out = instance;
		return CUDA_SUCCESS;
	}
	/* The registry takes the lock itself. */
	if (at != SIZE_MAX)
		kernel = simgpu_kernel_find_by_name(name);
	if (!kernel)
		return CUDA_ERROR_NOT_FOUND;
	if (!(instance = simgpu_kernel_instance(kernel)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Kept unless another thread's lookup kept one first (or the image went away). */
	simgpu_core_lock();
	img = image_find_locked(handle, kind, NULL);
	if (img && !img->instances[at])
		img->instances[at] = instance;
	else if (img)
		instance = img->instances[at];
	simgpu_core_unlock();
	*out = instance;
	return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult simgpu_image_unload(const void *handle, enum simgpu_image_kind kind)
{
	struct simgpu_image **link = NULL;

	simgpu_core_lock();
	struct simgpu_image *img = image_find_locked(handle, kind, &link);
	if (img) {
		*link = img->next;
		img->magic = 0;
	}
	simgpu_core_unlock();
	if (!img)
		return CUDA_ERROR_INVALID_HANDLE;
	image_free(img);
	return CUDA_SUCCESS;
}
