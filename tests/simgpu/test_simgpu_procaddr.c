/* SPDX-License-Identifier: Apache-2.0 */
/* Tests simgpu's libcuda.so.1: what cuGetProcAddress answers, and the driver behind it. */
#define _GNU_SOURCE /* dladdr */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simgpu.h"

#define PER_THREAD CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

/* Every DRIVER row of api.def: looking up (procname, version, variant) gives symbol. */
struct driver_row {
	const char *symbol;
	const char *procname;
	int version;
	bool per_thread;
};

#define ROW_PER_THREAD_PLAIN false
#define ROW_PER_THREAD_PTSZ true
#define ROW_PER_THREAD_PTDS true
#define ROW_DRIVER(symbol, procname, version, per_thread) {symbol, procname, version, per_thread},
#define ROW_RUNTIME(symbol, procname, version, per_thread)
#define ROW_NCCL(symbol, procname, version, per_thread)
static const struct driver_row driver_rows[] = {
#define SIMGPU_API(layer, symbol, procname, version, variant, cost) \
	ROW_##layer(#symbol, #procname, version, ROW_PER_THREAD_##variant)
#include "api.def"
#undef SIMGPU_API
};

static void *libcuda;
static PFN_cuGetProcAddress_v12000 get_proc;
/* Set once a test has called cuInit in this process; the before-init test needs it false. */
static bool driver_initialised;

/*
 * libcuda.so.1 through the binary's run path; failing that, beside libsimgpu.so. The
 * fallback is for ASan builds: its dlopen interceptor becomes the caller, whose run
 * path glibc then searches instead of ours.
 */
static void *open_libcuda(void)
{
	char path[4096];
	const char *slash;
	Dl_info info;
	void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (handle || !dladdr((void *)simgpu_counter, &info) || !info.dli_fname)
		return handle;
	slash = strrchr(info.dli_fname, '/');
	if (!slash)
		return NULL;
	snprintf(path, sizeof(path), "%.*s/libcuda.so.1", (int)(slash - info.dli_fname),
	         info.dli_fname);
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static int group_setup(void **state)
{
	libcuda = open_libcuda();
	if (!libcuda) {
		fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
		return -1;
	}
	get_proc = (PFN_cuGetProcAddress_v12000)dlsym(libcuda, "cuGetProcAddress_v2");
	return get_proc ? 0 : -1;
}

static int group_teardown(void **state)
{
	if (libcuda)
		dlclose(libcuda);
	return 0;
}

static void *exported(const char *symbol)
{
	void *fn = dlsym(libcuda, symbol);

	if (!fn)
		fail_msg("libcuda.so.1 does not export %s", symbol);
	return fn;
}

/* The entry point for procname at cudaVersion 13000 and the default flags; fails if none. */
static void *driver_fn(const char *procname)
{
	CUdriverProcAddressQueryResult status;
	void *fn = NULL;

	if (get_proc(procname, &fn, 13000, 0, &status) != CUDA_SUCCESS || !fn)
		fail_msg("cuGetProcAddress(%s) failed", procname);
	return fn;
}

static void assert_resolves(const char *procname, int version, cuuint64_t flags, const char *symbol)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	void *want = exported(symbol);
	void *fn = NULL;
	CUresult res = get_proc(procname, &fn, version, flags, &status);

	if (res != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || fn != want)
		fail_msg("%s at %d, flags %llu: result %d, status %d, %p; want %s at %p", procname,
		         version, (unsigned long long)flags, res, status, fn, symbol, want);
}

static void assert_not_found(const char *procname, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult want_status)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
	void *fn = &fn;
	CUresult res = get_proc(procname, &fn, version, flags, &status);

	/* cuda.h: not found is CUDA_SUCCESS with a NULL pointer; the status says why. */
	if (res != CUDA_SUCCESS || status != want_status || fn != NULL)
		fail_msg("\"%s\" at %d: result %d, status %d, %p; want success, status %d, NULL",
		         procname, version, res, status, fn, want_status);
}

static void init_driver(void)
{
	PFN_cuInit_v2000 init = (PFN_cuInit_v2000)driver_fn("cuInit");

	assert_int_equal(init(0), CUDA_SUCCESS);
	driver_initialised = true;
}

/* ---- Before cuInit, in a child process ------------------------------------------------- */

/*
 * The child must not use cmocka's asserts: a failure would jump back into the child's
 * copy of the test runner. It prints the first failed check and exits with 1 instead.
 */
static int child_fail(const char *what, CUresult res)
{
	fprintf(stderr, "child: %s (result %d)\n", what, res);
	return 1;
}

/* cuGetProcAddress at 13000, default flags; NULL on failure. */
static void *child_fn(const char *procname)
{
	void *fn = NULL;

	if (get_proc(procname, &fn, 13000, 0, NULL) != CUDA_SUCCESS)
		return NULL;
	return fn;
}

/*
 * Lookups and the version and error queries work before cuInit; everything else
 * answers CUDA_ERROR_NOT_INITIALIZED until cuInit(0) succeeds, a refused cuInit(1)
 * included. Returns 0, or 1 after printing the first failed check.
 */
static int child_before_init(void)
{
	PFN_cuInit_v2000 init = (PFN_cuInit_v2000)child_fn("cuInit");
	PFN_cuDriverGetVersion_v2020 version =
	        (PFN_cuDriverGetVersion_v2020)child_fn("cuDriverGetVersion");
	PFN_cuGetErrorName_v6000 error_name = (PFN_cuGetErrorName_v6000)child_fn("cuGetErrorName");
	PFN_cuDeviceGetCount_v2000 count = (PFN_cuDeviceGetCount_v2000)child_fn("cuDeviceGetCount");
	PFN_cuMemAlloc_v3020 mem_alloc = (PFN_cuMemAlloc_v3020)child_fn("cuMemAlloc");
	PFN_cuCtxSynchronize_v2000 ctx_sync =
	        (PFN_cuCtxSynchronize_v2000)child_fn("cuCtxSynchronize");
	PFN_cuMemGetAddressRange_v3020 address_range =
	        (PFN_cuMemGetAddressRange_v3020)child_fn("cuMemGetAddressRange");
	const char *name = NULL;
	CUdeviceptr ptr;
	int n = 0;
	CUresult res;

	if (!init || init != dlsym(libcuda, "cuInit"))
		return child_fail("cuGetProcAddress(cuInit) before cuInit", CUDA_ERROR_NOT_FOUND);
	if (!version || !error_name || !count || !mem_alloc || !ctx_sync || !address_range)
		return child_fail("cuGetProcAddress before cuInit", CUDA_ERROR_NOT_FOUND);
	res = version(&n);
	if (res != CUDA_SUCCESS || n != 13000)
		return child_fail("cuDriverGetVersion before cuInit", res);
	res = error_name(CUDA_ERROR_NOT_INITIALIZED, &name);
	if (res != CUDA_SUCCESS || !name || strcmp(name, "CUDA_ERROR_NOT_INITIALIZED") != 0)
		return child_fail("cuGetErrorName before cuInit", res);
	res = count(&n);
	if (res != CUDA_ERROR_NOT_INITIALIZED)
		return child_fail("cuDeviceGetCount before cuInit", res);
	res = mem_alloc(&ptr, 4096);
	if (res != CUDA_ERROR_NOT_INITIALIZED)
		return child_fail("cuMemAlloc_v2 before cuInit", res);
	res = address_range(NULL, NULL, 0);
	if (res != CUDA_ERROR_NOT_INITIALIZED)
		return child_fail("cuMemGetAddressRange_v2 before cuInit", res);
	res = ctx_sync();
	if (res != CUDA_ERROR_NOT_INITIALIZED)
		return child_fail("cuCtxSynchronize before cuInit", res);
	res = init(1);
	if (res != CUDA_ERROR_INVALID_VALUE)
		return child_fail("cuInit(1)", res);
	res = count(&n);
	if (res != CUDA_ERROR_NOT_INITIALIZED)
		return child_fail("cuDeviceGetCount after a refused cuInit", res);
	res = init(0);
	if (res != CUDA_SUCCESS)
		return child_fail("cuInit(0)", res);
	res = count(&n);
	if (res != CUDA_SUCCESS || n < 1)
		return child_fail("cuDeviceGetCount after cuInit", res);
	return 0;
}

/* Must run before any test that calls cuInit: a forked child inherits the driver state. */
static void test_driver_refuses_calls_before_cuinit(void **state)
{
	pid_t pid;
	int status;

	assert_false(driver_initialised);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_before_init());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- cuGetProcAddress ------------------------------------------------------------------ */

static void test_procaddr_picks_abi_by_version(void **state)
{
	assert_resolves("cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
	assert_resolves("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
	assert_resolves("cuMemAlloc", 3010, 0, "cuMemAlloc");
	assert_resolves("cuMemAlloc", 2000, 0, "cuMemAlloc");
	assert_resolves("cuStreamDestroy", 3020, 0, "cuStreamDestroy");
	assert_resolves("cuStreamDestroy", 12000, 0, "cuStreamDestroy_v2");
	assert_resolves("cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2");
	assert_resolves("cuEventElapsedTime", 12060, 0, "cuEventElapsedTime");
}

/* cuda.h maps the plain name to _v2 (3020); dlsym finds both under their own names. */
static void test_procaddr_finds_mem_get_address_range_at_both_abis(void **state)
{
	assert_resolves("cuMemGetAddressRange", 13000, 0, "cuMemGetAddressRange_v2");
	assert_resolves("cuMemGetAddressRange", 3020, 0, "cuMemGetAddressRange_v2");
	assert_resolves("cuMemGetAddressRange", 3010, 0, "cuMemGetAddressRange");
	assert_resolves("cuMemGetAddressRange", 2000, 0, "cuMemGetAddressRange");
	assert_resolves("cuMemGetAddressRange", 13000, PER_THREAD, "cuMemGetAddressRange_v2");
	assert_not_found("cuMemGetAddressRange", 1000, 0,
	                 CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	assert_ptr_not_equal(exported("cuMemGetAddressRange"), exported("cuMemGetAddressRange_v2"));
}

static void test_procaddr_per_thread_flag_picks_ptsz(void **state)
{
	assert_resolves("cuLaunchKernel", 13000, PER_THREAD, "cuLaunchKernel_ptsz");
	assert_resolves("cuLaunchKernel", 13000, 0, "cuLaunchKernel");
	assert_resolves("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
	                "cuLaunchKernel");
	assert_resolves("cuMemcpyHtoDAsync", 13000, PER_THREAD, "cuMemcpyHtoDAsync_v2_ptsz");
}

static void test_procaddr_per_thread_flag_picks_ptds(void **state)
{
	assert_resolves("cuMemcpy", 13000, PER_THREAD, "cuMemcpy_ptds");
	assert_resolves("cuMemcpy", 13000, 0, "cuMemcpy");
	assert_resolves("cuMemcpyHtoD", 13000, PER_THREAD, "cuMemcpyHtoD_v2_ptds");
	assert_resolves("cuMemsetD32", 13000, PER_THREAD, "cuMemsetD32_v2_ptds");
}

static void test_procaddr_per_thread_flag_falls_back_to_plain(void **state)
{
	assert_resolves("cuMemAlloc", 13000, PER_THREAD, "cuMemAlloc_v2");
	assert_resolves("cuInit", 13000, PER_THREAD, "cuInit");
	/* cuMemcpy_ptds arrived in 7.0: an older caller gets the plain copy. */
	assert_resolves("cuMemcpy", 6050, PER_THREAD, "cuMemcpy");
}

static void test_procaddr_reports_version_not_sufficient(void **state)
{
	assert_not_found("cuMemCreate", 10000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	assert_not_found("cuMemCreate", 10000, PER_THREAD,
	                 CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	assert_not_found("cuKernelGetParamInfo", 12030, 0,
	                 CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	assert_resolves("cuMemCreate", 10020, 0, "cuMemCreate");
}

static void test_procaddr_matches_exact_names_only(void **state)
{
	assert_not_found("cuNoSuchThing", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	assert_not_found("cu", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	assert_not_found("", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	assert_not_found("cuMemAllo", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	assert_not_found("cuMemAllocHostX", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	assert_not_found("cumemalloc", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	/* Callers ask by base name; the ABI suffix is the driver's answer, not a name. */
	assert_not_found("cuMemAlloc_v2", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	assert_not_found("cuLaunchKernel_ptsz", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

static void test_procaddr_answers_old_callers_with_old_entry_point(void **state)
{
	PFN_cuGetProcAddress_v11030 old = (PFN_cuGetProcAddress_v11030)exported("cuGetProcAddress");
	void *fn = NULL;

	assert_resolves("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
	assert_resolves("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
	assert_not_found("cuGetProcAddress", 11020, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	assert_int_equal(old("cuLaunchKernel", &fn, 13000, PER_THREAD), CUDA_SUCCESS);
	assert_ptr_equal(fn, exported("cuLaunchKernel_ptsz"));
	assert_int_equal(old("cuNoSuchThing", &fn, 13000, 0), CUDA_SUCCESS);
	assert_null(fn);
	/* A version newer than the driver is the one error. */
	assert_int_equal(old("cuLaunchKernel", &fn, 13010, 0), CUDA_ERROR_INVALID_VALUE);
}

static void test_procaddr_resolves_every_driver_row_to_its_symbol(void **state)
{
	size_t n = sizeof(driver_rows) / sizeof(driver_rows[0]);

	assert_true(n > 50);
	for (size_t i = 0; i < n; i++) {
		const struct driver_row *row = &driver_rows[i];

		assert_resolves(row->procname, row->version, row->per_thread ? PER_THREAD : 0,
		                row->symbol);
	}
}

static void test_procaddr_rejects_bad_arguments(void **state)
{
	CUdriverProcAddressQueryResult status;
	void *fn = &fn;

	assert_int_equal(get_proc(NULL, &fn, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(get_proc("cuInit", NULL, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(get_proc("cuInit", &fn, 13000, 1u << 7, &status),
	                 CUDA_ERROR_INVALID_VALUE);
	assert_null(fn);
	/* The status is optional. */
	assert_int_equal(get_proc("cuInit", &fn, 13000, 0, NULL), CUDA_SUCCESS);
	assert_ptr_equal(fn, exported("cuInit"));
}

static void test_procaddr_counts_each_lookup(void **state)
{
	uint64_t v2 = simgpu_counter("cuGetProcAddress_v2");
	uint64_t v1 = simgpu_counter("cuGetProcAddress");
	PFN_cuGetProcAddress_v11030 old = (PFN_cuGetProcAddress_v11030)exported("cuGetProcAddress");
	void *fn;

	assert_int_not_equal(v2, UINT64_MAX);
	get_proc("cuInit", &fn, 13000, 0, NULL);
	get_proc("cuNoSuchThing", &fn, 13000, 0, NULL);
	get_proc(NULL, &fn, 13000, 0, NULL);
	old("cuInit", &fn, 13000, 0);
	assert_int_equal(simgpu_counter("cuGetProcAddress_v2"), v2 + 3);
	assert_int_equal(simgpu_counter("cuGetProcAddress"), v1 + 1);
}

/* ---- Driver semantics through looked-up pointers --------------------------------------- */

static void test_driver_reports_version_and_devices(void **state)
{
	PFN_cuDriverGetVersion_v2020 version =
	        (PFN_cuDriverGetVersion_v2020)driver_fn("cuDriverGetVersion");
	PFN_cuDeviceGetCount_v2000 count =
	        (PFN_cuDeviceGetCount_v2000)driver_fn("cuDeviceGetCount");
	PFN_cuDeviceGet_v2000 get = (PFN_cuDeviceGet_v2000)driver_fn("cuDeviceGet");
	PFN_cuDeviceGetName_v2000 name = (PFN_cuDeviceGetName_v2000)driver_fn("cuDeviceGetName");
	PFN_cuDeviceTotalMem_v3020 total =
	        (PFN_cuDeviceTotalMem_v3020)driver_fn("cuDeviceTotalMem");
	char buf[256], small[4];
	size_t bytes = 0;
	CUdevice dev;
	int v, n;

	init_driver();
	assert_int_equal(version(&v), CUDA_SUCCESS);
	assert_int_equal(v, 13000);
	assert_int_equal(count(&n), CUDA_SUCCESS);
	assert_true(n >= 1);
	assert_int_equal(get(&dev, n - 1), CUDA_SUCCESS);
	assert_int_equal(dev, n - 1);
	assert_int_equal(get(&dev, n), CUDA_ERROR_INVALID_DEVICE);
	assert_int_equal(get(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
	assert_int_equal(name(buf, sizeof(buf), 0), CUDA_SUCCESS);
	assert_true(strlen(buf) > 0);
	assert_int_equal(name(small, sizeof(small), 0), CUDA_SUCCESS);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, buf, sizeof(small) - 1);
	assert_int_equal(name(buf, sizeof(buf), n), CUDA_ERROR_INVALID_DEVICE);
	assert_int_equal(total(&bytes, 0), CUDA_SUCCESS);
	assert_true(bytes > 0);
}

static int attribute(CUdevice_attribute attrib)
{
	PFN_cuDeviceGetAttribute_v2000 get =
	        (PFN_cuDeviceGetAttribute_v2000)driver_fn("cuDeviceGetAttribute");
	int value = -1;

	assert_int_equal(get(&value, attrib, 0), CUDA_SUCCESS);
	return value;
}

static void test_driver_answers_device_attributes(void **state)
{
	init_driver();
	assert_int_equal(attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
	assert_true(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) > 0);
	assert_true(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 7);
	assert_true(attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) >= 256);
	assert_true(attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) > 0);
	assert_true(attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) > 0);
	assert_int_equal(attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
	assert_int_equal(attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), 1);
	assert_int_equal(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 1);
	assert_int_equal(attribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS), 1);
	assert_int_equal(attribute(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT), 2);
	/* An attribute simgpu does not know is answered, with 0. */
	assert_int_equal(attribute((CUdevice_attribute)100000), 0);
}

static void test_driver_refuses_legacy_32bit_abis(void **state)
{
	void *fn = NULL;
	CUdeviceptr_v1 ptr;

	init_driver();
	assert_int_equal(get_proc("cuMemAlloc", &fn, 2000, 0, NULL), CUDA_SUCCESS);
	assert_int_equal(((PFN_cuMemAlloc_v2000)fn)(&ptr, 4096), CUDA_ERROR_NOT_SUPPORTED);
	assert_int_equal(get_proc("cuMemFree", &fn, 2000, 0, NULL), CUDA_SUCCESS);
	assert_int_equal(((PFN_cuMemFree_v2000)fn)(0x1000), CUDA_ERROR_NOT_SUPPORTED);
	assert_int_equal(get_proc("cuMemGetAddressRange", &fn, 2000, 0, NULL), CUDA_SUCCESS);
	assert_int_equal(((PFN_cuMemGetAddressRange_v2000)fn)(&ptr, NULL, 0x1000),
	                 CUDA_ERROR_NOT_SUPPORTED);
}

static char thread_failed;

/* A new thread starts without a current context; returns what it sees. */
static void *current_ctx_of_new_thread(void *arg)
{
	PFN_cuCtxGetCurrent_v4000 get = (PFN_cuCtxGetCurrent_v4000)arg;
	CUcontext cur;

	if (get(&cur) != CUDA_SUCCESS)
		return &thread_failed;
	return cur;
}

static void test_driver_keeps_current_context_per_thread(void **state)
{
	PFN_cuDeviceGetCount_v2000 count =
	        (PFN_cuDeviceGetCount_v2000)driver_fn("cuDeviceGetCount");
	PFN_cuDevicePrimaryCtxRetain_v7000 retain =
	        (PFN_cuDevicePrimaryCtxRetain_v7000)driver_fn("cuDevicePrimaryCtxRetain");
	PFN_cuDevicePrimaryCtxRelease_v11000 release =
	        (PFN_cuDevicePrimaryCtxRelease_v11000)driver_fn("cuDevicePrimaryCtxRelease");
	PFN_cuCtxSetCurrent_v4000 set = (PFN_cuCtxSetCurrent_v4000)driver_fn("cuCtxSetCurrent");
	PFN_cuCtxGetCurrent_v4000 get = (PFN_cuCtxGetCurrent_v4000)driver_fn("cuCtxGetCurrent");
	PFN_cuCtxGetDevice_v2000 device = (PFN_cuCtxGetDevice_v2000)driver_fn("cuCtxGetDevice");
	CUcontext ctx, again, cur;
	pthread_t thread;
	void *other;
	CUdevice dev;
	int n;

	init_driver();
	assert_int_equal(count(&n), CUDA_SUCCESS);
	assert_int_equal(retain(&ctx, n - 1), CUDA_SUCCESS);
	assert_non_null(ctx);
	assert_int_equal(retain(&again, n - 1), CUDA_SUCCESS);
	assert_ptr_equal(ctx, again);
	assert_int_equal(set(ctx), CUDA_SUCCESS);
	assert_int_equal(get(&cur), CUDA_SUCCESS);
	assert_ptr_equal(cur, ctx);
	assert_int_equal(device(&dev), CUDA_SUCCESS);
	assert_int_equal(dev, n - 1);
	assert_int_equal(pthread_create(&thread, NULL, current_ctx_of_new_thread, (void *)get), 0);
	assert_int_equal(pthread_join(thread, &other), 0);
	assert_null(other);
	assert_int_equal(set((CUcontext)&dev), CUDA_ERROR_INVALID_CONTEXT);
	assert_int_equal(set(NULL), CUDA_SUCCESS);
	assert_int_equal(get(&cur), CUDA_SUCCESS);
	assert_null(cur);
	assert_int_equal(release(n - 1), CUDA_SUCCESS);
	assert_int_equal(release(n - 1), CUDA_SUCCESS);
	assert_int_equal(release(n - 1), CUDA_ERROR_INVALID_CONTEXT);
	assert_int_equal(retain(&ctx, n), CUDA_ERROR_INVALID_DEVICE);
}

static void test_driver_copies_through_device_memory(void **state)
{
	PFN_cuMemAlloc_v3020 mem_alloc = (PFN_cuMemAlloc_v3020)driver_fn("cuMemAlloc");
	PFN_cuMemFree_v3020 mem_free = (PFN_cuMemFree_v3020)driver_fn("cuMemFree");
	PFN_cuMemcpyHtoD_v3020 htod = (PFN_cuMemcpyHtoD_v3020)driver_fn("cuMemcpyHtoD");
	PFN_cuMemcpyDtoH_v3020 dtoh = (PFN_cuMemcpyDtoH_v3020)driver_fn("cuMemcpyDtoH");
	PFN_cuMemsetD8_v3020 memset8 = (PFN_cuMemsetD8_v3020)driver_fn("cuMemsetD8");
	unsigned char in[256], out[256], host[16];
	CUdeviceptr dptr;

	init_driver();
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (unsigned char)(i * 7 + 1);
	assert_int_equal(mem_alloc(&dptr, sizeof(in)), CUDA_SUCCESS);
	assert_int_equal(htod(dptr, in, sizeof(in)), CUDA_SUCCESS);
	assert_int_equal(dtoh(out, dptr, sizeof(out)), CUDA_SUCCESS);
	assert_memory_equal(in, out, sizeof(in));
	assert_int_equal(memset8(dptr, 0xab, 16), CUDA_SUCCESS);
	assert_int_equal(dtoh(out, dptr, 16), CUDA_SUCCESS);
	memset(host, 0xab, sizeof(host));
	assert_memory_equal(out, host, sizeof(host));
	/* A host pointer where a CUdeviceptr belongs. */
	assert_int_equal(htod((CUdeviceptr)(uintptr_t)host, in, sizeof(host)),
	                 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(mem_free(dptr), CUDA_SUCCESS);
}

static void test_driver_never_reports_capture(void **state)
{
	PFN_cuStreamIsCapturing_v10000 capturing =
	        (PFN_cuStreamIsCapturing_v10000)driver_fn("cuStreamIsCapturing");
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;

	init_driver();
	assert_int_equal(capturing(NULL, &status), CUDA_SUCCESS);
	assert_int_equal(status, CU_STREAM_CAPTURE_STATUS_NONE);
	assert_int_equal(capturing((CUstream)&status, &status), CUDA_ERROR_INVALID_HANDLE);
}

static void test_driver_names_every_error_it_returns(void **state)
{
	static const CUresult codes[] = {
	        CUDA_SUCCESS,
	        CUDA_ERROR_INVALID_VALUE,
	        CUDA_ERROR_OUT_OF_MEMORY,
	        CUDA_ERROR_NOT_INITIALIZED,
	        CUDA_ERROR_INVALID_DEVICE,
	        CUDA_ERROR_INVALID_CONTEXT,
	        CUDA_ERROR_INVALID_HANDLE,
	        CUDA_ERROR_NOT_FOUND,
	        CUDA_ERROR_NOT_READY,
	        CUDA_ERROR_NOT_SUPPORTED,
	        CUDA_ERROR_ILLEGAL_ADDRESS,
	        CUDA_ERROR_UNKNOWN,
	};
	PFN_cuGetErrorName_v6000 name = (PFN_cuGetErrorName_v6000)driver_fn("cuGetErrorName");
	PFN_cuGetErrorString_v6000 text = (PFN_cuGetErrorString_v6000)driver_fn("cuGetErrorString");
	const char *s;

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		s = NULL;
		assert_int_equal(name(codes[i], &s), CUDA_SUCCESS);
		assert_non_null(s);
		assert_int_equal(strncmp(s, "CUDA_", 5), 0);
		s = NULL;
		assert_int_equal(text(codes[i], &s), CUDA_SUCCESS);
		assert_non_null(s);
	}
	assert_int_equal(name(CUDA_ERROR_NOT_FOUND, &s), CUDA_SUCCESS);
	assert_string_equal(s, "CUDA_ERROR_NOT_FOUND");
	assert_int_equal(text(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
	assert_string_equal(s, "invalid argument");
	assert_int_equal(name((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	assert_null(s);
	s = "x";
	assert_int_equal(text((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	assert_null(s);
}

static void test_driver_has_no_export_tables(void **state)
{
	PFN_cuGetExportTable_v3000 get = (PFN_cuGetExportTable_v3000)driver_fn("cuGetExportTable");
	const void *table = &table;
	CUuuid id = {{0}};

	assert_int_equal(get(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
	assert_null(table);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        /* First: it needs a process in which nothing has called cuInit yet. */
	        cmocka_unit_test(test_driver_refuses_calls_before_cuinit),
	        cmocka_unit_test(test_procaddr_picks_abi_by_version),
	        cmocka_unit_test(test_procaddr_finds_mem_get_address_range_at_both_abis),
	        cmocka_unit_test(test_procaddr_per_thread_flag_picks_ptsz),
	        cmocka_unit_test(test_procaddr_per_thread_flag_picks_ptds),
	        cmocka_unit_test(test_procaddr_per_thread_flag_falls_back_to_plain),
	        cmocka_unit_test(test_procaddr_reports_version_not_sufficient),
	        cmocka_unit_test(test_procaddr_matches_exact_names_only),
	        cmocka_unit_test(test_procaddr_answers_old_callers_with_old_entry_point),
	        cmocka_unit_test(test_procaddr_resolves_every_driver_row_to_its_symbol),
	        cmocka_unit_test(test_procaddr_rejects_bad_arguments),
	        cmocka_unit_test(test_procaddr_counts_each_lookup),
	        cmocka_unit_test(test_driver_has_no_export_tables),
	        cmocka_unit_test(test_driver_reports_version_and_devices),
	        cmocka_unit_test(test_driver_answers_device_attributes),
	        cmocka_unit_test(test_driver_refuses_legacy_32bit_abis),
	        cmocka_unit_test(test_driver_keeps_current_context_per_thread),
	        cmocka_unit_test(test_driver_copies_through_device_memory),
	        cmocka_unit_test(test_driver_never_reports_capture),
	        cmocka_unit_test(test_driver_names_every_error_it_returns),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
