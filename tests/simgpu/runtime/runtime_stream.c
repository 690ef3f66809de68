/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runtime streams and events: one driver call each. Stream handles, including 0,
 * cudaStreamLegacy and cudaStreamPerThread, pass through unchanged; the driver resolves
 * them, per thread when reached through a _ptsz function.
 */
#include "runtime.h"

/* ---- Streams --------------------------------------------------------------------------- */

SIMGPU_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaStreamCreate, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamCreate(pStream, cudaStreamDefault));
}

/* cudaStreamNonBlocking and CU_STREAM_NON_BLOCKING share their value. */
SIMGPU_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaStreamCreateWithFlags,
	                                       SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamCreate(pStream, flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                       int priority)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaStreamCreateWithPriority,
	                                       SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamCreateWithPriority(pStream, flags, priority));
}

SIMGPU_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaStreamDestroy, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamDestroy_v2(stream));
}

static cudaError_t stream_synchronize(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                      cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamSynchronize(stream));
}

SIMGPU_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	return stream_synchronize(SIMGPU_API_cudaStreamSynchronize, SIMGPU_RUNTIME_LEGACY, stream);
}

SIMGPU_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	return stream_synchronize(SIMGPU_API_cudaStreamSynchronize_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                          stream);
}

/* cudaErrorNotReady is an answer, not an error: it does not become the last error. */
static cudaError_t stream_query(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamQuery(stream));
}

SIMGPU_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return stream_query(SIMGPU_API_cudaStreamQuery, SIMGPU_RUNTIME_LEGACY, stream);
}

SIMGPU_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
	return stream_query(SIMGPU_API_cudaStreamQuery_ptsz, SIMGPU_RUNTIME_PER_THREAD, stream);
}

static cudaError_t stream_wait_event(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                     cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamWaitEvent(stream, event, flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                              unsigned int flags)
{
	return stream_wait_event(SIMGPU_API_cudaStreamWaitEvent, SIMGPU_RUNTIME_LEGACY, stream,
	                         event, flags);
}

SIMGPU_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                                   unsigned int flags)
{
	return stream_wait_event(SIMGPU_API_cudaStreamWaitEvent_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                         stream, event, flags);
}

static cudaError_t stream_get_priority(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                       cudaStream_t stream, int *priority)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamGetPriority(stream, priority));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
	return stream_get_priority(SIMGPU_API_cudaStreamGetPriority, SIMGPU_RUNTIME_LEGACY, hStream,
	                           priority);
}

SIMGPU_EXPORT cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int *priority)
{
	return stream_get_priority(SIMGPU_API_cudaStreamGetPriority_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                           hStream, priority);
}

static cudaError_t stream_get_flags(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                    cudaStream_t stream, unsigned int *flags)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamGetFlags(stream, flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags)
{
	return stream_get_flags(SIMGPU_API_cudaStreamGetFlags, SIMGPU_RUNTIME_LEGACY, hStream,
	                        flags);
}

SIMGPU_EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags)
{
	return stream_get_flags(SIMGPU_API_cudaStreamGetFlags_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                        hStream, flags);
}

/* cudaStreamCaptureStatus and CUstreamCaptureStatus share their values. */
static cudaError_t stream_is_capturing(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                       cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
	const struct simgpu_runtime_driver *drv;
	CUstreamCaptureStatus cu_status = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult res;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	if (!status)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	res = drv->cuStreamIsCapturing(stream, &cu_status);
	if (res == CUDA_SUCCESS)
		*status = (enum cudaStreamCaptureStatus)cu_status;
	return simgpu_runtime_result(res);
}

SIMGPU_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                                enum cudaStreamCaptureStatus *pCaptureStatus)
{
	return stream_is_capturing(SIMGPU_API_cudaStreamIsCapturing, SIMGPU_RUNTIME_LEGACY, stream,
	                           pCaptureStatus);
}

SIMGPU_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                     enum cudaStreamCaptureStatus *pCaptureStatus)
{
	return stream_is_capturing(SIMGPU_API_cudaStreamIsCapturing_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                           stream, pCaptureStatus);
}

/* ---- Events ---------------------------------------------------------------------------- */

SIMGPU_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaEventCreate, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuEventCreate(event, cudaEventDefault));
}

/* cudaEvent* flags and CU_EVENT_* flags share their values. */
SIMGPU_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaEventCreateWithFlags,
	                                       SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuEventCreate(event, flags));
}

SIMGPU_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaEventDestroy, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuEventDestroy_v2(event));
}

static cudaError_t event_record(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                cudaEvent_t event, cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuEventRecord(event, stream));
}

SIMGPU_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	return event_record(SIMGPU_API_cudaEventRecord, SIMGPU_RUNTIME_LEGACY, event, stream);
}

SIMGPU_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
	return event_record(SIMGPU_API_cudaEventRecord_ptsz, SIMGPU_RUNTIME_PER_THREAD, event,
	                    stream);
}

SIMGPU_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaEventQuery, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuEventQuery(event));
}

SIMGPU_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaEventSynchronize, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuEventSynchronize(event));
}

SIMGPU_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaEventElapsedTime, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuEventElapsedTime_v2(ms, start, end));
}
