/* SPDX-License-Identifier: Apache-2.0 */
/* Reading whole regular files without blocking: see regular_file.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "regular_file.h"

static const char *kind_of(mode_t mode)
{
	if (S_ISFIFO(mode))
		return "a named pipe";
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "a device";
	if (S_ISSOCK(mode))
		return "a socket";
	return "of another kind";
}

int lynx_regular_file_read(const char *path, size_t max_bytes, char **text, size_t *len, char *why,
                           size_t why_len)
{
	/*
	 * O_NONBLOCK: opening a named pipe for reading blocks until a writer comes, so the
	 * kind is checked on the open descriptor, after an open that cannot wait. On a regular
	 * file the flag changes nothing.
	 */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int err = 0;

	*text = NULL;
	*len = 0;
	if (why_len)
		why[0] = 0;
	if (fd < 0) {
		err = -errno;
		snprintf(why, why_len, "cannot open it: %s", strerror(errno));
		return err;
	}
	if (fstat(fd, &st)) {
		err = -errno;
		snprintf(why, why_len, "cannot stat it: %s", strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		err = -EINVAL;
		snprintf(why, why_len, "it is %s, not a regular file: not read",
		         kind_of(st.st_mode));
	} else if ((unsigned long long)st.st_size > max_bytes) {
		err = -EFBIG;
		snprintf(why, why_len, "it is %lld bytes, over the %zu read at most",
		         (long long)st.st_size, max_bytes);
	} else if (!(buf = malloc((size_t)st.st_size + 1))) {
		err = -ENOMEM;
		snprintf(why, why_len, "out of memory");
	}
	/* The file may shrink or grow while it is read: read what is there, up to the size. */
	while (!err && got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			snprintf(why, why_len, "cannot read it: %s", strerror(errno));
		}
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (err) {
		free(buf);
		return err;
	}
	buf[got] = 0;
	*text = buf;
	*len = got;
	return 0;
}
