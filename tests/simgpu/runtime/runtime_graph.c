/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runtime stream capture and graphs: one driver call each. cudaStreamCaptureMode,
 * cudaStreamCaptureStatus and cudaGraphInstantiateFlags share their values with the
 * driver's enums; cudaGraph_t, cudaGraphExec_t and cudaGraphNode_t are the driver's
 * handles, and cudaGraphEdgeData has CUgraphEdgeData's layout.
 */
#include "runtime.h"

_Static_assert(sizeof(cudaGraphEdgeData) == sizeof(CUgraphEdgeData),
               "runtime and driver edge data share their layout");

/* ---- Capture --------------------------------------------------------------------------- */

static cudaError_t begin_capture(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                 cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(
	        drv->cuStreamBeginCapture_v2(stream, (CUstreamCaptureMode)mode));
}

SIMGPU_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                                 enum cudaStreamCaptureMode mode)
{
	return begin_capture(SIMGPU_API_cudaStreamBeginCapture, SIMGPU_RUNTIME_LEGACY, stream,
	                     mode);
}

SIMGPU_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                      enum cudaStreamCaptureMode mode)
{
	return begin_capture(SIMGPU_API_cudaStreamBeginCapture_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                     stream, mode);
}

static cudaError_t end_capture(enum simgpu_api_id id, enum simgpu_runtime_need need,
                               cudaStream_t stream, cudaGraph_t *pGraph)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuStreamEndCapture(stream, pGraph));
}

SIMGPU_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	return end_capture(SIMGPU_API_cudaStreamEndCapture, SIMGPU_RUNTIME_LEGACY, stream, pGraph);
}

SIMGPU_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
	return end_capture(SIMGPU_API_cudaStreamEndCapture_ptsz, SIMGPU_RUNTIME_PER_THREAD, stream,
	                   pGraph);
}

/* The runtime's unsigned long long id and the driver's cuuint64_t are the same type. */
static cudaError_t
get_capture_info(enum simgpu_api_id id, enum simgpu_runtime_need need, cudaStream_t stream,
                 enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out,
                 cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out,
                 const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	const struct simgpu_runtime_driver *drv;
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult res;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	if (!captureStatus_out)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	res = drv->cuStreamGetCaptureInfo_v3(
	        stream, &status, (cuuint64_t *)id_out, graph_out, dependencies_out,
	        (const CUgraphEdgeData **)edgeData_out, numDependencies_out);
	if (res == CUDA_SUCCESS)
		*captureStatus_out = (enum cudaStreamCaptureStatus)status;
	return simgpu_runtime_result(res);
}

SIMGPU_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *captureStatus_out,
                                                   unsigned long long *id_out,
                                                   cudaGraph_t *graph_out,
                                                   const cudaGraphNode_t **dependencies_out,
                                                   const cudaGraphEdgeData **edgeData_out,
                                                   size_t *numDependencies_out)
{
	return get_capture_info(SIMGPU_API_cudaStreamGetCaptureInfo, SIMGPU_RUNTIME_LEGACY, stream,
	                        captureStatus_out, id_out, graph_out, dependencies_out,
	                        edgeData_out, numDependencies_out);
}

SIMGPU_EXPORT cudaError_t
cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                              unsigned long long *id_out, cudaGraph_t *graph_out,
                              const cudaGraphNode_t **dependencies_out,
                              const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	return get_capture_info(SIMGPU_API_cudaStreamGetCaptureInfo_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                        stream, captureStatus_out, id_out, graph_out, dependencies_out,
	                        edgeData_out, numDependencies_out);
}

/* ---- Graphs ---------------------------------------------------------------------------- */

/* The CUDA 13 signature: flags, where CUDA 11 took an error node and a log buffer. */
SIMGPU_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                               unsigned long long flags)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaGraphInstantiate, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuGraphInstantiateWithFlags(pGraphExec, graph, flags));
}

static cudaError_t graph_launch(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                cudaGraphExec_t graphExec, cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuGraphLaunch(graphExec, stream));
}

SIMGPU_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return graph_launch(SIMGPU_API_cudaGraphLaunch, SIMGPU_RUNTIME_LEGACY, graphExec, stream);
}

SIMGPU_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return graph_launch(SIMGPU_API_cudaGraphLaunch_ptsz, SIMGPU_RUNTIME_PER_THREAD, graphExec,
	                    stream);
}

SIMGPU_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaGraphExecDestroy, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuGraphExecDestroy(graphExec));
}

SIMGPU_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaGraphDestroy, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuGraphDestroy(graph));
}
