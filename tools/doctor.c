/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx doctor`: loads libcuda.so.1, libcudart.so.13 and libnccl.so.2 as the loader finds
 * them (a real install or simgpu), reports paths and versions, and checks every hook of
 * shim/hooks.def: the shim's real-function table must find each one.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "config.h"
#include "doctor.h"
#include "libpath.h"
#include "lynx.h"

enum layer { LAYER_DRIVER, LAYER_RUNTIME, LAYER_NCCL, LAYER_COUNT };
enum variant { VARIANT_PLAIN, VARIANT_PTSZ, VARIANT_PTDS };

/* One row of hooks.def, as far as finding it goes (kind, body, signature do not matter here). */
struct hook {
	enum layer layer;
	const char *symbol, *procname;
	int version;
	enum variant variant;
};

static const struct hook hooks[] = {
#define LYNX_HOOK(layer, symbol, procname, version, variant, ...) \
	{LAYER_##layer, #symbol, #procname, version, VARIANT_##variant},
#include "hooks.def"
#undef LYNX_HOOK
};

#define N_HOOKS (sizeof(hooks) / sizeof(hooks[0]))

enum lib_state { LIB_LOADED, LIB_ABSENT, LIB_BROKEN };

/* A library of one layer, and what loading it told. */
struct lib {
	const char *soname, *what;
	void *handle;
	enum lib_state state;
	char path[PATH_MAX];
	char error[512];
	int version; /* 0 when the version query failed */
};

static struct lib libs[LAYER_COUNT] = {
        [LAYER_DRIVER] = {.soname = "libcuda.so.1", .what = "CUDA driver"},
        [LAYER_RUNTIME] = {.soname = "libcudart.so.13", .what = "CUDA runtime"},
        [LAYER_NCCL] = {.soname = "libnccl.so.2", .what = "NCCL"},
};

static const char *const layer_names[LAYER_COUNT] = {"driver", "runtime", "NCCL"};

typedef CUresult (*get_proc_address_fn)(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult *status);

/* What the run found; the exit status follows from failures. */
struct tally {
	int failures, warnings;
	bool verbose;
};

static void vrow(const char *component, const char *status, const char *fmt, va_list ap)
        __attribute__((format(printf, 3, 0)));

static void vrow(const char *component, const char *status, const char *fmt, va_list ap)
{
	printf("%-26s %-6s ", component, status);
	vprintf(fmt, ap);
	printf("\n");
}

static void row(struct tally *t, const char *component, const char *status, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void total_row(const char *component, const char *status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* One line of the table. status "FAIL" counts as a problem, "warn" as a warning. */
static void row(struct tally *t, const char *component, const char *status, const char *fmt, ...)
{
	va_list ap;

	if (!strcmp(status, "FAIL"))
		t->failures++;
	else if (!strcmp(status, "warn"))
		t->warnings++;
	va_start(ap, fmt);
	vrow(component, status, fmt, ap);
	va_end(ap);
}

/* A line that sums up rows above it: its status is not counted again. */
static void total_row(const char *component, const char *status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vrow(component, status, fmt, ap);
	va_end(ap);
}

void lynx_doctor_help(FILE *out)
{
	fprintf(out,
	        "Loads %s, %s and %s the way a trainer would\n"
	        "(LD_LIBRARY_PATH, then the loader cache), prints where each one is and its\n"
	        "version, and checks that each of the %zu hooks of shim/hooks.def resolves:\n"
	        "runtime hooks by dlsym; driver hooks by dlsym and by cuGetProcAddress_v2 with\n"
	        "the row's version and stream flag, which must give the same function; NCCL\n"
	        "hooks as p<name> (the strong symbols the shim forwards to). Run under\n"
	        "liblynx.so, it re-executes itself without it first.\n\n"
	        "  -v, --verbose    list every hook, not only those that fail\n"
	        "  --require-nccl   fail when libnccl.so.2 is absent (multi-GPU jobs need it)\n\n"
	        "It fails (exit 1) when the driver or the runtime is absent; when a library is\n"
	        "present but cannot be loaded, or a version cannot be read; when the runtime is\n"
	        "newer than the driver by a major version; when a hook of a loaded library does\n"
	        "not resolve; and when liblynx.so is not found. An absent NCCL is a warning only\n"
	        "(a single-GPU job needs none). A driver hook newer than the driver is skipped.\n"
	        "Bad LYNX_* values are a warning: Lynx runs with the defaults (see lynx env).\n",
	        libs[LAYER_DRIVER].soname, libs[LAYER_RUNTIME].soname, libs[LAYER_NCCL].soname,
	        N_HOOKS);
}

/* dlopens lib; a file the loader cannot find at all is ABSENT, anything else BROKEN. */
static void load(struct lib *lib)
{
	struct link_map *map = NULL;
	const char *err;

	lib->handle = dlopen(lib->soname, RTLD_LAZY | RTLD_LOCAL);
	if (lib->handle) {
		lib->state = LIB_LOADED;
		if (!dlinfo(lib->handle, RTLD_DI_LINKMAP, &map) && map && map->l_name[0]) {
			if (!realpath(map->l_name, lib->path))
				snprintf(lib->path, sizeof(lib->path), "%s", map->l_name);
		} else
			snprintf(lib->path, sizeof(lib->path), "%s", lib->soname);
		return;
	}
	err = dlerror();
	snprintf(lib->error, sizeof(lib->error), "%s", err ? err : "unknown error");
	/* glibc: "<name>: cannot open shared object file: ..." names the file it missed; a
	 * missing dependency of a library it did find names that dependency instead. */
	lib->state = !strncmp(lib->error, lib->soname, strlen(lib->soname)) &&
	                             strstr(lib->error, "cannot open shared object file")
	                     ? LIB_ABSENT
	                     : LIB_BROKEN;
}

/* Calls the version function `name` of lib (int fn(int *), 0 = success) into lib->version. */
static bool query_version(struct lib *lib, const char *name)
{
	int (*fn)(int *) = (int (*)(int *))dlsym(lib->handle, name);
	int version = 0;

	if (!fn || fn(&version) != 0 || version <= 0)
		return false;
	lib->version = version;
	return true;
}

/* "13.0" for CUDA's 13000. */
static void cuda_version_text(int v, char *buf, size_t len)
{
	snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
}

static void report_library(struct tally *t, enum layer layer, bool require_nccl)
{
	static const char *const version_fn[LAYER_COUNT] = {
	        [LAYER_DRIVER] = "cuDriverGetVersion",
	        [LAYER_RUNTIME] = "cudaRuntimeGetVersion",
	        [LAYER_NCCL] = "ncclGetVersion",
	};
	struct lib *lib = &libs[layer];
	char text[32];

	load(lib);
	if (lib->state == LIB_ABSENT) {
		if (layer == LAYER_NCCL && !require_nccl)
			row(t, lib->soname, "warn",
			    "absent: not on the loader path (single-GPU jobs need no NCCL)");
		else if (layer == LAYER_DRIVER)
			row(t, lib->soname, "FAIL",
			    "absent: no NVIDIA driver on the loader path (none installed, or a "
			    "container started without the GPU driver)");
		else if (layer == LAYER_RUNTIME)
			row(t, lib->soname, "FAIL",
			    "absent: not on the loader path (a PyTorch pip wheel brings its own "
			    "under "
			    "site-packages/nvidia/: add that lib directory to LD_LIBRARY_PATH)");
		else
			row(t, lib->soname, "FAIL",
			    "absent: not on the loader path (--require-nccl)");
		return;
	}
	if (lib->state == LIB_BROKEN) {
		row(t, lib->soname, "FAIL", "cannot load: %s", lib->error);
		return;
	}
	if (!query_version(lib, version_fn[layer])) {
		row(t, lib->soname, "FAIL", "%s, but %s fails", lib->path, version_fn[layer]);
		return;
	}
	if (layer == LAYER_NCCL) {
		int v = lib->version, major = v / 10000 ? v / 10000 : v / 1000;
		int minor = v / 10000 ? v % 10000 / 100 : v % 1000 / 100;

		row(t, lib->soname, "ok", "%s, %s %d.%d.%d (%d)", lib->path, lib->what, major,
		    minor, v % 100, v);
		return;
	}
	cuda_version_text(lib->version, text, sizeof(text));
	row(t, lib->soname, "ok", "%s, %s %s (%d)", lib->path, lib->what, text, lib->version);
}

/* The runtime runs on a driver of its major version or newer (minor-version compatibility). */
static void report_versions(struct tally *t)
{
	int driver = libs[LAYER_DRIVER].version, runtime = libs[LAYER_RUNTIME].version;
	char d[32], r[32];

	if (!driver || !runtime)
		return;
	cuda_version_text(driver, d, sizeof(d));
	cuda_version_text(runtime, r, sizeof(r));
	if (runtime / 1000 > driver / 1000)
		row(t, "CUDA versions", "FAIL",
		    "runtime %s needs a driver for CUDA %d or newer; this driver is for %s", r,
		    runtime / 1000, d);
	else if (runtime > driver)
		row(t, "CUDA versions", "warn",
		    "runtime %s on a driver for %s: minor-version compatibility (no PTX JIT of "
		    "newer code)",
		    r, d);
	else
		row(t, "CUDA versions", "ok", "runtime %s on a driver for %s", r, d);
}

/* "cuMemFree_v2 in libcuda.so.1" for a function pointer, as dladdr sees it. */
static void describe(const void *fn, char *buf, size_t len)
{
	Dl_info info;

	if (fn && dladdr(fn, &info) && info.dli_sname) {
		const char *file = info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;

		snprintf(buf, len, "%s in %s", info.dli_sname,
		         file             ? file + 1
		         : info.dli_fname ? info.dli_fname
		                          : "?");
	} else {
		snprintf(buf, len, "%p", fn);
	}
}

/*
 * Checks one hook of a loaded library. Returns the status ("ok", "FAIL", "skip") and writes
 * the detail into buf.
 */
static const char *check_hook(const struct hook *h, get_proc_address_fn get_proc, char *buf,
                              size_t len)
{
	struct lib *lib = &libs[h->layer];
	char name[256], got[PATH_MAX + 256], vtext[32];
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	cuuint64_t flags = h->variant == VARIANT_PLAIN
	                           ? CU_GET_PROC_ADDRESS_LEGACY_STREAM
	                           : CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	const char *flag_name = h->variant == VARIANT_PLAIN ? "legacy" : "per-thread";
	void *direct, *fn = NULL;
	CUresult r;

	snprintf(name, sizeof(name), "%s%s", h->layer == LAYER_NCCL ? "p" : "", h->symbol);
	direct = dlsym(lib->handle, name);
	if (h->layer != LAYER_DRIVER) {
		if (!direct) {
			snprintf(buf, len, "dlsym(%s, %s) finds nothing", lib->soname, name);
			return "FAIL";
		}
		snprintf(buf, len, "dlsym(%s, %s)", lib->soname, name);
		return "ok";
	}
	if (h->version > lib->version) {
		cuda_version_text(h->version, vtext, sizeof(vtext));
		snprintf(buf, len, "needs a driver for CUDA %s", vtext);
		return "skip";
	}
	if (!direct) {
		snprintf(buf, len, "dlsym(%s, %s) finds nothing", lib->soname, name);
		return "FAIL";
	}
	if (!get_proc) {
		snprintf(buf, len, "no cuGetProcAddress_v2 in %s (a driver for CUDA 12.0+ needed)",
		         lib->soname);
		return "FAIL";
	}
	r = get_proc(h->procname, &fn, h->version, flags, &status);
	if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
		snprintf(buf, len, "cuGetProcAddress_v2(%s, %d, %s) fails: result %d, status %d",
		         h->procname, h->version, flag_name, (int)r, (int)status);
		return "FAIL";
	}
	if (fn != direct) {
		describe(fn, got, sizeof(got));
		snprintf(buf, len, "cuGetProcAddress_v2(%s, %d, %s) gives %s, not %s", h->procname,
		         h->version, flag_name, got, name);
		return "FAIL";
	}
	snprintf(buf, len, "dlsym and cuGetProcAddress_v2(%s, %d, %s) agree", h->procname,
	         h->version, flag_name);
	return "ok";
}

/* Checks every hook of a layer: failures always listed, the rest with --verbose. */
static void report_hooks(struct tally *t, enum layer layer)
{
	struct lib *lib = &libs[layer];
	get_proc_address_fn get_proc = NULL;
	int total = 0, resolved = 0, skipped = 0;
	char component[128], detail[2 * PATH_MAX + 512];

	for (size_t i = 0; i < N_HOOKS; i++)
		total += hooks[i].layer == layer;
	if (!total)
		return;
	snprintf(component, sizeof(component), "%s hooks", layer_names[layer]);
	if (lib->state != LIB_LOADED || !lib->version) {
		row(t, component, "skip", "%d not checked: %s not loaded", total, lib->soname);
		return;
	}
	if (layer == LAYER_DRIVER)
		get_proc = (get_proc_address_fn)dlsym(lib->handle, "cuGetProcAddress_v2");
	for (size_t i = 0; i < N_HOOKS; i++) {
		const struct hook *h = &hooks[i];
		const char *status;

		if (h->layer != layer)
			continue;
		status = check_hook(h, get_proc, detail, sizeof(detail));
		resolved += !strcmp(status, "ok");
		skipped += !strcmp(status, "skip");
		if (t->verbose || strcmp(status, "ok")) {
			snprintf(component, sizeof(component), "  %s", h->symbol);
			row(t, component, status, "%s", detail);
		}
	}
	snprintf(component, sizeof(component), "%s hooks", layer_names[layer]);
	if (skipped)
		total_row(component, resolved + skipped == total ? "ok" : "FAIL",
		          "%d of %d resolve in %s, %d skipped (newer than this driver)", resolved,
		          total, lib->soname, skipped);
	else
		total_row(component, resolved == total ? "ok" : "FAIL", "%d of %d resolve in %s",
		          resolved, total, lib->soname);
}

static const char *lookup_env(const char *name)
{
	return getenv(name);
}

/* liblynx.so as `lynx run` would find it, and the LYNX_* settings it would read. */
static void report_lynx(struct tally *t)
{
	char path[PATH_MAX], tried[2 * PATH_MAX + 64], mode[32];
	struct lynx_config cfg;
	int refused;

	if (lynx_libpath_find(path, sizeof(path), tried, sizeof(tried)))
		row(t, "liblynx.so", "FAIL", "not found (looked at %s); set LYNX_LIB", tried);
	else
		row(t, "liblynx.so", "ok", "%s", path);
	refused = lynx_config_parse(&cfg, lookup_env, NULL);
	lynx_config_format(&cfg, LYNX_OPT_LYNX_MODE, mode, sizeof(mode));
	if (refused)
		row(t, "LYNX_* settings", "warn",
		    "%d bad value%s, defaults used instead (lynx env)", refused,
		    refused == 1 ? "" : "s");
	else
		row(t, "LYNX_* settings", "ok", "LYNX_MODE=%s", mode);
}

/*
 * With liblynx.so preloaded (`lynx run -- lynx doctor`, or an exported LD_PRELOAD), dlsym
 * and cuGetProcAddress answer with Lynx's own wrappers. Re-executes this program without
 * it; returns only when nothing needs dropping, or the exec failed (the checks then show
 * what they see). Drops entries named liblynx*.
 */
static void drop_lynx_preload(int argc, char **argv)
{
	const char *env = getenv("LD_PRELOAD");
	char *old = env ? strdup(env) : NULL, *kept = NULL, *p, **args = NULL;
	bool dropped = false;

	if (!old)
		return;
	kept = p = malloc(strlen(old) + 1);
	args = malloc(((size_t)argc + 2) * sizeof(*args));
	if (!kept || !args)
		goto out_free;
	*kept = '\0';
	for (const char *at = old; *at;) {
		size_t len = strcspn(at, ": ");
		const char *base = memrchr(at, '/', len);

		base = base ? base + 1 : at;
		if (len && !strncmp(base, "liblynx", 7))
			dropped = true;
		else if (len)
			p += sprintf(p, "%s%.*s", p == kept ? "" : ":", (int)len, at);
		at += len + (at[len] != '\0');
	}
	if (!dropped)
		goto out_free;
	if (p == kept ? unsetenv("LD_PRELOAD") : setenv("LD_PRELOAD", kept, 1))
		goto out_free;
	args[0] = "lynx";
	memcpy(args + 1, argv, argc * sizeof(*args));
	args[argc + 1] = NULL;
	execv("/proc/self/exe", args);
	setenv("LD_PRELOAD", old, 1);
out_free:
	free(args);
	free(kept);
	free(old);
}

int lynx_doctor_main(int argc, char **argv)
{
	struct tally t = {0};
	bool require_nccl = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return lynx_command_help("doctor");
		else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose"))
			t.verbose = true;
		else if (!strcmp(argv[i], "--require-nccl"))
			require_nccl = true;
		else
			return lynx_usage_error("doctor", "unknown argument '%s'", argv[i]);
	}
	drop_lynx_preload(argc, argv);

	printf("%-26s %-6s %s\n", "COMPONENT", "STATUS", "DETAIL");
	for (int layer = 0; layer < LAYER_COUNT; layer++)
		report_library(&t, (enum layer)layer, require_nccl);
	report_versions(&t);
	for (int layer = 0; layer < LAYER_COUNT; layer++)
		report_hooks(&t, (enum layer)layer);
	report_lynx(&t);

	if (t.failures)
		printf("doctor: %d problem%s: a trainer cannot run under Lynx here\n", t.failures,
		       t.failures == 1 ? "" : "s");
	else
		printf("doctor: ok: %zu hooks checked%s\n", N_HOOKS,
		       t.warnings ? " (see the warnings above)" : "");
	return t.failures ? LYNX_EXIT_FAIL : LYNX_EXIT_OK;
}
