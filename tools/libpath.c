/* SPDX-License-Identifier: Apache-2.0 */
/* Finds liblynx.so from $LYNX_LIB or from where this program lives. */
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libpath.h"

/* Whether the 64-bit ELF file f (header eh) is a position-independent executable: its
 * dynamic section's DT_FLAGS_1 has DF_1_PIE. */
static bool pie(FILE *f, const Elf64_Ehdr *eh)
{
	for (unsigned i = 0; i < eh->e_phnum && i < 256; i++) {
		Elf64_Phdr ph;
		if (fseek(f, (long)(eh->e_phoff + (Elf64_Off)i * eh->e_phentsize), SEEK_SET) ||
		    fread(&ph, sizeof(ph), 1, f) != 1)
			return false;
		if (ph.p_type != PT_DYNAMIC)
			continue;
		for (Elf64_Xword at = 0; at + sizeof(Elf64_Dyn) <= ph.p_filesz && at < (1u << 20);
		     at += sizeof(Elf64_Dyn)) {
			Elf64_Dyn d;
			if (fseek(f, (long)(ph.p_offset + at), SEEK_SET) ||
			    fread(&d, sizeof(d), 1, f) != 1 || d.d_tag == DT_NULL)
				return false;
			if (d.d_tag == DT_FLAGS_1)
				return d.d_un.d_val & DF_1_PIE;
		}
	}
	return false;
}

/* 0 when path is an ELF shared object that LD_PRELOAD can load (not a program), else
 * -ENOEXEC (or -errno): ld.so would skip it with a line on stderr, and the job would run
 * without Lynx. */
static int shared_object(const char *path)
{
	Elf64_Ehdr eh;
	FILE *f = fopen(path, "rb");
	int err = -ENOEXEC;

	if (!f)
		return -errno;
	if (fread(&eh, sizeof(eh), 1, f) == 1 && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
	    eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_ident[EI_DATA] == ELFDATA2LSB &&
	    eh.e_type == ET_DYN && eh.e_phentsize == sizeof(Elf64_Phdr) && !pie(f, &eh))
		err = 0;
	fclose(f);
	return err;
}

/* Copies the absolute, resolved path of a readable ELF shared object into path; or -errno. */
static int resolve_file(const char *candidate, char *path, size_t len)
{
	char resolved[PATH_MAX];
	struct stat st;
	int err;

	if (!realpath(candidate, resolved))
		return -errno;
	if (stat(resolved, &st))
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EISDIR;
	if (access(resolved, R_OK))
		return -errno;
	if ((err = shared_object(resolved)))
		return err;
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
			snprintf(tried, tried_len, "LYNX_LIB=%s (%s)", env,
			         err == -ENOEXEC ? "not an ELF shared object" : strerror(-err));
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
