/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: streams and events. */
#include "driver.h"

#define EVENT_CREATE_FLAGS (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING)

/* The helpers below do the work of the plain and the _ptsz entry points alike. */

static CUresult stream_create(CUstream *phStream, unsigned int flags, int priority)
{
	struct CUstream_st *stream;
	CUresult res;

	if (!phStream || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	res = simgpu_stream_create(&stream, flags, priority);
	if (res == CUDA_SUCCESS)
		*phStream = stream;
	return res;
}

/* The default streams (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) are not destroyed. */
static CUresult stream_destroy(CUstream hStream)
{
	struct CUstream_st *stream;

	if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
		return CUDA_ERROR_INVALID_HANDLE;
	stream = simgpu_stream_get(hStream, false);
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_stream_destroy(stream);
}

static CUresult stream_synchronize(CUstream hStream, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_stream_synchronize(stream);
}

static CUresult stream_query(CUstream hStream, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_stream_query(stream);
}

/* CU_EVENT_WAIT_EXTERNAL asks for an external event node under capture; simgpu has none,
 * so a capturing stream waiting on an event from outside its capture fails either way. */
static CUresult stream_wait_event(CUstream hStream, CUevent hEvent, unsigned int flags,
                                  bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);
	struct CUevent_st *event = simgpu_event_get(hEvent);

	if (flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream || !event)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_stream_wait_event(stream, event);
}

static CUresult stream_get_priority(CUstream hStream, int *priority, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	*priority = simgpu_stream_priority(stream);
	return CUDA_SUCCESS;
}

static CUresult stream_get_flags(CUstream hStream, unsigned int *flags, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	*flags = simgpu_stream_flags(stream);
	return CUDA_SUCCESS;
}

/* CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream while a blocking stream
 * captures. */
static CUresult stream_is_capturing(CUstream hStream, CUstreamCaptureStatus *status,
                                    bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);
	struct simgpu_capture_info info;
	CUresult res;

	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	res = simgpu_capture_info(stream, &info);
	if (res == CUDA_SUCCESS)
		*status = info.status;
	return res;
}

static CUresult event_destroy(CUevent hEvent)
{
	struct CUevent_st *event = simgpu_event_get(hEvent);

	if (!event)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_event_destroy(event);
}

/* CU_EVENT_RECORD_EXTERNAL asks for an external event node under capture: refused. */
static CUresult event_record(CUevent hEvent, CUstream hStream, unsigned int flags, bool per_thread)
{
	struct CUevent_st *event = simgpu_event_get(hEvent);
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (flags != CU_EVENT_RECORD_DEFAULT)
		return CUDA_ERROR_INVALID_VALUE;
	if (!event || !stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_event_record(event, stream);
}

static CUresult event_elapsed(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	struct CUevent_st *start = simgpu_event_get(hStart);
	struct CUevent_st *end = simgpu_event_get(hEnd);

	if (!pMilliseconds)
		return CUDA_ERROR_INVALID_VALUE;
	if (!start || !end)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_event_elapsed(pMilliseconds, start, end);
}

/* ---- Streams --------------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamCreate);

	if (err)
		return err;
	return stream_create(phStream, Flags, 0);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamCreate);

SIMGPU_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                  int priority)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamCreateWithPriority);

	if (err)
		return err;
	return stream_create(phStream, flags, priority);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamCreateWithPriority);

/* The CUDA 2.0 ABI: the same as _v2. */
SIMGPU_EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamDestroy);

	if (err)
		return err;
	return stream_destroy(hStream);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamDestroy);

SIMGPU_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamDestroy_v2);

	if (err)
		return err;
	return stream_destroy(hStream);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamDestroy_v2);

SIMGPU_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamSynchronize);

	if (err)
		return err;
	return stream_synchronize(hStream, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamSynchronize);

SIMGPU_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamSynchronize_ptsz);

	if (err)
		return err;
	return stream_synchronize(hStream, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamSynchronize_ptsz);

SIMGPU_EXPORT CUresult cuStreamQuery(CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamQuery);

	if (err)
		return err;
	return stream_query(hStream, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamQuery);

SIMGPU_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamQuery_ptsz);

	if (err)
		return err;
	return stream_query(hStream, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamQuery_ptsz);

SIMGPU_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamWaitEvent);

	if (err)
		return err;
	return stream_wait_event(hStream, hEvent, Flags, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamWaitEvent);

SIMGPU_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamWaitEvent_ptsz);

	if (err)
		return err;
	return stream_wait_event(hStream, hEvent, Flags, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamWaitEvent_ptsz);

SIMGPU_EXPORT CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamGetPriority);

	if (err)
		return err;
	return stream_get_priority(hStream, priority, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamGetPriority);

SIMGPU_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamGetPriority_ptsz);

	if (err)
		return err;
	return stream_get_priority(hStream, priority, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamGetPriority_ptsz);

SIMGPU_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamGetFlags);

	if (err)
		return err;
	return stream_get_flags(hStream, flags, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamGetFlags);

SIMGPU_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamGetFlags_ptsz);

	if (err)
		return err;
	return stream_get_flags(hStream, flags, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamGetFlags_ptsz);

SIMGPU_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamIsCapturing);

	if (err)
		return err;
	return stream_is_capturing(hStream, captureStatus, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamIsCapturing);

SIMGPU_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus *captureStatus)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamIsCapturing_ptsz);

	if (err)
		return err;
	return stream_is_capturing(hStream, captureStatus, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamIsCapturing_ptsz);

/* ---- Events ---------------------------------------------------------------------------- */

/* CU_EVENT_INTERPROCESS is refused: simgpu has no IPC events. */
SIMGPU_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventCreate);
	struct CUevent_st *event;
	CUresult res;

	if (err)
		return err;
	if (!phEvent || (Flags & ~(unsigned int)EVENT_CREATE_FLAGS))
		return CUDA_ERROR_INVALID_VALUE;
	res = simgpu_event_create(&event, Flags);
	if (res == CUDA_SUCCESS)
		*phEvent = event;
	return res;
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventCreate);

/* The CUDA 2.0 ABI: the same as _v2. */
SIMGPU_EXPORT CUresult cuEventDestroy(CUevent hEvent)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventDestroy);

	if (err)
		return err;
	return event_destroy(hEvent);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventDestroy);

SIMGPU_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventDestroy_v2);

	if (err)
		return err;
	return event_destroy(hEvent);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventDestroy_v2);

SIMGPU_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventRecord);

	if (err)
		return err;
	return event_record(hEvent, hStream, CU_EVENT_RECORD_DEFAULT, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventRecord);

SIMGPU_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventRecord_ptsz);

	if (err)
		return err;
	return event_record(hEvent, hStream, CU_EVENT_RECORD_DEFAULT, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventRecord_ptsz);

SIMGPU_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventRecordWithFlags);

	if (err)
		return err;
	return event_record(hEvent, hStream, flags, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventRecordWithFlags);

SIMGPU_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                   unsigned int flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventRecordWithFlags_ptsz);

	if (err)
		return err;
	return event_record(hEvent, hStream, flags, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventRecordWithFlags_ptsz);

SIMGPU_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventQuery);
	struct CUevent_st *event;

	if (err)
		return err;
	event = simgpu_event_get(hEvent);
	if (!event)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_event_query(event);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventQuery);

SIMGPU_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventSynchronize);
	struct CUevent_st *event;

	if (err)
		return err;
	event = simgpu_event_get(hEvent);
	if (!event)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_event_synchronize(event);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventSynchronize);

/* The CUDA 2.0 and 12.8 ABIs take the same arguments; simgpu answers both alike. */
SIMGPU_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventElapsedTime);

	if (err)
		return err;
	return event_elapsed(pMilliseconds, hStart, hEnd);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventElapsedTime);

SIMGPU_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuEventElapsedTime_v2);

	if (err)
		return err;
	return event_elapsed(pMilliseconds, hStart, hEnd);
}
SIMGPU_DRIVER_LOCAL_NAME(cuEventElapsedTime_v2);
