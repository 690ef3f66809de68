/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: stream capture and graphs (instantiate, launch, destroy). */
#include "driver.h"

/* The helpers below do the work of the plain and the _ptsz entry points alike. */

static CUresult begin_capture(CUstream hStream, CUstreamCaptureMode mode, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_capture_begin(stream, mode);
}

static CUresult end_capture(CUstream hStream, CUgraph *phGraph, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);
	struct CUgraph_st *graph;
	CUresult res;

	if (!phGraph)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	res = simgpu_capture_end(stream, &graph);
	*phGraph = graph;
	return res;
}

/* Every out-pointer but the status is optional; edge data need the dependencies too. */
static CUresult get_capture_info(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                 cuuint64_t *id_out, CUgraph *graph_out,
                                 const CUgraphNode **dependencies_out,
                                 const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out,
                                 bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);
	struct simgpu_capture_info info;
	CUresult res;

	if (!captureStatus_out || (edgeData_out && !dependencies_out))
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	res = simgpu_capture_info(stream, &info);
	if (res != CUDA_SUCCESS)
		return res;
	*captureStatus_out = info.status;
	if (info.status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return CUDA_SUCCESS;
	if (edgeData_out && info.count && !info.edges)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (id_out)
		*id_out = info.id;
	if (graph_out)
		*graph_out = info.graph;
	if (dependencies_out)
		*dependencies_out = info.deps;
	if (edgeData_out)
		*edgeData_out = info.edges;
	if (numDependencies_out)
		*numDependencies_out = info.count;
	return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream, bool per_thread)
{
	struct CUgraphExec_st *exec = simgpu_graph_exec_get(hGraphExec);
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!exec || !stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_graph_launch(exec, stream);
}

/* ---- Capture --------------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamBeginCapture_v2);

	if (err)
		return err;
	return begin_capture(hStream, mode, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamBeginCapture_v2);

SIMGPU_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamBeginCapture_v2_ptsz);

	if (err)
		return err;
	return begin_capture(hStream, mode, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamBeginCapture_v2_ptsz);

SIMGPU_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamEndCapture);

	if (err)
		return err;
	return end_capture(hStream, phGraph, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamEndCapture);

SIMGPU_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamEndCapture_ptsz);

	if (err)
		return err;
	return end_capture(hStream, phGraph, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamEndCapture_ptsz);

SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                                 CUstreamCaptureStatus *captureStatus_out,
                                                 cuuint64_t *id_out, CUgraph *graph_out,
                                                 const CUgraphNode **dependencies_out,
                                                 const CUgraphEdgeData **edgeData_out,
                                                 size_t *numDependencies_out)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamGetCaptureInfo_v3);

	if (err)
		return err;
	return get_capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
	                        edgeData_out, numDependencies_out, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamGetCaptureInfo_v3);

SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                      CUstreamCaptureStatus *captureStatus_out,
                                                      cuuint64_t *id_out, CUgraph *graph_out,
                                                      const CUgraphNode **dependencies_out,
                                                      const CUgraphEdgeData **edgeData_out,
                                                      size_t *numDependencies_out)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuStreamGetCaptureInfo_v3_ptsz);

	if (err)
		return err;
	return get_capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
	                        edgeData_out, numDependencies_out, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuStreamGetCaptureInfo_v3_ptsz);

/* ---- Graphs ---------------------------------------------------------------------------- */

/* What cuda.h calls cuGraphInstantiate since CUDA 12.0. */
SIMGPU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   unsigned long long flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuGraphInstantiateWithFlags);
	struct CUgraph_st *graph;
	struct CUgraphExec_st *exec;
	CUresult res;

	if (err)
		return err;
	if (!phGraphExec)
		return CUDA_ERROR_INVALID_VALUE;
	graph = simgpu_graph_get(hGraph);
	if (!graph)
		return CUDA_ERROR_INVALID_HANDLE;
	res = simgpu_graph_instantiate(&exec, graph, flags);
	if (res == CUDA_SUCCESS)
		*phGraphExec = exec;
	return res;
}
SIMGPU_DRIVER_LOCAL_NAME(cuGraphInstantiateWithFlags);

SIMGPU_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuGraphLaunch);

	if (err)
		return err;
	return graph_launch(hGraphExec, hStream, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuGraphLaunch);

SIMGPU_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuGraphLaunch_ptsz);

	if (err)
		return err;
	return graph_launch(hGraphExec, hStream, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuGraphLaunch_ptsz);

SIMGPU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuGraphExecDestroy);
	struct CUgraphExec_st *exec;

	if (err)
		return err;
	exec = simgpu_graph_exec_get(hGraphExec);
	if (!exec)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_graph_exec_destroy(exec);
}
SIMGPU_DRIVER_LOCAL_NAME(cuGraphExecDestroy);

SIMGPU_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuGraphDestroy);
	struct CUgraph_st *graph;

	if (err)
		return err;
	graph = simgpu_graph_get(hGraph);
	if (!graph)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_graph_destroy(graph);
}
SIMGPU_DRIVER_LOCAL_NAME(cuGraphDestroy);
