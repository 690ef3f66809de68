/* SPDX-License-Identifier: Apache-2.0 */
/* Runtime core: loading the driver, per-thread state, errors, versions, entry points. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * CUresult -> cudaError_t, as the real runtime translates what its driver calls return.
 * Anything not listed becomes cudaErrorUnknown. Launches translate
 * CUDA_ERROR_INVALID_HANDLE themselves (see runtime_exec.c).
 */
#define SIMGPU_RUNTIME_RESULTS(X)                                                    \
	X(CUDA_SUCCESS, cudaSuccess)                                                 \
	X(CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue)                           \
	X(CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation)                       \
	X(CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError)                  \
	X(CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading)                        \
	X(CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice)                                   \
	X(CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice)                         \
	X(CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized)                  \
	X(CUDA_ERROR_CONTEXT_IS_DESTROYED, cudaErrorContextIsDestroyed)              \
	X(CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle)                 \
	X(CUDA_ERROR_ILLEGAL_STATE, cudaErrorIllegalState)                           \
	X(CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound)                             \
	X(CUDA_ERROR_NOT_READY, cudaErrorNotReady)                                   \
	X(CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress)                       \
	X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, cudaErrorLaunchOutOfResources)         \
	X(CUDA_ERROR_LAUNCH_FAILED, cudaErrorLaunchFailure)                          \
	X(CUDA_ERROR_OPERATING_SYSTEM, cudaErrorOperatingSystem)                     \
	X(CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted)                           \
	X(CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported)                           \
	X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, cudaErrorSystemDriverMismatch)          \
	X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cudaErrorStreamCaptureUnsupported)  \
	X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cudaErrorStreamCaptureInvalidated)  \
	X(CUDA_ERROR_STREAM_CAPTURE_MERGE, cudaErrorStreamCaptureMerge)              \
	X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, cudaErrorStreamCaptureUnmatched)      \
	X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, cudaErrorStreamCaptureUnjoined)        \
	X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, cudaErrorStreamCaptureIsolation)      \
	X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cudaErrorStreamCaptureImplicit)        \
	X(CUDA_ERROR_CAPTURED_EVENT, cudaErrorCapturedEvent)                         \
	X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, cudaErrorStreamCaptureWrongThread) \
	X(CUDA_ERROR_TIMEOUT, cudaErrorTimeout)                                      \
	X(CUDA_ERROR_UNKNOWN, cudaErrorUnknown)

/* Every error this runtime can return, with the real runtime's description. */
#define SIMGPU_RUNTIME_ERRORS(X)                                                                 \
	X(cudaSuccess, "no error")                                                               \
	X(cudaErrorInvalidValue, "invalid argument")                                             \
	X(cudaErrorMemoryAllocation, "out of memory")                                            \
	X(cudaErrorInitializationError, "initialization error")                                  \
	X(cudaErrorCudartUnloading, "driver shutting down")                                      \
	X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                  \
	X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime "   \
	                               "version")                                                \
	X(cudaErrorInvalidDeviceFunction, "invalid device function")                             \
	X(cudaErrorNoDevice, "no CUDA-capable device is detected")                               \
	X(cudaErrorInvalidDevice, "invalid device ordinal")                                      \
	X(cudaErrorDeviceUninitialized, "invalid device context")                                \
	X(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS")      \
	X(cudaErrorInvalidResourceHandle, "invalid resource handle")                             \
	X(cudaErrorIllegalState, "the operation cannot be performed in the present state")       \
	X(cudaErrorSymbolNotFound, "named symbol not found")                                     \
	X(cudaErrorNotReady, "device not ready")                                                 \
	X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                   \
	X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")              \
	X(cudaErrorContextIsDestroyed, "context is destroyed")                                   \
	X(cudaErrorLaunchFailure, "unspecified launch failure")                                  \
	X(cudaErrorNotPermitted, "operation not permitted")                                      \
	X(cudaErrorNotSupported, "operation not supported")                                      \
	X(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver "  \
	                                 "combination")                                          \
	X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing") \
	X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during "  \
	                                     "capture")                                          \
	X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture "  \
	                               "sequences")                                              \
	X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it "     \
	                                   "began")                                              \
	X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                  \
	X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another "   \
	                                   "stream")                                             \
	X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a "  \
	                                  "capturing blocking stream")                           \
	X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a "      \
	                          "capturing stream")                                            \
	X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture "      \
	                                     "sequence from another thread")                     \
	X(cudaErrorTimeout, "timeout expired")                                                   \
	X(cudaErrorUnknown, "unknown error")

/* Where each driver function goes in a table: generated from the one list. */
static const struct driver_call {
	const char *procname;
	size_t offset;
} driver_calls[] = {
#define DRIVER_CALL(field, procname, pfn) {procname, offsetof(struct simgpu_runtime_driver, field)},
        SIMGPU_RUNTIME_DRIVER_CALLS(DRIVER_CALL)
#undef DRIVER_CALL
};

/* Written once by runtime_init (under init_once), read-only afterwards. */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static cudaError_t init_status;
static struct simgpu_runtime_driver driver_legacy;
static struct simgpu_runtime_driver driver_per_thread;
static int device_count;
static CUdevice *devices;
/*
 * Primary context of each device, retained on first use. Two threads may race to retain
 * the same one; both get the same context and the loser's extra reference is harmless
 * (the runtime never releases a primary context), so no lock is needed.
 */
static _Atomic(CUcontext) *primary_contexts;

static __thread int thread_device;
/* Device whose primary context this thread has made current; -1 for none yet. */
static __thread int thread_bound_device = -1;
static __thread cudaError_t thread_last_error;

/* One line on stderr, one write(2), so lines of concurrent processes do not mix. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n = snprintf(line, sizeof(line), "simgpu[%d] libcudart: ", (int)getpid());

	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	if (write(STDERR_FILENO, line, strlen(line)) < 0)
		return; /* nowhere left to report to */
}

static const char *driver_error_name(CUresult res)
{
	const char *name = NULL;

	if (!driver_legacy.cuGetErrorName || driver_legacy.cuGetErrorName(res, &name) || !name)
		return "unrecognized CUresult";
	return name;
}

/* Fills one table from cuGetProcAddress_v2; -ENOENT (reported) if a function is missing. */
static int resolve(struct simgpu_runtime_driver *drv, PFN_cuGetProcAddress_v12000 get_proc,
                   cuuint64_t flags)
{
	for (size_t i = 0; i < ARRAY_SIZE(driver_calls); i++) {
		CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		void *pfn = NULL;
		CUresult res =
		        get_proc(driver_calls[i].procname, &pfn, CUDART_VERSION, flags, &found);

		if (res != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !pfn) {
			report("cuGetProcAddress_v2(\"%s\", %d, flags %llu) found no function "
			       "(result %d, status %d)",
			       driver_calls[i].procname, CUDART_VERSION, (unsigned long long)flags,
			       (int)res, (int)found);
			return -ENOENT;
		}
		memcpy((char *)drv + driver_calls[i].offset, &pfn, sizeof(pfn));
	}
	return 0;
}

/*
 * dlopen("libcuda.so.1") by its plain name, as the real runtime does (and as a shim that
 * watches dlopen expects), then beside this library: glibc searches the run path
 * ($ORIGIN) of the object that calls dlopen, and under a sanitizer that object is the
 * sanitizer's interceptor, not libcudart.
 */
static void *open_driver(void)
{
	const char *slash;
	char path[PATH_MAX], first_error[256];
	Dl_info self;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);

	if (lib)
		return lib;
	snprintf(first_error, sizeof(first_error), "%s", dlerror());
	if (dladdr((void *)open_driver, &self) && self.dli_fname &&
	    (slash = strrchr(self.dli_fname, '/'))) {
		snprintf(path, sizeof(path), "%.*s/libcuda.so.1", (int)(slash - self.dli_fname),
		         self.dli_fname);
		lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	}
	if (!lib)
		report("cannot load libcuda.so.1: %s", first_error);
	return lib;
}

/* dlopen, then both tables. The handle stays open for the life of the process. */
static cudaError_t load_driver(void)
{
	PFN_cuGetProcAddress_v12000 get_proc;
	void *lib = open_driver();

	if (!lib)
		return cudaErrorInsufficientDriver;
	get_proc = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
	if (!get_proc) {
		report("libcuda.so.1 has no cuGetProcAddress_v2");
		return cudaErrorInsufficientDriver;
	}
	if (resolve(&driver_legacy, get_proc, CU_GET_PROC_ADDRESS_LEGACY_STREAM) ||
	    resolve(&driver_per_thread, get_proc, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
		return cudaErrorInsufficientDriver;
	return cudaSuccess;
}

/* cuInit and the device handles. A failed cuInit is an initialisation error, as in CUDA,
 * unless it says that there is no device or no usable driver. */
static cudaError_t init_devices(void)
{
	const struct simgpu_runtime_driver *drv = &driver_legacy;
	CUresult res = drv->cuInit(0);
	int count = 0;

	if (res != CUDA_SUCCESS) {
		report("cuInit failed: %s", driver_error_name(res));
		if (res == CUDA_ERROR_NO_DEVICE || res == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
			return simgpu_runtime_result(res);
		return cudaErrorInitializationError;
	}
	res = drv->cuDeviceGetCount(&count);
	if (res != CUDA_SUCCESS || count <= 0) {
		report("cuDeviceGetCount found no device: %s", driver_error_name(res));
		return res == CUDA_SUCCESS ? cudaErrorNoDevice : cudaErrorInitializationError;
	}
	devices = calloc((size_t)count, sizeof(*devices));
	primary_contexts = calloc((size_t)count, sizeof(*primary_contexts));
	if (!devices || !primary_contexts) {
		report("out of host memory for %d devices", count);
		goto out_free;
	}
	for (int i = 0; i < count; i++) {
		res = drv->cuDeviceGet(&devices[i], i);
		if (res != CUDA_SUCCESS) {
			report("cuDeviceGet(%d) failed: %s", i, driver_error_name(res));
			goto out_free;
		}
	}
	device_count = count;
	return cudaSuccess;

out_free:
	free(primary_contexts);
	primary_contexts = NULL;
	free(devices);
	devices = NULL;
	return cudaErrorInitializationError;
}

static void runtime_init(void)
{
	init_status = load_driver();
	if (init_status == cudaSuccess)
		init_status = init_devices();
}

/* Makes the primary context of the thread's device current on this thread, once per
 * device change: a thread starts on device 0 with no context, as in CUDA. */
static cudaError_t bind_thread(void)
{
	int device = thread_device;
	CUcontext ctx;
	CUresult res;

	if (thread_bound_device == device)
		return cudaSuccess;
	ctx = atomic_load(&primary_contexts[device]);
	if (!ctx) {
		res = driver_legacy.cuDevicePrimaryCtxRetain(&ctx, devices[device]);
		if (res != CUDA_SUCCESS)
			return simgpu_runtime_result(res);
		atomic_store(&primary_contexts[device], ctx);
	}
	res = driver_legacy.cuCtxSetCurrent(ctx);
	if (res != CUDA_SUCCESS)
		return simgpu_runtime_result(res);
	thread_bound_device = device;
	return cudaSuccess;
}

cudaError_t simgpu_runtime_enter(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                 const struct simgpu_runtime_driver **drv)
{
	int fault = simgpu_api_enter(id);
	cudaError_t err;

	if (fault)
		return simgpu_runtime_fail((cudaError_t)fault);
	pthread_once(&init_once, runtime_init);
	if (init_status != cudaSuccess)
		return simgpu_runtime_fail(init_status);
	if (need != SIMGPU_RUNTIME_NO_CONTEXT) {
		err = bind_thread();
		if (err != cudaSuccess)
			return err;
	}
	*drv = need == SIMGPU_RUNTIME_PER_THREAD ? &driver_per_thread : &driver_legacy;
	return cudaSuccess;
}

cudaError_t simgpu_runtime_fail(cudaError_t err)
{
	if (err != cudaSuccess && err != cudaErrorNotReady)
		thread_last_error = err;
	return err;
}

cudaError_t simgpu_runtime_result(CUresult res)
{
	switch (res) {
#define RESULT_CASE(cu, rt) \
	case cu:            \
		return simgpu_runtime_fail(rt);
		SIMGPU_RUNTIME_RESULTS(RESULT_CASE)
#undef RESULT_CASE
	default:
		return simgpu_runtime_fail(cudaErrorUnknown);
	}
}

int simgpu_runtime_device(void)
{
	return thread_device;
}

bool simgpu_runtime_device_handle(int device, CUdevice *out)
{
	if (device < 0 || device >= device_count)
		return false;
	*out = devices[device];
	return true;
}

cudaError_t simgpu_runtime_set_device(int device)
{
	CUdevice handle;

	if (!simgpu_runtime_device_handle(device, &handle))
		return simgpu_runtime_fail(cudaErrorInvalidDevice);
	thread_device = device;
	return bind_thread();
}

int simgpu_runtime_device_count(void)
{
	return device_count;
}

/* ---- Errors ---------------------------------------------------------------------------- */

SIMGPU_EXPORT cudaError_t cudaGetLastError(void)
{
	int fault = simgpu_api_enter(SIMGPU_API_cudaGetLastError);
	cudaError_t err = thread_last_error;

	if (fault)
		return simgpu_runtime_fail((cudaError_t)fault);
	thread_last_error = cudaSuccess;
	return err;
}

SIMGPU_EXPORT cudaError_t cudaPeekAtLastError(void)
{
	int fault = simgpu_api_enter(SIMGPU_API_cudaPeekAtLastError);

	if (fault)
		return simgpu_runtime_fail((cudaError_t)fault);
	return thread_last_error;
}

SIMGPU_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
	simgpu_api_enter(SIMGPU_API_cudaGetErrorName); /* no error to return a fault through */
	switch (error) {
#define NAME_CASE(err, text) \
	case err:            \
		return #err;
		SIMGPU_RUNTIME_ERRORS(NAME_CASE)
#undef NAME_CASE
	default:
		return "unrecognized error code";
	}
}

SIMGPU_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
	simgpu_api_enter(SIMGPU_API_cudaGetErrorString); /* no error to return a fault through */
	switch (error) {
#define STRING_CASE(err, text) \
	case err:              \
		return text;
		SIMGPU_RUNTIME_ERRORS(STRING_CASE)
#undef STRING_CASE
	default:
		return "unrecognized error code";
	}
}

/* ---- Versions -------------------------------------------------------------------------- */

SIMGPU_EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaDriverGetVersion,
	                                       SIMGPU_RUNTIME_NO_CONTEXT, &drv);

	if (err != cudaSuccess)
		return err;
	if (!driverVersion)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	return simgpu_runtime_result(drv->cuDriverGetVersion(driverVersion));
}

SIMGPU_EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	int fault = simgpu_api_enter(SIMGPU_API_cudaRuntimeGetVersion);

	if (fault)
		return simgpu_runtime_fail((cudaError_t)fault);
	if (!runtimeVersion)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

/* ---- Driver entry points --------------------------------------------------------------- */

/*
 * cudaGetDriverEntryPoint*: flags name the stream semantics the caller wants.
 * cudaEnableDefault means what the caller was compiled for, which the entry point tells:
 * per-thread for the _ptsz forms, legacy otherwise.
 */
static cudaError_t entry_point(enum simgpu_api_id id, const char *symbol, void **funcPtr,
                               int version, unsigned long long flags, bool per_thread_default,
                               enum cudaDriverEntryPointQueryResult *driverStatus)
{
	const struct simgpu_runtime_driver *drv;
	CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	cuuint64_t cu_flags;
	CUresult res;
	cudaError_t err = simgpu_runtime_enter(id, SIMGPU_RUNTIME_NO_CONTEXT, &drv);

	if (err != cudaSuccess)
		return err;
	if (!symbol || !funcPtr)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	switch (flags) {
	case cudaEnableDefault:
		cu_flags = per_thread_default ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
		                              : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
		break;
	case cudaEnableLegacyStream:
		cu_flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
		break;
	case cudaEnablePerThreadDefaultStream:
		cu_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
		break;
	default:
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	}
	res = drv->cuGetProcAddress_v2(symbol, funcPtr, version, cu_flags, &found);
	if (res != CUDA_SUCCESS)
		return simgpu_runtime_result(res);
	if (driverStatus) {
		switch (found) {
		case CU_GET_PROC_ADDRESS_SUCCESS:
			*driverStatus = cudaDriverEntryPointSuccess;
			break;
		case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
			*driverStatus = cudaDriverEntryPointVersionNotSufficent;
			break;
		default:
			*driverStatus = cudaDriverEntryPointSymbolNotFound;
			break;
		}
	}
	return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t
cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                        enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(SIMGPU_API_cudaGetDriverEntryPoint, symbol, funcPtr, CUDART_VERSION,
	                   flags, false, driverStatus);
}

SIMGPU_EXPORT cudaError_t
cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                             enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(SIMGPU_API_cudaGetDriverEntryPoint_ptsz, symbol, funcPtr, CUDART_VERSION,
	                   flags, true, driverStatus);
}

SIMGPU_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
        const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
        enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(SIMGPU_API_cudaGetDriverEntryPointByVersion, symbol, funcPtr,
	                   (int)cudaVersion, flags, false, driverStatus);
}

SIMGPU_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
        const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
        enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(SIMGPU_API_cudaGetDriverEntryPointByVersion_ptsz, symbol, funcPtr,
	                   (int)cudaVersion, flags, true, driverStatus);
}
