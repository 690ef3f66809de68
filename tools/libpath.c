/* SPDX-License-Identifier: Apache-2.0 */
/* Finds liblynx.so from $LYNX_LIB or from where this program lives. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libpath.h"

/* Copies the absolute, resolved path of a readable regular file into path; or -errno. */
static int resolve_file(const char *candidate, char *path, size_t len)
{
	char resolved[PATH_MAX];
	struct stat st;

	if (!realpath(candidate, resolved))
		return -errno;
	if (stat(resolved, &st))
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EISDIR;
	if (access(resolved, R_OK))
		return -errno;
	if ((size_t)snprintf(path, len, "%s", resolved) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int lynx_libpath_find(char *path, size_t len, char *tried, size_t tried_len)
{
	static const char *const layouts[] = {"liblynx.so", "lib/liblynx.so"};
	const char *env = getenv("LYNX_LIB");
	char exe[PATH_MAX], candidate[PATH_MAX + 32];
	size_t used = 0;
	ssize_t n;
	int err;

	if (tried_len)
		tried[0] = '\0';
	if (env && *env) {
		err = resolve_file(env, path, len);
		if (err)
			snprintf(tried, tried_len, "LYNX_LIB=%s (%s)", env, strerror(-err));
		return err;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n < 0) {
		err = -errno;
		snprintf(tried, tried_len, "/proc/self/exe (%s)", strerror(errno));
		return err;
	}
	exe[n] = '\0';
	/* <prefix>/bin/lynx: cut "/lynx", then "/bin"; the layouts hang off <prefix>. */
	for (int cut = 0; cut < 2; cut++) {
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = '\0';
	}
	err = -ENOENT;
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		snprintf(candidate, sizeof(candidate), "%s/%s", exe, layouts[i]);
		err = resolve_file(candidate, path, len);
		if (!err)
			return 0;
		if (used < tried_len)
			used += snprintf(tried + used, tried_len - used, "%s%s", used ? ", " : "",
			                 candidate);
	}
	return err;
}
