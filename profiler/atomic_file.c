/* SPDX-License-Identifier: Apache-2.0 */
/* Atomic output files: see atomic_file.h. */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"

/*
 * The temporaries being written, for lynx_atomic_file_unlink_pending: fixed storage, since a
 * signal handler can neither lock nor allocate. A slot is claimed (FREE to CLAIMED) by the
 * writer that then names its file there, and is LIVE from mkstemp's return to the rename
 * or the unlink that ends it.
 */
enum slot_state { SLOT_FREE, SLOT_CLAIMED, SLOT_LIVE };
static struct {
	atomic_int state;
	char tmp[PATH_MAX];
} pending[LYNX_ATOMIC_FILE_SLOTS];

static const char TEMPLATE[] = ".tmp.XXXXXX";

/* A slot for a temporary beside path (its name written there), or -1 when none is free or
 * the name does not fit (the temporary is then not covered at a signal). */
static int claim_slot(const char *path)
{
	if (strlen(path) + sizeof(TEMPLATE) > PATH_MAX)
		return -1;
	for (int i = 0; i < LYNX_ATOMIC_FILE_SLOTS; i++) {
		int expected = SLOT_FREE;
		if (atomic_compare_exchange_strong(&pending[i].state, &expected, SLOT_CLAIMED)) {
			strcpy(pending[i].tmp, path);
			strcat(pending[i].tmp, TEMPLATE);
			return i;
		}
	}
	return -1;
}

/* The temporary is gone (renamed or unlinked): its name and slot are given back. */
static void drop_tmp(struct lynx_atomic_file *a)
{
	if (a->slot >= 0)
		atomic_store(&pending[a->slot].state, SLOT_FREE);
	else
		free(a->tmp);
	a->tmp = NULL;
	a->slot = -1;
}

int lynx_atomic_file_open(struct lynx_atomic_file *a, const char *path)
{
	mode_t mask = umask(0);
	int fd, err;

	umask(mask);
	a->f = NULL;
	a->path = path;
	a->slot = claim_slot(path);
	if (a->slot >= 0) {
		a->tmp = pending[a->slot].tmp;
	} else {
		a->tmp = malloc(strlen(path) + sizeof(TEMPLATE));
		if (!a->tmp)
			return -ENOMEM;
		strcpy(a->tmp, path);
		strcat(a->tmp, TEMPLATE);
	}
	fd = mkstemp(a->tmp);
	if (fd < 0) {
		err = -errno;
		drop_tmp(a);
		return err;
	}
	if (a->slot >= 0)
		atomic_store(&pending[a->slot].state, SLOT_LIVE);
	/* mkstemp makes 0600: outputs are for others to read too. */
	if (fchmod(fd, 0644 & ~mask) || !(a->f = fdopen(fd, "w"))) {
		err = -errno;
		close(fd);
		unlink(a->tmp);
		drop_tmp(a);
		return err;
	}
	return 0;
}

int lynx_atomic_file_commit(struct lynx_atomic_file *a)
{
	int err = 0;

	if (ferror(a->f) || fflush(a->f) || fsync(fileno(a->f)))
		err = errno ? -errno : -EIO;
	if (fclose(a->f) && !err)
		err = errno ? -errno : -EIO;
	if (!err && rename(a->tmp, a->path))
		err = -errno;
	if (err)
		unlink(a->tmp);
	drop_tmp(a);
	a->f = NULL;
	return err;
}

void lynx_atomic_file_abort(struct lynx_atomic_file *a)
{
	if (a->f)
		fclose(a->f);
	if (a->tmp)
		unlink(a->tmp);
	drop_tmp(a);
	a->f = NULL;
}

void lynx_atomic_file_unlink_pending(void)
{
	for (int i = 0; i < LYNX_ATOMIC_FILE_SLOTS; i++)
		if (atomic_load(&pending[i].state) == SLOT_LIVE)
			unlink(pending[i].tmp);
}

void lynx_atomic_file_after_fork_in_child(void)
{
	for (int i = 0; i < LYNX_ATOMIC_FILE_SLOTS; i++)
		atomic_store(&pending[i].state, SLOT_FREE);
}

int lynx_atomic_file_write(const char *path, const char *text)
{
	struct lynx_atomic_file a;
	int err = lynx_atomic_file_open(&a, path);

	if (err)
		return err;
	fputs(text, a.f); /* a write error shows in commit's ferror */
	return lynx_atomic_file_commit(&a);
}
