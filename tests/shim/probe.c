/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small CUDA program for the shim's tests, run under LD_PRELOAD=liblynx.so on simgpu:
 *   probe threads N   8 threads each launch N kernels and make N stream-ordered
 *                     allocations on their own streams, at the same time
 *   probe fork        uses CUDA, forks a child that never does, and goes on using CUDA
 *   probe graph N     captures GRAPH_KERNELS launches into a CUDA graph and launches it
 *                     N times; prints the sum they computed
 *   probe pool N      as PyTorch's cudaMallocAsync backend: the default pool, its release
 *                     threshold, N stream-ordered allocations of growing size, one from
 *                     the pool by name, the pool's used and reserved bytes, trim
 *   probe module N    as Triton: loads a module and a library naming the probe's kernel
 *                     through driver entry points, launches it N times through each
 *   probe ex N        launches with a launch config and two attributes (a cluster, and
 *                     programmatic serialisation), N times each way: cudaLaunchKernelExC,
 *                     cudaLaunchKernelExC_ptsz, cuLaunchKernelEx with kernelParams and
 *                     cuLaunchKernelEx_ptsz with the parameters packed in `extra`
 * Exits 0 when every call succeeded (and the sums and byte counts are right).
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simgpu.h"

#define THREADS 8
#define GRAPH_KERNELS 3

/* The CUDA 13 headers declare the per-thread forms only when the runtime is built. */
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                     void **args);

static const void *kernel;
static long per_thread;

static void add_body(const struct simgpu_launch_dims *dims, void **params)
{
	float *x = *(float **)params[0];

	x[0] += *(float *)params[1];
}

static int failed(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return 0;
	fprintf(stderr, "probe: %s: %s\n", what, cudaGetErrorString(err));
	return 1;
}

static void *worker(void *arg)
{
	cudaStream_t stream;
	float *x, one = 1.0f;
	int bad = failed(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

	bad |= failed(cudaMallocAsync((void **)&x, sizeof(float), stream), "cudaMallocAsync");
	bad |= failed(cudaMemsetAsync(x, 0, sizeof(float), stream), "cudaMemsetAsync");
	for (long i = 0; i < per_thread && !bad; i++) {
		void *args[] = {&x, &one};
		float *scratch;
		bad |= failed(cudaLaunchKernel(kernel, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0,
		                               stream),
		              "cudaLaunchKernel");
		bad |= failed(cudaMallocAsync((void **)&scratch, 256, stream), "cudaMallocAsync");
		bad |= failed(cudaFreeAsync(scratch, stream), "cudaFreeAsync");
	}
	float result = 0;
	bad |= failed(cudaMemcpyAsync(&result, x, sizeof(float), cudaMemcpyDeviceToHost, stream),
	              "cudaMemcpyAsync");
	bad |= failed(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
	if (!bad && result != (float)per_thread) {
		fprintf(stderr, "probe: thread %ld summed %g, want %ld\n", (long)(intptr_t)arg,
		        result, per_thread);
		bad = 1;
	}
	cudaFreeAsync(x, stream);
	cudaStreamSynchronize(stream);
	cudaStreamDestroy(stream);
	return (void *)(intptr_t)bad;
}

static int run_threads(void)
{
	pthread_t threads[THREADS];
	int bad = 0;

	for (long t = 0; t < THREADS; t++)
		pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t);
	for (int t = 0; t < THREADS; t++) {
		void *result;
		pthread_join(threads[t], &result);
		bad |= (int)(intptr_t)result;
	}
	return bad;
}

static int run_fork(void)
{
	void *p;
	int status;

	if (failed(cudaMalloc(&p, 4096), "cudaMalloc"))
		return 1;
	pid_t pid = fork();
	if (pid == 0)
		exit(getpid() > 0 ? 0 : 1); /* a child that never touches CUDA */
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		return 1;
	return failed(cudaFree(p), "cudaFree") | failed(cudaDeviceSynchronize(), "sync");
}

static int expect_capture_status(cudaStream_t stream, enum cudaStreamCaptureStatus want)
{
	enum cudaStreamCaptureStatus status;

	if (failed(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing"))
		return 1;
	if (status == want)
		return 0;
	fprintf(stderr, "probe: capture status %d, want %d\n", (int)status, (int)want);
	return 1;
}

/* One capture of GRAPH_KERNELS additions of 1 to x, replayed `launches` times. */
static int run_graph(long launches)
{
	cudaStream_t stream;
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	float *x, one = 1.0f, sum = 0;
	int bad = failed(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

	bad |= failed(cudaMalloc((void **)&x, sizeof(float)), "cudaMalloc");
	bad |= failed(cudaMemsetAsync(x, 0, sizeof(float), stream), "cudaMemsetAsync");
	bad |= expect_capture_status(stream, cudaStreamCaptureStatusNone);
	bad |= failed(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal),
	              "cudaStreamBeginCapture");
	bad |= expect_capture_status(stream, cudaStreamCaptureStatusActive);
	for (int i = 0; i < GRAPH_KERNELS && !bad; i++) {
		void *args[] = {&x, &one};
		bad |= failed(cudaLaunchKernel(kernel, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0,
		                               stream),
		              "cudaLaunchKernel");
	}
	bad |= failed(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
	if (bad)
		return 1;
	bad |= failed(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
	for (long i = 0; i < launches && !bad; i++)
		bad |= failed(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
	bad |= failed(cudaMemcpyAsync(&sum, x, sizeof(float), cudaMemcpyDeviceToHost, stream),
	              "cudaMemcpyAsync");
	bad |= failed(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
	if (!bad && sum != (float)(GRAPH_KERNELS * launches)) {
		fprintf(stderr, "probe: the graph summed %g, want %ld\n", sum,
		        GRAPH_KERNELS * launches);
		bad = 1;
	}
	bad |= failed(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
	bad |= failed(cudaGraphDestroy(graph), "cudaGraphDestroy");
	bad |= failed(cudaFree(x), "cudaFree");
	bad |= failed(cudaStreamDestroy(stream), "cudaStreamDestroy");
	if (!bad)
		printf("probe graph: %d kernels x %ld launches = %g\n", GRAPH_KERNELS, launches,
		       sum);
	return bad;
}

static int expect_pool_bytes(cudaMemPool_t pool, enum cudaMemPoolAttr attr, uint64_t want,
                             const char *what)
{
	cuuint64_t value = 0;

	if (failed(cudaMemPoolGetAttribute(pool, attr, &value), "cudaMemPoolGetAttribute"))
		return 1;
	if (value == want)
		return 0;
	fprintf(stderr, "probe: %s is %llu bytes, want %llu\n", what, (unsigned long long)value,
	        (unsigned long long)want);
	return 1;
}

/* The calls of PyTorch's cudaMallocAsync allocator backend, on the default pool. */
static int run_pool(long count)
{
	const uint64_t page = 4096;
	cudaMemPool_t pool;
	cudaStream_t stream;
	cuuint64_t threshold = UINT64_MAX;
	void **bufs = calloc((size_t)count + 1, sizeof(*bufs));
	uint64_t total = 0;
	int bad = !bufs;

	bad |= failed(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
	bad |= failed(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
	              "cudaMemPoolSetAttribute");
	bad |= failed(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
	for (long i = 0; i < count && !bad; i++) {
		bad |= failed(cudaMallocAsync(&bufs[i], page * (uint64_t)(i + 1), stream),
		              "cudaMallocAsync");
		total += page * (uint64_t)(i + 1);
	}
	bad |= failed(cudaMallocFromPoolAsync(&bufs[count], page, pool, stream),
	              "cudaMallocFromPoolAsync");
	total += page;
	if (bad)
		return 1;
	bad |= expect_pool_bytes(pool, cudaMemPoolAttrUsedMemCurrent, total, "used");
	for (long i = 0; i <= count; i++)
		bad |= failed(cudaFreeAsync(bufs[i], stream), "cudaFreeAsync");
	bad |= failed(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
	bad |= expect_pool_bytes(pool, cudaMemPoolAttrUsedMemHigh, total, "used high");
	/* The threshold keeps every freed byte until the trim gives them back. */
	bad |= expect_pool_bytes(pool, cudaMemPoolAttrReservedMemCurrent, total, "reserved");
	bad |= expect_pool_bytes(pool, cudaMemPoolAttrReservedMemHigh, total, "reserved high");
	bad |= failed(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
	bad |= expect_pool_bytes(pool, cudaMemPoolAttrReservedMemCurrent, 0, "reserved, trimmed");
	bad |= failed(cudaStreamDestroy(stream), "cudaStreamDestroy");
	free(bufs);
	if (!bad)
		printf("probe pool: %ld allocations, high %llu bytes\n", count + 1,
		       (unsigned long long)total);
	return bad;
}

/* A driver function, as the runtime hands it out: flags cudaEnableDefault, or
 * cudaEnablePerThreadDefaultStream for the _ptsz form. */
static void *driver_entry_flags(const char *name, unsigned long long flags)
{
	enum cudaDriverEntryPointQueryResult found;
	void *fn = NULL;

	if (failed(cudaGetDriverEntryPointByVersion(name, &fn, 13000, flags, &found), name) ||
	    found != cudaDriverEntryPointSuccess)
		return NULL;
	return fn;
}

static void *driver_entry(const char *name)
{
	return driver_entry_flags(name, cudaEnableDefault);
}

static int failed_driver(CUresult res, const char *what)
{
	if (res == CUDA_SUCCESS)
		return 0;
	fprintf(stderr, "probe: %s: CUresult %d\n", what, (int)res);
	return 1;
}

/* Loads code as Triton and cuBLAS do, through driver entry points: a module and a library
 * whose images name the probe's kernel, each launched `launches` times. */
static int run_module(long launches)
{
	PFN_cuModuleLoadData_v2000 load_module = driver_entry("cuModuleLoadData");
	PFN_cuModuleGetFunction_v2000 get_function = driver_entry("cuModuleGetFunction");
	PFN_cuModuleUnload_v2000 unload_module = driver_entry("cuModuleUnload");
	PFN_cuLibraryLoadData_v12000 load_library = driver_entry("cuLibraryLoadData");
	PFN_cuLibraryGetKernel_v12000 get_kernel = driver_entry("cuLibraryGetKernel");
	PFN_cuLibraryUnload_v12000 unload_library = driver_entry("cuLibraryUnload");
	PFN_cuLaunchKernel_v4000 launch = driver_entry("cuLaunchKernel");
	CUmodule module = NULL;
	CUlibrary library = NULL;
	CUfunction function = NULL;
	CUkernel kernel_handle = NULL;
	float *x, one = 1.0f, sum = 0;
	void *args[] = {&x, &one};
	int bad;

	if (!load_module || !get_function || !unload_module || !load_library || !get_kernel ||
	    !unload_library || !launch)
		return 1;
	bad = failed(cudaMalloc((void **)&x, sizeof(float)), "cudaMalloc");
	bad |= failed(cudaMemset(x, 0, sizeof(float)), "cudaMemset");
	bad |= failed_driver(load_module(&module, "probe_add\n"), "cuModuleLoadData");
	bad |= failed_driver(get_function(&function, module, "probe_add"), "cuModuleGetFunction");
	bad |= failed_driver(load_library(&library, "probe_add\n", NULL, NULL, 0, NULL, NULL, 0),
	                     "cuLibraryLoadData");
	bad |= failed_driver(get_kernel(&kernel_handle, library, "probe_add"),
	                     "cuLibraryGetKernel");
	for (long i = 0; i < launches && !bad; i++) {
		bad |= failed_driver(launch(function, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL),
		                     "cuLaunchKernel (module)");
		bad |= failed_driver(
		        launch((CUfunction)kernel_handle, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL),
		        "cuLaunchKernel (library)");
	}
	if (bad)
		return 1;
	bad |= failed_driver(unload_module(module), "cuModuleUnload");
	bad |= failed_driver(unload_library(library), "cuLibraryUnload");
	bad |= failed(cudaMemcpy(&sum, x, sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
	if (!bad && sum != (float)(2 * launches)) {
		fprintf(stderr, "probe: the module's kernel summed %g, want %ld\n", sum,
		        2 * launches);
		bad = 1;
	}
	bad |= failed(cudaFree(x), "cudaFree");
	if (!bad)
		printf("probe module: 2 x %ld launches = %g\n", launches, sum);
	return bad;
}

/* Launches with a launch config, `launches` times each way (the usage above); the driver's
 * on the stream the runtime's legacy form uses, the per-thread forms on the per-thread
 * default stream (0). */
static int run_ex(long launches)
{
	PFN_cuLaunchKernelEx_v11060 launch_ex = driver_entry("cuLaunchKernelEx");
	PFN_cuLaunchKernelEx_v11060 launch_ex_ptsz =
	        driver_entry_flags("cuLaunchKernelEx", cudaEnablePerThreadDefaultStream);
	cudaLaunchAttribute attrs[2] = {
	        {.id = cudaLaunchAttributeClusterDimension, .val.clusterDim = {1, 1, 1}},
	        {.id = cudaLaunchAttributeProgrammaticStreamSerialization,
	         .val.programmaticStreamSerializationAllowed = 1},
	};
	CUlaunchAttribute cu_attrs[2] = {
	        {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.clusterDim = {1, 1, 1}},
	        {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
	         .value.programmaticStreamSerializationAllowed = 1},
	};
	cudaStream_t stream;
	float *x, one = 1.0f, sum = 0;
	unsigned char packed[8 + sizeof(float)];
	size_t packed_bytes = sizeof(packed);
	void *args[] = {&x, &one};
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
	                 &packed_bytes, CU_LAUNCH_PARAM_END};
	int bad = !launch_ex || !launch_ex_ptsz;

	bad |= failed(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
	bad |= failed(cudaMalloc((void **)&x, sizeof(float)), "cudaMalloc");
	bad |= failed(cudaMemset(x, 0, sizeof(float)), "cudaMemset");
	/* probe_add's parameters packed at their offsets: the pointer, then the float. */
	memcpy(packed, &x, sizeof(x));
	memcpy(packed + 8, &one, sizeof(one));
	cudaLaunchConfig_t config = {.gridDim = {1, 1, 1},
	                             .blockDim = {32, 1, 1},
	                             .stream = stream,
	                             .attrs = attrs,
	                             .numAttrs = 2};
	cudaLaunchConfig_t config_ptsz = config;
	config_ptsz.stream = 0;
	CUlaunchConfig cu_config = {.gridDimX = 1,
	                            .gridDimY = 1,
	                            .gridDimZ = 1,
	                            .blockDimX = 32,
	                            .blockDimY = 1,
	                            .blockDimZ = 1,
	                            .hStream = (CUstream)stream,
	                            .attrs = cu_attrs,
	                            .numAttrs = 2};
	CUlaunchConfig cu_config_ptsz = cu_config;
	cu_config_ptsz.hStream = NULL;
	for (long i = 0; i < launches && !bad; i++) {
		bad |= failed(cudaLaunchKernelExC(&config, kernel, args), "cudaLaunchKernelExC");
		bad |= failed(cudaLaunchKernelExC_ptsz(&config_ptsz, kernel, args),
		              "cudaLaunchKernelExC_ptsz");
		bad |= failed_driver(launch_ex(&cu_config, (CUfunction)kernel, args, NULL),
		                     "cuLaunchKernelEx");
		bad |= failed_driver(
		        launch_ex_ptsz(&cu_config_ptsz, (CUfunction)kernel, NULL, extra),
		        "cuLaunchKernelEx_ptsz");
	}
	bad |= failed(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	bad |= failed(cudaMemcpy(&sum, x, sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
	if (!bad && sum != (float)(4 * launches)) {
		fprintf(stderr, "probe: the launches summed %g, want %ld\n", sum, 4 * launches);
		bad = 1;
	}
	bad |= failed(cudaFree(x), "cudaFree");
	bad |= failed(cudaStreamDestroy(stream), "cudaStreamDestroy");
	if (!bad)
		printf("probe ex: 4 x %ld launches = %g\n", launches, sum);
	return bad;
}

int main(int argc, char **argv)
{
	struct simgpu_kernel_desc desc = {
	        .name = "probe_add",
	        .num_params = 2,
	        .param_sizes = {sizeof(float *), sizeof(float)},
	        .body = add_body,
	};

	kernel = simgpu_kernel_register(&desc);
	if (argc == 3 && !strcmp(argv[1], "threads")) {
		per_thread = atol(argv[2]);
		return run_threads();
	}
	if (argc == 2 && !strcmp(argv[1], "fork"))
		return run_fork();
	if (argc == 3 && !strcmp(argv[1], "graph"))
		return run_graph(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "pool"))
		return run_pool(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "module"))
		return run_module(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "ex"))
		return run_ex(atol(argv[2]));
	fprintf(stderr, "usage: probe threads N | probe fork | probe graph N | probe pool N | "
	                "probe module N | probe ex N\n");
	return 2;
}
