/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu driver: modules and libraries. An image is a text listing registered kernel
 * names (core.h, docs/simgpu.md); the CUfunction or CUkernel found in it is the registered
 * kernel's own handle, so launches and kernel metadata work on it as on any other. JIT and
 * library options mean nothing without code: they are checked for shape and ignored.
 */
#include "driver.h"

/* An option count needs both arrays, as CUDA requires. */
static bool options_valid(unsigned int count, const void *options, void *const *values)
{
	return !count || (options && values);
}

/* The handles are opaque pointers of the core (struct simgpu_image): assigned, never cast
 * through a pointer to pointer. */
static CUresult load_module(CUmodule *module, const void *image)
{
	void *handle;
	CUresult res = simgpu_image_load(&handle, image, SIMGPU_IMAGE_MODULE);

	if (res == CUDA_SUCCESS)
		*module = handle;
	return res;
}

static CUresult load_library(CUlibrary *library, const void *code)
{
	void *handle;
	CUresult res = simgpu_image_load(&handle, code, SIMGPU_IMAGE_LIBRARY);

	if (res == CUDA_SUCCESS)
		*library = handle;
	return res;
}

/* ---- Modules ---------------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuModuleLoadData);

	if (err)
		return err;
	if (!module)
		return CUDA_ERROR_INVALID_VALUE;
	return load_module(module, image);
}
SIMGPU_DRIVER_LOCAL_NAME(cuModuleLoadData);

SIMGPU_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                                          unsigned int numOptions, CUjit_option *options,
                                          void **optionValues)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuModuleLoadDataEx);

	if (err)
		return err;
	if (!module || !options_valid(numOptions, options, optionValues))
		return CUDA_ERROR_INVALID_VALUE;
	return load_module(module, image);
}
SIMGPU_DRIVER_LOCAL_NAME(cuModuleLoadDataEx);

SIMGPU_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuModuleGetFunction);
	struct simgpu_kernel *kernel;

	if (err)
		return err;
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	err = simgpu_image_kernel(hmod, SIMGPU_IMAGE_MODULE, name, &kernel);
	if (err == CUDA_SUCCESS)
		*hfunc = (CUfunction)kernel;
	return err;
}
SIMGPU_DRIVER_LOCAL_NAME(cuModuleGetFunction);

/* The functions found in the module stay valid: they are registered kernels. */
SIMGPU_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuModuleUnload);

	if (err)
		return err;
	return simgpu_image_unload(hmod, SIMGPU_IMAGE_MODULE);
}
SIMGPU_DRIVER_LOCAL_NAME(cuModuleUnload);

/* ---- Libraries -------------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
                                         CUjit_option *jitOptions, void **jitOptionsValues,
                                         unsigned int numJitOptions,
                                         CUlibraryOption *libraryOptions,
                                         void **libraryOptionValues, unsigned int numLibraryOptions)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLibraryLoadData);

	if (err)
		return err;
	if (!library || !options_valid(numJitOptions, jitOptions, jitOptionsValues) ||
	    !options_valid(numLibraryOptions, libraryOptions, libraryOptionValues))
		return CUDA_ERROR_INVALID_VALUE;
	return load_library(library, code);
}
SIMGPU_DRIVER_LOCAL_NAME(cuLibraryLoadData);

SIMGPU_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLibraryGetKernel);
	struct simgpu_kernel *kernel;

	if (err)
		return err;
	if (!pKernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	err = simgpu_image_kernel(library, SIMGPU_IMAGE_LIBRARY, name, &kernel);
	if (err == CUDA_SUCCESS)
		*pKernel = (CUkernel)kernel;
	return err;
}
SIMGPU_DRIVER_LOCAL_NAME(cuLibraryGetKernel);

/* The kernels found in the library stay valid: they are registered kernels. */
SIMGPU_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLibraryUnload);

	if (err)
		return err;
	return simgpu_image_unload(library, SIMGPU_IMAGE_LIBRARY);
}
SIMGPU_DRIVER_LOCAL_NAME(cuLibraryUnload);
