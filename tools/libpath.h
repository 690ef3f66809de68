/* SPDX-License-Identifier: Apache-2.0 */
/* Where liblynx.so is, for `lynx run` (to preload it) and `lynx doctor` (to report it). */
#ifndef LYNX_LIBPATH_H
#define LYNX_LIBPATH_H

#include <stddef.h>

/*
 * Finds liblynx.so: $LYNX_LIB when set (and then only there), else beside the directory of
 * this program (<bin>/../liblynx.so: the build tree, build/bin/lynx and build/liblynx.so),
 * else <bin>/../lib/liblynx.so (an install under a prefix). <bin> comes from
 * /proc/self/exe, so a symlink to lynx or a relative argv[0] does not matter.
 * The file must be an ELF shared object, which LD_PRELOAD can load (ld.so skips anything
 * else with a line on stderr, and the job would run without Lynx).
 * On success writes the absolute path (symlinks resolved) into path and returns 0. On
 * failure returns -ENOENT, -ENOEXEC (not a shared object) or -errno, and writes the places
 * it looked at into tried.
 */
int lynx_libpath_find(char *path, size_t len, char *tried, size_t tried_len);

#endif /* LYNX_LIBPATH_H */
