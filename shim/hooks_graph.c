/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stream capture: the begin- and end-capture hooks of the runtime and the driver, plain
 * and per-thread. Each is recorded like any call (the stream; for an end, the graph), and
 * keeps the count of open captures that lynx_capture_active() reads (hooks.h). Lynx
 * itself never issues a call here.
 */
#include "hooks.h"
#include "record.h"

_Atomic int lynx_capturing_streams;

/*
 * Capture hooks in progress on this thread, and whether one of them already changed the
 * count: cudaStreamBeginCapture reaches cuStreamBeginCapture_v2 through the driver
 * table, and both see the same capture begin. The innermost hook that sees it counts it
 * (so that its own event already carries LYNX_EVENT_CAPTURED), the ones around it do not.
 */
static __thread int capture_depth __attribute__((tls_model("initial-exec")));
static __thread bool capture_counted __attribute__((tls_model("initial-exec")));

/* delta: +1 for a capture begun, -1 for one ended; never below zero (a capture begun
 * before Lynx intercepted, or through a path it does not see). */
static void count_capture(int delta)
{
	int n = atomic_load_explicit(&lynx_capturing_streams, memory_order_relaxed);

	do {
		if (n + delta < 0)
			return;
	} while (!atomic_compare_exchange_weak_explicit(&lynx_capturing_streams, &n, n + delta,
	                                                memory_order_relaxed,
	                                                memory_order_relaxed));
}

static void capture_enter(void)
{
	capture_depth++;
}

/* After the real call: happened says whether it began (or ended) a capture. */
static void capture_leave(bool happened, int delta)
{
	if (happened && !capture_counted) {
		count_capture(delta);
		capture_counted = true;
	}
	if (--capture_depth == 0)
		capture_counted = false;
}

/* The end of the call bracket: the stream, and the graph an end-capture returned. */
static void capture_record(struct lynx_call *call, const void *stream, const void *graph,
                           int result)
{
	lynx_call_reserve(call, 0);
	lynx_record_handle(call->event, (uint64_t)(uintptr_t)stream, (uint64_t)(uintptr_t)graph);
	lynx_call_end(call, result);
}

/* An end-capture result after which the capture is over (CUDA returns a NULL graph for
 * the two errors). */
static bool runtime_capture_ended(cudaError_t result)
{
	return result == cudaSuccess || result == cudaErrorStreamCaptureInvalidated ||
	       result == cudaErrorStreamCaptureUnjoined;
}

static bool driver_capture_ended(CUresult result)
{
	return result == CUDA_SUCCESS || result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
	       result == CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
}

/*
 * One body per kind of capture hook; ptsz picks the per-thread-stream entry point. The real
 * pointer is read after lynx_call_begin, as in every hook.
 */
static cudaError_t runtime_begin_capture(enum lynx_hook_id hook, bool ptsz, cudaStream_t stream,
                                         enum cudaStreamCaptureMode mode)
{
	struct lynx_call call;
	cudaError_t result;

	lynx_call_begin(&call, hook);
	capture_enter();
	result = ptsz ? lynx_real_fn(cudaStreamBeginCapture_ptsz)(stream, mode)
	              : lynx_real_fn(cudaStreamBeginCapture)(stream, mode);
	capture_leave(result == cudaSuccess, +1);
	capture_record(&call, stream, NULL, (int)result);
	return result;
}

static cudaError_t runtime_end_capture(enum lynx_hook_id hook, bool ptsz, cudaStream_t stream,
                                       cudaGraph_t *pGraph)
{
	struct lynx_call call;
	cudaError_t result;

	lynx_call_begin(&call, hook);
	capture_enter();
	result = ptsz ? lynx_real_fn(cudaStreamEndCapture_ptsz)(stream, pGraph)
	              : lynx_real_fn(cudaStreamEndCapture)(stream, pGraph);
	capture_leave(runtime_capture_ended(result), -1);
	capture_record(&call, stream, result == cudaSuccess && pGraph ? *pGraph : NULL,
	               (int)result);
	return result;
}

static CUresult driver_begin_capture(enum lynx_hook_id hook, bool ptsz, CUstream hStream,
                                     CUstreamCaptureMode mode)
{
	struct lynx_call call;
	CUresult result;

	lynx_call_begin(&call, hook);
	capture_enter();
	result = ptsz ? lynx_real_fn(cuStreamBeginCapture_v2_ptsz)(hStream, mode)
	              : lynx_real_fn(cuStreamBeginCapture_v2)(hStream, mode);
	capture_leave(result == CUDA_SUCCESS, +1);
	capture_record(&call, hStream, NULL, (int)result);
	return result;
}

static CUresult driver_end_capture(enum lynx_hook_id hook, bool ptsz, CUstream hStream,
                                   CUgraph *phGraph)
{
	struct lynx_call call;
	CUresult result;

	lynx_call_begin(&call, hook);
	capture_enter();
	result = ptsz ? lynx_real_fn(cuStreamEndCapture_ptsz)(hStream, phGraph)
	              : lynx_real_fn(cuStreamEndCapture)(hStream, phGraph);
	capture_leave(driver_capture_ended(result), -1);
	capture_record(&call, hStream, result == CUDA_SUCCESS && phGraph ? *phGraph : NULL,
	               (int)result);
	return result;
}

/* ---- Runtime ----------------------------------------------------------------------------- */

cudaError_t lynx_active_cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	return runtime_begin_capture(LYNX_HOOK_cudaStreamBeginCapture, false, stream, mode);
}

cudaError_t lynx_active_cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                    enum cudaStreamCaptureMode mode)
{
	return runtime_begin_capture(LYNX_HOOK_cudaStreamBeginCapture_ptsz, true, stream, mode);
}

cudaError_t lynx_active_cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	return runtime_end_capture(LYNX_HOOK_cudaStreamEndCapture, false, stream, pGraph);
}

cudaError_t lynx_active_cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
	return runtime_end_capture(LYNX_HOOK_cudaStreamEndCapture_ptsz, true, stream, pGraph);
}

/* ---- Driver ------------------------------------------------------------------------------ */

CUresult lynx_active_cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	return driver_begin_capture(LYNX_HOOK_cuStreamBeginCapture_v2, false, hStream, mode);
}

CUresult lynx_active_cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	return driver_begin_capture(LYNX_HOOK_cuStreamBeginCapture_v2_ptsz, true, hStream, mode);
}

CUresult lynx_active_cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	return driver_end_capture(LYNX_HOOK_cuStreamEndCapture, false, hStream, phGraph);
}

CUresult lynx_active_cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	return driver_end_capture(LYNX_HOOK_cuStreamEndCapture_ptsz, true, hStream, phGraph);
}
