/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dlsym, interposed: libraries that look the driver up themselves (the CUDA runtime, NCCL,
 * Triton: dlopen("libcuda.so.1") then dlsym(handle, "cuGetProcAddress_v2")) search that
 * handle only, never the preloaded shim. When such a lookup returns a function Lynx hooks,
 * the answer becomes Lynx's wrapper for exactly that function.
 *
 * Why dlsym rather than dlopen: returning Lynx's own handle from dlopen("libcuda.so.1")
 * would make every later lookup on that handle search Lynx, which exports only the hooked
 * functions; interposing dlsym changes nothing but the answers for hooked functions.
 *
 * RTLD_NEXT and RTLD_DEFAULT lookups depend on their caller, which glibc finds from the
 * return address: they go to the real dlsym as a sibling call (a jump), so the caller stays
 * the caller. An unversioned definition here serves both dlsym@GLIBC_2.2.5 and
 * dlsym@GLIBC_2.34 references. Nothing here initialises Lynx.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "hooks.h"

typedef void *(*dlsym_fn)(void *handle, const char *name);

static dlsym_fn real_dlsym_fn(void)
{
	static dlsym_fn _Atomic real;
	dlsym_fn fn = atomic_load_explicit(&real, memory_order_relaxed);

	if (!fn) {
		fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (!fn)
			fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		atomic_store_explicit(&real, fn, memory_order_relaxed);
	}
	return fn;
}

void *lynx_real_dlsym(void *handle, const char *name)
{
	return real_dlsym_fn()(handle, name);
}

LYNX_EXPORT void *dlsym(void *handle, const char *name)
{
	dlsym_fn real = real_dlsym_fn();

	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT)
		return real(handle, name);
	void *found = real(handle, name);
	/* Only driver and NCCL names can be hooked functions reached through a handle. */
	if (!found || (strncmp(name, "cu", 2) && strncmp(name, "nccl", 4)))
		return found;
	return lynx_wrapper_for(name, found);
}
