/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: cuGetErrorName and cuGetErrorString, for every CUresult of CUDA 13.0. */
#include "driver.h"

struct error_entry {
	CUresult code;
	const char *name;
	const char *text;
};

/*
 * Every code of cuda.h's CUresult, not only those simgpu returns itself: SIMGPU_FAULTS
 * can inject any of them, and the caller will want to print it. The texts follow the
 * real driver's where known. O(n) lookup over ~100 entries; errors are rare.
 */
#define ERROR_ENTRY(code, text)   \
	{                         \
		code, #code, text \
	}
static const struct error_entry error_table[] = {
        ERROR_ENTRY(CUDA_SUCCESS, "no error"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
        ERROR_ENTRY(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
        ERROR_ENTRY(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
        ERROR_ENTRY(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
        ERROR_ENTRY(CUDA_ERROR_PROFILER_DISABLED,
                    "profiler disabled while using external profiling tool"),
        ERROR_ENTRY(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized"),
        ERROR_ENTRY(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
        ERROR_ENTRY(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
        ERROR_ENTRY(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
        ERROR_ENTRY(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER,
                    "the API call requires a newer CUDA driver"),
        ERROR_ENTRY(CUDA_ERROR_DEVICE_UNAVAILABLE,
                    "CUDA-capable device(s) is/are busy or unavailable"),
        ERROR_ENTRY(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
        ERROR_ENTRY(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
        ERROR_ENTRY(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
        ERROR_ENTRY(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
        ERROR_ENTRY(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
        ERROR_ENTRY(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
        ERROR_ENTRY(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
        ERROR_ENTRY(CUDA_ERROR_NO_BINARY_FOR_GPU,
                    "no kernel image is available for execution on the device"),
        ERROR_ENTRY(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
        ERROR_ENTRY(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
        ERROR_ENTRY(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
        ERROR_ENTRY(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
        ERROR_ENTRY(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
        ERROR_ENTRY(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
        ERROR_ENTRY(CUDA_ERROR_CONTEXT_ALREADY_IN_USE,
                    "exclusive-thread device already in use by a different thread"),
        ERROR_ENTRY(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                    "peer access is not supported between these two devices"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
        ERROR_ENTRY(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected"),
        ERROR_ENTRY(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
        ERROR_ENTRY(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                    "the provided PTX was compiled with an unsupported toolchain"),
        ERROR_ENTRY(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
        ERROR_ENTRY(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
                    "the provided execution affinity is not supported"),
        ERROR_ENTRY(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,
                    "the provided PTX contains an unsupported call to cudaDeviceSynchronize"),
        ERROR_ENTRY(CUDA_ERROR_CONTAINED,
                    "an exception occurred on the device that is now contained by the GPU"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
        ERROR_ENTRY(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
        ERROR_ENTRY(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
        ERROR_ENTRY(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
        ERROR_ENTRY(CUDA_ERROR_OPERATING_SYSTEM,
                    "OS call failed or operation not supported on this OS"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
        ERROR_ENTRY(CUDA_ERROR_ILLEGAL_STATE,
                    "the operation cannot be performed in the present state"),
        ERROR_ENTRY(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
        ERROR_ENTRY(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
        ERROR_ENTRY(CUDA_ERROR_NOT_READY, "device not ready"),
        ERROR_ENTRY(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
        ERROR_ENTRY(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
        ERROR_ENTRY(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
        ERROR_ENTRY(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING,
                    "launch uses incompatible texturing mode"),
        ERROR_ENTRY(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
        ERROR_ENTRY(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
        ERROR_ENTRY(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
                    "cannot set while device is active in this process"),
        ERROR_ENTRY(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
        ERROR_ENTRY(CUDA_ERROR_ASSERT, "device-side assert triggered"),
        ERROR_ENTRY(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
        ERROR_ENTRY(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                    "part or all of the requested memory range is already mapped"),
        ERROR_ENTRY(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                    "pointer does not correspond to a registered memory region"),
        ERROR_ENTRY(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
        ERROR_ENTRY(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
        ERROR_ENTRY(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_ADDRESS_SPACE,
                    "operation not supported on global/shared address space"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_PC, "invalid program counter"),
        ERROR_ENTRY(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
        ERROR_ENTRY(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
                    "too many blocks in cooperative launch"),
        ERROR_ENTRY(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed"),
        ERROR_ENTRY(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
        ERROR_ENTRY(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
        ERROR_ENTRY(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
        ERROR_ENTRY(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
                    "system has unsupported display driver / cuda driver combination"),
        ERROR_ENTRY(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
                    "forward compatibility was attempted on non supported HW"),
        ERROR_ENTRY(CUDA_ERROR_MPS_CONNECTION_FAILED,
                    "MPS client failed to connect to the MPS control daemon or the MPS server"),
        ERROR_ENTRY(CUDA_ERROR_MPS_RPC_FAILURE,
                    "the remote procedural call between the MPS server and the MPS client failed"),
        ERROR_ENTRY(CUDA_ERROR_MPS_SERVER_NOT_READY,
                    "MPS server is not ready to accept new MPS client requests"),
        ERROR_ENTRY(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,
                    "the hardware resources required to create MPS client have been exhausted"),
        ERROR_ENTRY(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,
                    "the hardware resources required to support device connections have been "
                    "exhausted"),
        ERROR_ENTRY(CUDA_ERROR_MPS_CLIENT_TERMINATED,
                    "the MPS client has been terminated by the server"),
        ERROR_ENTRY(CUDA_ERROR_CDP_NOT_SUPPORTED,
                    "the module is using CUDA Dynamic Parallelism, which is not supported here"),
        ERROR_ENTRY(CUDA_ERROR_CDP_VERSION_MISMATCH,
                    "the module uses CUDA Dynamic Parallelism APIs of mismatched versions"),
        ERROR_ENTRY(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                    "operation not permitted when stream is capturing"),
        ERROR_ENTRY(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                    "operation failed due to a previous error during capture"),
        ERROR_ENTRY(CUDA_ERROR_STREAM_CAPTURE_MERGE,
                    "operation would result in a merge of separate capture sequences"),
        ERROR_ENTRY(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
                    "capture was not ended in the same stream as it began"),
        ERROR_ENTRY(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
        ERROR_ENTRY(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                    "dependency created on uncaptured work in another stream"),
        ERROR_ENTRY(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                    "operation would make the legacy stream depend on a capturing blocking stream"),
        ERROR_ENTRY(CUDA_ERROR_CAPTURED_EVENT,
                    "operation not permitted on an event last recorded in a capturing stream"),
        ERROR_ENTRY(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
                    "attempt to terminate a thread-local capture sequence from another thread"),
        ERROR_ENTRY(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
        ERROR_ENTRY(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
                    "the graph update was not performed because it violated update constraints"),
        ERROR_ENTRY(CUDA_ERROR_EXTERNAL_DEVICE,
                    "an async error has occurred in an external entity outside of CUDA"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_CLUSTER_SIZE,
                    "a kernel launch error has occurred due to cluster misconfiguration"),
        ERROR_ENTRY(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_RESOURCE_TYPE,
                    "one or more resources are not valid resource types for the operation"),
        ERROR_ENTRY(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
                    "one or more resources are insufficient or non-applicable for the operation"),
        ERROR_ENTRY(CUDA_ERROR_KEY_ROTATION, "an error happened during the key rotation sequence"),
        ERROR_ENTRY(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef ERROR_ENTRY

static const struct error_entry *error_find(CUresult code)
{
	for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++) {
		if (error_table[i].code == code)
			return &error_table[i];
	}
	return NULL;
}

/* Both work before cuInit. An unknown code: CUDA_ERROR_INVALID_VALUE and *pStr = NULL. */
SIMGPU_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	int fault = simgpu_api_enter(SIMGPU_API_cuGetErrorString);
	const struct error_entry *e;

	if (fault)
		return (CUresult)fault;
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	e = error_find(error);
	*pStr = e ? e->text : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SIMGPU_DRIVER_LOCAL_NAME(cuGetErrorString);

SIMGPU_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	int fault = simgpu_api_enter(SIMGPU_API_cuGetErrorName);
	const struct error_entry *e;

	if (fault)
		return (CUresult)fault;
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	e = error_find(error);
	*pStr = e ? e->name : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SIMGPU_DRIVER_LOCAL_NAME(cuGetErrorName);
