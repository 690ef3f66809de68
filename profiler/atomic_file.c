/* SPDX-License-Identifier: Apache-2.0 */
/* Atomic output files: see atomic_file.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"

int lynx_atomic_file_open(struct lynx_atomic_file *a, const char *path)
{
	mode_t mask = umask(0);
	int fd, err;

	umask(mask);
	a->f = NULL;
	a->path = path;
	a->tmp = malloc(strlen(path) + sizeof(".tmp.XXXXXX"));
	if (!a->tmp)
		return -ENOMEM;
	strcpy(a->tmp, path);
	strcat(a->tmp, ".tmp.XXXXXX");
	fd = mkstemp(a->tmp);
	if (fd < 0) {
		err = -errno;
		free(a->tmp);
		a->tmp = NULL;
		return err;
	}
	/* mkstemp makes 0600: outputs are for others to read too. */
	if (fchmod(fd, 0644 & ~mask) || !(a->f = fdopen(fd, "w"))) {
		err = -errno;
		close(fd);
		unlink(a->tmp);
		free(a->tmp);
		a->tmp = NULL;
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
	free(a->tmp);
	a->f = NULL;
	a->tmp = NULL;
	return err;
}

void lynx_atomic_file_abort(struct lynx_atomic_file *a)
{
	if (a->f)
		fclose(a->f);
	if (a->tmp)
		unlink(a->tmp);
	free(a->tmp);
	a->f = NULL;
	a->tmp = NULL;
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
